"""Compiled calls replayed as one submission (Documentation/torch_compile.md "Replay").

``torch.compile(f, backend="spyre_graphs")`` compiles with Inductor (the spyre backend) and
runs the compiled call through ``Replayer``: per input signature (shapes, strides, dtypes,
devices and the non-tensor arguments), the first call runs normally (a warm-up: plans are
resolved and programs loaded), the second is captured into a ``torch.spyre.SpyreGraph`` and
every later call copies its inputs into the graph's static inputs and replays it, one
submission. The tensors of the captured call are the static inputs (kept alive by the graph): a
later call passing the same tensor (parameters, a KV cache updated in place) uses it in place,
another tensor is copied into it first (an input the call updates in place is then updated in
the static tensor only). The outputs are the graph's static outputs: the next
replay of the same signature overwrites them (clone what must outlive it), as with
``torch.cuda`` graphs. A call that cannot be captured (an op that falls back to the CPU, a
copy from host memory) warns once with the reason and runs normally from then on; so does a
signature with a CPU tensor argument (an optimizer's step counts: updated on the host by the
call, read by its kernels), which is not captured at all, and so does a training graph (grad
enabled and an argument that requires grad: the outputs of each call carry that call's autograd
graph, so the captured call's outputs cannot be handed out again).

``mode="reduce-overhead"`` on spyre inputs runs through ``Replayer`` too (_dynamo.py). A decode
step replays across positions only when no host value of it changes with the position: the
decoder's bucketed form (tests/models.py ``DecodeStep``) keeps the position on the card and
passes the cache length as a bucket, so the signature (and the capture) changes per bucket.
"""

import warnings

import torch
import torch._guards

import torch_spyre

STATS = {"captures": 0, "replays": 0, "eager_calls": 0, "capture_failures": 0}


class _Entry:
    def __init__(self):
        self.state = "warm"  # warm -> graph | eager
        self.graph = None
        self.static = None   # per argument: the tensor the graph reads (or None)
        self.outputs = None


class Replayer:
    """Wraps a compiled call (positional arguments) with capture and replay per signature.
    ``label`` names the graph in errors: its launches captured outside a compiled kernel (extern
    kernels) are labeled with it, and an exception raised by a replay gets it as a note."""

    def __init__(self, fn, label="a replayed spyre graph"):
        self.fn = fn
        self.label = label
        self.entries = {}
        self.warned = False

    def __call__(self, *args):
        # per argument its dtype, device, sizes, strides and offset or its repr; None without a
        # spyre tensor (in C++: the per-call loops over every parameter, ReplayArgs.cpp)
        key = torch_spyre._C._replay_key(args)
        if key is None:
            return self.fn(*args)
        e = self.entries.get(key)
        if e is None:
            e = self.entries[key] = _Entry()
            # a CPU tensor argument (an optimizer's step counts) is read or updated on the
            # host at each call: a replay would reuse what the capture saw, and a failed
            # capture would have updated it once more (as torch.cuda graphs, not replayed)
            if any(isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in args):
                e.state = "eager"
                STATS["capture_failures"] += 1
                self._warn("an argument is a CPU tensor (read or updated on the host at "
                           "each call)")
            # a training graph: its outputs carry the call's autograd graph, which a replay
            # returning the captured call's outputs would hand out again (a second backward
            # through it); Dynamo guards on grad mode and requires_grad, so this holds for
            # every call of the entry
            elif torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                                 for a in args):
                e.state = "eager"
                STATS["capture_failures"] += 1
                self._warn("it is a training graph (an argument requires grad): its autograd "
                           "graph is built per call")
            STATS["eager_calls"] += 1
            return self.fn(*args)
        if e.state == "warm":
            return self._capture(e, args)
        if e.state == "eager":
            STATS["eager_calls"] += 1
            return self.fn(*args)
        torch_spyre._C._replay_copy_inputs(e.static, args)
        try:
            e.graph.replay_current()
        except Exception as ex:
            ex.add_note(f"torch_spyre: raised by the replay of {self.label}")
            raise
        STATS["replays"] += 1
        return e.outputs

    def _warn(self, why):
        if not self.warned:
            self.warned = True
            warnings.warn(f"torch_spyre: this compiled call cannot be replayed as a graph, it "
                          f"runs op by op: {why}")

    def _capture(self, e, args):
        # The capture call's own tensors are the graph's static inputs (kept alive by the
        # entry): a later call passing the same tensor (a parameter, a KV cache updated in
        # place) uses it in place; another tensor is copied into it first.
        static = [a if isinstance(a, torch.Tensor) else None for a in args]
        # captured on the stream of the inputs' card, not the current device's
        card = next(a.device for a in args
                    if isinstance(a, torch.Tensor) and a.device.type == "spyre")
        g = torch.spyre.SpyreGraph()
        try:
            torch_spyre._C._push_launch_label(self.label)
            try:
                with torch.spyre.device(card), torch.spyre.graph(g):
                    outputs = self.fn(*args)
            finally:
                torch_spyre._C._pop_launch_label()
        except Exception as ex:  # noqa: BLE001 - any capture failure falls back
            g.reset()
            e.state = "eager"
            STATS["capture_failures"] += 1
            self._warn(ex)
            STATS["eager_calls"] += 1
            return self.fn(*args)
        e.graph, e.static, e.outputs, e.state = g, static, outputs, "graph"
        STATS["captures"] += 1
        try:
            g.replay()  # the capture ran nothing
        except Exception as ex:
            ex.add_note(f"torch_spyre: raised by the replay of {self.label}")
            raise
        STATS["replays"] += 1
        return outputs


def spyre_graphs(gm, example_inputs):
    """The Dynamo backend: Inductor, then ``Replayer``."""
    from torch._inductor.compile_fx import compile_fx

    return Replayer(compile_fx(gm, example_inputs), graph_label())


def graph_label():
    """The compiled graph being compiled, by Dynamo's compile id: "compiled graph [0/0]"."""
    cid = torch._guards.CompileContext.current_compile_id()
    return f"compiled graph [{cid}] (replayed)" if cid is not None else "a replayed spyre graph"

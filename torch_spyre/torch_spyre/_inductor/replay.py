"""Compiled calls replayed as one submission (Documentation/torch_compile.md "Replay").

``torch.compile(f, backend="spyre_graphs")`` (and ``mode="reduce-overhead"`` on spyre inputs,
_dynamo.py) compiles with Inductor (the spyre backend) and runs compiled calls through
``Replayer``: per input signature (shapes, strides, dtypes, devices and the non-tensor
arguments) the first call runs normally (a warm-up: plans are resolved and programs loaded),
the second is captured into a ``torch.spyre.SpyreGraph`` and every later call replays it, one
submission.

Inputs. A parameter, a tensor the call updates in place (a KV cache), and a tensor the capture
call passed as the call before it did (the same object: a token tensor reused) are read by the
graph in place: a later call replays that graph only when it passes the same tensor. Any other
argument is copied into a private static tensor of the graph before the capture and at each
replay (in the replay's submission), so a caller's tensor is never written by a replay of
another call. A call whose in-place arguments are other tensors than the graph's is captured as
a second graph of the signature (at most ``MAX_GRAPHS``), else runs op by op.

Outputs. An inference call returns the graph's static outputs: the next replay of that graph
overwrites them (clone what must outlive it), as with ``torch.cuda`` graphs. A training graph
(``torch.compile`` of a module whose parameters require grad) is replayed as its forward and its
backward apart, inside AOTAutograd (``compile_replayed``): their outputs (the loss, the saved
activations, the gradients) are handed out as new tensors over the graph's static memory, and a
graph is replayed only once nothing holds its outputs of the last replay any more (a
backward has consumed the saved activations, ``zero_grad`` has dropped the gradients);
otherwise the second graph of the signature is used (a loss kept until the next step's forward
alternates between the two), else the call runs op by op. So a replay never changes a tensor
someone still holds.

A call that cannot be captured (an op that falls back to the CPU, a copy from host memory)
warns once with the reason and runs normally from then on; so does a signature with a CPU
tensor argument (an optimizer's step counts: updated on the host by the call, read by its
kernels), which is not captured at all.
"""

import warnings
import weakref

import torch
import torch._guards

import torch_spyre

STATS = {"captures": 0, "replays": 0, "eager_calls": 0, "capture_failures": 0, "busy_calls": 0}

# Graphs per signature: a second one serves a call whose in-place arguments differ from the
# first's, or (training) while the first's outputs are still held.
MAX_GRAPHS = 2

# The storages (by data pointer) of live training graphs' static outputs -> (the graph, weakly,
# and the index of that storage in its `held`): a later graph reading one (a backward reading
# the forward's saved activations) reads it in place, never copies into it, and its static
# input is one more use of that storage the owner expects.
_STATIC_OUTPUTS = {}


def _storage_ptr(t):
    return t.untyped_storage().data_ptr()


class _Graph:
    """One captured graph of a signature."""

    def __init__(self, graph, static, in_place, outputs):
        self.graph = graph
        self.static = static      # per argument: the tensor the graph reads (or None)
        self.in_place = in_place  # per argument: the graph reads the caller's tensor itself
        self.outputs = outputs    # the captured call's outputs (static)
        self.held = None          # training: a static output per storage the outputs use
        self.held_counts = None   # and that storage's use count when nobody else holds it
        # training: output index -> (argument index, the argument itself?, offset in it) for
        # an output over an argument's memory (a saved input)
        self.input_outputs = None
        self.output_storages = ()  # training: its storages in _STATIC_OUTPUTS
        self.borrowed = []         # training: (owner, index) of static inputs it holds

    def __del__(self):
        try:
            for p in self.output_storages:
                owner = _STATIC_OUTPUTS.get(p)
                if owner is not None and owner[0]() in (self, None):
                    del _STATIC_OUTPUTS[p]
            for owner, k in self.borrowed:
                owner.held_counts[k] -= 1
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class _Entry:
    def __init__(self):
        self.state = "warm"  # warm -> graph | eager
        self.graphs = []
        self.warm_refs = None  # the warm-up call's tensors (weak) per argument
        self.full = False      # no further graph: MAX_GRAPHS, or a capture failed


class Replayer:
    """Wraps a compiled call (positional arguments) with capture and replay per signature.
    ``label`` names the graph in errors: its launches captured outside a compiled kernel (extern
    kernels) are labeled with it, and an exception raised by a replay gets it as a note.
    ``mutated``: argument indices the call updates in place; ``static``: those of parameters.
    ``training``: a ``_TrainingPart`` for the forward or backward of a training graph (outputs
    handed out as new tensors, a graph replayed only when its last outputs are no longer held);
    without it a call with a training graph (an argument requires grad) runs op by op, its
    autograd graph built per call."""

    def __init__(self, fn, label="a replayed spyre graph", mutated=(), training=None,
                 static=()):
        self.fn = fn
        self.label = label
        self.mutated = frozenset(mutated)
        self.static = frozenset(static)  # argument indices of parameters (AOTAutograd's)
        self.training = training  # None, or its _TrainingPart
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
            why = self._not_replayable(args)
            if why:
                e.state = "eager"
                STATS["capture_failures"] += 1
                self._warn(why)
            e.warm_refs = [weakref.ref(a) if isinstance(a, torch.Tensor) else None
                           for a in args]
            STATS["eager_calls"] += 1
            return self.fn(*args)
        if e.state == "eager":
            STATS["eager_calls"] += 1
            return self.fn(*args)
        for g in e.graphs:
            if self.training is not None and self._held(g):
                continue
            # the arguments read through private tensors copied in, then the graph, in one
            # submission; False (nothing queued) when an in-place argument is another tensor
            try:
                ran = torch_spyre._C._replay_run(g.graph._handle, g.graph._device, g.static,
                                                 args, g.in_place)
            except Exception as ex:
                ex.add_note(f"torch_spyre: raised by the replay of {self.label}")
                raise
            if ran:
                STATS["replays"] += 1
                return self._hand_out(g, args) if self.training is not None else g.outputs
        if not e.full:
            return self._capture(e, args)
        STATS["busy_calls"] += 1
        STATS["eager_calls"] += 1
        if self.training is not None:
            self._warn("the outputs of its replayed graphs are still held (keep .clone()s or "
                       "numbers across calls), or its in-place arguments are other tensors")
        else:
            self._warn("its in-place arguments (parameters, tensors it updates, or that the "
                       "captured calls passed again) are other tensors")
        return self.fn(*args)

    def _not_replayable(self, args):
        # a CPU tensor argument (an optimizer's step counts) is read or updated on the host at
        # each call: a replay would reuse what the capture saw, and a failed capture would have
        # updated it once more (as torch.cuda graphs, not replayed)
        if any(isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in args):
            return "an argument is a CPU tensor (read or updated on the host at each call)"
        # a training graph replayed whole would hand the captured call's outputs, and their
        # autograd graph, out again; its forward and backward replay apart (compile_replayed).
        # Dynamo guards on grad mode and requires_grad, so this holds for every call of the
        # entry.
        if (self.training is None and torch.is_grad_enabled()
                and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)):
            return ("it is a training graph (an argument requires grad): its autograd graph is "
                    "built per call")
        return None

    def _warn(self, why):
        if not self.warned:
            self.warned = True
            warnings.warn(f"torch_spyre: this compiled call cannot be replayed as a graph, it "
                          f"runs op by op: {why}")

    @staticmethod
    def _held(g):
        return torch_spyre._C._replay_held(g.held, g.held_counts)

    def _first_replay(self, g, args):
        try:
            g.graph.replay_current()  # the static inputs hold this call's values
        except Exception as ex:
            ex.add_note(f"torch_spyre: raised by the replay of {self.label}")
            raise
        STATS["replays"] += 1
        return self._hand_out(g, args) if self.training is not None else g.outputs

    def _capture(self, e, args):
        # The graph reads an argument in place when the call updates it, and else: in a
        # training graph when it is a parameter (the forward's static inputs, which the backward
        # gets too) or another training graph's static output (the backward's saved
        # activations); in an inference graph when it is a parameter or the tensor the call
        # before passed (the warm-up's for the first graph, the first graph's for a second: the
        # same object, not an address the allocator may have handed out again). The others
        # through a private copy, so that a replay never writes a caller's tensor.
        ref = [r() if r is not None else None for r in e.warm_refs] if not e.graphs else list(
            e.graphs[0].static)
        static, in_place = [], []
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                static.append(None)
                in_place.append(False)
                continue
            if self.training is not None:
                keep = (i in self.mutated or self.training.is_static(i, a)
                        or _storage_ptr(a) in _STATIC_OUTPUTS)
            else:
                keep = ref[i] is a or i in self.mutated or i in self.static
            if not keep:
                keep_a = a
                a = torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=a.device)
                a.copy_(keep_a)
            static.append(a)
            in_place.append(keep)
        # captured on the stream of the inputs' card, not the current device's
        card = next(a.device for a in args
                    if isinstance(a, torch.Tensor) and a.device.type == "spyre")
        graph = torch.spyre.SpyreGraph()
        try:
            torch_spyre._C._push_launch_label(self.label)
            try:
                with torch.spyre.device(card), torch.spyre.graph(graph):
                    outputs = self.fn(*(a if s is None else s for s, a in zip(static, args)))
            finally:
                torch_spyre._C._pop_launch_label()
        except Exception as ex:  # noqa: BLE001 - any capture failure falls back
            graph.reset()
            e.full = True  # not tried again (a capture synchronizes the card)
            if not e.graphs:
                e.state = "eager"
            STATS["capture_failures"] += 1
            self._warn(ex)
            STATS["eager_calls"] += 1
            return self.fn(*args)
        g = _Graph(graph, static, in_place, outputs)
        if self.training is not None:
            self._track_outputs(g)
        e.graphs.append(g)
        e.full = len(e.graphs) >= MAX_GRAPHS
        e.state = "graph"
        STATS["captures"] += 1
        return self._first_replay(g, args)  # the capture ran nothing

    def _track_outputs(self, g):
        # Outputs over an argument's memory (a saved input) are handed out as views of that
        # argument; the others as new tensors over the static memory, whose use counts tell
        # when they are no longer held.
        inputs = {_storage_ptr(s): i for i, s in enumerate(g.static) if s is not None}
        g.input_outputs, g.held, seen = {}, [], set()
        for j, o in enumerate(g.outputs):
            if not isinstance(o, torch.Tensor):
                continue
            p = _storage_ptr(o)
            if p in inputs:
                i = inputs[p]
                s = g.static[i]
                same = (o.size(), o.stride(), o.storage_offset()) == (
                    s.size(), s.stride(), s.storage_offset())
                g.input_outputs[j] = (i, same, o.storage_offset() - s.storage_offset())
            elif p not in seen:
                seen.add(p)
                g.held.append(o)
        g.output_storages = tuple(seen)
        g.held_counts = torch_spyre._C._replay_use_counts(g.held)
        # a static input over another graph's output memory (a backward's saved activations)
        # is a use that graph expects from now on
        for s, keep in zip(g.static, g.in_place):
            ref = _STATIC_OUTPUTS.get(_storage_ptr(s)) if keep else None
            owner = ref[0]() if ref is not None else None
            if owner is not None:
                owner.held_counts[ref[1]] += 1
                g.borrowed.append((owner, ref[1]))
        for k, t in enumerate(g.held):
            _STATIC_OUTPUTS[_storage_ptr(t)] = (weakref.ref(g), k)

    def _hand_out(self, g, args):
        outs = torch_spyre._C._replay_aliases(g.outputs)
        for j, (i, same, delta) in g.input_outputs.items():
            a = args[i]
            if same:
                outs[j] = a
            else:
                o = g.outputs[j]
                outs[j] = a.as_strided(o.size(), o.stride(), a.storage_offset() + delta)
        return tuple(outs) if isinstance(g.outputs, tuple) else outs


class _TrainingPart:
    """The forward or backward of a training graph, for its ``Replayer``: which arguments are
    parameters or buffers (read in place). ``static_ptrs`` is shared by the two parts: the
    forward's static inputs (``static_idxs``, AOTAutograd's parameters and buffers) by data
    pointer, which the backward gets too (saved for it)."""

    def __init__(self, static_ptrs, static_idxs=frozenset()):
        self.static_ptrs = static_ptrs
        self.static_idxs = static_idxs

    def is_static(self, i, a):
        if i in self.static_idxs:
            self.static_ptrs.add(a.data_ptr())
            return True
        return a.data_ptr() in self.static_ptrs


class _BoxedReplayer:
    """A training graph's forward or backward as AOTAutograd calls it (one list of arguments,
    which the callee empties) through a ``Replayer``."""

    def __init__(self, compiled, label, mutated, training):
        # an instance attribute: AOTAutograd's wrappers (functools.wraps) copy __dict__ only
        self._boxed_call = True
        self.compiled = compiled
        self.replayer = Replayer(self._run, label, mutated, training=training)

    def _run(self, *args):
        return self.compiled(list(args))

    def __call__(self, args):
        a = tuple(args)
        args.clear()
        return self.replayer(*a)


def compile_replayed(gm, example_inputs, config_patches=None):
    """Inductor with every compiled call replayed: an inference graph through ``Replayer``, a
    training graph's forward and backward each through one (their outputs handed out as new
    tensors, see the module's text)."""
    from torch._functorch import config as functorch_config
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    label = graph_label()
    static_ptrs = set()

    def inner_compile(gm, example_inputs, **kwargs):
        compiled = compile_fx_inner(gm, example_inputs, **kwargs)
        if kwargs.get("is_inference"):
            return compiled  # replayed whole, below
        if kwargs.get("is_backward"):
            return _BoxedReplayer(compiled, f"{label} backward", compiled.mutated_input_idxs,
                                  _TrainingPart(static_ptrs))
        static = frozenset(kwargs.get("static_input_idxs") or ())
        return _BoxedReplayer(compiled, f"{label} forward", compiled.mutated_input_idxs,
                              _TrainingPart(static_ptrs, static))

    training = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)
    # Off: AOTAutograd's cache would load a training graph's forward and backward without
    # inner_compile, and an inference graph without its metadata (which arguments the graph
    # updates: read in place, or the update lands in a private copy). Inductor's FX graph
    # cache still serves the compiled graphs.
    with functorch_config.patch(enable_autograd_cache=False):
        compiled = compile_fx(gm, example_inputs, inner_compile=inner_compile,
                              config_patches=config_patches)
    # Dynamo guards on grad mode and requires_grad: every call of a training graph is one
    if training:
        return compiled
    # the arguments the graph updates in place, and its parameters (AOTAutograd's view of the
    # graph just compiled)
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is None:  # not known what the graph updates: not replayed
        warnings.warn("torch_spyre: this compiled call cannot be replayed as a graph, it runs op "
                      "by op: AOTAutograd gave no metadata of its inputs")
        return compiled
    mutated = [i for i, info in enumerate(meta.input_info)
               if info.mutates_data or info.mutates_metadata]
    return Replayer(compiled, label, mutated, static=meta.static_input_indices)


def spyre_graphs(gm, example_inputs):
    """The Dynamo backend: Inductor, every compiled call replayed."""
    return compile_replayed(gm, example_inputs)


def graph_label():
    """The compiled graph being compiled, by Dynamo's compile id: "compiled graph [0/0]"."""
    cid = torch._guards.CompileContext.current_compile_id()
    return f"compiled graph [{cid}] (replayed)" if cid is not None else "a replayed spyre graph"

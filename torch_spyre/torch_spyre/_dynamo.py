"""torch.compile registration of the spyre device: the Dynamo device interface (what Dynamo,
AOTAutograd and Inductor ask of a device: count, current device, streams, events,
synchronize, properties) and fake kernels of the ``spyre::`` custom operators, so graphs with
them trace under FakeTensorMode. Installed by ``import torch_spyre``.
"""

import importlib.abc
import importlib.util
import os
import sys

import torch

from . import spyre


class _Worker:
    """What compile workers may ask without touching a card (Dynamo calls these from threads)."""

    @staticmethod
    def set_device(device: int):
        spyre.set_device(device)

    @staticmethod
    def current_device() -> int:
        return spyre.current_device()

    @staticmethod
    def get_device_properties(device=None):
        di = sys.modules["torch._dynamo.device_interface"]
        return di.get_interface_for_device("spyre").get_device_properties(device)


class _Properties:
    """spyre_device_info as attributes (Inductor reads ``.name`` and ``.multi_processor_count``)."""

    def __init__(self, info):
        self.__dict__.update(info)
        self.multi_processor_count = info.get("cores", 32)
        self.total_memory = info.get("memory_bytes", info.get("total_memory", 0))

    def __repr__(self):
        return f"_SpyreProperties({self.__dict__})"


def _interface_class():
    di = sys.modules["torch._dynamo.device_interface"]

    class SpyreInterface(di.DeviceInterface):
        device = spyre.device
        Event = spyre.Event
        Stream = spyre.Stream
        Worker = _Worker

        current_device = staticmethod(spyre.current_device)
        set_device = staticmethod(spyre.set_device)
        device_count = staticmethod(spyre.device_count)
        is_available = staticmethod(spyre.is_available)
        current_stream = staticmethod(spyre.current_stream)
        set_stream = staticmethod(spyre.set_stream)
        synchronize = staticmethod(spyre.synchronize)
        memory_allocated = staticmethod(spyre.memory_allocated)

        @staticmethod
        def stream(stream):
            return spyre.stream(stream)

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            prev = spyre.current_device()
            if device != prev:
                spyre.set_device(device)
            return prev

        exchange_device = maybe_exchange_device

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int):
            spyre.set_stream(spyre.Stream(stream_id=stream_id, device_index=device_index,
                                          device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return spyre.current_stream(device_idx).stream_id

        @classmethod
        def get_device_properties(cls, device=None):
            return _Properties(spyre.get_device_properties(device))

        @staticmethod
        def get_compute_capability(device=None):
            return "spyre"  # no CUDA-style capability: one engine ISA (Documentation/isa.md)

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return True

    return SpyreInterface


def _register_fakes():
    """A fake (meta) kernel for every spyre:: operator: output shapes and dtypes only."""

    @torch.library.register_fake("spyre::rotary")
    def _rotary(x, cos, sin):
        torch._check(x.dim() == 4, lambda: f"spyre::rotary: x must be [B, H, L, D], got {x.shape}")
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    @torch.library.register_fake("spyre::rms_norm")
    def _rms_norm(x, normalized_shape, weight=None, eps=None):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    @torch.library.register_fake("spyre::add_rms_norm")
    def _add_rms_norm(x, residual, normalized_shape, weight=None, eps=None):
        torch._check(x.shape == residual.shape,
                     lambda: f"spyre::add_rms_norm: x {x.shape} and residual {residual.shape}")
        h = torch.empty_like(x, dtype=torch.result_type(x, residual),
                             memory_format=torch.contiguous_format)
        dtype = h.dtype if weight is None else torch.promote_types(h.dtype, weight.dtype)
        return torch.empty_like(h, dtype=dtype), h

    @torch.library.register_fake("spyre::linear")
    def _linear(x, weight, bias=None, activation="none"):
        torch._check(weight.dim() == 2 and x.dim() >= 1 and x.shape[-1] == weight.shape[1],
                     lambda: f"spyre::linear: x {x.shape} and weight {weight.shape}")
        return x.new_empty((*x.shape[:-1], weight.shape[0]))

    @torch.library.register_fake("spyre::linear_int8_weight")
    def _linear_int8_weight(x, weight, scales, bias=None, activation="none"):
        torch._check(weight.dim() == 2 and x.dim() >= 1 and x.shape[-1] == weight.shape[1]
                     and scales.dim() == 1 and scales.shape[0] == weight.shape[0],
                     lambda: f"spyre::linear_int8_weight: x {x.shape}, weight {weight.shape}, "
                             f"scales {scales.shape}")
        return x.new_empty((*x.shape[:-1], weight.shape[0]))

    @torch.library.register_fake("spyre::linear_rotary")
    def _linear_rotary(x, weight, cos, sin):
        torch._check(x.dim() == 3 and weight.dim() == 2 and x.shape[-1] == weight.shape[1],
                     lambda: f"spyre::linear_rotary: x {x.shape} and weight {weight.shape}")
        return x.new_empty((*x.shape[:-1], weight.shape[0]))

    @torch.library.register_fake("spyre::mlp")
    def _mlp(x, w_gate, w_up, w_down, activation="silu"):
        torch._check(w_up.dim() == 2 and w_down.dim() == 2 and x.shape[-1] == w_up.shape[1]
                     and w_down.shape[1] == w_up.shape[0],
                     lambda: f"spyre::mlp: x {x.shape}, w_up {w_up.shape}, w_down {w_down.shape}")
        return x.new_empty((*x.shape[:-1], w_down.shape[0]))

    @torch.library.register_fake("spyre::fused_pointwise")
    def _fused_pointwise(kernel, n, inputs, outputs, label=""):
        return True


_meta_lib = None


def _register_sdpa_meta():
    """Shapes of aten's SDPA op and its backward for PrivateUse1 backends as torch_spyre's
    kernels return them (the output and the gradients [B, L, H, D] blocks seen as [B, H, L, D];
    no logsumexp: the backward recomputes it when it gets none); aten has none."""
    global _meta_lib
    _meta_lib = torch.library.Library("aten", "IMPL")

    def sdpa(q, k, v, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False,
             scale=None):
        b, h, lq, dv = q.shape[0], q.shape[1], q.shape[2], v.shape[3]
        none = q.new_empty((0,))
        return (q.new_empty((b, lq, h, dv)).transpose(1, 2), none, none, none, lq, k.shape[2],
                none, none, none)

    def sdpa_backward(grad_out, q, k, v, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
                      cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset,
                      scale=None):
        def like(t):
            return t.new_empty((t.shape[0], t.shape[2], t.shape[1], t.shape[3])).transpose(1, 2)

        return like(q), like(k), like(v), None

    _meta_lib.impl("_scaled_dot_product_fused_attention_overrideable", sdpa, "Meta")
    _meta_lib.impl("_scaled_dot_product_fused_attention_overrideable_backward", sdpa_backward,
                   "Meta")


def _pre_grad(graph):
    """Inductor pre-grad pass of inference graphs: the library's fused kernels in place of the
    patterns they compute (_inductor/patterns.py: SwiGLU MLP, linear + activation, residual
    add + RMSNorm), then rms_norm on spyre inputs becomes spyre::rms_norm, which AOTAutograd
    does not decompose
    (aten's composite would become pow, mean, rsqrt and mul: a reduction and a pointwise kernel
    where the library has one launch)."""
    if torch.is_grad_enabled():
        return  # training graphs keep the differentiable ops
    from ._inductor.patterns import replace_fused_blocks

    replace_fused_blocks(graph)
    for n in graph.nodes:
        x = n.args[0] if n.op == "call_function" and n.args else None
        v = x.meta.get("example_value") if isinstance(x, torch.fx.Node) else None
        if n.target == torch.rms_norm and isinstance(v, torch.Tensor) and v.device.type == "spyre":
            n.target = torch.ops.spyre.rms_norm.default
    graph.lint()


def _register_interface():
    di = sys.modules["torch._dynamo.device_interface"]  # still importing: no attribute yet
    di.register_interface_for_device("spyre", _interface_class())


def _register_pass():
    config = sys.modules["torch._inductor.config"]

    if config.pre_grad_custom_pass is None:  # a pass of the user's own stays (and wins)
        config.pre_grad_custom_pass = _pre_grad
    if config.post_grad_custom_post_pass is None:  # the backend's sources in the cache key
        from torch_spyre._cache_key import BackendKey

        config.post_grad_custom_post_pass = BackendKey()


def _key_source_lines():
    from torch_spyre._cache_key import key_source_lines

    key_source_lines()


def _enable_autograd_cache():
    # AOTAutograd's cache on disk (off by default in torch 2.6): without it a warm start traces
    # the joint graph again before Inductor's FX graph cache hits, 1.9 s of TinyGranite's
    # 3.1 s first compiled call (torch_spyre.md "Program cache"). Its key holds Inductor's
    # config, so the backend's sources (BackendKey) too. TORCHINDUCTOR_AUTOGRAD_CACHE decides
    # when it is set.
    if "TORCHINDUCTOR_AUTOGRAD_CACHE" not in os.environ:
        sys.modules["torch._functorch.config"].enable_autograd_cache = True


def _spyre_graphs(gm, example_inputs):
    """backend="spyre_graphs": Inductor, each compiled call replayed as one submission
    (_inductor/replay.py)."""
    from ._inductor.replay import spyre_graphs

    return spyre_graphs(gm, example_inputs)


def _register_backend():
    registry = sys.modules["torch._dynamo.backends.registry"]
    if "spyre_graphs" not in registry._COMPILER_FNS:
        registry.register_backend(_spyre_graphs, name="spyre_graphs")


def _on_spyre(inputs):
    return any(isinstance(t, torch.Tensor) and t.device.type == "spyre" for t in inputs)


def _reduce_overhead_replays():
    """mode="reduce-overhead" sets Inductor's `triton.cudagraphs`, which Inductor honours for
    CUDA only (a spyre graph is compiled and run op by op, with a "skipping cudagraphs" log). For
    a graph with spyre inputs torch.compile's Inductor wrapper instead compiles without it and
    replays each call as a spyre graph (a training graph's forward and backward apart): the
    same as backend="spyre_graphs"."""
    cls = torch._TorchCompileInductorWrapper
    if getattr(cls.__call__, "_spyre", False):
        return
    call = cls.__call__

    def __call__(self, model_, inputs_):
        if not (self.config.get("triton.cudagraphs") and _on_spyre(inputs_)):
            return call(self, model_, inputs_)
        from ._inductor.replay import compile_replayed

        patches = {k: v for k, v in self.config.items() if k != "triton.cudagraphs"}
        return compile_replayed(model_, inputs_, config_patches=patches)

    __call__._spyre = True
    cls.__call__ = __call__


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `fn` once module `name` has been imported: torch._dynamo costs ~0.5 s to import, so
    `import torch_spyre` registers with it only when something (torch.compile) imports it."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module, fn = spec.loader.exec_module, self.fn

        def exec_then_register(module):
            exec_module(module)
            fn()

        spec.loader.exec_module = exec_then_register
        return spec


def _after_import(name, fn):
    if name in sys.modules:
        fn()
    else:
        sys.meta_path.insert(0, _AfterImport(name, fn))


def install():
    _register_fakes()
    _register_sdpa_meta()
    _after_import("torch._dynamo.device_interface", _register_interface)
    _after_import("torch._inductor.config", _register_pass)
    _after_import("torch._inductor.codecache", _key_source_lines)
    _after_import("torch._functorch.config", _enable_autograd_cache)
    _after_import("torch._dynamo.backends.registry", _register_backend)
    _reduce_overhead_replays()

"""The Inductor backend of the spyre device (Documentation/torch_compile.md).

Inductor finds it through ``torch.spyre.Scheduling`` / ``PythonWrapperCodegen`` /
``CppWrapperCodegen`` (its registration hook for the PrivateUse1 backend); importing this module
also registers the wrapper's device code and sends to the eager spyre kernels (extern kernels)
the ops whose Inductor lowerings make indirect or masked loads.
"""

import sympy
import torch
import torch.utils._pytree as pytree
from torch._inductor import inductor_prims, ir, lowering
from torch._inductor.codegen import common
from torch._inductor.virtualized import V
from .scheduling import SpyreScheduling
from .wrapper import SpyreWrapperCodegen

aten = torch.ops.aten


class SpyreDeviceOpOverrides(common.DeviceOpOverrides):
    def import_get_raw_stream_as(self, name):
        return f"{name} = torch._dynamo.device_interface.get_interface_for_device('spyre')" \
               ".get_raw_stream"

    def set_device(self, device_idx):
        return f"torch.spyre.set_device({device_idx})"

    def synchronize(self):
        return "torch.spyre.synchronize()"

    def device_guard(self, device_idx):
        return f"torch.spyre.device({device_idx})"


class CppWrapperCodegen:
    """No C++ wrapper (config.cpp_wrapper) for spyre graphs."""

    @staticmethod
    def create(*args, **kwargs):
        raise NotImplementedError("spyre: torch.compile with cpp_wrapper is not supported")


Scheduling = SpyreScheduling
PythonWrapperCodegen = SpyreWrapperCodegen

# Ops whose Inductor lowerings index indirectly or through masks: on spyre tensors they stay
# the eager spyre kernels (extern kernels), elsewhere Inductor's lowering.
EXTERN = [aten.embedding.default, aten.index_select.default, aten.cat.default,
          aten.constant_pad_nd.default, aten.index.Tensor, aten.gather.default,
          aten.scatter.src, aten.scatter.value, aten.index_put.default, aten.index_put_.default,
          aten.slice_scatter.default, aten.select_scatter.default, aten.masked_fill.Scalar,
          aten.masked_fill.Tensor, aten.where.self, aten.sort.default,
          aten.topk.default, aten.cumsum.default, aten._softmax.default, aten._log_softmax.default]


def _on_spyre(args, kwargs):
    for a in pytree.tree_leaves((args, kwargs)):
        if isinstance(a, ir.IRNode):
            d = a.get_device()
            if d is not None and d.type == "spyre":
                return True
    return False


# where / masked_fill: the mask's argument. A mask computed in the graph (a compare Inductor has
# not realized) is lowered by Inductor, so the compare and the select fuse into one kernel (float
# or int32/int64 values: flat kernels select integers exactly); so is a bool graph input or
# buffer read as a layout the kernels load (_loadable_bool_mask); another mask keeps the
# one-launch eager kernel (a kernel refusing its view would run all its ops eagerly).
MASK_ARG = {aten.where.self: 0, aten.masked_fill.Scalar: 1, aten.masked_fill.Tensor: 1}
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64)  # flat kernels select integers exactly


def _loadable_bool_mask(m, args):
    """Whether the bool mask m (a graph input or a buffer) is contiguous and, where broadcast
    against the other operands, broadcast only over leading dims with whole 128-byte sticks
    after them (the kernel's view of it moves rows of whole sticks): `[S, S]` of S = 64 under
    `[B, H, S, S]`, not S = 37."""
    if not isinstance(m, ir.IRNode) or m.get_dtype() != torch.bool:
        return False
    sizevars = V.graph.sizevars
    try:  # a view of the mask (unsqueeze, expand) has no stride of its own: the eager kernel
        size, stride = list(m.get_size()), list(m.get_stride())
    except NotImplementedError:
        return False
    if not all(sizevars.statically_known_equals(a, b) for a, b in
               zip(stride, ir.FlexibleLayout.contiguous_strides(size))):
        return False
    shapes = [list(a.get_size()) for a in args if isinstance(a, ir.IRNode) and a is not m]
    out = list(size)
    for s in shapes:  # the broadcast shape (a dim of 1 widened by the others)
        n = max(len(out), len(s))
        out, s = [1] * (n - len(out)) + out, [1] * (n - len(s)) + s
        out = [b if sizevars.statically_known_equals(a, 1) else a for a, b in zip(out, s)]
    mine = [1] * (len(out) - len(size)) + size
    run, broadcast = 1, False
    for a, b in zip(reversed(mine), reversed(out)):
        if broadcast or not sizevars.statically_known_equals(a, b):
            broadcast = True
            if not sizevars.statically_known_equals(a, 1):
                return False  # a middle dim broadcast: rows of run bytes
        else:
            run = run * a
    return not broadcast or (isinstance(sympy.sympify(run), sympy.Integer) and int(run) % 128 == 0)


def _fusable_mask(op, args):
    k = MASK_ARG.get(op)
    if k is None or len(args) <= k:
        return False
    if not isinstance(getattr(getattr(args[k], "data", None), "data", None), ir.Pointwise) \
            and not _loadable_bool_mask(args[k], args):
        return False
    return all(a.get_dtype() in FLOATS + INTS for i, a in enumerate(args)
               if i != k and isinstance(a, ir.IRNode))


def _extern_on_spyre(op):
    inductor = lowering.lowerings.get(op)
    eager = lowering.fallback_handler(op, add_to_fallback_set=False)

    def lower(*args, **kwargs):
        if inductor is None or (_on_spyre(args, kwargs) and not _fusable_mask(op, args)):
            return eager(*args, **kwargs)
        return inductor(*args, **kwargs)

    lowering.lowerings[op] = lower


def _index_put_in_place_on_spyre():
    # In place, the generic fallback's result (a MultiOutput of the mutated input) breaks
    # Inductor's byte count when the graph returns it: the eager kernel through Inductor's
    # own mutation node (IndexPutFallback), as Inductor does for boolean indices
    op = aten.index_put_.default
    inductor = lowering.lowerings[op]

    def lower(self, indices, values, accumulate=False):
        if _on_spyre((self, indices, values), {}):
            return lowering.index_put_fallback(self, indices, values, accumulate)
        return inductor(self, indices, values, accumulate)

    lowering.lowerings[op] = lower


def _random_on_spyre():
    # Inductor replaces rand/randn/randint (dropout's mask too) by its own prims, generated in
    # the kernel from a seed buffer (Philox in Triton); on spyre they are the eager kernels
    # drawing from the card's generator, as torch._inductor.config.fallback_random does
    # everywhere: torch.manual_seed repeats them (the draws differ from an eager dropout's,
    # whose decomposition is another)
    random, randint = lowering.lowerings[inductor_prims.random], \
        lowering.lowerings[inductor_prims.randint]

    def lower_random(size, seed, mode, *, offset=0):
        device = seed.get_device()
        if device is None or device.type != "spyre":
            return random(size, seed, mode, offset=offset)
        fallback = lowering.fallback_rand_default if mode == "rand" else \
            lowering.fallback_randn_default
        return fallback(list(size), dtype=torch.float32, device=device)

    def lower_randint(low, high, size, seed, *, offset=0):
        device = seed.get_device()
        if device is None or device.type != "spyre":
            return randint(low, high, size, seed, offset=offset)
        return _RANDINT(low, high, list(size), dtype=torch.int64, device=device)

    lowering.lowerings[inductor_prims.random] = lower_random
    lowering.lowerings[inductor_prims.randint] = lower_randint


_RANDINT = lowering.fallback_handler(aten.randint.low, add_to_fallback_set=False)


def _attention_reads_head_views():
    # PrivateUse1's SDPA (aten's "overrideable" op) has no lowering, and Inductor's implicit
    # fallback made q, k and v dense first: three copies per attention, where the heads of a
    # projection are a transposed view ([B, H, L, D] over [B, L, H*D]) the card's kernel reads
    # as it is in eager mode. The constraint Inductor gives CUDA's SDPA kernels keeps each
    # input's layout when its last dim is dense. Other devices' graphs never reach this op.
    for op in (aten._scaled_dot_product_fused_attention_overrideable.default,
               aten._scaled_dot_product_fused_attention_overrideable_backward.default):
        if op not in lowering.lowerings:
            lowering.make_fallback(op, lowering.sdpa_constraint, warn=False)


def _install():
    common.get_device_op_overrides("cpu")  # Inductor's own first: it fills an empty table only
    common.register_device_op_overrides("spyre", SpyreDeviceOpOverrides())
    for op in EXTERN:
        if op is not aten.index_put_.default:
            _extern_on_spyre(op)
    _index_put_in_place_on_spyre()
    _random_on_spyre()
    _attention_reads_head_views()


_install()

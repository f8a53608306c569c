"""Compiled kernels over operands that are not read or written by position
(Documentation/torch_compile.md "Views"): an input permuted, sliced or broadcast along an outer
or middle dim and an output stored into a slice of a wider buffer are ``view`` operands of the
kernel description, moved by the program as rows of whole sticks (a transposed input as
blocks transposed in the scratchpad), so each case is ONE fused launch (not the eager form),
under TORCH_SPYRE_STRICT=1, matching the CPU. The layouts the description does not take (a
transposed slice, rows off a stick, a reduction over a non-contiguous dim) run their eager
form and still match; a strided copy stays the eager DMA copy."""

import pytest
import torch

import torch_spyre
from conftest import FLOATS, close, make
from torch_spyre._inductor import runtime


# A CPU fallback raises; nothing falls back; Dynamo fresh for every test.
pytestmark = pytest.mark.usefixtures("compile_strict")


def launches(fn, *args):
    """Runs the compiled fn (compiled by a first call); returns its output and the profiled
    events and runtime.STATS changes of a second call."""
    fn(*args)
    before = dict(runtime.STATS)
    with torch_spyre.profiler.profile() as prof:
        out = fn(*args)
    stats = {k: runtime.STATS[k] - before[k] for k in before}
    return out, [e.aten_op for e in prof.events], stats


def one_fused_launch(fn, *args):
    out, ops, stats = launches(fn, *args)
    assert ops == ["spyre::fused_pointwise"], ops
    assert stats == {"fused": 1, "eager": 0, "refused": 0, "copies": 0}, stats
    return out


B, S, H = 2, 6, 3


def head_split(qkv):
    # k of a packed qkv projection, heads to the front (attention's q/k/v transposes)
    d = qkv.shape[-1] // (3 * H)
    k = qkv[..., H * d:2 * H * d].view(B, S, H, d).transpose(1, 2)
    return (k * 0.5 + 1.0).contiguous()


def middle_broadcast(x, w):
    return x * w[:, None, :] - 0.25  # w along the middle dim


def row_broadcast(x, w):
    return (x - w).relu()  # a weight of one row under every row (a flat kernel's broadcast)


def outer_permute(x):
    return (x.permute(1, 0, 2) * 2.0).contiguous()  # rows of the last dim stay whole


def into_slice(x, out):
    out[:, 64:] = x.exp()  # stores to every row's second half of a wider buffer
    return out


@pytest.mark.parametrize("dtype", FLOATS)
def test_head_split_is_one_launch(dtype):
    d = 128 // dtype.itemsize  # a head of one stick
    qkv = make((B, S, 3 * H * d), torch.float32).to(dtype)
    out = one_fused_launch(torch.compile(head_split), qkv.to("spyre"))
    assert out.shape == (B, H, S, d)
    close(out.cpu(), head_split(qkv.float()).to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_middle_and_row_broadcasts_are_one_launch(dtype):
    d = 256 // dtype.itemsize
    x, w = make((4, 7, d), torch.float32).to(dtype), make((4, d), torch.float32, 1).to(dtype)
    out = one_fused_launch(torch.compile(middle_broadcast), x.to("spyre"), w.to("spyre"))
    close(out.cpu(), middle_broadcast(x.float(), w.float()).to(dtype), dtype)
    x2, w2 = make((5, d), torch.float32).to(dtype), make((d,), torch.float32, 2).to(dtype)
    out = one_fused_launch(torch.compile(row_broadcast), x2.to("spyre"), w2.to("spyre"))
    close(out.cpu(), row_broadcast(x2.float(), w2.float()).to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_outer_permute_is_one_launch(dtype):
    x = make((5, 9, 128 // dtype.itemsize), torch.float32).to(dtype)
    out = one_fused_launch(torch.compile(outer_permute), x.to("spyre"))
    close(out.cpu(), outer_permute(x.float()).to(dtype), dtype)


def rotary(x, cos, sin):
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rotary_halves_are_one_launch(dtype):
    # x read at two places (its halves, one operand each), the two halves of the output
    # stored into the cat's buffer: heads of 128, halves of one stick
    x = make((2, 3, 5, 128), torch.float32).to(dtype)
    cos, sin = (make((5, 64), torch.float32, k).to(dtype) for k in (1, 2))
    out = one_fused_launch(torch.compile(rotary), *(t.to("spyre") for t in (x, cos, sin)))
    close(out.cpu(), rotary(x.float(), cos.float(), sin.float()).to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_transposed_inputs_are_one_launch(dtype):
    # x.t() + y (a [Q, P] matrix read as [P, Q]: loaded whole, transposed in the scratchpad),
    # odd sizes, and a batch of transposed blocks
    x, y = make((24, 40), torch.float32).to(dtype), make((40, 24), torch.float32, 1).to(dtype)
    out = one_fused_launch(torch.compile(lambda x, y: x.t() + y), x.to("spyre"), y.to("spyre"))
    close(out.cpu(), (x.float().t() + y.float()).to(dtype), dtype)
    b = make((3, 64, 9), torch.float32).to(dtype)
    fn = torch.compile(lambda b: (b.transpose(1, 2) * 3.0).relu().contiguous())
    out = one_fused_launch(fn, b.to("spyre"))
    close(out.cpu(), (b.float().transpose(1, 2) * 3.0).relu().to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_reductions_over_other_dims_are_row_kernels(dtype):
    # the reduced dim is not the last: the row kernel reads x as transposed blocks (rows of
    # the kernel = columns of x), so softmax over dim 0 or a middle dim is a row kernel then
    # a fused epilogue (2 launches, none the eager form)
    x = make((24, 64), torch.float32).to(dtype)  # rows of the epilogue's broadcasts: sticks
    out, ops, stats = launches(torch.compile(lambda x: x.softmax(0)), x.to("spyre"))
    assert ops == ["spyre::fused_pointwise"] * 2 and stats["eager"] == 0, (ops, stats)
    close(out.cpu(), x.float().softmax(0).to(dtype), dtype)
    x3 = make((4, 33, 128 // dtype.itemsize), torch.float32).to(dtype)
    out, ops, stats = launches(torch.compile(lambda x: x.softmax(1)), x3.to("spyre"))
    assert ops == ["spyre::fused_pointwise"] * 2 and stats["eager"] == 0, (ops, stats)
    close(out.cpu(), x3.float().softmax(1).to(dtype), dtype)


def test_store_into_a_slice_is_one_launch():
    x = make((8, 64), torch.float32)
    base = make((8, 128), torch.float32, 1)
    out = one_fused_launch(torch.compile(into_slice), x.to("spyre"), base.to("spyre"))
    want = into_slice(x, base.clone())
    close(out.cpu(), want, torch.float32)
    assert torch.equal(out.cpu()[:, :64], base[:, :64])  # the other half is untouched


def test_store_at_a_dynamic_position_is_one_launch():
    # a KV cache's write: the position is a symbol, so the view's offset moves into the call
    def step(cache, x, pos):
        cache[:, pos] = x * 2.0
        return cache

    fn = torch.compile(step)  # the second position recompiles with the position as a symbol
    cache, want = torch.zeros(2, 8, 64, device="spyre"), torch.zeros(2, 8, 64)
    for pos in (3, 5, 0):
        x = make((2, 64), torch.float32, pos)
        step(want, x, pos)
        one_fused_launch(fn, cache, x.to("spyre"), pos)  # twice: the same values
        close(cache.cpu(), want, torch.float32)


def test_a_strided_copy_stays_a_dma_copy():
    # no arithmetic: the eager form's copy_ is one strided DMA copy, no program launch at all
    def heads(qkv):
        return qkv.view(B, S, H, 32).transpose(1, 2).contiguous()

    qkv = make((B, S, H * 32), torch.float32)
    out, ops, stats = launches(torch.compile(heads), qkv.to("spyre"))
    assert "spyre::fused_pointwise" not in ops and stats["eager"] == 1, (ops, stats)
    assert stats["copies"] == 1, stats  # the eager form's one-copy path (_copy_plan)
    close(out.cpu(), heads(qkv), torch.float32)


def test_a_kv_cache_write_at_a_symbolic_position_is_one_copy():
    # a decode step's cache write: the position a symbol after the second one, each call one
    # strided copy of the eager form's copy path (no expression evaluated per op), the cache
    # equal to the CPU's after every call and nothing else written
    def write(cache, kv, pos):
        cache[:, :, pos:pos + 1] = kv
        return cache

    fn = torch.compile(write)
    cache, want = torch.zeros(1, 2, 8, 64, device="spyre"), torch.zeros(1, 2, 8, 64)
    for k, pos in enumerate((3, 5, 6, 0, 7)):
        kv = make((1, 2, 1, 64), torch.float32, k)
        write(want, kv, pos)
        before = dict(runtime.STATS)
        fn(cache, kv.to("spyre"), pos)
        stats = {n: runtime.STATS[n] - before[n] for n in before}
        assert stats == {"fused": 0, "eager": 1, "refused": 0, "copies": 1}, (pos, stats)
        assert torch.equal(cache.cpu(), want), pos


def test_a_copy_read_backwards_takes_the_general_eager_form():
    # a flipped source is a negative stride: not the copy path, the general form, same values
    def flipped(x):
        return x.flip(0).contiguous()

    x = make((8, 64), torch.float32)
    out, ops, stats = launches(torch.compile(flipped), x.to("spyre"))
    assert stats["eager"] == 1 and stats["copies"] == 0, stats
    close(out.cpu(), flipped(x), torch.float32)


# layouts the description does not take: the eager form, the same values
NOT_TAKEN = {
    "transposed_slice": (lambda x, y: x[:, 1:].t() + y, [(24, 41), (40, 24)]),
    "rows_off_a_stick": (lambda x: (x[:, :8] * 3.0).contiguous(), [(16, 40)]),
    "read_at_two_places_off_a_stick": (lambda x: x[:, :16] * x[:, 16:], [(8, 32)]),
    "softmax_over_a_sliced_dim0": (lambda x: x[:, 1:].softmax(0), [(16, 41)]),
}


@pytest.mark.parametrize("name", sorted(NOT_TAKEN))
def test_layouts_not_taken_run_the_eager_form(name):
    fn, shapes = NOT_TAKEN[name]
    args = [make(s, torch.float32, k) for k, s in enumerate(shapes)]
    out, ops, stats = launches(torch.compile(fn), *[a.to("spyre") for a in args])
    assert stats["eager"] >= 1 and stats["refused"] == 0, stats
    close(out.cpu(), fn(*args), torch.float32)


def test_a_view_the_library_refuses_runs_the_eager_form():
    # a graph input that is a slice off a stick: the description is generated (the strides are
    # whole sticks) but the call's operand is not on a stick, so the library refuses it
    x = make((4, 64 + 32), torch.float32)
    dev = x.to("spyre")[:, 1:65]

    def f(x):
        return x * 2.0

    out, ops, stats = launches(torch.compile(f), dev)
    assert stats["refused"] == 1 and stats["eager"] == 1, stats
    close(out.cpu(), f(x[:, 1:65]), torch.float32)


def heads_merged(x, w):
    # [heads, tokens, d] -> [tokens, heads * d] (attention's output heads back into rows):
    # the kernel runs over [tokens, heads * d], so x's index divides the column,
    # 64 * i0 + 768 * (i1 // 64) + ModularIndexing(i1, 1, 64), split into a view of [12, 12, 64]
    h, t, d = x.shape
    return (x.permute(1, 0, 2).reshape(t, h * d) * w).sin()


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_divided_index_is_a_view_in_one_launch(dtype):
    d = 128 // dtype.itemsize  # a head of one stick
    x = make((12, 5, d), torch.float32).to(dtype)
    w = make((5, 12 * d), torch.float32, 1).to(dtype)
    out = one_fused_launch(torch.compile(heads_merged), x.to("spyre"), w.to("spyre"))
    close(out.cpu(), heads_merged(x.float(), w.float()).to(dtype), dtype)


def per_row_scale(x, s):
    return (x * s).exp() - s  # s: [rows, 1], one value along each row (RMSNorm's scale)


def per_channel(x, m, w):
    # BatchNorm's normalization over NCHW: a value per channel along N and HW
    return ((x - m[None, :, None, None]) * w[None, :, None, None]).relu()


@pytest.mark.parametrize("dtype", FLOATS)
def test_broadcasts_along_the_last_dim_are_one_launch(dtype):
    # a per-row or per-channel input (the last dim's stride 0) is a row operand of a row
    # kernel without reductions; NCHW by channel reads and writes x as rows of N runs of HW
    x, s = make((12, 256), torch.float32).to(dtype), make((12, 1), torch.float32, 1).to(dtype)
    out = one_fused_launch(torch.compile(per_row_scale), x.to("spyre"), s.to("spyre"))
    close(out.cpu(), per_row_scale(x.float(), s.float()).to(dtype), dtype)
    x = make((4, 8, 16, 16), torch.float32).to(dtype)
    m, w = (make((8,), torch.float32, k).to(dtype) for k in (1, 2))
    out = one_fused_launch(torch.compile(per_channel), *(t.to("spyre") for t in (x, m, w)))
    close(out.cpu(), per_channel(x.float(), m.float(), w.float()).to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sums_per_channel_over_nchw_are_row_kernels(dtype):
    # BatchNorm's statistics: a row per channel of N runs of HW, each run one LOAD
    channel_stats_fused(make((4, 8, 16, 16), torch.float32).to(dtype))


def channel_stats_fused(x):
    """var_mean over N, H and W of NCHW compiled: fused launches only, the CPU's statistics."""
    fn = torch.compile(lambda x: torch.var_mean(x.float(), (0, 2, 3), correction=0))
    (var, mean), ops, stats = launches(fn, x.to("spyre"))
    assert set(ops) == {"spyre::fused_pointwise"} and stats["eager"] == 0, (ops, stats)
    want = torch.var_mean(x.float(), (0, 2, 3), correction=0)
    close(var.cpu(), want[0], torch.float32)
    close(mean.cpu(), want[1], torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_channels_too_long_for_a_core_stream_their_runs(dtype):
    # rows of N runs of HW longer than a core's scratchpad (8 channels of 2 x 128 x 128): long
    # rows, each core's chunks whole pieces of the runs; the statistics and the normalization
    x = make((2, 8, 128, 128), torch.float32).to(dtype)
    m, w = (make((8,), torch.float32, k).to(dtype) for k in (1, 2))
    out = one_fused_launch(torch.compile(per_channel), *(t.to("spyre") for t in (x, m, w)))
    close(out.cpu(), per_channel(x.float(), m.float(), w.float()).to(dtype), dtype)
    channel_stats_fused(x)


def test_an_extern_result_in_another_layout_than_its_meta_is_made_that_layout():
    # `where` of a transposed condition runs as Inductor's fallback kernel: its meta result
    # follows the transposed input (strides (1, 64)), the card's kernel returns it dense; the
    # kernel after it read it by the meta strides. Copied into the meta layout now (it raised
    # an AssertionError from the layout check before, and read transposed values before that).
    def f(a, m):
        w = torch.where(m.t(), a, 0.0)
        return w * 2.0 + a, w

    torch.compiler.reset()
    a = make((64, 64), torch.float32)
    m = make((64, 64), torch.float32, seed=1) > 0
    before = runtime.RELAYOUTS["copies"]
    got = torch.compile(f)(a.to("spyre"), m.to("spyre"))
    for g, w in zip(got, f(a, m)):
        assert torch.equal(g.cpu(), w)
    assert runtime.RELAYOUTS["copies"] > before
    torch.compiler.reset()


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_a_pad_with_symbolic_sizes_indexes_in_the_eager_form(mode):
    # dynamic sizes: a reflect pad's positions are sympy Where/abs of the sizes, evaluated by
    # the eager form over tensors of positions (Where raised a NameError there)
    import torch.nn.functional as F

    def pad(x):
        return F.pad(x, (1, 2, 2, 1), mode=mode) * 2.0

    fn = torch.compile(pad, dynamic=True)
    for shape in [(2, 3, 5, 6), (1, 2, 4, 7)]:
        x = make(shape, torch.float32, shape[-1])
        assert torch.equal(fn(x.to("spyre")).cpu(), pad(x))


def test_float64_intermediates_of_symbolic_sizes_are_fp32_on_the_card():
    # Inductor divides by a symbolic size in float64 (sizes to double, the quotient back to
    # fp32); the eager form computed it through the CPU fallback (strict mode raised)
    def scale(x):
        return x * (1.0 / (x.shape[0] * x.shape[1])) + x.sum(1, keepdim=True) / x.shape[1]

    fn = torch.compile(scale, dynamic=True)
    for shape in [(3, 5), (4, 7)]:
        x = make(shape, torch.float32, shape[1])
        close(fn(x.to("spyre")).cpu(), scale(x), torch.float32)

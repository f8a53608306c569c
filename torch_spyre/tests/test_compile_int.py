"""Integer and bool tensors inside compiled kernels (Documentation/torch_compile.md "Integer
values"): int64/int32 loads, stores and constants, add/sub/mul/neg/abs/min/max/clamp, floor
division and remainder of negatives (Python's, as torch), bitwise ops and shifts (counts out of
range too), compares, where and masked_fill of integers and with a bool input as the mask, casts
int <-> float (truncation toward zero) and int <-> int, bool masks stored and re-read,
BatchNorm's ``num_batches_tracked += 1``, positions as values (``arange``, position ids, from a
symbolic start too; in row kernels: a causal mask built from two aranges, softmaxed or
summed, and a decode step's mask at a symbolic position), and
integer sums, counts, maxima and minima of rows (row kernels, exact into int64):
each ONE fused launch (not the eager form), under TORCH_SPYRE_STRICT=1, against the CPU bit
for bit (int64 values past 2^53 and 2^62 included, which fp32 could not carry)."""

import pytest
import torch

import torch_spyre

from test_compile_layout import one_fused_launch
from test_intops import ints

pytestmark = pytest.mark.usefixtures("compile_strict")

SHAPE = (5, 37)  # odd sizes: a partial stick per core and per chunk


def same(got, want):
    """got (from the card) equals want bit for bit, dtype included."""
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert torch.equal(g.cpu(), w), (g.cpu(), w)


def check(fn, *args):
    """fn compiled on the card (one fused launch) against fn on the CPU."""
    torch.compiler.reset()
    got = one_fused_launch(torch.compile(fn), *[a.to("spyre") for a in args])
    same(got, fn(*args))


def big(shape, seed):
    """int64 values over the whole range with the edges, small ones and ones past 2^53."""
    x = ints(shape, torch.int64, seed).flatten()
    x[:8] = torch.tensor([2 ** 63 - 1, -2 ** 63, 2 ** 53 + 1, -2 ** 53 - 3, 2 ** 62 + 5, -7, 7, 0])
    x[8::3] = x[8::3] % 2001 - 1000
    return x.view(shape)


def divisor(shape, seed, dtype=torch.int64):
    """Nonzero divisors of both signs (small, and large for int64)."""
    d = ints(shape, dtype, seed, -9, 10)
    d[d == 0] = 3
    if dtype == torch.int64:
        d.view(-1)[::4] = ints(d.view(-1)[::4].shape, dtype, seed + 1) | 1
    return d


def test_int64_arithmetic_past_2_53():
    x, y = big(SHAPE, 0), big(SHAPE, 1)
    check(lambda a, b: (a + (2 ** 53 + 1), a * 3 - b, -a, a.abs(), torch.maximum(a, b),
                        torch.minimum(a, b + 1)), x, y)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_floor_division_and_remainder_of_negatives(dtype):
    x = ints(SHAPE, dtype, 2) if dtype == torch.int32 else big(SHAPE, 2)
    x.view(-1)[:4] = torch.tensor([-7, 7, -7, 7])
    d = divisor(SHAPE, 3, dtype)
    d.view(-1)[:4] = torch.tensor([2, -2, -2, 2])
    check(lambda a, b: (a // b, a % b, torch.remainder(a, -4), torch.floor_divide(a, 5)), x, d)


def test_int32_wraps_and_clamps():
    x = ints(SHAPE, torch.int32, 4)
    check(lambda a: (a * 3 + 7, torch.clamp(a, -5, 1000), (a - 100).abs()), x)


def test_where_and_masked_fill_of_ids():
    ids = ints(SHAPE, torch.int64, 5, -3, 50)
    pad = 0
    check(lambda t: (torch.where(t != pad, t, -100), t.masked_fill(t > 40, 2 ** 60)), ids)


def test_compares_stored_as_bool_and_reread():
    # ReLU's backward mask: x > 0 stored as torch.bool, then read as a mask by another kernel
    x = torch.randn(SHAPE)
    g = torch.randn(SHAPE)
    check(lambda a: a > 0, x)
    mask = (x > 0)
    check(lambda m, b: b * m, mask, g)
    ids = ints(SHAPE, torch.int64, 6, -3, 5)
    check(lambda t: (t != 0, (t > 1) & (t < 4)), ids)


def test_casts_between_ints_and_floats():
    # float -> int truncates toward zero (negatives too); int -> float rounds once; int64 ->
    # int32 wraps, int32 -> int64 widens
    x = torch.randn(SHAPE) * 1000
    ids = big(SHAPE, 7)
    small = ints(SHAPE, torch.int32, 8)
    check(lambda a: (a * 2.5).long(), x)
    check(lambda t: (t.float() * 0.5, t.int()), ids)
    check(lambda s: (s.long() * 3, s.float() + 1), small)


def test_num_batches_tracked_add():
    # BatchNorm's num_batches_tracked += 1: an int64 0-dim counter updated in place
    def step(t):
        t.add_(1)
        return t

    t = torch.tensor(2 ** 60 + 3)
    torch.compiler.reset()
    got = one_fused_launch(torch.compile(step), t.clone().to("spyre"))
    same(got, step(t.clone()) + 1)  # two calls on the card: the compile's and the counted one


def test_integer_sums_counts_and_extremes_of_rows():
    # row kernels: VRED's integer path into int64 per row (sums past 2^53 wrap as torch's)
    ids = big(SHAPE, 9)
    ids.view(-1)[::5] = 0
    check(lambda t: (t != 0).sum(-1), ids)
    check(lambda t: (t.sum(-1), t.amax(-1), t.amin(-1)), ids)
    check(lambda t: (t != 0).sum(), ids)  # the whole tensor: one row
    check(lambda a: (a > 0).sum(-1), torch.randn(SHAPE))  # a float mask's count


def test_positions_as_values():
    # Inductor's index_expr (arange, position ids) in flat kernels: each loop variable from the
    # position, exact, in int64, int32 and float
    ids = big((8, 37), 10)
    check(lambda t: t + torch.arange(t.shape[-1], device=t.device) + 7, ids)
    check(lambda t: (torch.arange(296, device=t.device) * 3 - 5 + t.view(-1)).view(8, 37), ids)
    check(lambda s: torch.arange(296, device=s.device, dtype=torch.int32) + s,
          ints((296,), torch.int32, 11))
    check(lambda a: torch.arange(296, device=a.device, dtype=torch.float32) * 0.5 + a,
          torch.randn(296))


def _causal(s):
    n = s.shape[-1]
    return torch.arange(n, device=s.device)[:, None] >= torch.arange(n, device=s.device)[None, :]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_positions_in_row_kernels_are_one_launch(dtype):
    # Inductor's index_expr in row kernels: a causal mask built from two aranges (the query
    # position a row variable, the key position the column) and softmaxed or summed in the
    # same kernel; a position expression with coefficients and an offset; positions reduced
    # over two dims (the column part not a multiple of the column index). The row part is a
    # row operand the call makes once, the column part the kernel's iota (or a col operand);
    # each ran the eager form before ("index_expr of torch.int64")
    from torch_spyre._inductor import runtime

    rtol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]

    def close(got, want):  # want in float64: sums' roundings relative to the largest value
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu().double(), want.to(dtype).double(), rtol=rtol,
                                   atol=rtol * float(want.abs().max()))

    def masked_softmax(s):
        return torch.where(_causal(s), s, float("-inf")).softmax(-1)

    def masked_sum(s):
        return (s * _causal(s)).sum(-1), (s * _causal(s)).amax(-1)

    def shifted(s):
        n = s.shape[-1]
        i, j = torch.arange(n, device=s.device)[:, None], torch.arange(n, device=s.device)
        return ((i * 2 - j + 3).to(s.dtype) * s).sum(-1)

    def two_dims(x):
        rows = torch.arange(x.shape[-2], device=x.device)[:, None].to(x.dtype)
        return (x * rows).sum((-2, -1))

    for fn, x in ((masked_softmax, torch.randn(2, 3, 64, 64)), (masked_sum, torch.randn(3, 37, 37)),
                  (shifted, torch.randn(2, 40, 40)), (two_dims, torch.randn(5, 6, 10))):
        torch.compiler.reset()
        got = one_fused_launch(torch.compile(fn), x.to(dtype).to("spyre"))
        want = fn(x.to(dtype).double())
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            close(g, w)
    # the row operand is made once: a third call makes nothing new
    torch.compiler.reset()
    f = torch.compile(masked_softmax)
    x = torch.randn(2, 3, 64, 64).to(dtype).to("spyre")
    f(x)
    before = dict(runtime.STATS)
    with torch_spyre.profiler.profile() as prof:
        f(x)
    assert [e.aten_op for e in prof.events] == ["spyre::fused_pointwise"]
    assert runtime.STATS["fused"] == before["fused"] + 1


def test_positions_in_row_kernels_with_dynamic_sizes():
    # dynamic=True: the row operand is made for each size at the call (the row length
    # symbolic too); values that fp32 would not hold exactly (the largest |value| is checked
    # at each call) run the eager form, with the right values
    from torch_spyre._inductor import runtime

    def masked_softmax(s):
        return torch.where(_causal(s), s, float("-inf")).softmax(-1)

    def scaled(s):
        n = s.shape[-1]
        i, j = torch.arange(n, device=s.device)[:, None], torch.arange(n, device=s.device)
        return (s * (i * 2 ** 20 >= j * 2 ** 20 + 2 ** 19)).sum(-1)

    for fn, shapes in ((masked_softmax, ((2, 3, 37, 37), (2, 3, 64, 64), (1, 2, 100, 100),
                                        (2, 3, 64, 64))),
                       (scaled, ((2, 8, 8), (3, 16, 16), (2, 17, 17), (2, 40, 40)))):
        torch.compiler.reset()
        f = torch.compile(fn, dynamic=True)
        for shape in shapes:
            x = torch.randn(shape)
            before = dict(runtime.STATS)
            got = f(x.to("spyre"))
            stats = {k: runtime.STATS[k] - before[k] for k in before}
            # scaled: 2^20 * (n - 1) + 2^19 below 2^24 up to n = 16
            fused = fn is masked_softmax or shape[-1] <= 16
            assert stats == {"fused": int(fused), "eager": int(not fused), "refused": 0,
                             "copies": 0}, (fn.__name__, shape, stats)
            torch.testing.assert_close(got.cpu(), fn(x), rtol=1e-5, atol=1e-5)


def _decode_softmax(s, pos):  # a decode step's scores [B, H, 1, K], keys up to pos
    return torch.where(torch.arange(s.shape[-1], device=s.device) <= pos, s,
                       float("-inf")).softmax(-1)


def _decode_sum(s, pos):
    return (s * (torch.arange(s.shape[-1], device=s.device) <= pos)).sum(-1)


def _chunk_softmax(s, pos):  # queries at pos .. pos + S - 1 (a prefill chunk)
    i = torch.arange(s.shape[-2], device=s.device)[:, None]
    j = torch.arange(s.shape[-1], device=s.device)
    return torch.where(j <= i + pos, s, float("-inf")).softmax(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_positions_in_row_kernels_at_a_symbolic_position(dtype):
    # a decode step's causal mask at a position, softmaxed or summed: once the position is a
    # symbol (its second value recompiles once, then never again), the mask's constant term
    # is an fp32 scalar input the call fills (one fill per new value), added on the card to
    # the column index (and the row operand: a prefill chunk's queries at pos + i). Each call
    # is ONE launch (before, the eager form: "index_expr s0 (not affine)"); a position whose
    # values fp32 would not hold (past 2^24, checked at each call) runs the eager form, right
    # values, no recompile. Also dynamic=True (symbolic from the first call, the key length
    # too) and the position as a 0-dim int64 tensor on the card (traced as data: a scalar load)
    import torch._dynamo.testing

    rtol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]

    def run(f, fn, x, pos, fused=True):
        before = dict(runtime.STATS)
        with torch_spyre.profiler.profile() as prof:
            got = f(x.to(dtype).to("spyre"), pos.to("spyre") if torch.is_tensor(pos) else pos)
        stats = {k: runtime.STATS[k] - before[k] for k in before}
        if fused:
            assert [e.aten_op for e in prof.events] == ["spyre::fused_pointwise"], pos
            assert stats == {"fused": 1, "eager": 0, "refused": 0, "copies": 0}, (pos, stats)
        else:
            assert stats == {"fused": 0, "eager": 1, "refused": 0, "copies": 0}, (pos, stats)
        assert got.dtype == dtype
        want = fn(x.to(dtype).double(), pos)  # the CPU in float64
        torch.testing.assert_close(got.cpu().double(), want.to(dtype).double(), rtol=rtol,
                                   atol=rtol * float(want.nan_to_num().abs().max()),
                                   equal_nan=True)

    from torch_spyre._inductor import runtime

    positions = (3, 5, 9, 40, 0, 63, 5, 2 ** 24 - 70, -1)
    for fn, shape in ((_decode_softmax, (2, 4, 1, 64)), (_decode_sum, (2, 4, 1, 64)),
                      (_chunk_softmax, (2, 2, 4, 64))):
        torch.compiler.reset()
        cnt = torch._dynamo.testing.CompileCounterWithBackend("inductor")
        f = torch.compile(fn, backend=cnt)
        for k, pos in enumerate(positions):
            run(f, fn, torch.randn(shape), pos)
            assert cnt.frame_count == min(k + 1, 2), (fn.__name__, pos, cnt.frame_count)
        if dtype == torch.float32:
            # 2^24 + 66 past the integers fp32 holds
            run(f, fn, torch.randn(shape), 2 ** 24 + 3, fused=False)
            assert cnt.frame_count == 2
    torch.compiler.reset()
    cnt = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    f = torch.compile(_decode_softmax, backend=cnt, dynamic=True)
    for pos, n in ((3, 64), (5, 64), (37, 100), (99, 100), (2, 64)):
        run(f, _decode_softmax, torch.randn(2, 4, 1, n), pos)
    assert cnt.frame_count == 1
    torch.compiler.reset()
    cnt = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    for fn in (_decode_softmax, _decode_sum):
        f = torch.compile(fn, backend=cnt)
        for pos in (3, 5, 40, 5):
            run(f, fn, torch.randn(2, 4, 1, 64), torch.tensor(pos))
    assert cnt.frame_count == 2  # one graph each: the position is data


def test_a_symbolic_position_alone_in_a_row_kernel():
    # the position as a value by itself: in a kernel of int64 values the exact int64 scalar
    # (no 2^24 bound: positions past 2^40, sums wrapping as torch's), bit for bit; in a kernel
    # of 16-bit floats a scalar of that type (filled rounded once, as Inductor's index_expr of
    # it). Each call after the second position ONE launch, no further recompile
    import torch._dynamo.testing
    from torch_spyre._inductor import runtime

    def ints_(t, pos):
        mask = torch.arange(t.shape[-1], device=t.device) <= pos
        return (t + pos).amax(-1), torch.where(mask, t, 0).sum(-1)

    def floats(s, pos):
        return (s + pos).amax(-1)

    for fn, x, positions in ((ints_, big((3, 64), 17), (3, 5, 9, 2 ** 24 + 1, 2 ** 40, -2 ** 50)),
                             (floats, torch.randn(3, 64).half(), (3, 5, 9, 40)),
                             (floats, torch.randn(3, 64).bfloat16(), (3, 5, 9, 40))):
        torch.compiler.reset()
        cnt = torch._dynamo.testing.CompileCounterWithBackend("inductor")
        f = torch.compile(fn, backend=cnt)
        for pos in positions:
            before = dict(runtime.STATS)
            got = f(x.to("spyre"), pos)
            stats = {k: runtime.STATS[k] - before[k] for k in before}
            assert stats == {"fused": 1, "eager": 0, "refused": 0, "copies": 0}, (pos, stats)
            same(got, fn(x, pos))
        assert cnt.frame_count == 2


def test_positions_in_a_row_kernel_of_integers():
    # a kernel of int64 values (exact): the causal selection of ids summed per row, past 2^53,
    # and the positions themselves summed (an int64 row output)
    ids = big((3, 37, 37), 16)
    check(lambda t: torch.where(_causal(t), t, 0).sum(-1), ids)
    check(lambda t: (t + torch.arange(37, device=t.device)[:, None]).amax(-1), ids)


def test_positions_from_a_symbolic_start_are_one_launch():
    # a decode step's position ids, arange(pos, pos + L): once the position is a symbol of the
    # compiled graph (its second value), its value reaches the kernel as an int64 scalar input
    # the call makes, one fill per new value (before, the eager form ran at every call); the
    # length dynamic too (one loop variable: the position itself)
    from torch_spyre._inductor import runtime

    torch.compiler.reset()

    def positions(x, pos):
        return x + torch.arange(pos, pos + x.shape[0], device=x.device)[:, None] * 2

    fn = torch.compile(positions)
    for k, (pos, n) in enumerate(((3, 1), (3, 4), (5, 1), (9, 4), (0, 1), (2 ** 40, 3),
                                  (12, 1), (5, 1))):
        x = ints((n, 64), torch.int64, 20 + k)
        before = dict(runtime.STATS)
        got = fn(x.to("spyre"), pos)
        stats = {name: runtime.STATS[name] - before[name] for name in before}
        assert stats == {"fused": 1, "eager": 0, "refused": 0, "copies": 0}, (pos, n, stats)
        same(got, positions(x, pos))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_bitwise_ops_and_shifts(dtype):
    # &, |, ^, ~ over the whole range; shifts by counts in [-3, width + 2] (torch's rule out of
    # range: << gives 0, >> the sign fill), arithmetic >> of negatives, constants both sides
    bits = dtype.itemsize * 8
    x = big(SHAPE, 12) if dtype == torch.int64 else ints(SHAPE, dtype, 12)
    y = big(SHAPE, 13).to(dtype) if dtype == torch.int64 else ints(SHAPE, dtype, 13)
    s = ints(SHAPE, dtype, 14, -3, bits + 3)
    s.view(-1)[:6] = torch.tensor([0, 1, bits - 1, bits, -1, bits + 2])
    check(lambda a, b: (a & b, a | b, a ^ b, ~a, (a & 0xFF) | (b ^ -2)), x, y)
    check(lambda a, c: (a << c, a >> c, torch.bitwise_left_shift(3, c), (a >> 2) + (a << 5)),
          x, s)


def test_where_and_masked_fill_with_a_bool_input_mask():
    # a bool graph input as the mask (read as 0/1 bytes), with float and integer values, in a
    # flat kernel, broadcast over leading dims (a causal [S, S] mask of whole sticks) and in a
    # row kernel (an exact integer sum of the selected ids)
    x, y = torch.randn(SHAPE), torch.randn(SHAPE)
    m = torch.rand(SHAPE) > 0.5
    ids = big(SHAPE, 15)
    check(lambda c, a, b: torch.where(c, a, b), m, x, y)
    check(lambda a, c: a.masked_fill(c, float("-inf")), x, m)
    check(lambda t, c: (t.masked_fill(c, -100), torch.where(c, t, 2 ** 60)), ids, m)
    causal = torch.ones(64, 64, dtype=torch.bool).triu(1)
    check(lambda s, c: s.masked_fill(c, float("-inf")), torch.randn(2, 3, 64, 64), causal)
    check(lambda t, c: torch.where(c, t, 0).sum(-1), ids, m)


def test_float_to_int_and_back_in_a_kernel_of_floats():
    # x.long().float() (truncation toward zero, as torch) in a kernel of float buffers only:
    # the kernel is described again with exact integer values (flat and row kernels)
    x = torch.randn(SHAPE) * 1000
    x.view(-1)[:6] = torch.tensor([-2.5, 2.5, -0.5, 1e10, -3e9, 0.0])
    check(lambda a: a.long().float() * 0.5 + a, x)
    check(lambda a: (a * 10).long().float().amax(-1), x)
    y = torch.randn(SHAPE) * 1000
    check(lambda a: (a.int().float() + a, (a * 3).long().to(torch.float16)), y)

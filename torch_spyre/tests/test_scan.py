"""cumsum and cumprod on the card (spyre_op_scan) against the CPU, bit for bit and with no
fallback: every dtype the card scans (bool and narrow integers promoted to int64 as torch does),
every dim and negative dims, dims of size 1, empty and 0-d tensors, transposed inputs, `out=`,
in place, `dtype=`, fp32 sums that need torch's double accumulator and fp16 sums that need its
float accumulator. fp32 cumprod multiplies in fp32 (as torch's CUDA kernel; the CPU in double):
bit for bit that recurrence and within torch's own device-vs-CPU tolerance of the CPU.
logcumsumexp (a scan of the card's logaddexp) within a few fp32 ulps of the float64 answer, with
-inf, inf and NaN as the CPU's, and its gradient."""

import pytest
import torch

import torch_spyre
from conftest import FLOATS, assert_same, make

INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]


def data(shape, dtype, seed=0, prod=False):
    """Values whose fp32 sums round and integers that overflow the narrow types."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        if prod:
            return (0.5 + torch.rand(shape, generator=g) * 1.5).to(dtype)
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -(2**40)), min(info.max, 2**40)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def same(actual, expected):
    """assert_same, NaN equal to NaN."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert torch.equal(actual, expected) or torch.allclose(
        actual.double(), expected.double(), rtol=0, atol=0, equal_nan=True), (
        f"\n{actual}\n!=\n{expected}")


@pytest.fixture
def no_fallback(fallback_reset):
    yield
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_cumsum(no_fallback, dtype, dim):
    x = data((3, 7, 5), dtype, seed=dim + 3)
    assert_same(torch.cumsum(x.to("spyre"), dim).cpu(), torch.cumsum(x, dim))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16] + INTS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumprod(no_fallback, dtype, dim):
    x = data((4, 9, 3), dtype, seed=dim + 11, prod=True)
    assert_same(torch.cumprod(x.to("spyre"), dim).cpu(), torch.cumprod(x, dim))


def test_sort_scan_shape_and_long_rows(no_fallback):
    x = make((8, 33), torch.float32)
    assert_same(torch.cumsum(x.to("spyre"), dim=1).cpu(), torch.cumsum(x, dim=1))
    for dtype in FLOATS:
        y = data((3, 1000), dtype, seed=5)
        assert_same(torch.cumsum(y.to("spyre"), -1).cpu(), torch.cumsum(y, -1))


def test_accumulator_types_are_torchs(no_fallback):
    # fp32: torch accumulates in double (a float accumulator ends at 0, not 1)
    x = torch.tensor([1e8, 1.0, -1e8, 0.5])
    assert_same(torch.cumsum(x.to("spyre"), 0).cpu(), torch.cumsum(x, 0))
    assert torch.cumsum(x, 0)[2] == 1.0
    # fp16: in float (an fp16 accumulator stays at 2048)
    h = torch.tensor([2048.0, 1.0, 1.0], dtype=torch.float16)
    assert_same(torch.cumsum(h.to("spyre"), 0).cpu(), torch.cumsum(h, 0))
    assert torch.cumsum(h, 0)[2] == 2050
    # -0.0, infinities and NaN
    s = torch.tensor([-0.0, 2.0, float("inf"), float("-inf"), 1.0, float("nan"), 3.0])
    for dtype in FLOATS:
        got = torch.cumsum(s.to(dtype).to("spyre"), 0).cpu()
        want = torch.cumsum(s.to(dtype), 0)
        same(got, want)
        assert not torch.signbit(got[0])


def test_edge_shapes_and_layouts(no_fallback):
    x = make((5, 6, 4), torch.float32)
    d = x.to("spyre")
    for shape, dim in [((0, 3), 1), ((3, 0), 1), ((4, 1), 1), ((1, 4), 0)]:
        e = make(shape, torch.float32)
        assert_same(torch.cumsum(e.to("spyre"), dim).cpu(), torch.cumsum(e, dim))
    z = torch.tensor(2.5)
    assert_same(torch.cumsum(z.to("spyre"), 0).cpu(), torch.cumsum(z, 0))
    # a transposed (non-contiguous) input and a slice
    assert_same(torch.cumsum(d.transpose(0, 2), 1).cpu(), torch.cumsum(x.transpose(0, 2), 1))
    assert_same(torch.cumsum(d[:, 1:5], 1).cpu(), torch.cumsum(x[:, 1:5], 1))
    # out=, in place, and dtype=
    out = torch.empty(0, device="spyre")
    torch.cumsum(d, -2, out=out)
    assert_same(out.cpu(), torch.cumsum(x, -2))
    e = d.clone()
    e.cumsum_(0)
    assert_same(e.cpu(), torch.cumsum(x, 0))
    i = data((6, 5), torch.int32, seed=2)
    assert_same(torch.cumsum(i.to("spyre"), 0, dtype=torch.float32).cpu(),
                torch.cumsum(i, 0, dtype=torch.float32))
    assert_same(torch.cumsum(i.to("spyre"), 1, dtype=torch.int32).cpu(),
                torch.cumsum(i, 1, dtype=torch.int32))


@pytest.mark.parametrize("shape,dim", [((4, 5), 1), ((4, 9, 3), 0), ((6, 300), 1)])
def test_fp32_cumprod_on_the_card(no_fallback, shape, dim):
    # an fp32 accumulator (as torch's CUDA kernel): bit for bit the fp32 recurrence, and within
    # the tolerance torch's own test_compare_cpu gives a device against the CPU's double
    # accumulator (atol = rtol = 1e-3); measured well inside N fp32 roundings of it
    x = data(shape, torch.float32, seed=5, prod=True)
    got = torch.cumprod(x.to("spyre"), dim).cpu()
    acc, steps = torch.ones_like(x.select(dim, 0)), []
    for j in range(x.shape[dim]):
        acc = acc * x.select(dim, j)
        steps.append(acc)
    assert_same(got, torch.stack(steps, dim))
    want = torch.cumprod(x, dim)
    torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)
    n = torch.arange(1, x.shape[dim] + 1).view([-1 if d == dim else 1 for d in range(x.dim())])
    assert ((got - want).abs() <= want.abs() * n * 2.0**-23 + 1e-30).all()


def test_integer_cumsum_of_a_line_longer_than_one_program(no_fallback):
    """Integer lines too long for one scan program scan in blocks of 8192 and add the blocks'
    running totals: exact (integer sums wrap alike in any order)."""
    n = (1 << 24) + 4096
    x = torch.randint(-1000, 1000, (n,), generator=torch.Generator().manual_seed(4))
    with torch_spyre.profiler.profile() as prof:
        r = x.to("spyre").cumsum(0)
    assert_same(r.cpu(), x.cumsum(0))
    assert [e.op for e in prof.events].count("cumsum") == 2, prof.events  # blocks, totals


def test_float_cumsum_of_a_line_longer_than_one_program(no_fallback):
    """fp32 lines too long for the library's scan (its double VRED per output is quadratic and
    refused past a slab): a scan of double-float pairs, each output the exact prefix sum
    rounded once, equal to torch's double accumulator here (wide magnitudes, cancellation,
    infinities, NaN, -0.0); 16-bit lines are the exact sum rounded once (the CPU's fp32
    accumulator drifts from it by one unit at a few positions)."""
    n = (1 << 18) + 3
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, n, generator=g) * torch.pow(10.0, torch.empty(3, n).uniform_(-6, 6,
                                                                                 generator=g))
    x[0, 5] = float("inf")
    x[1, 7] = float("nan")
    x[2, 0] = -0.0
    bitwise = dict(rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(x.to("spyre").cumsum(1).cpu(), x.cumsum(1), **bitwise)
    torch.testing.assert_close(x.t().to("spyre").cumsum(0).cpu(), x.t().cumsum(0), **bitwise)
    long = torch.randn((1 << 21) + 1000, generator=g) * 100  # two blocks of 2^21
    torch.testing.assert_close(long.to("spyre").cumsum(0).cpu(), long.cumsum(0), **bitwise)
    z = torch.zeros(n)
    z[0] = -0.0
    got = z.to("spyre").cumsum(0).cpu()
    assert_same(got, z.cumsum(0))
    assert not torch.signbit(got).any()  # +0.0 + -0.0 is +0.0, as torch's accumulator
    h = torch.randn(1 << 19, generator=g).bfloat16()  # past the library's 16-bit scan too
    got, want = h.to("spyre").cumsum(0).cpu(), h.cumsum(0)
    exact = h.double().cumsum(0)
    # the exact sum rounded (twice: to fp32, then bf16), where the CPU's fp32 accumulator drifts
    assert (got.double() - exact).abs().le(exact.abs() * (2.0**-8 + 2.0**-23)).all()
    assert 0 < (got != want).sum().item() < h.numel() // 1000


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,dim", [((4, 37), 1), ((300,), 0), ((5, 1000, 3), 1),
                                       ((6, 2, 9), -3), ((7, 1), 1)])
def test_logcumsumexp(no_fallback, dtype, shape, dim):
    g = torch.Generator().manual_seed(11)
    x = (torch.randn(shape, generator=g) * 30).to(dtype)  # spread: prefixes far below the max
    got = torch.logcumsumexp(x.to("spyre"), dim).cpu()
    want = torch.logcumsumexp(x.double(), dim).to(dtype)
    assert got.dtype == dtype and got.shape == want.shape
    if dtype == torch.float32:
        # the CPU accumulates in double; the card's fp32 steps: log2(n) + 2 ulps of the sum
        torch.testing.assert_close(got, want, rtol=4e-7 * (x.size(dim).bit_length() + 2),
                                   atol=1e-6)
    else:
        torch.testing.assert_close(got.float(), want.float(), rtol=tol_of(dtype), atol=0)


def tol_of(dtype):
    return {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}[dtype]


def test_logcumsumexp_special_values_out_and_gradient(no_fallback):
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[-inf, -inf, 1.0, nan, 2.0], [inf, 1.0, -inf, 3.0, 0.0], [-inf] * 5,
                      [-1e30, 0.0, -inf, 1e30, 5.0]])
    same(torch.logcumsumexp(x.to("spyre"), 1).cpu(), torch.logcumsumexp(x, 1))
    same(torch.logcumsumexp(torch.tensor(2.5).to("spyre"), 0).cpu(), torch.tensor(2.5))
    empty = torch.empty(0, 3)
    same(torch.logcumsumexp(empty.to("spyre"), 0).cpu(), empty)
    out = torch.empty(0, device="spyre")
    src = torch.randn(4, 6)
    torch.logcumsumexp(src.to("spyre"), 1, out=out)
    torch.testing.assert_close(out.cpu(), torch.logcumsumexp(src, 1), rtol=2e-6, atol=1e-6)
    t = torch.randn(9, 40, generator=torch.Generator().manual_seed(12)) * 5
    w = torch.randn(9, 40, generator=torch.Generator().manual_seed(13))
    c, d = t.clone().requires_grad_(), t.to("spyre").requires_grad_()
    (torch.logcumsumexp(c, 1) * w).sum().backward()
    (torch.logcumsumexp(d, 1) * w.to("spyre")).sum().backward()
    torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-5, atol=1e-5)

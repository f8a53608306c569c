"""The float unary math set inside fused kernels (Documentation/torch_compile.md): floor, ceil,
trunc, round, sign, erf, erfc, log1p, expm1, exp2, log2, log10, tan, asin, acos, atan, sinh,
cosh, asinh, acosh, atanh compiled with Inductor in fp32/fp16/bf16, each with the arithmetic
that maps its input to its domain, as ONE fused launch (not the eager form), under
TORCH_SPYRE_STRICT=1, against the CPU computing the same chain in fp32 and rounding once (as
Inductor does), with the tolerances of test_unary_math.py; the special values through the op
alone; the exact gelu (erf) and a row kernel with rounding; isnan, isinf and the logical ops as
masks; `any` of a compare as one row kernel with a bool row output; `atan2` over every pair of
the special values and in a row kernel, one launch; `prod` still runs its eager form."""

import pytest
import torch

import torch_spyre
from conftest import FLOATS, make
from test_unary_math import DOMAIN, SPECIALS, check
from torch_spyre._inductor import runtime

NAMES = sorted(n for n in DOMAIN if n != "sgn")  # sgn is sign for real types


# A CPU fallback raises; nothing falls back; Dynamo fresh for every test.
pytestmark = pytest.mark.usefixtures("compile_strict")


def one_fused_launch(fn, *args):
    """Runs the compiled fn (compiled by a first call) and checks that the call was ONE fused
    kernel launch that ran its description, not the eager form."""
    fn(*args)
    before = dict(runtime.STATS)
    with torch_spyre.profiler.profile() as prof:
        out = fn(*args)
    ops = [e.aten_op for e in prof.events]
    assert ops == ["spyre::fused_pointwise"], ops
    assert runtime.STATS["fused"] == before["fused"] + 1, runtime.STATS
    assert runtime.STATS["eager"] == before["eager"], runtime.STATS
    return out


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", NAMES)
def test_unary_op_in_a_fused_kernel(dtype, name):
    op = getattr(torch, name)

    def f(x):
        return op(DOMAIN[name](x))

    x = make((5, 3, 41), torch.float32).to(dtype)
    out = one_fused_launch(torch.compile(f), x.to("spyre"))
    # the CPU computing the chain in fp32, rounded once (Inductor's numerics)
    check(name, out.cpu(), f(x.float()).to(dtype))
    # the special values through the op alone
    s = torch.tensor(SPECIALS, dtype=dtype)
    torch.compiler.reset()
    check(name, one_fused_launch(torch.compile(op), s.to("spyre")).cpu(), op(s))


@pytest.mark.parametrize("dtype", FLOATS)
def test_exact_gelu_is_one_launch(dtype):
    # F.gelu (approximate="none") is Inductor's x * 0.5 * (1 + erf(x / sqrt(2))): the eager form
    # before erf was a description op
    x = (make((7, 130), torch.float32, 1) * 3).to(dtype)
    out = one_fused_launch(torch.compile(torch.nn.functional.gelu), x.to("spyre"))
    torch.testing.assert_close(out.cpu().float(),
                               torch.nn.functional.gelu(x.float()).to(dtype).float(),
                               rtol=2 * {torch.float32: 2.5e-7, torch.float16: 1e-3,
                                         torch.bfloat16: 8e-3}[dtype], atol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rounding_in_a_row_kernel(dtype):
    # a quantize-like chain: round(x * 8) / 8 summed per row, and the row's max of |floor|
    def f(x):
        q = torch.round(x * 8) / 8
        return q.sum(-1), torch.floor(x * 3).abs().amax(-1)

    x = make((9, 37), torch.float32, 2).to(dtype)
    s, m = one_fused_launch(torch.compile(f), x.to("spyre"))
    ws, wm = f(x.float())
    torch.testing.assert_close(s.cpu().float(), ws.to(dtype).float(), rtol=1e-6 if
                               dtype == torch.float32 else 8e-3, atol=1e-5)
    assert torch.equal(m.cpu(), wm.to(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_any_of_a_compare_is_one_row_kernel(dtype):
    # any over the last dim of a mask made in the kernel: a bool row output; a NaN counts as
    # nonzero (x != 0 is true for it), rows with no hit give False
    def f(x, t):
        return (x > t).any(-1), (x != 0).any(-1, keepdim=True)

    for shape in [(6, 37), (2, 32000)]:
        x = make(shape, torch.float32, 3).to(dtype)
        x[1] = 0.0
        x[2 % shape[0], 5] = float("nan")
        g = torch.compile(f)
        a, b = one_fused_launch(g, x.to("spyre"), 2.5)
        wa, wb = f(x, 2.5)
        assert a.dtype == torch.bool and b.dtype == torch.bool
        assert torch.equal(a.cpu(), wa) and torch.equal(b.cpu(), wb), (a, wa, b, wb)
        assert not bool(wa.all()) and bool(wa.any())  # both outcomes occur
        torch.compiler.reset()


@pytest.mark.parametrize("dtype", FLOATS)
def test_logical_ops_and_nan_inf_tests_are_one_launch(dtype):
    # masks from isnan / isinf / logical_* used by where and as numbers
    def f(x, y):
        bad = torch.isnan(x) | torch.isinf(y)
        keep = torch.logical_and(x > -1, ~(y > 1)) ^ (x < -2)
        return torch.where(bad, 0.0, x * y), keep.to(x.dtype) + torch.logical_or(x > 2, y < -2)

    x, y = make((7, 45), torch.float32, 5).to(dtype), make((7, 45), torch.float32, 6).to(dtype)
    x[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0])
    y[1, :4] = torch.tensor([float("inf"), -float("inf"), float("nan"), 3.0])
    a, b = one_fused_launch(torch.compile(f), x.to("spyre"), y.to("spyre"))
    wa, wb = f(x.float(), y.float())
    torch.testing.assert_close(a.cpu(), wa.to(dtype), equal_nan=True,
                               rtol={torch.float32: 2.5e-7, torch.float16: 1e-3,
                                     torch.bfloat16: 8e-3}[dtype], atol=0.0)
    assert torch.equal(b.cpu(), wb.to(dtype))


def _same_or_close(actual, expected, rtol):
    """NaN where the CPU's is NaN, zeros with their sign, the rest within rtol."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    a, e = actual.float(), expected.float()
    nan = e.isnan()
    assert torch.equal(a.isnan(), nan), (a[a.isnan() != nan], e[a.isnan() != nan])
    zero = (e == 0) | (a == 0)
    assert torch.equal(a[zero], e[zero]) and torch.equal(a[zero].signbit(), e[zero].signbit()), (
        a[zero], e[zero])
    torch.testing.assert_close(a[~nan], e[~nan], rtol=rtol, atol=0.0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_atan2_is_one_launch(dtype):
    # atan2 in the description (atan of the quotient moved by +-pi into x's half plane, the
    # zeros' and infinities' answers by the signs): every pair of the special values, random
    # values, a number operand; the CPU computing in fp32, rounded once; within 2 ulps in fp32
    # (the quotient's, atan's and the addition's roundings), 1 ulp in fp16/bf16. It ran the
    # eager form before ("eager ops (op atan2)").
    s = torch.tensor(SPECIALS, dtype=torch.float32)
    y = torch.cat([s.repeat_interleave(len(SPECIALS)), make((400,), torch.float32, 7) * 10])
    x = torch.cat([s.repeat(len(SPECIALS)), make((400,), torch.float32, 8)])
    y, x = y.to(dtype), x.to(dtype)

    def f(y, x):
        return torch.atan2(y, x), torch.atan2(y * 2, x + 0.5) * 0.5

    rtol = {torch.float32: 5e-7, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    a, b = one_fused_launch(torch.compile(f), y.to("spyre"), x.to("spyre"))
    wa, wb = f(y.float(), x.float())
    _same_or_close(a.cpu(), wa.to(dtype), rtol)
    _same_or_close(b.cpu(), wb.to(dtype), rtol)


@pytest.mark.parametrize("dtype", FLOATS)
def test_atan2_in_a_row_kernel(dtype):
    # angles summed per row and made relative to the row's largest: one row kernel
    def f(y, x):
        a = torch.atan2(y, x)
        return a.sum(-1), a - a.amax(-1, keepdim=True)

    y, x = make((6, 37), torch.float32, 9).to(dtype), make((6, 37), torch.float32, 10).to(dtype)
    y[0, :4], x[0, :4] = torch.tensor([0.0, -0.0, 1.0, -1.0]), torch.tensor([-0.0, -1.0, 0.0, -0.0])
    s, d = one_fused_launch(torch.compile(f), y.to("spyre"), x.to("spyre"))
    ws, wd = f(y.float(), x.float())
    torch.testing.assert_close(s.cpu().float(), ws.to(dtype).float(), rtol=1e-5 if
                               dtype == torch.float32 else 8e-3, atol=1e-5)
    torch.testing.assert_close(d.cpu().float(), wd.to(dtype).float(), rtol=1e-5 if
                               dtype == torch.float32 else 8e-3, atol=1e-5)


def test_prod_runs_the_eager_form():
    # the engine has no float product reduction (VRED PROD is integer only): the eager form
    def f(x):
        return (x * 0.5 + 1).prod(-1)

    x = make((4, 9), torch.float32, 4)
    g = torch.compile(f)
    d = x.to("spyre")
    g(d)
    before = dict(runtime.STATS)
    out = g(d)
    assert runtime.STATS["eager"] > before["eager"], runtime.STATS
    torch.testing.assert_close(out.cpu(), f(x), rtol=1e-5, atol=1e-6)

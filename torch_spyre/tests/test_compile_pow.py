"""`pow` inside fused kernels (Documentation/torch_compile.md "Kernel descriptions"): x ** y
compiled with Inductor in fp32/fp16/bf16 as ONE fused launch (not the eager form), under
TORCH_SPYRE_STRICT=1, against the CPU computing the same chain in fp32 and rounding once. Inductor
itself turns integer exponents below 32 into multiplies, 0.5 into sqrt and 2 ** y into exp2;
what reaches the generator's `pow` is a tensor exponent, a non-integer constant exponent and a
number base (AdamW's beta ** step); the special values (signed zeros, +-1, negative bases,
infinities, NaN) through each form; the tolerance is the generator's (torch_compile.md
"Numerics": fp32 exp2(y * log2|x|) within about 1 + |y log2|x|| ulps)."""

import math

import pytest
import torch

import torch_spyre

from conftest import FLOATS, make
from test_compile_unary import one_fused_launch

pytestmark = pytest.mark.usefixtures("compile_strict")

RTOL = {torch.float32: 2e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
INF, NAN = math.inf, math.nan
BASES = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 1.5, -1.5, INF, -INF, NAN,
         1e-3, 10.0, 0.9]
EXPONENTS = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 0.5, -0.5, 1.5, -2.5, 7.0, INF, -INF,
             NAN, 0.3]


def close(got, want, dtype, x, y):
    """got (from the card) against the CPU's fp32 result rounded to dtype: NaN where NaN,
    zeros and infinities with their sign, else within the type's rtol (fp32: the generator's
    bound, 2 + 1.5 |y log2|x|| ulps, at the largest finite |y log2|x|| of the inputs)."""
    got, want = got.cpu().float(), want.to(dtype).float()
    t = (torch.as_tensor(y, dtype=torch.float64) *
         torch.as_tensor(x, dtype=torch.float64).abs().log2()).abs()
    t = t[t.isfinite()].max().item() if t.isfinite().any() else 0.0
    rtol = RTOL[dtype] if dtype != torch.float32 else max(RTOL[dtype], 2 ** -23 * (2 + 1.5 * t))
    exact = (want == 0) | want.isinf()
    assert torch.equal(got[exact], want[exact]), (got[exact], want[exact])
    assert torch.equal(got[exact].signbit(), want[exact].signbit()), (got[exact], want[exact])
    torch.testing.assert_close(got, want, rtol=rtol, atol=0.0, equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_constant_exponents(dtype):
    # x ** 2, x ** 3.0, x ** -1 (Inductor's multiplies and reciprocal), x ** 0.5 (sqrt), and
    # the ones it leaves to ops.pow: x ** 1.5, x ** -0.5, x ** 2.5 on negative bases (NaN)
    x = (make((6, 41), torch.float32, 1) * 2).to(dtype)
    x[0, :len(BASES)] = torch.tensor(BASES)
    for e in (2, 3.0, -1, 0.5, 1.5, -0.5, 2.5, 40.0):
        def f(x):
            return (x * 1.0) ** e + 0.0  # in a chain: load, pow, add, store
        torch.compiler.reset()
        got = one_fused_launch(torch.compile(f), x.to("spyre"))
        close(got, f(x.float()), dtype, x.float(), e)


@pytest.mark.parametrize("dtype", FLOATS)
def test_tensor_exponent_and_number_base(dtype):
    # x ** y elementwise over every base with every exponent; 2.0 ** x (Inductor's exp2) and
    # 0.9 ** x, (-2.0) ** x (the generator's pow of a constant base)
    xs = torch.tensor([b for b in BASES for _ in EXPONENTS])
    ys = torch.tensor([e for _ in BASES for e in EXPONENTS])
    x = torch.cat([xs, make((100,), torch.float32, 2).abs() + 0.1]).to(dtype)
    y = torch.cat([ys, make((100,), torch.float32, 3) * 3]).to(dtype)
    got = one_fused_launch(torch.compile(lambda a, b: a ** b), x.to("spyre"), y.to("spyre"))
    close(got, x.float() ** y.float(), dtype, x.float(), y.float())
    for base in (2.0, 0.9, -2.0):
        torch.compiler.reset()
        got = one_fused_launch(torch.compile(lambda b: base ** b), y.to("spyre"))
        close(got, base ** y.float(), dtype, base, y.float())


def test_pow_of_a_cpu_scalar_step_is_fused():
    # AdamW's bias corrections: 1 - beta ** step with step a CPU scalar tensor (the kernel gets
    # a fill of its value) fuse with the update
    def f(p, step):
        return p / (1 - 0.9 ** step) * (1 - 0.999 ** step) ** 0.5

    p = make((8, 64), torch.float32, 4)
    step = torch.tensor(7.0)
    got = one_fused_launch(torch.compile(f), p.to("spyre"), step)
    close(got, f(p, step), torch.float32, 0.9, step)


def test_a_refused_pow_kernel_runs_its_eager_form(fallback_reset):
    # an input off a stick: the library refuses the call and the eager form's torch.pow runs
    # (a number exponent, a tensor exponent, a number base), no CPU fallback
    from torch_spyre._inductor import runtime

    def f(x, y):
        return x.abs() ** 1.5 + x ** y + 0.9 ** y

    base = make((1 + 5 * 33,), torch.float32).to("spyre")
    x, y = base[1:].view(5, 33), (make((5, 33), torch.float32, 1) * 3).round().to("spyre")
    before = dict(runtime.STATS)
    out = torch.compile(f)(x, y)
    assert runtime.STATS["refused"] == before["refused"] + 1, runtime.STATS
    close(out, f(x.cpu(), y.cpu()), torch.float32, x.cpu(), y.cpu())
    assert torch_spyre.fallback_counts() == {}

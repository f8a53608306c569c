"""erfinv, lgamma, digamma and the modified Bessel functions i0, i0e, i1, i1e on the card under
strict mode against the CPU's float64 answers (fp32 to a few ulps, 16-bit rounded once): the
whole domain (near +-1 for erfinv; small, large, negative non-integer, near the zeros at 1 and 2
for lgamma; both sides of 0 for digamma; both sides of the Bessel series' switch at |x| = 8),
the poles, signed zeros, infinities and NaN as the CPU gives them (and the overflow of exp(|x|)
in i0 and i1 where the CPU's fp32 kernel has it); nn.init.trunc_normal_ and the log-densities
of Gamma, Beta and Poisson on the card."""

import math

import pytest
import torch

from conftest import FLOATS, tol

INF, NAN = float("inf"), float("nan")


def check(f, x, dtype, rtol, atol):
    """Against the CPU in float64 rounded to dtype: in erfinv's far tails the CPU's own float
    kernel is further from it (1 - 2^-20: 3.8e-6 relative) than the card (3e-8)."""
    got = f(x.to(dtype).to("spyre")).cpu()
    want = f(x.to(dtype).double()).to(dtype)
    assert got.dtype == want.dtype
    if dtype != torch.float32:
        rtol, atol = max(rtol, tol(dtype)), max(atol, tol(dtype))
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_erfinv(strict, dtype):
    g = torch.Generator().manual_seed(0)
    y = torch.cat([torch.rand(500, generator=g) * 2 - 1,
                   torch.tensor([0.0, -0.0, 0.5, -0.9, 0.999, -0.99999, 1.0, -1.0, 1.5, NAN,
                                 1 - 2 ** -20])])
    check(torch.erfinv, y, dtype, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS)
def test_lgamma(strict, dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.rand(300, generator=g) * 20, torch.rand(200, generator=g) * 1e4,
                   -torch.rand(200, generator=g) * 30 - 0.01,
                   torch.tensor([1.0, 2.0, 0.5, 1e-6, 3.7, 1.0001, 1.9999, 0.0, -0.0, -1.0,
                                 -7.0, INF, -INF, NAN, 1e30, -2.5, -3.999])])
    # near lgamma's zeros (1, 2) the error is absolute
    check(torch.lgamma, x, dtype, rtol=4e-6, atol=4e-6)


@pytest.mark.parametrize("dtype", FLOATS)
def test_digamma(strict, dtype):
    g = torch.Generator().manual_seed(2)
    x = torch.cat([torch.rand(300, generator=g) * 20, torch.rand(100, generator=g) * 1e4,
                   -torch.rand(200, generator=g) * 20 - 0.01,
                   torch.tensor([1.0, 0.5, 1e-4, 1.4616321, 0.0, -0.0, -1.0, -3.0, INF, -INF,
                                 NAN, -0.5, -2.25])])
    check(torch.digamma, x, dtype, rtol=4e-6, atol=4e-6)


BESSEL = [torch.special.i0, torch.special.i0e, torch.special.i1, torch.special.i1e]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("f", BESSEL, ids=lambda f: f.__name__)
def test_bessel_i(strict, f, dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.cat([torch.randn(400, generator=g) * 4, torch.rand(300, generator=g) * 180 - 90,
                   torch.tensor([0.0, -0.0, 8.0, -8.0, 7.9999, 8.0001, 1e-6, -3e-5, 88.0, 89.5,
                                 -95.0, 200.0, INF, -INF, NAN])]).to(dtype)
    got = f(x.to("spyre")).cpu()
    want = f(x)  # the CPU's kernel: fp32, the same Chebyshev series
    assert got.dtype == want.dtype
    finite = want.isfinite()
    # where exp(|x|) overflows fp32 (|x| > 88.7, i0 and i1) the CPU gives inf (or NaN for inf
    # over inf): the card the same, exactly
    torch.testing.assert_close(got[~finite], want[~finite], rtol=0, atol=0, equal_nan=True)
    # elsewhere within a few fp32 ulps of the float64 function (as the CPU's own kernel is)
    exact = f(x[finite].double()).to(dtype)
    rtol = 2e-6 if dtype == torch.float32 else tol(dtype)
    atol = 1e-30 if dtype == torch.float32 else torch.finfo(dtype).tiny  # 16-bit subnormals
    torch.testing.assert_close(got[finite].float(), exact.float(), rtol=rtol, atol=atol)
    assert torch.equal(torch.signbit(got[finite]), torch.signbit(exact))  # i1, i1e odd


def test_bessel_i_out_in_place_and_gradient(strict):
    x = torch.linspace(-12, 12, 97)
    out = torch.empty(97, device="spyre")
    torch.special.i1e(x.to("spyre"), out=out)
    torch.testing.assert_close(out.cpu(), torch.special.i1e(x), rtol=2e-6, atol=0)
    d = x.to("spyre")
    d.i0_()
    torch.testing.assert_close(d.cpu(), torch.i0(x), rtol=2e-6, atol=0)
    # i0's derivative is i1, i1's involves i0 and i1: all on the card
    for f in (torch.special.i0, torch.special.i1):
        c, s = x.clone().requires_grad_(), x.to("spyre").requires_grad_()
        f(c).sum().backward()
        f(s).sum().backward()
        torch.testing.assert_close(s.grad.cpu(), c.grad, rtol=1e-5, atol=1e-6)


def test_integer_inputs_give_floats(strict):
    x = torch.arange(1, 12)
    torch.testing.assert_close(torch.lgamma(x.to("spyre")).cpu(), torch.lgamma(x))
    torch.testing.assert_close(torch.digamma(x.to("spyre")).cpu(), torch.digamma(x))
    torch.testing.assert_close(torch.special.i0(x.to("spyre")).cpu(), torch.special.i0(x),
                               rtol=2e-6, atol=0)


def test_trunc_normal_init_and_distributions(strict):
    torch.manual_seed(0)
    w = torch.empty(256, 256, device="spyre")
    torch.nn.init.trunc_normal_(w, std=0.02, a=-0.04, b=0.04)
    c = w.cpu()
    assert c.abs().max() <= 0.04 and abs(c.std().item() - 0.0176) < 2e-3  # truncated at 2 std
    x = torch.rand(16) * 3 + 0.1
    conc, rate = torch.rand(16) * 3 + 0.5, torch.rand(16) + 0.5
    for dist, args, value in [
        (torch.distributions.Gamma, (conc, rate), x),
        (torch.distributions.Beta, (conc, rate), x / 3.2),
        (torch.distributions.Poisson, (rate * 3,), torch.floor(x * 2)),
    ]:
        want = dist(*args).log_prob(value)
        got = dist(*[a.to("spyre") for a in args]).log_prob(value.to("spyre"))
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    want = torch.distributions.Gamma(conc, rate).entropy()
    got = torch.distributions.Gamma(conc.to("spyre"), rate.to("spyre")).entropy()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    assert math.isfinite(got.sum().item())

"""Operators composed of card ops, under strict mode (no CPU fallback), against the CPU:
activations (hardtanh/relu6, elu/celu/selu, leaky_relu, hardsigmoid, hardswish, softplus,
softshrink, hardshrink, threshold, mish, glu, logit, logsigmoid, and the gradients of 16 forms),
float binary
math (div rounding modes, floor_divide, remainder, fmod, atan2, copysign, fmax/fmin,
logaddexp(2), xlogy, heaviside, signbit, sinc, hypot, frac, lerp with a weight tensor, pow by a
tensor and by any number, 2 ** tensor and ldexp, frexp), vector norms (linalg.vector_norm of every order, torch.norm,
F.normalize, cosine_similarity, clip_grad_norm_), nansum, aminmax, matrix-vector products
(mv, addmv, dot, vdot, 1-D matmul), PReLU and its gradients, RReLU (eval, and training with its
slopes drawn on the card), renorm (and its gradient) and trace. Inputs include zeros of both signs, infinities and NaN where
the CPU's answer depends on them."""

import math

import pytest
import torch
import torch.nn.functional as F

import torch_spyre

from conftest import FLOATS, tol

INF, NAN = float("inf"), float("nan")


def same(got, want, dtype, scale=1.0):
    assert got.device.type == "cpu" and got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    torch.testing.assert_close(got.float(), want.float(), rtol=tol(dtype),
                               atol=tol(dtype) * scale, equal_nan=True)


def values(dtype, n=64, seed=0, scale=4.0):
    """Random values with the special ones appended: +-0, +-inf, NaN, +-1."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * scale
    special = torch.tensor([0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 0.25])
    return torch.cat([x, special]).to(dtype)


def check_unary(f, x, dtype, **kw):
    """f on the card against f on the CPU in fp32 rounded to dtype (the CPU's own 16-bit kernels
    compute in fp32)."""
    same(f(x.to("spyre"), **kw).cpu(), f(x.float(), **kw).to(dtype), dtype)


ACTIVATIONS = [
    (F.hardtanh, {}), (F.hardtanh, {"min_val": -0.5, "max_val": 2.0}), (F.relu6, {}),
    (F.elu, {}), (F.elu, {"alpha": 0.3}), (F.celu, {"alpha": 1.7}), (F.selu, {}),
    (F.leaky_relu, {}), (F.leaky_relu, {"negative_slope": 0.2}), (F.hardsigmoid, {}),
    (F.hardswish, {}), (F.softplus, {}), (F.softplus, {"beta": 2.0, "threshold": 5.0}),
    (F.softshrink, {}), (F.softshrink, {"lambd": 1.5}), (F.hardshrink, {}),
    (F.hardshrink, {"lambd": 1.5}), (F.threshold, {"threshold": 0.1, "value": -2.0}),
    (F.mish, {}), (F.logsigmoid, {}), (torch.logit, {}), (torch.logit, {"eps": 0.1}),
    (torch.logit, {"eps": -1.0}),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("f,kw", ACTIVATIONS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_activation(strict, dtype, f, kw):
    x = values(dtype)
    if f is torch.logit:
        x = torch.cat([torch.rand(67, generator=torch.Generator().manual_seed(3)),
                       torch.tensor([0.0, 1.0, 0.05, 0.95, NAN])]).to(dtype)
    check_unary(f, x, dtype, **kw)
    check_unary(f, x.reshape(8, 9)[:, 1:7].t(), dtype, **kw)  # a strided view


@pytest.mark.parametrize("dtype", FLOATS)
def test_activation_inplace_and_out(strict, dtype):
    x = values(dtype)
    for f, kw in [(F.hardtanh, {}), (F.relu6, {}), (F.elu, {}), (F.leaky_relu, {}),
                  (F.hardswish, {}), (F.hardsigmoid, {}), (F.threshold, {"threshold": 0.0,
                                                                          "value": 3.0})]:
        d = x.to("spyre")
        r = f(d, inplace=True, **kw)
        assert r.data_ptr() == d.data_ptr()
        same(d.cpu(), f(x.float(), **kw).to(dtype), dtype)
    d = x.to("spyre")
    d.logit_(0.2)
    same(d.cpu(), torch.logit(x.float(), 0.2).to(dtype), dtype)
    out = torch.empty(0, dtype=dtype, device="spyre")
    torch._C._nn.hardtanh(x.to("spyre"), -0.3, 0.3, out=out)
    same(out.cpu(), F.hardtanh(x.float(), -0.3, 0.3).to(dtype), dtype)
    torch._C._nn.softplus(x.to("spyre"), 1.0, 20.0, out=out)
    same(out.cpu(), F.softplus(x.float()).to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_glu(strict, dtype):
    x = torch.randn(4, 6, 10, generator=torch.Generator().manual_seed(4)).to(dtype)
    for dim in (-1, 1, 0):
        check_unary(F.glu, x, dtype, dim=dim)


def test_glu_odd_dimension_is_refused_as_on_the_cpu(fallback_reset):
    with pytest.raises(RuntimeError, match="even"):
        F.glu(torch.ones(3, 5, device="spyre"))


@pytest.mark.parametrize("dtype", FLOATS)
def test_logsigmoid_backward_and_bce_with_logits(strict, dtype):
    x = values(dtype)[:64]
    d = x.to("spyre").requires_grad_()
    c = x.float().requires_grad_()
    F.logsigmoid(d).sum().backward()
    F.logsigmoid(c).sum().backward()
    same(d.grad.cpu(), c.grad.to(dtype), dtype)
    t = (torch.rand(64, generator=torch.Generator().manual_seed(5)) > 0.5).to(dtype)
    got = F.binary_cross_entropy_with_logits(x.to("spyre"), t.to("spyre"))
    same(got.cpu(), F.binary_cross_entropy_with_logits(x.float(), t.float()).to(dtype), dtype)


def pair(dtype, seed=1):
    """(a, b) covering every pairing of the special values, plus random ones."""
    s = torch.tensor([0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 2.5, -3.0])
    a, b = torch.cartesian_prod(s, s).t()
    g = torch.Generator().manual_seed(seed)
    ra, rb = torch.randn(2, 200, generator=g) * 5
    return torch.cat([a, ra]).to(dtype), torch.cat([b, rb]).to(dtype)


BINARY = [
    lambda a, b: torch.div(a, b, rounding_mode="floor"),
    lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    lambda a, b: torch.div(a, b, rounding_mode=None),
    torch.floor_divide, torch.remainder, torch.fmod, torch.atan2, torch.copysign, torch.fmax,
    torch.fmin, torch.logaddexp, torch.logaddexp2, torch.xlogy, torch.hypot, torch.pow,
]
NAMES = ["div_floor", "div_trunc", "div", "floor_divide", "remainder", "fmod", "atan2",
         "copysign", "fmax", "fmin", "logaddexp", "logaddexp2", "xlogy", "hypot", "pow"]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("f", BINARY, ids=NAMES)
def test_binary_math(strict, dtype, f):
    a, b = pair(dtype)
    if f is torch.pow:  # exponents where the sign of a negative base shows
        b = torch.cat([b[:-50], torch.randint(-4, 5, (50,)).to(dtype)])
    want = f(a.float(), b.float()).to(dtype)
    got = f(a.to("spyre"), b.to("spyre")).cpu()
    # the quotient's rounding: a floor that lands one off is an error of |b|; a remainder near b
    same(got, want, dtype, scale=8.0)
    if f in (torch.copysign, torch.atan2):  # the signs of zeros, exactly
        z = want == 0
        assert torch.equal(torch.signbit(got[z]), torch.signbit(want[z]))


@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_math_broadcasts_numbers_and_out(strict, dtype):
    a = torch.randn(3, 1, 5, generator=torch.Generator().manual_seed(6)).to(dtype) * 4
    b = torch.randn(4, 1, generator=torch.Generator().manual_seed(7)).to(dtype) + 2
    da, db = a.to("spyre"), b.to("spyre")
    for f in (torch.remainder, torch.fmod, torch.atan2, torch.fmax, torch.logaddexp,
              torch.copysign, torch.floor_divide):
        same(f(da, db).cpu(), f(a.float(), b.float()).to(dtype), dtype, scale=8.0)
    same((da % 1.5).cpu(), (a.float() % 1.5).to(dtype), dtype)
    same((da // 0.7).cpu(), (a.float() // 0.7).to(dtype), dtype, scale=8.0)
    same(torch.fmod(da, -2).cpu(), torch.fmod(a.float(), -2).to(dtype), dtype)
    same(torch.xlogy(da, 3.0).cpu(), torch.xlogy(a.float(), 3.0).to(dtype), dtype)
    out = torch.empty(0, dtype=dtype, device="spyre")
    torch.atan2(da, db, out=out)
    same(out.cpu(), torch.atan2(a.float(), b.float()).to(dtype), dtype)
    c = da.clone()
    c.fmod_(db[:1, :1])
    same(c.cpu(), torch.fmod(a.float(), b.float()[:1, :1]).to(dtype), dtype)


def test_integer_operands_of_float_results(strict):
    a = torch.arange(-6, 6, dtype=torch.int64)
    b = torch.tensor([3, -2, 5, 7, -1, 4, 2, -3, 6, 1, 9, -5])
    for f in (torch.atan2, torch.copysign, torch.xlogy):
        got = f(a.to("spyre"), b.to("spyre")).cpu()
        same(got, f(a, b), torch.float32)
    same(torch.sinc(a.to("spyre")).cpu(), torch.sinc(a), torch.float32)
    # integer floor division stays exact
    assert torch.equal(torch.div(a.to("spyre"), b.to("spyre"), rounding_mode="floor").cpu(),
                       torch.div(a, b, rounding_mode="floor"))
    assert torch.equal(torch.signbit(a.to("spyre")).cpu(), torch.signbit(a))


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_math(strict, dtype):
    x = values(dtype)
    for f in (torch.sinc, torch.frac):
        check_unary(f, x, dtype)
    assert torch.equal(torch.signbit(x.to("spyre")).cpu(), torch.signbit(x))
    v = torch.randn(20).to(dtype)
    h = torch.heaviside(x[:20].to("spyre"), v.to("spyre")).cpu()
    same(h, torch.heaviside(x[:20].float(), v.float()).to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_lerp_with_weight_tensor(strict, dtype):
    g = torch.Generator().manual_seed(8)
    a, b = torch.randn(2, 5, 7, generator=g).to(dtype)
    w = (torch.rand(5, 7, generator=g) * 2 - 0.5).to(dtype)
    same(torch.lerp(a.to("spyre"), b.to("spyre"), w.to("spyre")).cpu(),
         torch.lerp(a.float(), b.float(), w.float()).to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("e", [2.5, -3, 7, 1 / 3, -0.7, 20, 17, -1.5, 4])
def test_pow_any_number(strict, dtype, e):
    x = values(dtype, scale=1.5)
    got = torch.pow(x.to("spyre"), e).cpu()
    want = torch.pow(x.float(), e).to(dtype)
    torch.testing.assert_close(got.float(), want.float(), rtol=4 * tol(dtype), atol=tol(dtype),
                               equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_frexp_exact(strict, dtype):
    """Mantissa and exponent bit for bit: normals, subnormals (fp32's too), signed zeros,
    powers of two (mantissa 0.5), infinities and NaN."""
    x = values(dtype, scale=1e3)
    extra = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0 ** 20, 3.0 * 2.0 ** -20, INF, -INF, NAN]
    if dtype == torch.float32:
        extra += [1e-40, -3e-42, 2.0 ** -149, 2.0 ** -126, 3.4e38]
    x = torch.cat([x, torch.tensor(extra).to(dtype)])
    m, e = torch.frexp(x.to("spyre"))
    cm, ce = torch.frexp(x)
    assert m.dtype == cm.dtype and e.dtype == ce.dtype == torch.int32
    bits = torch.int16 if dtype != torch.float32 else torch.int32
    nan = torch.isnan(x)
    assert torch.equal(torch.isnan(m.cpu()), nan)
    assert torch.equal(m.cpu()[~nan].view(bits), cm[~nan].view(bits)), (m, cm)  # -0.0 too
    finite = torch.isfinite(x)
    assert torch.equal(e.cpu()[finite], ce[finite]), (e, ce)
    m0, e0 = torch.frexp(torch.tensor(-0.375, dtype=dtype).to("spyre"))  # 0-dim
    assert m0.shape == () and m0.item() == -0.75 and e0.item() == -1


@pytest.mark.parametrize("dtype", FLOATS)
def test_ldexp_and_powers_of_two(strict, dtype):
    x = values(dtype)
    k = (torch.arange(x.numel()) % 64 - 20).to(torch.int32)
    got = torch.ldexp(x.to("spyre"), k.to("spyre")).cpu()
    torch.testing.assert_close(got, torch.ldexp(x, k), rtol=0, atol=0, equal_nan=True)
    ef = torch.linspace(-10, 10, 64).to(dtype)  # non-integral exponents too
    same(torch.pow(2.0, ef.to("spyre")).cpu(), torch.pow(2.0, ef), dtype)
    same(torch.pow(1, ef.to("spyre")).cpu(), torch.pow(1, ef), dtype)
    same(torch.pow(2, torch.tensor(3.0, dtype=dtype).to("spyre")).cpu(),
         torch.pow(2, torch.tensor(3.0, dtype=dtype)), dtype)  # 0-dim


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("base", [0.9, 0.999, 10, -2.0, 0.0, -0.0, 0.5, INF, NAN, -1])
def test_any_number_raised_to_a_tensor(strict, dtype, base):
    """An optimizer's bias corrections (beta ** step) and any other number ** tensor: the
    special exponents (0, +-inf, NaN, integers for a negative base) as the CPU's std::pow."""
    e = torch.cat([torch.linspace(-12, 12, 49), torch.tensor([0.0, -0.0, INF, -INF, NAN, 3,
                                                              -3, 1000, 1, 2])]).to(dtype)
    same(torch.pow(base, e.to("spyre")).cpu(), torch.pow(base, e.float()).to(dtype), dtype,
         scale=8.0)
    out = torch.empty(0, dtype=dtype, device="spyre")
    torch.pow(base, e.to("spyre"), out=out)
    same(out.cpu(), torch.pow(base, e.float()).to(dtype), dtype, scale=8.0)
    step = torch.tensor(7.0)  # 0-dim, as an optimizer's step count
    same(torch.pow(base, step.to("spyre")).cpu(), torch.pow(base, step), torch.float32)


NORM_CASES = [(2, None, False), (1, 1, False), (INF, (0, 2), True), (-INF, -1, False),
              (0, None, True), (3, 1, True), (0.5, (1, 2), False), (-1, 0, False), (2, (), False)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ord,dim,keepdim", NORM_CASES)
def test_vector_norm(strict, dtype, ord, dim, keepdim):
    x = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(9)).to(dtype)
    x[0, 1, 2] = 0
    got = torch.linalg.vector_norm(x.to("spyre"), ord, dim, keepdim).cpu()
    want = torch.linalg.vector_norm(x.float(), ord, dim, keepdim).to(dtype)
    same(got, want, dtype)
    if dim is not None and dim != ():
        got = torch.norm(x.to("spyre"), p=ord, dim=dim, keepdim=keepdim).cpu()
        want = torch.norm(x.float(), p=ord, dim=dim, keepdim=keepdim).to(dtype)
        same(got, want, dtype)


def test_vector_norm_dtype_and_special_values(strict):
    x = torch.tensor([[3.0, -4.0, 0.0], [NAN, 1.0, 2.0]], dtype=torch.float16)
    got = torch.linalg.vector_norm(x.to("spyre"), dim=1, dtype=torch.float32).cpu()
    same(got, torch.linalg.vector_norm(x, dim=1, dtype=torch.float32), torch.float32)
    s = torch.tensor(-2.5)  # a 0-dim tensor
    same(torch.linalg.vector_norm(s.to("spyre"), 3).cpu(), torch.linalg.vector_norm(s, 3),
         torch.float32)
    same(torch.norm(torch.ones(4, 4).to("spyre")).cpu(), torch.norm(torch.ones(4, 4)),
         torch.float32)


@pytest.mark.parametrize("dtype", FLOATS)
def test_normalize_cosine_similarity_and_clip_grad_norm(strict, dtype):
    g = torch.Generator().manual_seed(10)
    a, b = torch.randn(2, 6, 16, generator=g).to(dtype)
    same(F.normalize(a.to("spyre"), dim=-1).cpu(), F.normalize(a.float(), dim=-1).to(dtype),
         dtype)
    same(F.cosine_similarity(a.to("spyre"), b.to("spyre")).cpu(),
         F.cosine_similarity(a.float(), b.float()).to(dtype), dtype)
    if dtype == torch.float32:
        ws = [torch.randn(5, 3, generator=g) * 4, torch.randn(7, generator=g)]
        ds = [w.to("spyre").requires_grad_() for w in ws]
        cs = [w.clone().requires_grad_() for w in ws]
        for p, q in zip(ds, cs):
            p.grad, q.grad = (p.detach() * 3), (q.detach() * 3)
        n_got = torch.nn.utils.clip_grad_norm_(ds, 1.0)
        n_want = torch.nn.utils.clip_grad_norm_(cs, 1.0)
        same(n_got.cpu(), n_want, dtype)
        for p, q in zip(ds, cs):
            same(p.grad.cpu(), q.grad, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_nansum_and_aminmax(strict, dtype):
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(11)).to(dtype)
    x[1, 2] = x[3, 0] = NAN
    d = x.to("spyre")
    same(torch.nansum(d).cpu(), torch.nansum(x.float()).to(dtype), dtype, scale=4)
    same(torch.nansum(d, 1, keepdim=True).cpu(), torch.nansum(x.float(), 1, True).to(dtype),
         dtype, scale=4)
    same(torch.nanmean(d, 0).cpu(), torch.nanmean(x.float(), 0).to(dtype), dtype)
    y = x.nan_to_num()
    for kw in [{}, {"dim": 1}, {"dim": 0, "keepdim": True}]:
        lo, hi = torch.aminmax(y.to("spyre"), **kw)
        want = torch.aminmax(y, **kw)
        same(lo.cpu(), want.min, dtype)
        same(hi.cpu(), want.max, dtype)
    lo, hi = torch.aminmax(x.to("spyre"))  # NaN propagates
    assert math.isnan(lo.item()) and math.isnan(hi.item())


@pytest.mark.parametrize("dtype", FLOATS)
def test_matrix_vector_products(strict, dtype):
    g = torch.Generator().manual_seed(12)
    m, v, w = torch.randn(9, 13, generator=g), torch.randn(13, generator=g), torch.randn(9, generator=g)
    m, v, w = m.to(dtype), v.to(dtype), w.to(dtype)
    dm, dv, dw = m.to("spyre"), v.to("spyre"), w.to("spyre")
    s = 4.0  # sums of 13 products
    same(torch.mv(dm, dv).cpu(), torch.mv(m.float(), v.float()).to(dtype), dtype, s)
    same((dm @ dv).cpu(), (m.float() @ v.float()).to(dtype), dtype, s)
    same((dw @ dm).cpu(), (w.float() @ m.float()).to(dtype), dtype, s)
    same(torch.mv(dm.t().contiguous().t(), dv).cpu(), torch.mv(m.float(), v.float()).to(dtype),
         dtype, s)
    same(torch.addmv(dw, dm, dv, beta=0.5, alpha=2).cpu(),
         torch.addmv(w.float(), m.float(), v.float(), beta=0.5, alpha=2).to(dtype), dtype, s)
    nan = torch.full((9,), NAN, dtype=dtype)
    same(torch.addmv(nan.to("spyre"), dm, dv, beta=0).cpu(),
         torch.addmv(nan.float(), m.float(), v.float(), beta=0).to(dtype), dtype, s)
    same(torch.dot(dv, dv).cpu(), torch.dot(v.float(), v.float()).to(dtype), dtype, s)
    same(torch.vdot(dv, dv * 2).cpu(), torch.vdot(v.float(), v.float() * 2).to(dtype), dtype, s)
    same(torch.inner(dv, dv).cpu(), torch.inner(v.float(), v.float()).to(dtype), dtype, s)


GRADS = [(F.hardtanh, {}), (F.relu6, {}), (F.elu, {}), (F.elu, {"alpha": 0.5}), (F.celu, {}),
         (F.selu, {}), (F.leaky_relu, {"negative_slope": 0.2}), (F.hardsigmoid, {}),
         (F.hardswish, {}), (F.softplus, {"beta": 2.0, "threshold": 3.0}),
         (F.softshrink, {"lambd": 0.7}), (F.hardshrink, {"lambd": 0.7}), (F.mish, {}),
         (F.glu, {}), (torch.logit, {}), (torch.logit, {"eps": 0.2})]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("f,kw", GRADS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_activation_gradients(strict, dtype, f, kw):
    g = torch.Generator().manual_seed(13)
    x = torch.randn(6, 8, generator=g) * 3
    if f is torch.logit:
        x = torch.rand(6, 8, generator=g) * 1.2 - 0.1  # outside [0, 1] too
    x = x.to(dtype)
    d, c = x.to("spyre").requires_grad_(), x.float().clone().requires_grad_()
    w = torch.randn(f(c, **kw).shape, generator=g).to(dtype)
    (f(d, **kw) * w.to("spyre")).sum().backward()
    (f(c, **kw) * w.float()).sum().backward()
    same(d.grad.cpu(), c.grad.to(dtype), dtype)
    # from the result: elu's backward with is_result (inplace forms save the output)
    if f is F.elu:
        d2, c2 = x.to("spyre").requires_grad_(), x.float().clone().requires_grad_()
        (F.elu(d2.clone(), inplace=True, **kw) * w.to("spyre")).sum().backward()
        (F.elu(c2.clone(), inplace=True, **kw) * w.float()).sum().backward()
        same(d2.grad.cpu(), c2.grad.to(dtype), dtype)


PRELU_CASES = [((2, 3, 5, 7), 3), ((2, 3, 5, 7), 1), ((4, 6), 6), ((72,), 1)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,channels", PRELU_CASES, ids=str)
def test_prelu_and_its_gradients(strict, dtype, shape, channels):
    g = torch.Generator().manual_seed(21)
    x = values(dtype, n=math.prod(shape) - 8).reshape(shape)
    w = (torch.rand(channels, generator=g) * 0.6 - 0.1).to(dtype)  # negative slopes too
    same(F.prelu(x.to("spyre"), w.to("spyre")).cpu(), F.prelu(x.float(), w.float()).to(dtype),
         dtype)
    # the gradients of the input and of the slopes (finite values: a sum over the slope's
    # elements)
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    u = torch.randn(shape, generator=g).to(dtype)
    d, dw = x.to("spyre").requires_grad_(), w.to("spyre").requires_grad_()
    c, cw = x.float().requires_grad_(), w.float().requires_grad_()
    (F.prelu(d, dw) * u.to("spyre")).sum().backward()
    (F.prelu(c, cw) * u.float()).sum().backward()
    same(d.grad.cpu(), c.grad.to(dtype), dtype)
    same(dw.grad.cpu(), cw.grad.to(dtype), dtype, scale=math.prod(shape) / channels)
    # the module
    m = torch.nn.PReLU(channels).to(dtype)
    same(m.to("spyre")(x.to("spyre")).detach().cpu(), F.prelu(x.float(), m.weight.float().cpu())
         .to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rrelu_eval_is_leaky_relu_of_the_mean_slope(strict, dtype):
    x = values(dtype)
    for lower, upper in ((1 / 8, 1 / 3), (0.1, 0.3)):
        check_unary(F.rrelu, x, dtype, lower=lower, upper=upper, training=False)
    d = x.to("spyre")
    F.rrelu(d, training=False, inplace=True)
    same(d.cpu(), F.rrelu(x.float(), training=False).to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rrelu_training_draws_its_slopes_on_the_card(strict, dtype):
    lower, upper = 0.1, 0.3
    x = values(dtype, n=4000)
    torch.manual_seed(5)  # seeds the card's generator too
    d = x.to("spyre").requires_grad_()
    y = F.rrelu(d, lower, upper, training=True)
    got, xf = y.detach().cpu().float(), x.float()
    drawn = (xf < 0) & xf.isfinite()
    # inputs > 0 (and NaN, 0, -0 times their slope) as the CPU's: unchanged or scaled
    kept = ~(xf <= 0)
    torch.testing.assert_close(got[kept], xf[kept], rtol=0, atol=0, equal_nan=True)
    slopes = got[drawn] / xf[drawn]
    assert slopes.numel() > 1500
    assert slopes.min() >= lower - tol(dtype) and slopes.max() <= upper + tol(dtype), slopes
    assert abs(slopes.mean().item() - (lower + upper) / 2) < 0.01 + tol(dtype)
    assert slopes.std().item() > 0.04  # drawn per element, not one slope
    # the gradient is the slope drawn (the noise), 1 for inputs > 0
    y.sum().backward()
    grad = d.grad.cpu().float()
    assert torch.equal(grad[(xf > 0) & xf.isfinite()], torch.ones_like(grad[(xf > 0) &
                                                                             xf.isfinite()]))
    same(grad[drawn], slopes, dtype)
    # the same seed draws the same slopes; the in-place form too
    torch.manual_seed(5)
    again = F.rrelu(x.to("spyre"), lower, upper, training=True).cpu()
    torch.testing.assert_close(again, y.detach().cpu(), rtol=0, atol=0, equal_nan=True)
    torch.manual_seed(5)
    inplace = x.to("spyre")
    F.rrelu(inplace, lower, upper, training=True, inplace=True)
    torch.testing.assert_close(inplace.cpu(), again, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_renorm(strict, dtype):
    g = torch.Generator().manual_seed(8)
    x = (torch.randn(5, 6, 7, generator=g) * 3).to(dtype)
    for p, dim, maxnorm in ((2, 0, 5.0), (1, 1, 10.0), (3.5, 2, 2.0), (INF, -1, 1.0),
                            (2, 1, 1e6), (2, 0, 0.0)):
        same(torch.renorm(x.to("spyre"), p, dim, maxnorm).cpu(),
             torch.renorm(x.float(), p, dim, maxnorm).to(dtype), dtype)
    d = x.to("spyre")
    d.renorm_(2, 1, 4.0)
    same(d.cpu(), torch.renorm(x.float(), 2, 1, 4.0).to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_renorm_gradient(strict, dtype):
    # torch's renorm_backward asks for float64 norms (the cores compute none): with a gradient
    # wanted renorm is composed of differentiable card ops, the gradient the CPU's formula
    g = torch.Generator().manual_seed(8)
    x = (torch.randn(5, 6, 7, generator=g) * 3).to(dtype)
    w = torch.randn(5, 6, 7, generator=g).to(dtype)
    for p, dim, maxnorm in ((2, 0, 5.0), (1, 1, 10.0), (3.5, 2, 2.0), (INF, -1, 1.0),
                            (2, 1, 1e6)):
        d, c = x.to("spyre").requires_grad_(), x.clone().requires_grad_()
        yd, yc = torch.renorm(d, p, dim, maxnorm), torch.renorm(c, p, dim, maxnorm)
        same(yd.detach().cpu(), yc.detach(), dtype)
        (yd * w.to("spyre")).sum().backward()
        (yc * w).sum().backward()
        same(d.grad.cpu(), c.grad, dtype, scale=4)
    # in place on a non-leaf: the gradient through the values it had
    d, c = x.to("spyre").requires_grad_(), x.clone().requires_grad_()
    yd, yc = d * 1, c * 1
    yd.renorm_(2, 1, 4.0)
    yc.renorm_(2, 1, 4.0)
    (yd * yd).sum().backward()
    (yc * yc).sum().backward()
    same(d.grad.cpu(), c.grad, dtype, scale=4)
    # without a gradient wanted renorm_ still bumps the version autograd checks
    w = torch.ones(3, 4, device="spyre", requires_grad=True)
    v = torch.randn(3, 4, generator=g).to("spyre") * 5
    y = (w * v).sum()
    v.renorm_(2, 0, 1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    d = torch.randn(3, 4).to("spyre").requires_grad_()
    with pytest.raises(RuntimeError, match="non-positive-norm"):
        torch.renorm(d, 0, 0, 1.0)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.renorm(torch.randn(4).to("spyre").requires_grad_(), 2, 0, 1.0)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.int8, torch.uint8])
def test_trace(strict, dtype):
    g = torch.Generator().manual_seed(9)
    for shape in ((7, 5), (5, 7), (1, 1), (0, 3)):
        x = (torch.randn(shape, generator=g) * 10).to(dtype)
        got = torch.trace(x.to("spyre")).cpu()
        if dtype.is_floating_point:  # the CPU has no 16-bit trace: fp32's, rounded
            same(got, torch.trace(x.float()).to(dtype), dtype, scale=10)
        else:
            want = torch.trace(x)
            assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
    if dtype.is_floating_point:
        for shape in ((6, 4), (4, 6)):  # torch's own backward of a tall matrix: [5, 0] too
            x = torch.randn(shape, generator=g).to(dtype)
            d, c = x.to("spyre").requires_grad_(), x.float().requires_grad_()
            torch.trace(d).backward()
            torch.trace(c).backward()
            assert torch.equal(d.grad.cpu(), c.grad.to(dtype)), shape


def test_trace_of_a_vector_or_of_bool_is_refused_as_on_the_cpu(fallback_reset):
    with pytest.raises(RuntimeError, match="matrix"):
        torch.trace(torch.ones(3, device="spyre"))
    with pytest.raises(RuntimeError, match="Bool"):
        torch.trace(torch.ones(3, 3, dtype=torch.bool, device="spyre"))


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_index_fill(strict, dtype):
    g = torch.Generator().manual_seed(10)
    x = (torch.randn(6, 7, 5, generator=g) * 10).to(dtype)
    for dim, index, value in ((0, [4, 0, -1], 3), (1, [6, 2, 2], 0), (-1, [-5, 3], 1),
                              (2, [], 2)):
        idx = torch.tensor(index, dtype=torch.long)
        want = x.clone().index_fill_(dim, idx, value)
        got = x.to("spyre").index_fill_(dim, idx.to("spyre"), value).cpu()
        assert torch.equal(got, want), (dim, index)
        # a 0-dim value tensor (the form trace's backward uses), on the card and in host memory,
        # and the functional form with an int32 index
        v = torch.tensor(value, dtype=dtype)
        for vv in (v, v.to("spyre")):
            got = x.to("spyre").index_fill_(dim, idx.to("spyre"), vv).cpu()
            assert torch.equal(got, want), (dim, index, vv.device)
        got = torch.index_fill(x.to("spyre"), dim, idx.int().to("spyre"), value).cpu()
        assert torch.equal(got, want), (dim, index)

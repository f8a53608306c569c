"""Norms and reductions on the card against CPU: layer_norm (with and without affine
parameters, mean/rstd outputs, one launch without a gradient, gradients, negative eps), rms_norm, sum/mean/amax/max/argmax over the last dim, other
dims, several dims and all elements, keepdim, non-contiguous and 0-dim inputs; with no CPU
fallback. Cases the kernels do not take (integers, empty reductions) give CPU's answers."""

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import FLOATS, close, make


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(4, 64), (2, 3, 100), (1, 1000), (5, 1)])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(fallback_reset, dtype, shape, affine):
    x = make(shape, dtype)
    n = shape[-1]
    w = make((n,), dtype, seed=1) if affine else None
    b = make((n,), dtype, seed=2) if affine else None
    dw, db = (w.to("spyre"), b.to("spyre")) if affine else (None, None)
    r = F.layer_norm(x.to("spyre"), (n,), dw, db, eps=1e-5)
    ref = F.layer_norm(x.float(), (n,), w.float() if affine else None, b.float() if affine else None)
    close(r.cpu(), ref.to(dtype), dtype, scale=4)
    out, mean, rstd = torch.native_layer_norm(x.to("spyre"), [n], dw, db, 1e-5)
    _, rmean, rrstd = torch.native_layer_norm(x, [n], w, b, 1e-5)
    assert mean.shape == rmean.shape and mean.dtype == rmean.dtype
    close(mean.cpu(), rmean, dtype)
    close(rstd.cpu(), rrstd, dtype, scale=4)
    assert torch_spyre.fallback_counts() == {}


def test_layer_norm_is_one_launch_without_a_gradient(fallback_reset):
    x, w, b = make((6, 64), torch.float32), make((64,), torch.float32, 1), make((64,), torch.float32, 2)
    dx, dw, db = x.to("spyre"), w.to("spyre"), b.to("spyre")
    with torch_spyre.profiler.profile() as prof:
        r = F.layer_norm(dx, (64,), dw, db)
    assert [(e.aten_op, e.op) for e in prof.events] == [("aten::layer_norm", "layer_norm")]
    close(r.cpu(), F.layer_norm(x, (64,), w, b), torch.float32, scale=4)
    with torch_spyre.profiler.profile() as prof:
        torch.native_layer_norm(dx, (64,), dw, db, 1e-5)  # the statistics take six more
    assert len(prof.events) == 7
    assert {e.aten_op for e in prof.events} == {"aten::native_layer_norm"}


def test_layer_norm_with_a_gradient_and_negative_eps(fallback_reset):
    x, w = make((4, 64), torch.float32), make((64,), torch.float32, 1)
    dx, dw = x.to("spyre").requires_grad_(), w.to("spyre").requires_grad_()
    cx, cw = x.clone().requires_grad_(), w.clone().requires_grad_()
    F.layer_norm(dx, (64,), dw).pow(2).sum().backward()
    F.layer_norm(cx, (64,), cw).pow(2).sum().backward()
    close(dx.grad.cpu(), cx.grad, torch.float32, scale=8)
    close(dw.grad.cpu(), cw.grad, torch.float32, scale=8)
    # the library takes no negative eps: the CPU's answer (NaN where var < 0.5)
    r = F.layer_norm(x.to("spyre"), (64,), eps=-0.5)
    torch.testing.assert_close(r.cpu(), F.layer_norm(x, (64,), eps=-0.5), equal_nan=True)
    assert "aten::native_layer_norm" in torch_spyre.fallback_counts()


def test_layer_norm_module_two_normalized_dims_and_mixed_params(fallback_reset):
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm((3, 40))
    x = make((5, 3, 40), torch.float32)
    with torch.no_grad():
        close(ln.to("spyre")(x.to("spyre")).cpu(), ln.cpu()(x), torch.float32)
        xb = make((6, 64), torch.bfloat16)
        ln2 = torch.nn.LayerNorm(64)  # fp32 parameters on a bf16 input
        ref = ln2(xb)
        close(ln2.to("spyre")(xb.to("spyre")).cpu(), ref, torch.bfloat16)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(4, 64), (2, 7, 200), (3, 1)])
def test_rms_norm(fallback_reset, dtype, shape):
    x = make(shape, dtype)
    w = make(shape[-1:], dtype, seed=1)
    ref = F.rms_norm(x.float(), shape[-1:], w.float(), eps=1e-6).to(dtype)
    close(F.rms_norm(x.to("spyre"), shape[-1:], w.to("spyre"), eps=1e-6).cpu(), ref, dtype, scale=4)
    ref = F.rms_norm(x.float(), shape[-1:]).to(dtype)  # no weight, default eps
    close(F.rms_norm(x.to("spyre"), shape[-1:]).cpu(), ref, dtype, scale=4)
    m = torch.nn.RMSNorm(shape[-1], eps=1e-5).to(dtype)
    with torch.no_grad():
        m.weight.copy_(w)
        ref = m(x)
        close(m.to("spyre")(x.to("spyre")).cpu(), ref, dtype, scale=4)
    assert torch_spyre.fallback_counts() == {}


REDUCTIONS = [
    ("sum", lambda x, **k: torch.sum(x, **k)),
    ("mean", lambda x, **k: torch.mean(x, **k)),
    ("amax", lambda x, **k: torch.amax(x, **k)),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name,fn", REDUCTIONS)
@pytest.mark.parametrize("dim,keepdim", [(-1, False), (-1, True), (0, False), (1, True),
                                         ((0, 2), False), ((1, 2), True)])
def test_reductions(fallback_reset, dtype, name, fn, dim, keepdim):
    x = make((6, 5, 70), dtype)
    r = fn(x.to("spyre"), dim=dim, keepdim=keepdim)
    ref = fn(x.float(), dim=dim, keepdim=keepdim).to(dtype)
    n = x.numel() / ref.numel()
    close(r.cpu(), ref, dtype, scale=n ** 0.5 if name == "sum" else 1)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_full_reductions_0dim_and_non_contiguous(fallback_reset, dtype):
    x = make((9, 31), dtype)
    d = x.to("spyre")
    close(d.sum().cpu(), x.float().sum().to(dtype), dtype, scale=17)
    close(d.mean().cpu(), x.float().mean().to(dtype), dtype)
    close(d.max().cpu(), x.max(), dtype)
    close(d.t().sum(-1).cpu(), x.float().t().sum(-1).to(dtype), dtype, scale=3)
    close(d[:, 3:20].mean(-1).cpu(), x.float()[:, 3:20].mean(-1).to(dtype), dtype)
    s = torch.tensor(2.5, dtype=dtype)
    close(s.to("spyre").sum().cpu(), s.sum(), dtype)
    close(s.to("spyre").amax(0).cpu(), s.amax(0), dtype)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_max_dim_and_argmax(fallback_reset, dtype):
    # distinct values, so the index of the maximum is unique in every dtype
    x = torch.randperm(4 * 6 * 50, generator=torch.Generator().manual_seed(0)).reshape(4, 6, 50)
    x = (x.float() / 8).to(dtype) if dtype != torch.bfloat16 else (x % 256).to(dtype)
    d = x.to("spyre")
    for dim in (-1, 1, 0):
        v, i = d.max(dim=dim)
        rv, ri = x.max(dim=dim)
        close(v.cpu(), rv, dtype)
        if dtype != torch.bfloat16:
            assert torch.equal(i.cpu(), ri)
        else:  # ties possible after rounding: the index points at a maximum
            assert torch.equal(x.gather(dim % 3, i.cpu().unsqueeze(dim % 3)).squeeze(dim % 3), rv)
        assert i.dtype == torch.int64
    y = make((3, 200), dtype)
    assert torch.equal(y.to("spyre").argmax(-1).cpu(), y.argmax(-1))
    assert torch.equal(y.to("spyre").argmax(-1, keepdim=True).cpu(), y.argmax(-1, keepdim=True))
    assert torch.equal(y.to("spyre").argmax().cpu(), y.argmax())
    assert torch_spyre.fallback_counts() == {}


def test_what_reductions_do_not_take_falls_back(fallback_reset):
    a = torch.arange(20).reshape(4, 5)
    assert torch.equal(a.to("spyre").sum(-1).cpu(), a.sum(-1))
    x = make((4, 8), torch.float16)
    r = x.to("spyre").sum(-1, dtype=torch.float32)
    close(r.cpu(), x.sum(-1, dtype=torch.float32), torch.float32, scale=4)
    # an amax of an empty tensor along a dim it has (an empty result) still takes the fallback
    e = torch.empty(0, 3)
    assert torch.equal(e.to("spyre").amax(1).cpu(), e.amax(1))
    assert "aten::amax.out" in torch_spyre.fallback_counts()


def test_reductions_over_more_than_2_to_23_elements(fallback_reset):
    # the library's rows hold at most 2^23 elements: longer ones reduce in two stages on the
    # card (a loss or a gradient norm over a big tensor); the references in float64
    n = (1 << 23) + (1 << 20)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, n, generator=g)
    x[0, 3] = x[0, n - 1] = x[1, n - 5] = 100.0  # ties: the first index wins
    d = x.to("spyre")
    ref = x.double()
    torch.testing.assert_close(d.sum().cpu().double(), ref.sum(), rtol=1e-5, atol=1e-2)
    torch.testing.assert_close(d.mean(-1).cpu().double(), ref.mean(-1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.linalg.vector_norm(d).cpu().double(), ref.norm(), rtol=1e-5, atol=0)
    assert torch.equal(d.amin(-1).cpu(), x.amin(-1))
    v, i = d.max(-1)
    assert torch.equal(v.cpu(), x.max(-1).values) and i.tolist() == [3, n - 5]
    assert d.argmax().item() == 3
    h = x[1].half().to("spyre")
    h[7] = float("nan")
    assert h.argmax().item() == 7 and torch.isnan(h.max())
    assert torch_spyre.fallback_counts() == {}


def test_softmax_of_rows_longer_than_2_to_23(fallback_reset):
    # the row program keeps fp32 counts: longer rows are the card's two-stage max and sum with
    # elementwise ops (a softmax over a flattened 4096 x 4097 map); references in float64
    n = (1 << 23) + 4096
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, generator=g) * 4
    x[5] = 60.0  # one large logit: exp(x - max) must not overflow
    d = x.to("spyre")
    ref = torch.softmax(x.double(), 0)
    got = torch.softmax(d, 0).cpu()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-12)
    torch.testing.assert_close(torch.log_softmax(d, -1).cpu().double(),
                               torch.log_softmax(x.double(), 0), rtol=1e-6, atol=1e-4)
    h = x.view(1, n).bfloat16().to("spyre")  # 16-bit: computed in fp32, rounded once
    torch.testing.assert_close(torch.softmax(h, 1).cpu(),
                               torch.softmax(x.view(1, n).bfloat16().double(), 1).bfloat16(),
                               rtol=1.6e-2, atol=1e-12)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_sum_and_mean_of_nothing_are_fills_on_the_card(fallback_reset, dtype):
    # an expert of a mixture-of-experts layer that got no token sums an empty batch: 0 (mean:
    # NaN) in the CPU's shape and dtype, without the CPU fallback (it took it before)
    for shape, kw in [((0, 8), {"dim": 0}), ((0, 8), {"dim": 1}), ((3, 0, 2), {"dim": 1,
                      "keepdim": True}), ((0,), {}), ((0, 4), {"dim": 0, "dtype": torch.float32})]:
        x = torch.zeros(shape, dtype=dtype)
        for op in (torch.sum, torch.mean):
            if op is torch.mean and not (dtype.is_floating_point or "dtype" in kw):
                continue
            want, got = op(x, **kw), op(x.to("spyre"), **kw).cpu()
            assert got.dtype == want.dtype and got.shape == want.shape, (op, shape, kw)
            assert torch.equal(got.nan_to_num(7), want.nan_to_num(7)), (op, shape, kw)
    assert torch_spyre.fallback_counts() == {}

"""2-D pooling on the card against CPU: max_pool2d and avg_pool2d over non-overlapping windows
(3-D and 4-D inputs, square and rectangular kernels, sizes that leave a remainder, NaN,
non-contiguous inputs, out=), nn.MaxPool2d / nn.AvgPool2d in eval under strict mode; and every
window torch takes (overlapping, padded, dilated, ceil_mode, count_include_pad,
divisor_override), max_pool2d's indices (NaN, windows of -inf), adaptive average and max pools,
the gradients of all of them, a ResNet stem and head trained on the card; invalid pools keep
the CPU's errors."""

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import FLOATS, close, make


@pytest.fixture
def strict(monkeypatch, fallback_reset):
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")


CASES = [((2, 3, 8, 8), 2, None), ((3, 9, 7), 3, 3), ((1, 2, 6, 10), (2, 5), None),
         ((2, 4, 5, 5), (1, 2), (1, 2)), ((1, 1, 4, 4), 4, None)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,kernel,stride", CASES)
def test_max_pool2d(strict, dtype, shape, kernel, stride):
    x = make(shape, dtype)
    x.view(-1)[1] = float("nan")
    r = F.max_pool2d(x.to("spyre"), kernel, stride)
    torch.testing.assert_close(r.cpu(), F.max_pool2d(x, kernel, stride), rtol=0, atol=0,
                               equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,kernel,stride", CASES)
def test_avg_pool2d(strict, dtype, shape, kernel, stride):
    x = make(shape, dtype)
    r = F.avg_pool2d(x.to("spyre"), kernel, stride)
    close(r.cpu(), F.avg_pool2d(x.float(), kernel, stride).to(dtype), dtype)


def test_modules_views_and_out(strict):
    x = make((2, 3, 12, 8), torch.float32)
    d = x.to("spyre")
    with torch.no_grad():
        close(torch.nn.MaxPool2d(2)(d).cpu(), torch.nn.MaxPool2d(2)(x), torch.float32)
        close(torch.nn.AvgPool2d((3, 2)).to("spyre")(d).cpu(), torch.nn.AvgPool2d((3, 2))(x),
              torch.float32)
    t = d.transpose(2, 3)  # a non-contiguous input
    close(F.max_pool2d(t, 2).cpu(), F.max_pool2d(x.transpose(2, 3), 2), torch.float32)
    out = torch.empty(0).to("spyre")
    torch._C._nn.avg_pool2d(d, [2, 2], out=out)
    close(out.cpu(), F.avg_pool2d(x, 2), torch.float32)
    assert torch_spyre.fallback_counts() == {}


GENERAL = [  # kernel, stride, padding, dilation, ceil_mode
    (3, 2, 1, 1, False), (3, 2, 1, 1, True), (2, 1, 0, 1, False), ((3, 2), (2, 1), (1, 0), 1, True),
    (3, 1, 1, 1, False), (3, 2, 1, 2, False), ((2, 3), (3, 2), (1, 1), (2, 1), True),
    (5, 3, 2, 1, True),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("k,s,p,d,ceil", GENERAL)
def test_max_pool2d_any_window_with_indices(strict, dtype, k, s, p, d, ceil):
    x = make((2, 3, 9, 11), dtype)
    x.view(-1)[5] = float("nan")
    kw = dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil)
    got = F.max_pool2d(x.to("spyre"), **kw)
    torch.testing.assert_close(got.cpu(), F.max_pool2d(x, **kw), rtol=0, atol=0, equal_nan=True)
    y = make((3, 10, 7), dtype)  # 3-D, no NaN: the positions of the maxima are the CPU's
    v, i = F.max_pool2d(y.to("spyre"), return_indices=True, **kw)
    v2, i2 = F.max_pool2d(y, return_indices=True, **kw)
    assert torch.equal(v.cpu(), v2) and torch.equal(i.cpu(), i2)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("k,s,p,d,ceil", [c for c in GENERAL if c[3] == 1])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d_any_window(strict, dtype, k, s, p, d, ceil, count_include_pad):
    x = make((2, 3, 9, 11), dtype)
    kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil,
              count_include_pad=count_include_pad)
    close(F.avg_pool2d(x.to("spyre"), **kw).cpu(), F.avg_pool2d(x.float(), **kw).to(dtype), dtype)
    kw["divisor_override"] = 5
    close(F.avg_pool2d(x.to("spyre"), **kw).cpu(), F.avg_pool2d(x.float(), **kw).to(dtype), dtype)


def test_max_pool2d_index_of_a_window_of_minus_infinity(strict):
    x = torch.full((1, 1, 5, 5), float("-inf"))
    x[0, 0, 4, 4] = 1.0
    for kw in [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, stride=1, padding=1,
                                                               dilation=2)]:
        v, i = F.max_pool2d(x.to("spyre"), return_indices=True, **kw)
        v2, i2 = F.max_pool2d(x, return_indices=True, **kw)
        assert torch.equal(v.cpu(), v2) and torch.equal(i.cpu(), i2), (i.cpu(), i2)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("size", [(1, 1), (4, 5), (3, 3), (9, 11), (7, 4), (2, 8)])
def test_adaptive_pools(strict, dtype, size):
    x = make((2, 3, 9, 11), dtype)
    close(F.adaptive_avg_pool2d(x.to("spyre"), size).cpu(),
          F.adaptive_avg_pool2d(x.float(), size).to(dtype), dtype)
    v, i = F.adaptive_max_pool2d(x.to("spyre"), size, return_indices=True)
    v2, i2 = F.adaptive_max_pool2d(x, size, return_indices=True)
    assert torch.equal(v.cpu(), v2) and torch.equal(i.cpu(), i2)
    y = make((3, 6, 5), dtype)  # 3-D, and 1-D pools through the 2-D ones
    close(F.adaptive_avg_pool1d(y.to("spyre"), 4).cpu(), F.adaptive_avg_pool1d(y.float(), 4).to(dtype),
          dtype)
    close(F.adaptive_max_pool1d(y.to("spyre"), 3).cpu(), F.adaptive_max_pool1d(y, 3), dtype)


POOLS = [
    lambda t: F.max_pool2d(t, 3, 2, 1), lambda t: F.max_pool2d(t, 2),
    lambda t: F.max_pool2d(t, (3, 2), (1, 2), (1, 0), dilation=(1, 2), ceil_mode=True),
    lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True),
    lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False), lambda t: F.avg_pool2d(t, 2),
    lambda t: F.adaptive_avg_pool2d(t, (4, 5)), lambda t: F.adaptive_avg_pool2d(t, 1),
    lambda t: F.adaptive_max_pool2d(t, (4, 5)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pool", POOLS, ids=range(len(POOLS)))
def test_pool_gradients(strict, dtype, pool):
    x = make((2, 3, 9, 11), dtype)
    g, c = x.to("spyre").requires_grad_(), x.float().requires_grad_()
    w = torch.randn(pool(c).shape, generator=torch.Generator().manual_seed(3))
    (pool(g) * w.to(dtype).to("spyre")).sum().backward()
    (pool(c) * w.to(dtype).float()).sum().backward()
    close(g.grad.cpu(), c.grad.to(dtype), dtype, scale=4.0)


def test_resnet_stem_and_head_train_on_the_card(strict):
    torch.manual_seed(0)
    stem = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 7, 2, 3), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(3, 2, 1), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(8, 4))
    ref = [p.detach().clone() for p in stem.parameters()]
    x = torch.randn(2, 3, 32, 32)
    want = stem(x)
    want.sum().backward()
    grads = [p.grad.clone() for p in stem.parameters()]
    stem.zero_grad()
    dev = stem.to("spyre")
    got = dev(x.to("spyre"))
    close(got.cpu(), want.detach(), torch.float32, scale=10.0)
    got.sum().backward()
    for p, gref, r in zip(dev.parameters(), grads, ref):
        close(p.grad.cpu(), gref, torch.float32, scale=50.0)
        assert torch.equal(p.detach().cpu(), r)


def test_invalid_pools_keep_the_cpu_errors(fallback_reset):
    d = make((1, 2, 7, 7), torch.float32).to("spyre")
    with pytest.raises(RuntimeError, match="pad should be"):
        F.max_pool2d(d, 2, 1, 2)
    with pytest.raises(RuntimeError):
        F.avg_pool2d(d, 3, 1, divisor_override=0)

"""2-D pooling on the card against CPU: max_pool2d and avg_pool2d over non-overlapping windows
(3-D and 4-D inputs, square and rectangular kernels, sizes that leave a remainder, NaN,
non-contiguous inputs, out=), nn.MaxPool2d / nn.AvgPool2d in eval under strict mode; and every
window torch takes (overlapping, padded, dilated, ceil_mode, count_include_pad,
divisor_override), max_pool2d's indices (NaN, windows of -inf), adaptive average and max pools,
the gradients of all of them, a ResNet stem and head trained on the card; avg_pool3d (4-D and
5-D inputs, every window torch takes, out=, non-contiguous inputs) and its gradient,
nn.LocalResponseNorm (avg_pool3d inside) forward and backward and a small 3-D CNN trained;
max_pool3d's values and indices bit-exact (every window torch takes, NaN, planes of -inf, ties)
and its gradient, adaptive average and max 3-D pools (indices bit-exact, output sizes that do
not divide the input, larger than it, (1, 1, 1)) and their gradients, nn.MaxPool3d /
nn.AdaptiveAvgPool3d / nn.AdaptiveMaxPool3d, out= and grad_input=, max_pool3d under
torch.func.grad and a 3-D CNN with max and global average pools trained one step; all with no CPU
fallback; invalid pools keep the CPU's errors."""

import copy

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


def check_gradient(pool, x, dtype):
    """pool's input gradient on the card (a random upstream gradient) against the CPU's in
    fp32 rounded to dtype."""
    g, c = x.to("spyre").requires_grad_(), x.float().requires_grad_()
    w = torch.randn(pool(c).shape, generator=torch.Generator().manual_seed(3))
    (pool(g) * w.to(dtype).to("spyre")).sum().backward()
    (pool(c) * w.to(dtype).float()).sum().backward()
    close(g.grad.cpu(), c.grad.to(dtype), dtype, scale=4.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pool", POOLS, ids=range(len(POOLS)))
def test_pool_gradients(strict, dtype, pool):
    check_gradient(pool, make((2, 3, 9, 11), dtype), dtype)


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


AVG3D = [  # kernel, stride, padding, ceil_mode
    (2, None, 0, False), (3, 2, 1, False), (3, 2, 1, True), ((3, 1, 2), (2, 1, 1), (1, 0, 1), True),
    ((2, 3, 3), 1, (1, 1, 0), False), (5, 3, 2, True), (4, (3, 2, 3), (2, 0, 1), True),
    ((5, 1, 1), 1, 0, False),  # LocalResponseNorm's window
]
SHAPES3D = [(2, 3, 5, 7, 6), (3, 7, 5, 9)]  # 5-D and 4-D ([C, D, H, W]), odd sizes


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES3D, ids=["5d", "4d"])
@pytest.mark.parametrize("k,s,p,ceil", AVG3D)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool3d_any_window(strict, dtype, shape, k, s, p, ceil, count_include_pad):
    x = make(shape, dtype)
    kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil,
              count_include_pad=count_include_pad)
    for divisor in [None, 5, -3]:
        kw["divisor_override"] = divisor
        want = F.avg_pool3d(x.float(), **kw).to(dtype)
        close(F.avg_pool3d(x.to("spyre"), **kw).cpu(), want, dtype)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES3D, ids=["5d", "4d"])
@pytest.mark.parametrize("k,s,p,ceil,count_include_pad,divisor", [
    (3, 2, 1, True, True, None), (3, 2, 1, False, False, None), (2, None, 0, False, True, None),
    ((3, 1, 2), (2, 1, 1), (1, 0, 1), True, False, 3), ((5, 1, 1), 1, 0, False, True, None),
    (4, (3, 2, 3), (2, 0, 1), True, False, None),
])
def test_avg_pool3d_gradient(strict, dtype, shape, k, s, p, ceil, count_include_pad, divisor):
    kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil,
              count_include_pad=count_include_pad, divisor_override=divisor)
    x = make(shape, dtype)
    check_gradient(lambda t: F.avg_pool3d(t, **kw), x, dtype)
    assert torch_spyre.fallback_counts() == {}


def test_avg_pool3d_module_views_and_out(strict):
    x = make((2, 3, 6, 8, 5), torch.float32)
    d = x.to("spyre")
    with torch.no_grad():
        m = torch.nn.AvgPool3d((3, 2, 2), (1, 2, 1), (1, 0, 1), count_include_pad=False)
        close(m(d).cpu(), m(x), torch.float32)
    t = d.transpose(2, 4)  # a non-contiguous input
    close(F.avg_pool3d(t, 2, 1, 1).cpu(), F.avg_pool3d(x.transpose(2, 4), 2, 1, 1), torch.float32)
    out = torch.empty(0).to("spyre")
    torch._C._nn.avg_pool3d(d, [2, 3, 2], [2, 2, 2], [1, 1, 0], out=out)
    close(out.cpu(), F.avg_pool3d(x, [2, 3, 2], [2, 2, 2], [1, 1, 0]), torch.float32)
    grad_input = torch.empty(0).to("spyre")
    gy = make(out.shape, torch.float32, seed=1)
    torch.ops.aten.avg_pool3d_backward.grad_input(gy.to("spyre"), d, [2, 3, 2], [2, 2, 2],
                                                  [1, 1, 0], False, True, None,
                                                  grad_input=grad_input)
    want = torch.ops.aten.avg_pool3d_backward(gy, x, [2, 3, 2], [2, 2, 2], [1, 1, 0], False, True,
                                              None)
    close(grad_input.cpu(), want, torch.float32)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,size,alpha,beta,k", [
    ((2, 7, 5, 6), 5, 1e-4, 0.75, 1.0), ((2, 6, 3, 4, 5), 3, 0.5, 0.75, 2.0),
    ((1, 8, 9, 7), 2, 0.1, 0.5, 1.25),
])
def test_local_response_norm_trains_on_the_card(strict, dtype, shape, size, alpha, beta, k):
    m = torch.nn.LocalResponseNorm(size, alpha, beta, k)
    x = make(shape, dtype)
    g, c = x.to("spyre").requires_grad_(), x.float().requires_grad_()
    w = torch.randn(shape, generator=torch.Generator().manual_seed(3)).to(dtype)
    y = m(g)
    want = m(c)
    close(y.detach().cpu(), want.detach().to(dtype), dtype)
    (y * w.to("spyre")).sum().backward()
    (want * w.float()).sum().backward()
    close(g.grad.cpu(), c.grad.to(dtype), dtype, scale=4.0)
    assert torch_spyre.fallback_counts() == {}


def test_3d_cnn_with_average_pools_trains_on_the_card(strict):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv3d(2, 4, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.AvgPool3d(2), torch.nn.LocalResponseNorm(3),
                              torch.nn.AvgPool3d(3, 2, 1, ceil_mode=True, count_include_pad=False),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 2 * 3 * 3, 3))
    x = torch.randn(2, 2, 7, 10, 8)
    want = net(x)
    want.sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    dev = net.to("spyre")
    got = dev(x.to("spyre"))
    close(got.cpu(), want.detach(), torch.float32, scale=10.0)
    got.sum().backward()
    for p, gref in zip(dev.parameters(), grads):
        close(p.grad.cpu(), gref, torch.float32, scale=50.0)
    assert torch_spyre.fallback_counts() == {}


MAX3D = [  # kernel, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False), (3, 2, 1, 1, False), (3, 2, 1, 1, True), (3, 1, 1, 1, False),
    ((3, 1, 2), (2, 1, 1), (1, 0, 1), (1, 1, 2), True), ((1, 2, 2), (1, 2, 2), 0, 1, False),
    (2, 1, 1, 2, True), ((2, 3, 3), (3, 2, 1), (1, 1, 0), (2, 1, 1), True), (5, 3, 2, 1, True),
]


def max3d_input(shape, dtype):
    """make(shape) with a plane (channel 0) of -inf only, so that padded windows and windows of
    -inf only occur, one NaN in channel 1 (at most one in any window: the CPU's index of several
    is the last NaN, the card's the first) and a few -inf in channel 2."""
    x = make(shape, dtype)
    x.select(-4, 0).fill_(float("-inf"))
    x.select(-4, 1)[..., 1, 2, 3] = float("nan")
    x.select(-4, 2)[..., ::2, 1::3, ::2] = float("-inf")
    return x


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES3D, ids=["5d", "4d"])
@pytest.mark.parametrize("k,s,p,d,ceil", MAX3D)
def test_max_pool3d_any_window_with_indices(strict, dtype, shape, k, s, p, d, ceil):
    x = max3d_input(shape, dtype)
    kw = dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil)
    v, i = F.max_pool3d(x.to("spyre"), return_indices=True, **kw)
    v2, i2 = F.max_pool3d(x, return_indices=True, **kw)
    torch.testing.assert_close(v.cpu(), v2, rtol=0, atol=0, equal_nan=True)
    assert i.dtype == torch.int64 and torch.equal(i.cpu(), i2)
    # without indices (max_pool3d's own kernel)
    torch.testing.assert_close(F.max_pool3d(x.to("spyre"), **kw).cpu(), v2, rtol=0, atol=0,
                               equal_nan=True)
    assert torch_spyre.fallback_counts() == {}


def test_max_pool3d_indices_of_ties_and_windows_of_minus_infinity(strict):
    x = torch.full((1, 2, 5, 5, 5), float("-inf"))
    x[0, 0, 4, 4, 4] = 1.0
    x[0, 1] = 0.5  # every window a tie: its first element in scan order
    for kw in [dict(kernel_size=3, stride=2, padding=1),
               dict(kernel_size=2, stride=1, padding=1, dilation=2),
               dict(kernel_size=(3, 2, 3), stride=(1, 2, 2), padding=(1, 1, 0), ceil_mode=True)]:
        v, i = F.max_pool3d(x.to("spyre"), return_indices=True, **kw)
        v2, i2 = F.max_pool3d(x, return_indices=True, **kw)
        assert torch.equal(v.cpu(), v2) and torch.equal(i.cpu(), i2), (kw, i.cpu(), i2)
    v, i = F.adaptive_max_pool3d(x.to("spyre"), (2, 3, 4), return_indices=True)
    v2, i2 = F.adaptive_max_pool3d(x, (2, 3, 4), return_indices=True)
    assert torch.equal(v.cpu(), v2) and torch.equal(i.cpu(), i2)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES3D, ids=["5d", "4d"])
@pytest.mark.parametrize("k,s,p,d,ceil", [MAX3D[i] for i in (1, 2, 4, 5, 6, 8)])
def test_max_pool3d_gradient(strict, dtype, shape, k, s, p, d, ceil):
    kw = dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil)
    x = make(shape, dtype)
    check_gradient(lambda t: F.max_pool3d(t, **kw), x, dtype)
    assert torch_spyre.fallback_counts() == {}


SIZES3D = [(1, 1, 1), (2, 3, 4), (3, 2, 5), (4, 5, 3), (5, 7, 6), (7, 9, 8), (1, 4, 1)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES3D, ids=["5d", "4d"])
@pytest.mark.parametrize("size", SIZES3D, ids=str)
def test_adaptive_pools_3d(strict, dtype, shape, size):
    x = max3d_input(shape, dtype)
    v, i = F.adaptive_max_pool3d(x.to("spyre"), size, return_indices=True)
    v2, i2 = F.adaptive_max_pool3d(x, size, return_indices=True)
    torch.testing.assert_close(v.cpu(), v2, rtol=0, atol=0, equal_nan=True)
    assert i.dtype == torch.int64 and torch.equal(i.cpu(), i2)
    y = make(shape, dtype, seed=1)
    want = F.adaptive_avg_pool3d(y.float(), size).to(dtype)
    close(F.adaptive_avg_pool3d(y.to("spyre"), size).cpu(), want, dtype)
    # the kernel itself (F's (1, 1, 1) is a mean)
    close(torch.ops.aten._adaptive_avg_pool3d(y.to("spyre"), size).cpu(), want, dtype)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES3D, ids=["5d", "4d"])
@pytest.mark.parametrize("size", [(1, 1, 1), (2, 3, 4), (4, 5, 3), (7, 9, 8)], ids=str)
@pytest.mark.parametrize("pool", [torch.ops.aten._adaptive_avg_pool3d, F.adaptive_max_pool3d],
                         ids=["avg", "max"])  # avg: the kernel itself (F's (1, 1, 1) is a mean)
def test_adaptive_pool3d_gradients(strict, dtype, shape, size, pool):
    x = make(shape, dtype)
    check_gradient(lambda t: pool(t, size), x, dtype)
    assert torch_spyre.fallback_counts() == {}


def test_3d_pool_modules_views_and_out(strict):
    x = make((2, 3, 6, 8, 5), torch.float32)
    d = x.to("spyre")
    with torch.no_grad():
        for m in [torch.nn.MaxPool3d(2), torch.nn.MaxPool3d((3, 2, 2), (1, 2, 1), (1, 0, 1),
                                                            ceil_mode=True),
                  torch.nn.AdaptiveAvgPool3d((1, 1, 1)), torch.nn.AdaptiveAvgPool3d((4, 3, 2)),
                  torch.nn.AdaptiveAvgPool3d((None, 3, None)), torch.nn.AdaptiveMaxPool3d(3)]:
            close(m(d).cpu(), m(x), torch.float32)
        v, i = torch.nn.MaxPool3d(3, 2, 1, return_indices=True)(d)
        v2, i2 = torch.nn.MaxPool3d(3, 2, 1, return_indices=True)(x)
        assert torch.equal(v.cpu(), v2) and torch.equal(i.cpu(), i2)
    t = d.transpose(2, 4)  # a non-contiguous input
    v, i = F.max_pool3d(t, 2, 1, 1, return_indices=True)
    v2, i2 = F.max_pool3d(x.transpose(2, 4), 2, 1, 1, return_indices=True)
    assert torch.equal(v.cpu(), v2) and torch.equal(i.cpu(), i2)
    v, i = F.adaptive_max_pool3d(t, (2, 3, 4), return_indices=True)
    v2, i2 = F.adaptive_max_pool3d(x.transpose(2, 4), (2, 3, 4), return_indices=True)
    assert torch.equal(v.cpu(), v2) and torch.equal(i.cpu(), i2)
    close(F.adaptive_avg_pool3d(t, (3, 2, 4)).cpu(),
          F.adaptive_avg_pool3d(x.transpose(2, 4), (3, 2, 4)), torch.float32)
    # out= and grad_input= forms
    args = ([2, 3, 2], [2, 2, 2], [1, 1, 0], [1, 1, 1], False)
    out, indices = torch.empty(0).to("spyre"), torch.empty(0, dtype=torch.long).to("spyre")
    torch.ops.aten.max_pool3d_with_indices.out(d, *args, out=out, indices=indices)
    v2, i2 = torch.ops.aten.max_pool3d_with_indices(x, *args)
    assert torch.equal(out.cpu(), v2) and torch.equal(indices.cpu(), i2)
    gy = make(v2.shape, torch.float32, seed=1)
    grad_input = torch.empty(0).to("spyre")
    torch.ops.aten.max_pool3d_with_indices_backward.grad_input(
        gy.to("spyre"), d, *args, indices, grad_input=grad_input)
    want = torch.ops.aten.max_pool3d_with_indices_backward(gy, x, *args, i2)
    assert torch.equal(grad_input.cpu(), want)
    out, indices = torch.empty(0).to("spyre"), torch.empty(0, dtype=torch.long).to("spyre")
    torch.ops.aten.adaptive_max_pool3d.out(d, [4, 3, 2], out=out, indices=indices)
    v2, i2 = torch.ops.aten.adaptive_max_pool3d(x, [4, 3, 2])
    assert torch.equal(out.cpu(), v2) and torch.equal(indices.cpu(), i2)
    assert torch_spyre.fallback_counts() == {}


def test_max_pool3d_under_torch_func_grad(strict):
    x = make((2, 3, 6, 7, 5), torch.float32)
    f = lambda t: (F.max_pool3d(t, 3, 2, 1) * 2).sum()  # noqa: E731
    got = torch.func.grad(f)(x.to("spyre"))
    assert torch.equal(got.cpu(), torch.func.grad(f)(x))
    assert torch_spyre.fallback_counts() == {}


def test_3d_cnn_with_max_and_adaptive_pools_trains_on_the_card(strict):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv3d(2, 4, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.MaxPool3d((1, 2, 2)), torch.nn.Conv3d(4, 6, 3, padding=1),
                              torch.nn.ReLU(), torch.nn.MaxPool3d(3, 2, 1, ceil_mode=True),
                              torch.nn.AdaptiveAvgPool3d((1, 1, 1)), torch.nn.Flatten(),
                              torch.nn.Linear(6, 3))
    x, target = torch.randn(2, 2, 5, 10, 8), torch.tensor([0, 2])
    dev = copy.deepcopy(net).to("spyre")

    def step(model, inputs, labels):  # one SGD step: the loss
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        opt.step()
        return loss.detach()

    want = step(net, x, target)
    got = step(dev, x.to("spyre"), target.to("spyre"))
    close(got.cpu(), want, torch.float32, scale=10.0)
    for p, ref in zip(dev.parameters(), net.parameters()):
        close(p.grad.cpu(), ref.grad, torch.float32, scale=50.0)
        close(p.detach().cpu(), ref.detach(), torch.float32, scale=50.0)
    assert torch_spyre.fallback_counts() == {}


def cpu_error(fn, *args, **kwargs):
    with pytest.raises(RuntimeError) as e:
        fn(*args, **kwargs)
    return str(e.value).split("\n")[0]


def test_invalid_pools_keep_the_cpu_errors(fallback_reset):
    d = make((1, 2, 7, 7), torch.float32).to("spyre")
    with pytest.raises(RuntimeError, match="pad should be"):
        F.max_pool2d(d, 2, 1, 2)
    with pytest.raises(RuntimeError):
        F.avg_pool2d(d, 3, 1, divisor_override=0)
    x = make((1, 2, 5, 7, 7), torch.float32)
    for args, kwargs in [((3, 1), dict(divisor_override=0)), ((2, 1, 2), {}),
                         ((9, 1), {}), (((3, 3), 1), {})]:
        want = cpu_error(F.avg_pool3d, x, *args, **kwargs)
        assert cpu_error(F.avg_pool3d, x.to("spyre"), *args, **kwargs) == want, (args, kwargs)
    gy = make((1, 2, 3, 5, 5), torch.float32)
    backward = torch.ops.aten.avg_pool3d_backward
    want = cpu_error(backward, gy, x, [3, 3, 3], [1, 1, 1], [0, 0, 0], False, True, 0)
    assert cpu_error(backward, gy.to("spyre"), x.to("spyre"), [3, 3, 3], [1, 1, 1], [0, 0, 0],
                     False, True, 0) == want
    for args, kwargs in [((2, 1, 2), {}), ((9, 1), {}), (((3, 3), 1), {}), ((2, 0), {}),
                         ((3, 1, 1, 0), {}), ((3, 2, 1), dict(dilation=(1, 2)))]:
        want = cpu_error(F.max_pool3d, x, *args, **kwargs)
        assert cpu_error(F.max_pool3d, x.to("spyre"), *args, **kwargs) == want, (args, kwargs)
    # max pools' backwards: a window torch refuses, a gradient not of the pooling's shape (2-D;
    # the CPU's 3-D backward does not check it)
    indices = torch.zeros(gy.shape, dtype=torch.long)
    for backward, y, g, k, p in [
            (torch.ops.aten.max_pool3d_with_indices_backward, x, gy, [3, 3, 3], [2, 2, 2]),
            (torch.ops.aten.max_pool2d_with_indices_backward, x[0], gy[0], [2, 2], [0, 0])]:
        s, dil, i = [1] * len(k), [1] * len(k), indices.view(g.shape)
        want = cpu_error(backward, g, y, k, s, p, dil, False, i)
        assert cpu_error(backward, g.to("spyre"), y.to("spyre"), k, s, p, dil, False,
                         i.to("spyre")) == want, (backward, k, p)
    for size in [(2, 2), (2, 2, 2, 2), (-1, 2, 2)]:
        for pool in [F.adaptive_max_pool3d, torch.ops.aten._adaptive_avg_pool3d]:
            want = cpu_error(pool, x, size)
            assert cpu_error(pool, x.to("spyre"), size) == want, (pool, size)

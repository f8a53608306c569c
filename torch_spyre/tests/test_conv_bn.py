"""Convolutions (1-D and 2-D, any stride, padding, dilation and groups; forward and backward)
and batch norm (training and eval, forward and backward) on the card against the CPU, with no
fallback. 3-D and transposed convolutions: test_conv_transposed.py."""

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import FLOATS, close, make

CONV2D = [  # N, C, H, W, O, kernel, stride, padding, dilation, groups
    (2, 3, 9, 11, 8, 3, 1, 1, 1, 1),
    (1, 4, 8, 8, 8, 3, 2, 0, 1, 2),
    (2, 6, 10, 7, 6, 3, 1, 2, 2, 6),  # depthwise, dilated
    (1, 3, 5, 5, 4, 1, 1, 0, 1, 1),  # pointwise
    (3, 2, 16, 16, 5, (3, 2), (2, 1), (1, 0), (1, 2), 1),
    (1, 8, 7, 7, 16, 7, 1, 3, 1, 4),
    (2, 11, 6, 6, 1, 1, 1, 0, 1, 1),  # one output channel: gradient rows with a stride-odd dim
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", CONV2D)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv2d(fallback_reset, dtype, case, with_bias):
    n, c, h, w, o, k, s, p, d, g = case
    k = (k, k) if isinstance(k, int) else k
    x, wt = make((n, c, h, w), dtype), make((o, c // g, *k), dtype, seed=1)
    b = make((o,), dtype, seed=2) if with_bias else None
    got = F.conv2d(x.to("spyre"), wt.to("spyre"), None if b is None else b.to("spyre"),
                   stride=s, padding=p, dilation=d, groups=g)
    want = F.conv2d(x.float(), wt.float(), None if b is None else b.float(), stride=s,
                    padding=p, dilation=d, groups=g).to(dtype)
    assert got.shape == want.shape and got.dtype == dtype
    close(got.cpu(), want, dtype, scale=(c // g * k[0] * k[1]) ** 0.5)
    assert torch_spyre.fallback_counts() == {}


def conv_grads(x, w, b, upstream, **kw):
    """(grad_input, grad_weight, grad_bias) of conv2d/conv1d at x, w, b for the given upstream
    gradient, computed on x's device."""
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b) if t is not None]
    conv = F.conv2d if x.dim() == 4 else F.conv1d
    y = conv(leaves[0], leaves[1], leaves[2] if b is not None else None, **kw)
    y.backward(upstream)
    return [t.grad for t in leaves]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", CONV2D)
def test_conv2d_backward(fallback_reset, dtype, case):
    n, c, h, w, o, k, s, p, d, g = case
    k = (k, k) if isinstance(k, int) else k
    kw = dict(stride=s, padding=p, dilation=d, groups=g)
    x, wt = make((n, c, h, w), dtype), make((o, c // g, *k), dtype, seed=1)
    b = make((o,), dtype, seed=2)
    out_shape = F.conv2d(x.float(), wt.float(), **kw).shape
    up = make(out_shape, dtype, seed=3)
    got = conv_grads(x.to("spyre"), wt.to("spyre"), b.to("spyre"), up.to("spyre"), **kw)
    want = conv_grads(x.float(), wt.float(), b.float(), up.float(), **kw)
    positions = out_shape[2] * out_shape[3]
    # grad_input sums O/groups * taps products, grad_weight and grad_bias N * positions
    scales = ((o // g * k[0] * k[1]) ** 0.5, (n * positions) ** 0.5, (n * positions) ** 0.5)
    for gt, wnt, scale in zip(got, want, scales):
        assert gt.device.type == "spyre" and gt.dtype == dtype
        close(gt.cpu(), wnt.to(dtype), dtype, scale=scale)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_conv1d_backward_without_bias_and_training_step(fallback_reset, dtype):
    kw = dict(stride=2, padding=3, dilation=2, groups=2)
    x, wt = make((3, 4, 21), dtype), make((6, 2, 4), dtype, seed=1)
    up = make(F.conv1d(x.float(), wt.float(), **kw).shape, dtype, seed=3)
    got = conv_grads(x.to("spyre"), wt.to("spyre"), None, up.to("spyre"), **kw)
    want = conv_grads(x.float(), wt.float(), None, up.float(), **kw)
    for gt, wnt in zip(got, want):
        close(gt.cpu(), wnt.to(dtype), dtype, scale=4)
    # a small CNN's SGD steps: conv, batch norm, relu, pool, linear, cross entropy
    torch.manual_seed(0)
    dev = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, stride=2),
        torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 5)).to(dtype)
    ref = copy.deepcopy(dev).float()
    dev = dev.to("spyre")
    xb, target = make((4, 3, 8, 8), dtype, seed=4), make((4, 5), dtype, seed=5)
    for step in range(2):
        for m, xx, tt in ((dev, xb.to("spyre"), target.to("spyre")),
                          (ref, xb.float(), target.float())):
            m.zero_grad()
            F.mse_loss(m(xx), tt).backward()
            with torch.no_grad():
                for prm in m.parameters():
                    prm -= 0.1 * prm.grad
    for pd, pr in zip(dev.parameters(), ref.parameters()):
        close(pd.detach().cpu(), pr.detach().to(dtype), dtype, scale=4)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_conv1d_module_and_layouts(fallback_reset, dtype):
    torch.manual_seed(0)
    cpu = torch.nn.Conv1d(4, 6, 5, stride=2, padding=3, groups=2).to(dtype)
    dev = torch.nn.Conv1d(4, 6, 5, stride=2, padding=3, groups=2).to(dtype)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("spyre")
    x = make((2, 20, 4), dtype).transpose(1, 2)  # a strided view [N, C, L]
    with torch.no_grad():
        close(dev(x.to("spyre")).cpu(), cpu.float()(x.float()).to(dtype), dtype, scale=4)
        assert dev(torch.empty(0, 4, 20, dtype=dtype, device="spyre")).shape == (0, 6, 11)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(6, 5), (4, 3, 7), (2, 4, 5, 6)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_training_and_eval(fallback_reset, dtype, shape, affine):
    torch.manual_seed(0)
    bn_cls = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d}
    cpu = bn_cls[len(shape)](shape[1], affine=affine, momentum=0.2)
    if affine:
        with torch.no_grad():
            cpu.weight.uniform_(0.5, 1.5)
            cpu.bias.uniform_(-0.5, 0.5)
    dev = bn_cls[len(shape)](shape[1], affine=affine, momentum=0.2)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("spyre")
    x = make(shape, dtype) * 2 + 0.5
    for train in (True, True, False):
        cpu.train(train)
        dev.train(train)
        with torch.no_grad():
            got = dev(x.to("spyre"))
            want = cpu(x.float()).to(dtype)  # fp32 statistics, as torch's mixed-type kernel
        assert got.dtype == dtype
        close(got.cpu(), want, dtype, scale=2)
        torch.testing.assert_close(dev.running_mean.cpu(), cpu.running_mean, rtol=1e-5,
                                   atol=1e-6)
        torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var, rtol=1e-5, atol=1e-6)
    assert int(dev.num_batches_tracked) == int(cpu.num_batches_tracked) == 2
    assert torch_spyre.fallback_counts() == {}  # num_batches_tracked += 1 included (int64)


def test_batch_norm_saved_statistics(fallback_reset):
    x = make((4, 3, 6), torch.float32)
    rm, rv = torch.zeros(3), torch.ones(3)
    want = torch.native_batch_norm(x, None, None, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    got = torch.native_batch_norm(x.to("spyre"), None, None, rm.to("spyre"), rv.to("spyre"),
                                  True, 0.1, 1e-5)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-6)
    want = torch.native_batch_norm(x, None, None, rm, rv, False, 0.1, 1e-5)
    got = torch.native_batch_norm(x.to("spyre"), None, None, rm.to("spyre"), rv.to("spyre"),
                                  False, 0.1, 1e-5)
    for g, w in zip(got, want):
        assert g.shape == w.shape
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-5, atol=1e-6)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(6, 5), (4, 3, 7), (2, 4, 5, 6)])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("train", [True, False])
def test_batch_norm_backward(fallback_reset, dtype, shape, affine, train):
    torch.manual_seed(1)
    bn_cls = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d}
    cpu = bn_cls[len(shape)](shape[1], affine=affine).train(train)
    with torch.no_grad():
        cpu.running_mean.uniform_(-0.5, 0.5)
        cpu.running_var.uniform_(0.5, 1.5)
        if affine:
            cpu.weight.uniform_(0.5, 1.5)
            cpu.bias.uniform_(-0.5, 0.5)
    dev = copy.deepcopy(cpu).to("spyre")
    x = make(shape, dtype) * 2 + 0.5
    up = make(shape, dtype, seed=4)
    xd, xc = x.to("spyre").requires_grad_(), x.float().requires_grad_()
    (dev(xd) * up.to("spyre")).sum().backward()
    (cpu(xc) * up.float()).sum().backward()
    n = x.numel() // shape[1]
    close(xd.grad.cpu(), xc.grad.to(dtype), dtype, scale=4)
    if affine:
        close(dev.weight.grad.cpu(), cpu.weight.grad, dtype, scale=n ** 0.5)
        close(dev.bias.grad.cpu(), cpu.bias.grad, dtype, scale=n ** 0.5)
    assert torch_spyre.fallback_counts() == {}

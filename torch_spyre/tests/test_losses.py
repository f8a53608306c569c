"""binary_cross_entropy (weights, the log clamp, the [0, 1] check), smooth_l1_loss (beta 0 and
positive), huber_loss and the 2-D NLL loss (cross-entropy of [N, C, H, W] logits: class
weights, ignore_index) on the card under strict mode, forward and backward, every reduction,
against the CPU."""

import pytest
import torch
import torch.nn.functional as F

from conftest import FLOATS, close, make


def forward_backward(f, x, *args, **kw):
    x = x.detach().clone().requires_grad_()
    y = f(x, *args, **kw)
    w = torch.linspace(0.5, 1.5, y.numel(), device=y.device).view(y.shape).to(y.dtype)
    (y * w).sum().backward()
    return y.detach(), x.grad


def compare(f, x, others, dtype, scale=4.0, **kw):
    got_y, got_g = forward_backward(f, x.to("spyre"), *[o.to("spyre") for o in others], **kw)
    want_y, want_g = forward_backward(f, x.float(), *[o.float() for o in others], **kw)
    close(got_y.cpu(), want_y.to(dtype), dtype, scale=scale)
    close(got_g.cpu(), want_g.to(dtype), dtype, scale=scale)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy(strict, dtype, reduction):
    g = torch.Generator().manual_seed(0)
    p = torch.rand(5, 7, generator=g).to(dtype)
    p[0, 0], p[0, 1] = 0.0, 1.0  # the logs clamped at -100
    t = torch.rand(5, 7, generator=g).round().to(dtype)
    w = (torch.rand(5, 7, generator=g) + 0.5).to(dtype)
    compare(F.binary_cross_entropy, p, [t], dtype, scale=8.0, reduction=reduction)
    compare(lambda x, t, w: F.binary_cross_entropy(x, t, weight=w, reduction=reduction), p,
            [t, w], dtype, scale=8.0)


def test_binary_cross_entropy_refuses_what_the_cpu_refuses(fallback_reset):
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(torch.tensor([0.5, 1.5], device="spyre"),
                               torch.tensor([1.0, 0.0], device="spyre"))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_smooth_l1_and_huber(strict, dtype, reduction):
    x, t = make((6, 9), dtype), make((6, 9), dtype, seed=1)
    for beta in (1.0, 0.3, 0.0):
        compare(F.smooth_l1_loss, x, [t], dtype, reduction=reduction, beta=beta)
    for delta in (1.0, 0.4, 2.5):
        compare(F.huber_loss, x, [t], dtype, reduction=reduction, delta=delta)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_of_images(strict, dtype, reduction):
    logits = make((2, 4, 5, 3), dtype)
    target = torch.randint(0, 4, (2, 5, 3), generator=torch.Generator().manual_seed(3))
    target[0, 1, 1] = -100  # ignored
    weight = torch.tensor([1.0, 0.5, 2.0, 1.5]).to(dtype)
    for kw in [{}, {"weight": weight}, {"ignore_index": 2}]:
        t = target.clamp_min(0) if "ignore_index" in kw else target  # -100 is a class there
        dev = {k: v.to("spyre") if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        got_y, got_g = forward_backward(F.cross_entropy, logits.to("spyre"), t.to("spyre"),
                                        reduction=reduction, **dev)
        cpu = {k: v.float() if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        want_y, want_g = forward_backward(F.cross_entropy, logits.float(), t,
                                          reduction=reduction, **cpu)
        close(got_y.cpu(), want_y.to(dtype), dtype, scale=8.0)
        close(got_g.cpu(), want_g.to(dtype), dtype, scale=4.0)

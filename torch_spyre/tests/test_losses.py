"""binary_cross_entropy (weights, the log clamp, the [0, 1] check), smooth_l1_loss (beta 0 and
positive), huber_loss, multi_margin_loss (p 1 and 2, margins, weights), multilabel_margin_loss
(targets ended by -1, repeated, none, all classes), ctc_loss (padded and concatenated targets,
lengths per item, repeated labels, impossible alignments, zero_infinity) and the 2-D NLL loss
(cross-entropy of [N, C, H, W] logits: class weights, ignore_index) on the card under strict
mode, forward and backward, every reduction, against the CPU."""

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


def compare(f, x, others, dtype, scale=4.0, rtol=None, **kw):
    """Forward and gradient against the CPU to dtype tolerance (and to rtol when given)."""
    got_y, got_g = forward_backward(f, x.to("spyre"), *[o.to("spyre") for o in others], **kw)
    want_y, want_g = forward_backward(f, x.float(), *[o.float() for o in others], **kw)
    close(got_y.cpu(), want_y.to(dtype), dtype, scale=scale)
    close(got_g.cpu(), want_g.to(dtype), dtype, scale=scale)
    if rtol is not None:
        for got, want in ((got_y, want_y), (got_g, want_g)):
            torch.testing.assert_close(got.cpu(), want, rtol=rtol, atol=rtol * scale)


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


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss(strict, reduction, p):
    """The mean over the other classes of w[t] max(0, margin - x[t] + x[d])^p (the CPU kernel
    takes fp32 and fp64 only); a margin that leaves some terms out, with and without weights,
    a single sample of 1-D scores, a non-contiguous input."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 7, generator=g)
    t = torch.tensor([0, 6, 3, 3, 1, 5])
    w = torch.rand(7, generator=g) + 0.5
    for margin in (1.0, 0.3):
        kw = {"p": p, "margin": margin, "reduction": reduction}
        compare(lambda x, t: F.multi_margin_loss(x, t.long(), **kw), x, [t], torch.float32,
                scale=1.0, rtol=1e-5)
        compare(lambda x, t, w: F.multi_margin_loss(x, t.long(), weight=w, **kw), x, [t, w],
                torch.float32, scale=1.0, rtol=1e-5)
    kw = {"p": p, "reduction": reduction}
    compare(lambda x, t: F.multi_margin_loss(x, t.long(), **kw), x[0], [t[2]], torch.float32,
            scale=1.0, rtol=1e-5)
    xt = torch.randn(7, 5, generator=g).t()  # [5, 7], strided
    compare(lambda x, t: F.multi_margin_loss(x, t.long(), **kw), xt, [t[:5]], torch.float32,
            scale=1.0, rtol=1e-5)
    # nn.MultiMarginLoss as a module
    got = torch.nn.MultiMarginLoss(p=p, weight=w.to("spyre"), reduction=reduction)(
        x.to("spyre"), t.to("spyre"))
    close(got.cpu(), torch.nn.MultiMarginLoss(p=p, weight=w, reduction=reduction)(x, t),
          torch.float32)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss(strict, reduction):
    """The sum over each row's targets (up to its first -1) and the classes that
    are no target of max(0, 1 - x[y_j] + x[d]), over C (the CPU kernel takes fp32 and fp64
    only): rows with targets ended by -1 (and entries after it ignored), a repeated target,
    no target, every class a target; a single 1-D sample, a 0-dim one, a strided input, the
    module."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, generator=g) * 2
    t = torch.tensor([[3, 0, -1, 1, 4], [0, 1, 2, 3, 4], [-1, 0, 0, 0, 0], [2, 2, -1, 0, 0],
                      [4, -1, 3, -1, 1], [1, 3, 0, -1, 2]])
    f = lambda x, t: F.multilabel_margin_loss(x, t.long(), reduction=reduction)
    compare(f, x, [t], torch.float32, scale=1.0, rtol=1e-5)
    compare(f, x[0], [t[0]], torch.float32, scale=1.0, rtol=1e-5)
    for t0 in (0, -1):  # 0-dim: one sample of one class
        compare(f, x[0, 0], [torch.tensor(t0)], torch.float32, scale=1.0, rtol=1e-5)
    xt = torch.randn(5, 6, generator=g).t()  # [6, 5], strided
    compare(f, xt, [t], torch.float32, scale=1.0, rtol=1e-5)
    big = torch.randn(64, 100, generator=g)
    tb = torch.randint(0, 100, (64, 100), generator=g)
    tb[torch.arange(64), torch.randint(0, 100, (64,), generator=g)] = -1
    compare(f, big, [tb], torch.float32, scale=1.0, rtol=1e-5)
    got = torch.nn.MultiLabelMarginLoss(reduction=reduction)(x.to("spyre"), t.to("spyre"))
    close(got.cpu(), torch.nn.MultiLabelMarginLoss(reduction=reduction)(x, t), torch.float32)
    # the forward's second output, is_target, as the CPU's
    got = torch.ops.aten.multilabel_margin_loss_forward(x.to("spyre"), t.to("spyre"), 1)
    want = torch.ops.aten.multilabel_margin_loss_forward(x, t, 1)
    assert torch.equal(got[1].cpu(), want[1])
    for bad in (t + 5, t - 1):  # the CPU refuses any entry outside [-1, C), after a -1 too
        with pytest.raises(RuntimeError, match="'target' is out of range"):
            F.multilabel_margin_loss(x, bad)
        with pytest.raises(RuntimeError, match="'target' is out of range"):
            F.multilabel_margin_loss(x.to("spyre"), bad.to("spyre"))


def ctc_case(g, T, N, C, S, il, tl, concat=False, blank=0, repeat=False, scale=1.0):
    lp = (torch.randn(T, N, C, generator=g) * scale).log_softmax(2)
    tg = torch.randint(0, C, (N, S), generator=g)
    tg[tg == blank] = (blank + 1) % C
    if repeat:  # runs of one label: the path needs a blank between them
        tg[:, 1::2] = tg[:, 0::2][:, : tg[:, 1::2].size(1)]
    if concat:
        tg = torch.cat([tg[n, : tl[n]] for n in range(N)])
    return lp, tg, torch.tensor(il), torch.tensor(tl)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_ctc_loss(strict, reduction):
    """nn.CTCLoss forward and backward in fp32 (the CPU kernel's type) against the CPU: the
    alpha/beta recursions over every item at once, each with its own input and target length;
    padded [N, S] and concatenated targets, a blank other than 0, repeated labels, an empty
    target, sharp distributions, an alignment that cannot fit (inf loss: NaN gradients as the
    CPU, or 0 with zero_infinity), an unbatched input. To fp32's tolerance (1e-4): the card sums
    a class's alpha-beta terms in another order than the CPU's loop (2e-5 measured)."""
    g = torch.Generator().manual_seed(4)
    cases = [
        (dict(T=20, N=3, C=6, S=5, il=[20, 20, 20], tl=[5, 5, 5]), {}),
        (dict(T=20, N=3, C=6, S=5, il=[20, 15, 7], tl=[5, 3, 0], repeat=True), {}),
        (dict(T=30, N=4, C=5, S=6, il=[30, 25, 10, 3], tl=[6, 2, 4, 4], concat=True, blank=2),
         {}),
        (dict(T=30, N=4, C=5, S=6, il=[30, 25, 10, 3], tl=[6, 2, 4, 4], concat=True, blank=4),
         {"zero_infinity": True}),
        (dict(T=50, N=2, C=20, S=10, il=[50, 40], tl=[10, 10], scale=5.0), {}),
    ]
    for spec, kw in cases:
        lp, tg, il, tl = ctc_case(g, **spec)
        blank = spec.get("blank", 0)
        f = lambda x, t: F.ctc_loss(x, t, il, tl, blank=blank, reduction=reduction, **kw)
        got_y, got_g = forward_backward(f, lp.to("spyre"), tg.to("spyre"))
        want_y, want_g = forward_backward(f, lp, tg)
        torch.testing.assert_close(got_y.cpu(), want_y, rtol=1e-4, atol=1e-4, equal_nan=True)
        torch.testing.assert_close(got_g.cpu(), want_g, rtol=1e-4, atol=1e-4, equal_nan=True)
    lp, tg, il, tl = ctc_case(g, 12, 1, 4, 3, [12], [3])
    one = dict(input_lengths=torch.tensor(12), target_lengths=torch.tensor(3))
    f = lambda x, t: F.ctc_loss(x, t, reduction=reduction, **one)
    got_y, got_g = forward_backward(f, lp[:, 0].to("spyre"), tg[0].to("spyre"))
    want_y, want_g = forward_backward(f, lp[:, 0], tg[0])
    torch.testing.assert_close(got_y.cpu(), want_y, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_g.cpu(), want_g, rtol=1e-4, atol=1e-4)
    module = torch.nn.CTCLoss(blank=0, reduction=reduction)
    lp, tg, il, tl = ctc_case(g, 16, 2, 7, 4, [16, 11], [4, 2])
    torch.testing.assert_close(module(lp.to("spyre"), tg.to("spyre"), il, tl).cpu(),
                               module(lp, tg, il, tl), rtol=1e-4, atol=1e-4)


def test_multi_margin_loss_refuses_what_the_cpu_refuses(strict):
    x = torch.randn(3, 4)
    for t in (torch.tensor([0, 4, 1]), torch.tensor([0, -1, 1])):
        with pytest.raises(RuntimeError, match="target out of range"):
            F.multi_margin_loss(x, t)
        with pytest.raises(RuntimeError, match="target out of range"):
            F.multi_margin_loss(x.to("spyre"), t.to("spyre"))

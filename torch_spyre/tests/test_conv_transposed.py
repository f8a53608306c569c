"""3-D convolutions and transposed convolutions (1-D to 3-D; any stride, padding, output
padding, dilation and groups) forward and backward on the card against the CPU in strict mode,
and small models built of them training one SGD step with CPU-matching gradients."""

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import FLOATS, close, make

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}

# transposed, input shape, weight shape, keyword arguments
CASES = [
    (False, (2, 4, 5, 6, 7), (6, 2, 3, 2, 3), dict(stride=(1, 2, 1), padding=(1, 0, 2), groups=2)),
    (False, (1, 2, 7, 6, 7), (3, 2, 3, 2, 3), dict(dilation=(2, 1, 2))),
    (False, (3, 3, 4, 4, 4), (5, 3, 1, 1, 1), dict()),  # pointwise
    (True, (2, 4, 9), (4, 3, 4), dict(stride=2, padding=1, output_padding=1)),
    (True, (2, 6, 7), (6, 1, 3), dict(stride=3, padding=2, groups=6, dilation=2,
                                       output_padding=2)),
    (True, (2, 4, 5, 6), (4, 3, 3, 2),
     dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2, dilation=(1, 2))),
    (True, (1, 5, 4, 4), (5, 2, 4, 4), dict(stride=2, padding=1)),  # a UNet up-convolution
    # output padding of the stride or more (torch allows it below the dilation)
    (True, (2, 2, 4, 4), (2, 2, 4, 5),
     dict(stride=(3, 2), padding=(1, 2), output_padding=(2, 3), groups=2, dilation=(4, 4))),
    (True, (1, 2, 3, 4, 3), (2, 3, 2, 3, 2), dict(stride=2)),
    (True, (2, 4, 3, 3, 2), (4, 1, 3, 3, 3),
     dict(stride=(1, 2, 2), padding=1, output_padding=(0, 1, 1), groups=2)),
]


def conv_of(transposed, x):
    return (CONV_T if transposed else CONV)[x.dim() - 2]


def grads(transposed, x, w, b, upstream, **kw):
    """(output, grad_input, grad_weight, grad_bias) on x's device."""
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    y = conv_of(transposed, x)(*leaves, **kw)
    y.backward(upstream)
    return [y.detach()] + [t.grad for t in leaves]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: str(c))
def test_forward_and_backward(strict, dtype, case):
    transposed, xs, ws, kw = case
    x, w = make(xs, dtype), make(ws, dtype, seed=1)
    out_channels = ws[1] * kw.get("groups", 1) if transposed else ws[0]
    b = make((out_channels,), dtype, seed=2)
    shape = conv_of(transposed, x)(x.float(), w.float(), **kw).shape
    up = make(shape, dtype, seed=3)
    got = grads(transposed, x.to("spyre"), w.to("spyre"), b.to("spyre"), up.to("spyre"), **kw)
    want = grads(transposed, x.float(), w.float(), b.float(), up.float(), **kw)
    taps = w[0, 0].numel()
    positions = shape[2:].numel()
    # the output and grad_input sum channels * taps products, grad_weight and grad_bias
    # N * positions (of the larger side)
    wide = (w.shape[0] * taps) ** 0.5
    many = (x.shape[0] * max(positions, x.shape[2:].numel())) ** 0.5
    for gt, wnt, scale in zip(got, want, (wide, wide, many, many)):
        assert gt.device.type == "spyre" and gt.dtype == dtype
        close(gt.cpu(), wnt.to(dtype), dtype, scale=scale)


def test_without_bias_and_empty_batch(strict):
    x, w = make((2, 3, 4, 5), torch.float32), make((3, 2, 3, 3), torch.float32, seed=1)
    close(F.conv_transpose2d(x.to("spyre"), w.to("spyre"), stride=2).cpu(),
          F.conv_transpose2d(x, w, stride=2), torch.float32, scale=3)
    e = torch.empty(0, 3, 4, 5, device="spyre")
    assert F.conv_transpose2d(e, w.to("spyre"), stride=2).shape == (0, 2, 9, 11)
    e3 = torch.empty(0, 2, 4, 4, 4, device="spyre")
    assert F.conv3d(e3, torch.ones(3, 2, 3, 3, 3, device="spyre")).shape == (0, 3, 2, 2, 2)


def test_what_stays_on_the_cpu_still_answers(fallback_reset):
    x, w = make((1, 2, 5), torch.float64), make((2, 3, 3), torch.float64, seed=1)
    kw = dict(stride=2, output_padding=1)
    torch.testing.assert_close(F.conv_transpose1d(x.to("spyre"), w.to("spyre"), **kw).cpu(),
                               F.conv_transpose1d(x, w, **kw))
    assert set(torch_spyre.fallback_counts()) == {"aten::convolution"}


def sgd_step_matches(model, x, target, dtype):
    """One SGD step of model on the card and on the CPU: the same gradients and parameters."""
    torch.manual_seed(0)
    model = model.to(dtype)
    ref = copy.deepcopy(model).float()
    dev = model.to("spyre")
    for m, xx, tt in ((dev, x.to("spyre"), target.to("spyre")), (ref, x.float(), target.float())):
        m.zero_grad()
        F.mse_loss(m(xx), tt).backward()
    grads_dev = [p.grad.cpu() for p in dev.parameters()]
    grads_ref = [p.grad.to(dtype) for p in ref.parameters()]
    for m in (dev, ref):
        with torch.no_grad():
            for prm in m.parameters():
                prm -= 0.1 * prm.grad
    for gd, gr in zip(grads_dev, grads_ref):
        close(gd, gr, dtype, scale=8)
    for pd, pr in zip(dev.parameters(), ref.parameters()):
        close(pd.detach().cpu(), pr.detach().to(dtype), dtype, scale=4)


@pytest.mark.parametrize("dtype", FLOATS)
def test_small_3d_cnn_trains(strict, dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv3d(2, 4, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv3d(4, 4, 3, stride=2, groups=2), torch.nn.Flatten(),
        torch.nn.Linear(4 * 2 * 2 * 2, 3))
    sgd_step_matches(model, make((3, 2, 6, 6, 6), dtype, seed=4), make((3, 3), dtype, seed=5),
                     dtype)


class Decoder(torch.nn.Module):
    """A UNet-style decoder: up-convolutions, a skip connection, convolutions."""

    def __init__(self):
        super().__init__()
        self.up1 = torch.nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.conv1 = torch.nn.Conv2d(8, 4, 3, padding=1)
        self.up2 = torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)
        self.out = torch.nn.Conv2d(2, 1, 1)

    def forward(self, x):
        bottom, skip = x[:, :8, ::2, ::2], x[:, 8:]
        y = torch.relu(self.conv1(torch.cat([self.up1(bottom), skip], 1)))
        return self.out(torch.relu(self.up2(y)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_unet_decoder_trains(strict, dtype):
    torch.manual_seed(0)
    sgd_step_matches(Decoder(), make((2, 12, 6, 6), dtype, seed=4),
                     make((2, 1, 12, 12), dtype, seed=5), dtype)


@pytest.mark.parametrize("case", [
    (F.conv2d, (2, 4, 8, 8), (6, 4, 3, 3), dict(padding=1)),
    (F.conv2d, (2, 4, 9, 9), (6, 2, 3, 3), dict(stride=2, groups=2, dilation=2)),
    (F.conv3d, (1, 2, 6, 6, 6), (3, 2, 3, 3, 3), dict(padding=1, stride=(1, 2, 2))),
    (F.conv_transpose2d, (2, 4, 5, 5), (4, 3, 4, 4), dict(stride=2, padding=1)),
    (F.conv_transpose1d, (2, 4, 9), (4, 3, 4), dict(stride=3, output_padding=2)),
], ids=lambda c: c[0].__name__ + str(c[3]))
@pytest.mark.parametrize("dtype", FLOATS)
def test_no_copy_through_the_host(strict, case, dtype):
    """The patches, the output permute and the per-tap accumulations of the input gradient (a
    transposed convolution's output) are device copies: nothing goes through the host."""
    conv, xs, ws, kw = case
    x = make(xs, dtype).to("spyre").requires_grad_()
    w = make(ws, dtype, seed=1).to("spyre").requires_grad_()
    up = make(conv(x.detach().cpu().float(), w.detach().cpu().float(), **kw).shape, dtype,
              seed=2).to("spyre")
    torch_spyre._C._reset_copy_stats()
    conv(x, w, **kw).backward(up)
    torch.spyre.synchronize()
    assert torch_spyre._C._copy_stats()["through_host"] == 0
    assert x.grad is not None and w.grad is not None

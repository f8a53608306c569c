"""F.grid_sample (grid_sampler_2d) on the card under strict mode against the CPU: bilinear,
nearest and bicubic, padding zeros / border / reflection, align_corners both, fp32/fp16/bf16, grids reaching
outside [-1, 1], odd sizes, non-contiguous operands; the gradients of the input and the grid;
a spatial-transformer training step (affine_grid + grid_sample + conv)."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from conftest import FLOATS, close, make

MODES = ["bilinear", "nearest", "bicubic"]
PADDINGS = ["zeros", "border", "reflection"]


def near(actual, expected, dtype, scale=1.0):
    """close(), and fp32 results to 1e-5 relative (the rounding of positions and sums)."""
    close(actual, expected, dtype, scale=scale)
    if dtype == torch.float32:
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5 * scale)


def grid_of(n, h, w, dtype, seed=1, reach=1.6):
    """A random grid in [-reach, reach], plus a few exact pixel centres and corners."""
    g = torch.rand(n, h, w, 2, generator=torch.Generator().manual_seed(seed)) * 2 * reach - reach
    g[0, 0, 0] = torch.tensor([-1.0, -1.0])
    g[0, 0, 1] = torch.tensor([1.0, 1.0])
    g[0, 0, 2] = torch.tensor([0.0, 0.5])
    return g.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode,padding,align_corners",
                         list(itertools.product(MODES, PADDINGS, [False, True])))
def test_forward(strict, dtype, mode, padding, align_corners):
    x = make((2, 3, 5, 7), dtype)
    grid = grid_of(2, 4, 9, dtype)
    kw = {"mode": mode, "padding_mode": padding, "align_corners": align_corners}
    got = F.grid_sample(x.to("spyre"), grid.to("spyre"), **kw)
    want = F.grid_sample(x.float(), grid.float(), **kw)
    if mode == "nearest" and dtype == torch.float32:
        assert torch.equal(got.cpu(), want)  # the same pixels, copied
    near(got.cpu(), want.to(dtype), dtype, scale=2.0)


@pytest.mark.parametrize("mode", MODES)
def test_non_contiguous(strict, mode):
    x = make((2, 7, 3, 5), torch.float32).transpose(1, 3)  # [2, 5, 3, 7], strided
    grid = grid_of(2, 9, 4, torch.float32).transpose(1, 2)  # [2, 4, 9, 2], strided
    kw = {"mode": mode, "padding_mode": "zeros", "align_corners": False}
    got = F.grid_sample(x.to("spyre"), grid.to("spyre"), **kw)
    near(got.cpu(), F.grid_sample(x, grid, **kw), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode,padding,align_corners",
                         list(itertools.product(MODES, PADDINGS, [False, True])))
def test_gradients(strict, dtype, mode, padding, align_corners):
    x = make((2, 3, 5, 7), dtype)
    # a small grid of many duplicates: the input's gradient accumulates
    grid = grid_of(2, 6, 5, dtype, seed=3, reach=1.3)
    kw = {"mode": mode, "padding_mode": padding, "align_corners": align_corners}
    w = torch.randn(2, 3, 6, 5, generator=torch.Generator().manual_seed(4)).to(dtype)
    xs, gs = x.to("spyre").requires_grad_(), grid.to("spyre").requires_grad_()
    xc, gc = x.float().requires_grad_(), grid.float().requires_grad_()
    (F.grid_sample(xs, gs, **kw) * w.to("spyre")).sum().backward()
    (F.grid_sample(xc, gc, **kw) * w.float()).sum().backward()
    near(xs.grad.cpu(), xc.grad.to(dtype), dtype, scale=4.0)
    near(gs.grad.cpu(), gc.grad.to(dtype), dtype, scale=8.0)


def test_input_gradient_only(strict):
    x = make((1, 2, 6, 6), torch.float32)
    grid = grid_of(1, 5, 5, torch.float32)
    xs = x.to("spyre").requires_grad_()
    F.grid_sample(xs, grid.to("spyre"), align_corners=True).sum().backward()
    xc = x.clone().requires_grad_()
    F.grid_sample(xc, grid, align_corners=True).sum().backward()
    near(xs.grad.cpu(), xc.grad, torch.float32)


class SpatialTransformer(torch.nn.Module):
    """A localisation net predicts an affine transform; the input is resampled by it."""

    def __init__(self):
        super().__init__()
        self.loc = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(),
                                       torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                       torch.nn.Linear(4, 6))
        self.head = torch.nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x):
        theta = self.loc(x).view(-1, 2, 3) + torch.tensor(
            [[1.0, 0, 0], [0, 1.0, 0]], device=x.device)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return self.head(F.grid_sample(x, grid, align_corners=False))


def test_spatial_transformer_step(strict):
    torch.manual_seed(0)
    cpu = SpatialTransformer()
    card = SpatialTransformer()
    card.load_state_dict(cpu.state_dict())
    card.to("spyre")
    x = torch.randn(3, 2, 9, 11)
    target = torch.randn(3, 3, 9, 11)
    for model, dev in ((cpu, "cpu"), (card, "spyre")):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = F.mse_loss(model(x.to(dev)), target.to(dev))
        loss.backward()
        opt.step()
        model.loss = loss.item()
    assert abs(card.loss - cpu.loss) <= 1e-5 * abs(cpu.loss) + 1e-6
    for (name, p), q in zip(cpu.named_parameters(), card.parameters()):
        near(q.detach().cpu(), p.detach(), torch.float32, scale=2.0)


@pytest.mark.parametrize("mode", MODES)
def test_one_large_image(strict, mode):
    """A 4 MiB image: the input's gradient is added in groups of channels (the scatter keeps its
    table in a core's scratchpad)."""
    x = make((1, 64, 128, 128), torch.float32)
    grid = grid_of(1, 96, 96, torch.float32)
    w = torch.randn(1, 64, 96, 96, generator=torch.Generator().manual_seed(4))
    xs, gs = x.to("spyre").requires_grad_(), grid.to("spyre").requires_grad_()
    xc, gc = x.clone().requires_grad_(), grid.clone().requires_grad_()
    got = F.grid_sample(xs, gs, mode=mode, align_corners=False)
    want = F.grid_sample(xc, gc, mode=mode, align_corners=False)
    near(got.detach().cpu(), want.detach(), torch.float32)
    (got * w.to("spyre")).sum().backward()
    (want * w).sum().backward()
    near(xs.grad.cpu(), xc.grad, torch.float32, scale=4.0)
    # the grid's gradient sums 64 channels of terms of both signs: to 1e-5 of its largest
    # element (the CPU's fp32 result is as far from a float64 reference)
    near(gs.grad.cpu(), gc.grad, torch.float32, scale=gc.grad.abs().max().item())

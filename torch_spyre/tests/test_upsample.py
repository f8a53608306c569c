"""F.interpolate / nn.Upsample on the card under strict mode against the CPU: nearest and
nearest-exact (1-D, 2-D, 3-D; up, down, non-integer factors, the 2x shortcut, given scale
factors) bit for bit; linear, bilinear and trilinear with and without align_corners (to
rounding, fp32/fp16/bf16); bicubic; antialiased bilinear and bicubic (fp32); the gradients of
every mode; a U-Net-style decoder step; one large image."""

import pytest
import torch
import torch.nn.functional as F

from conftest import FLOATS, close, make


SHAPES = {1: (2, 3, 7), 2: (2, 3, 5, 7), 3: (1, 2, 3, 4, 5)}
SIZES = {1: [(14,), (3,), (10,), (7,)], 2: [(10, 14), (3, 4), (8, 11), (5, 7)],
         3: [(6, 8, 10), (2, 3, 3), (4, 7, 6)]}
LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}


def near(actual, expected, dtype, scale=1.0):
    """close(), and fp32 results to 1e-5 relative (the rounding of the weights and sums)."""
    close(actual, expected, dtype, scale=scale)
    if dtype == torch.float32:
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest(strict, dtype, dims, mode):
    x = make(SHAPES[dims], dtype)
    for size in SIZES[dims]:
        got = F.interpolate(x.to("spyre"), size=size, mode=mode)
        assert torch.equal(got.cpu(), F.interpolate(x, size=size, mode=mode)), size
    for factor in (2, 1.5, 0.6, 3):
        got = F.interpolate(x.to("spyre"), scale_factor=factor, mode=mode)
        assert torch.equal(got.cpu(), F.interpolate(x, scale_factor=factor, mode=mode)), factor


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("align_corners", [False, True])
def test_linear_modes(strict, dtype, dims, align_corners):
    x = make(SHAPES[dims], dtype)
    mode = LINEAR[dims]
    for size in SIZES[dims]:
        got = F.interpolate(x.to("spyre"), size=size, mode=mode, align_corners=align_corners)
        want = F.interpolate(x.float(), size=size, mode=mode, align_corners=align_corners)
        close(got.cpu(), want.to(dtype), dtype)
    for factor in (2, 1.7, 0.5):
        got = F.interpolate(x.to("spyre"), scale_factor=factor, mode=mode,
                            align_corners=align_corners)
        want = F.interpolate(x.float(), scale_factor=factor, mode=mode,
                             align_corners=align_corners)
        close(got.cpu(), want.to(dtype), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dims,mode,kw", [
    (1, "nearest", {}), (2, "nearest", {}), (3, "nearest", {}), (2, "nearest-exact", {}),
    (1, "linear", {"align_corners": False}), (2, "bilinear", {"align_corners": False}),
    (2, "bilinear", {"align_corners": True}), (3, "trilinear", {"align_corners": False}),
])
def test_gradients(strict, dtype, dims, mode, kw):
    x = make(SHAPES[dims], dtype)
    size = SIZES[dims][2]
    g, c = x.to("spyre").requires_grad_(), x.float().requires_grad_()
    w = torch.randn(F.interpolate(c, size=size, mode=mode, **kw).shape,
                    generator=torch.Generator().manual_seed(4)).to(dtype)
    (F.interpolate(g, size=size, mode=mode, **kw) * w.to("spyre")).sum().backward()
    (F.interpolate(c, size=size, mode=mode, **kw) * w.float()).sum().backward()
    close(g.grad.cpu(), c.grad.to(dtype), dtype, scale=4.0)


def test_decoder_step(strict):
    torch.manual_seed(0)
    up = torch.nn.Sequential(torch.nn.Upsample(scale_factor=2, mode="bilinear"),
                             torch.nn.Conv2d(4, 2, 3, padding=1), torch.nn.ReLU(),
                             torch.nn.Upsample(scale_factor=2, mode="nearest"))
    x = torch.randn(2, 4, 6, 5)
    want = up(x)
    got = up.to("spyre")(x.to("spyre"))
    close(got.cpu(), want.detach(), torch.float32, scale=10.0)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("align_corners", [False, True])
def test_bicubic(strict, dtype, align_corners):
    """4 taps per output along each dim, reads clamped at the edges, A = -0.75, as the CPU."""
    x = make((2, 3, 5, 7), dtype)
    kw = {"mode": "bicubic", "align_corners": align_corners}
    for size in [(10, 14), (3, 4), (8, 11), (5, 7), (1, 9)]:
        got = F.interpolate(x.to("spyre"), size=size, **kw)
        near(got.cpu(), F.interpolate(x.float(), size=size, **kw).to(dtype), dtype, scale=2.0)
    for factor in (2, 1.7, 0.5, (0.6, 2.3)):
        got = F.interpolate(x.to("spyre"), scale_factor=factor, **kw)
        want = F.interpolate(x.float(), scale_factor=factor, **kw)
        near(got.cpu(), want.to(dtype), dtype, scale=2.0)
    # a non-contiguous input (channels last through a transpose)
    t = x.transpose(2, 3)
    got = F.interpolate(t.to("spyre"), size=(9, 4), **kw)
    near(got.cpu(), F.interpolate(t.float(), size=(9, 4), **kw).to(dtype), dtype, scale=2.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [(9, 13), (3, 4)])
def test_bicubic_gradients(strict, dtype, align_corners, size):
    x = make((2, 3, 5, 7), dtype)
    kw = {"mode": "bicubic", "align_corners": align_corners}
    g, c = x.to("spyre").requires_grad_(), x.float().requires_grad_()
    w = torch.randn((2, 3) + size, generator=torch.Generator().manual_seed(4)).to(dtype)
    (F.interpolate(g, size=size, **kw) * w.to("spyre")).sum().backward()
    (F.interpolate(c, size=size, **kw) * w.float()).sum().backward()
    near(g.grad.cpu(), c.grad.to(dtype), dtype, scale=4.0)


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_one_large_image(strict, mode):
    """One image of 64 channels: the gathers and scatters along the last dim have a single
    leading row, so they run with the dims before folded into one and in chunks of it."""
    x = make((1, 64, 64, 128), torch.float32)
    g, c = x.to("spyre").requires_grad_(), x.clone().requires_grad_()
    w = torch.randn(1, 64, 128, 256, generator=torch.Generator().manual_seed(4))
    got, want = F.interpolate(g, scale_factor=2, mode=mode), F.interpolate(c, scale_factor=2,
                                                                          mode=mode)
    near(got.detach().cpu(), want.detach(), torch.float32)
    (got * w.to("spyre")).sum().backward()
    (want * w).sum().backward()
    near(g.grad.cpu(), c.grad, torch.float32, scale=4.0)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_antialias(strict, mode, align_corners):
    """antialias=True (the CPU kernel takes fp32 and fp64): shrinking by 1.3x to 5x (the support
    widens with the factor), growing, given scale factors, a transposed input; the gradients."""
    x = make((2, 3, 23, 37), torch.float32)
    kw = {"mode": mode, "align_corners": align_corners, "antialias": True}
    for size in [(5, 7), (17, 11), (23, 37), (40, 50), (1, 3)]:
        got = F.interpolate(x.to("spyre"), size=size, **kw)
        near(got.cpu(), F.interpolate(x, size=size, **kw), torch.float32)
    for factor in (0.5, 0.3, (0.7, 1.5)):
        got = F.interpolate(x.to("spyre"), scale_factor=factor, **kw)
        near(got.cpu(), F.interpolate(x, scale_factor=factor, **kw), torch.float32)
    t = x.transpose(2, 3)
    got = F.interpolate(t.to("spyre"), size=(9, 4), **kw)
    near(got.cpu(), F.interpolate(t, size=(9, 4), **kw), torch.float32)
    for size in [(6, 9), (30, 40)]:
        g, c = x.to("spyre").requires_grad_(), x.clone().requires_grad_()
        w = torch.randn((2, 3) + size, generator=torch.Generator().manual_seed(4))
        (F.interpolate(g, size=size, **kw) * w.to("spyre")).sum().backward()
        (F.interpolate(c, size=size, **kw) * w).sum().backward()
        near(g.grad.cpu(), c.grad, torch.float32, scale=4.0)

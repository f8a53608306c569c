"""Reflection and replication padding (1-D, 2-D, 3-D; forward, backward; every padding side;
F.pad and conv's padding_mode), linspace / logspace / eye and masked_select on the card under
strict mode, against the CPU; cases the card leaves to the CPU keep its answers and errors."""

import pytest
import torch
import torch.nn.functional as F

from conftest import FLOATS, close, make


PADS = {1: [(2, 3), (0, 1), (4, 0)], 2: [(1, 2, 3, 0), (2, 2, 2, 2), (0, 0, 1, 4)],
        3: [(1, 0, 2, 1, 0, 2), (1, 1, 1, 1, 1, 1)]}
SHAPES = {1: [(2, 3, 6), (3, 6)], 2: [(2, 3, 5, 6), (3, 5, 6)], 3: [(1, 2, 3, 5, 4), (2, 3, 5, 4)]}


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32])
@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad(strict, dtype, dims, mode):
    for shape in SHAPES[dims]:
        x = make(shape, torch.float32).mul(5).to(dtype)
        for pad in PADS[dims]:
            got = F.pad(x.to("spyre"), pad, mode=mode)
            assert torch.equal(got.cpu(), F.pad(x, pad, mode=mode)), (shape, pad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_backward(strict, dtype, dims, mode):
    x = make(SHAPES[dims][0], dtype)
    pad = PADS[dims][0]
    g, c = x.to("spyre").requires_grad_(), x.float().requires_grad_()
    w = make(F.pad(c, pad, mode=mode).shape, dtype, seed=5)
    (F.pad(g, pad, mode=mode) * w.to("spyre")).sum().backward()
    (F.pad(c, pad, mode=mode) * w.float()).sum().backward()
    close(g.grad.cpu(), c.grad.to(dtype), dtype, scale=2.0)


def test_conv_with_reflect_and_replicate_padding_modes(strict):
    torch.manual_seed(0)
    for mode in ("reflect", "replicate"):
        conv = torch.nn.Conv2d(3, 4, 3, padding=1, padding_mode=mode)
        x = torch.randn(2, 3, 7, 6)
        want = conv(x)
        got = conv.to("spyre")(x.to("spyre"))
        close(got.cpu(), want.detach(), torch.float32, scale=4.0)


def test_pad_errors_stay_the_cpus(fallback_reset):
    with pytest.raises(RuntimeError):
        F.pad(torch.ones(1, 2, 3, device="spyre"), (3, 0), mode="reflect")  # pad >= size
    with pytest.raises(RuntimeError, match="Bool"):
        F.pad(torch.ones(1, 2, 3, dtype=torch.bool, device="spyre"), (1, 1), mode="replicate")


@pytest.mark.parametrize("dtype", FLOATS)
def test_linspace_logspace(strict, dtype):
    for start, end, steps in [(0, 1, 5), (-3.5, 7.25, 11), (2, -2, 1), (1, 1, 4), (0, 10, 0),
                              (-1, 1, 1000)]:
        got = torch.linspace(start, end, steps, dtype=dtype, device="spyre").cpu()
        close(got, torch.linspace(start, end, steps, dtype=dtype), dtype)
        if dtype == torch.float32 and steps >= 2:  # the last value is end exactly
            assert got[-1].item() == torch.tensor(float(end)).item()
    for start, end, steps, base in [(0, 3, 7, 10.0), (-2, 2, 5, 2.0), (1, 0, 4, 0.5)]:
        got = torch.logspace(start, end, steps, base, dtype=dtype, device="spyre").cpu()
        close(got, torch.logspace(start, end, steps, base, dtype=dtype), dtype, scale=10.0)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.bool])
def test_eye(strict, dtype):
    for args in [(4,), (3, 5), (6, 2), (0, 3)]:
        got = torch.eye(*args, dtype=dtype, device="spyre").cpu()
        assert torch.equal(got, torch.eye(*args, dtype=dtype))


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.bool])
def test_masked_select(strict, dtype):
    x = make((4, 6), torch.float32).mul(4).to(dtype)
    mask = make((4, 6), torch.float32, seed=2) > 0
    assert torch.equal(torch.masked_select(x.to("spyre"), mask.to("spyre")).cpu(),
                       torch.masked_select(x, mask))
    row = mask[1]  # broadcast along the rows
    assert torch.equal(torch.masked_select(x.to("spyre"), row.to("spyre")).cpu(),
                       torch.masked_select(x, row))
    none = torch.zeros(4, 6, dtype=torch.bool)
    assert torch.masked_select(x.to("spyre"), none.to("spyre")).numel() == 0

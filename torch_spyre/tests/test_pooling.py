"""2-D pooling on the card against CPU: max_pool2d and avg_pool2d over non-overlapping windows
(3-D and 4-D inputs, square and rectangular kernels, sizes that leave a remainder, NaN,
non-contiguous inputs, out=), nn.MaxPool2d / nn.AvgPool2d in eval under strict mode; other
pools, and max_pool2d with a gradient, give the CPU's answers through the fallback."""

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


def test_overlapping_padded_and_training_pools_fall_back(fallback_reset):
    x = make((1, 2, 7, 7), torch.float32)
    d = x.to("spyre")
    close(F.max_pool2d(d, 3, 2, 1).cpu(), F.max_pool2d(x, 3, 2, 1), torch.float32)
    close(F.avg_pool2d(d, 3, 1, ceil_mode=True).cpu(), F.avg_pool2d(x, 3, 1, ceil_mode=True),
          torch.float32)
    counts = torch_spyre.fallback_counts()
    assert counts["aten::max_pool2d_with_indices.out"] == 1
    assert counts["aten::avg_pool2d.out"] == 1
    g = d.clone().requires_grad_()
    F.max_pool2d(g, 2).sum().backward()  # with a gradient: the indices are needed
    c = x.clone().requires_grad_()
    F.max_pool2d(c, 2).sum().backward()
    assert torch.equal(g.grad.cpu(), c.grad)
    assert torch_spyre.fallback_counts()["aten::max_pool2d_with_indices.out"] == 2

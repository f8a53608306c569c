"""im2col / col2im (F.unfold, nn.Unfold, F.fold, nn.Fold) on the card against the CPU in strict
mode, forward and backward (each is the other's backward)."""

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import FLOATS, assert_same, close, make

# input shape [N, C, H, W] (or unbatched), kernel, dilation, padding, stride
UNFOLD = [
    ((2, 3, 7, 8), (3, 2), (1, 2), 1, (2, 1)),
    ((1, 4, 5, 5), 2, 1, 0, 2),  # non-overlapping patches
    ((3, 6, 6), 3, 1, 1, 1),  # unbatched
    ((2, 1, 9, 4), (4, 1), (2, 1), (2, 0), (3, 1)),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", UNFOLD, ids=str)
def test_unfold_forward_and_backward(strict, dtype, case):
    shape, k, d, p, s = case
    kw = dict(kernel_size=k, dilation=d, padding=p, stride=s)
    x = make(shape, dtype)
    xd, xc = x.to("spyre").requires_grad_(), x.float().requires_grad_()
    yd, yc = F.unfold(xd, **kw), F.unfold(xc, **kw)
    assert_same(yd.detach().cpu(), yc.detach().to(dtype))  # moved, not computed: exact
    up = make(yc.shape, dtype, seed=1)
    yd.backward(up.to("spyre"))
    yc.backward(up.float())
    kk = (k, k) if isinstance(k, int) else k
    close(xd.grad.cpu(), xc.grad.to(dtype), dtype, scale=(kk[0] * kk[1]) ** 0.5)


# columns [N, C * kh * kw, L] (or unbatched), output size, kernel, dilation, padding, stride
FOLD = [
    ((2, 18, 12), (5, 6), (3, 2), 1, (0, 1), (1, 2)),
    ((1, 8, 4), (4, 4), 2, 1, 0, 2),
    ((27, 25), (7, 7), 3, 2, 1, 1),  # unbatched, dilated
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", FOLD, ids=str)
def test_fold_forward_and_backward(strict, dtype, case):
    shape, out, k, d, p, s = case
    kw = dict(output_size=out, kernel_size=k, dilation=d, padding=p, stride=s)
    x = make(shape, dtype)
    xd, xc = x.to("spyre").requires_grad_(), x.float().requires_grad_()
    yd, yc = F.fold(xd, **kw), F.fold(xc, **kw)
    kk = (k, k) if isinstance(k, int) else k
    close(yd.detach().cpu(), yc.detach().to(dtype), dtype, scale=(kk[0] * kk[1]) ** 0.5)
    up = make(yc.shape, dtype, seed=1)
    yd.backward(up.to("spyre"))
    yc.backward(up.float())
    assert_same(xd.grad.cpu(), xc.grad.to(dtype))


def test_modules_and_round_trip(strict):
    x = make((2, 3, 8, 8), torch.float32)
    unfold, fold = torch.nn.Unfold(2, stride=2), torch.nn.Fold((8, 8), 2, stride=2)
    cols = unfold(x.to("spyre"))
    assert_same(cols.cpu(), unfold(x))
    assert_same(fold(cols).cpu(), x)  # non-overlapping patches fold back exactly


def test_unfold_of_bool(strict):
    x = make((2, 3, 6, 5), torch.bool)
    assert_same(F.unfold(x.to("spyre"), (2, 3), padding=1, stride=(2, 1)).cpu(),
                F.unfold(x, (2, 3), padding=1, stride=(2, 1)))


def test_other_dtypes_stay_on_the_cpu(fallback_reset):
    x = make((2, 3, 4, 4), torch.float64)
    assert_same(F.unfold(x.to("spyre"), 2).cpu(), F.unfold(x, 2))
    assert set(torch_spyre.fallback_counts()) == {"aten::im2col"}

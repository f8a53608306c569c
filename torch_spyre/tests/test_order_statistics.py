"""kthvalue, median, nanmedian and mode along a dim on the card against the CPU in strict mode:
values bit for bit (NaN where the CPU has NaN); indices point at an element equal to the value
(the CPU's index among ties comes from nth_element or an unstable sort, the card's from a
stable sort: see torch_spyre.md), and where the row has no ties they are the CPU's."""

import pytest
import torch

import torch_spyre
from conftest import FLOATS, make

INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]
NAN = float("nan")


def data(shape, dtype, seed=0, ties=True):
    """Rows with repeated values (ties) or distinct ones, floats with NaN in some rows."""
    g = torch.Generator().manual_seed(seed)
    n = torch.Size(shape).numel()
    if ties:
        x = torch.randint(0, 5, shape, generator=g)
    else:
        x = torch.randperm(n, generator=g).view(shape) % 120
    x = x.to(dtype)
    if dtype.is_floating_point and ties and x.dim() >= 1 and x.numel() > 3:
        flat = x.view(-1)
        flat[1] = NAN
        flat[-2] = NAN
    return x


def check(op, x, dim, keepdim, *args, ties=True):
    want = op(x, *args, dim=dim, keepdim=keepdim)
    got = op(x.to("spyre"), *args, dim=dim, keepdim=keepdim)
    v, i = got[0].cpu(), got[1].cpu()
    assert v.dtype == want[0].dtype and i.dtype == torch.int64
    assert v.shape == want[0].shape and i.shape == want[1].shape
    torch.testing.assert_close(v, want[0], rtol=0, atol=0, equal_nan=True)
    # the index points at the value (a NaN at a NaN)
    at = x.gather(dim, i if keepdim or x.dim() == 0 else i.unsqueeze(dim))
    at = at if keepdim or x.dim() == 0 else at.squeeze(dim)
    torch.testing.assert_close(at, v, rtol=0, atol=0, equal_nan=True)
    if not ties:
        assert torch.equal(i, want[1])


SHAPES = [((7,), 0), ((4, 9), 1), ((4, 9), 0), ((3, 5, 6), -2), ((2, 3, 8), 2), ((), 0)]


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("shape,dim", SHAPES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("ties", [True, False])
def test_median_nanmedian_mode(strict, dtype, shape, dim, keepdim, ties):
    x = data(shape, dtype, ties=ties)
    check(torch.median, x, dim, keepdim, ties=ties)
    check(torch.nanmedian, x, dim, keepdim, ties=ties)
    # a NaN makes the CPU's mode unspecified (its sort's order breaks down)
    check(torch.mode, x.nan_to_num(2.5), dim, keepdim, ties=ties)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("shape,dim", SHAPES)
@pytest.mark.parametrize("ties", [True, False])
def test_kthvalue(strict, dtype, shape, dim, ties):
    x = data(shape, dtype, seed=1, ties=ties)
    n = x.shape[dim] if x.dim() else 1
    for k in sorted({1, (n + 1) // 2, n}):
        check(torch.kthvalue, x, dim, k % 2 == 0, k, ties=ties)


def test_all_nan_rows_and_bool_mode(strict):
    x = torch.tensor([[NAN, NAN, NAN], [1.0, NAN, 1.0], [NAN, 2.0, -1.0]])
    for op in (torch.median, torch.nanmedian):
        check(op, x, 1, False)
    want = torch.nanmedian(x, 1)
    got = torch.nanmedian(x.to("spyre"), 1)
    assert torch.equal(got.indices.cpu(), want.indices)  # all NaN: index 0, as the CPU
    b = torch.tensor([[True, False, True], [False, False, True]])
    check(torch.mode, b, 1, False)


def test_out_variants_and_what_falls_back(fallback_reset):
    x = data((4, 6), torch.float32, ties=False)
    v, i = torch.empty(0, device="spyre"), torch.empty(0, dtype=torch.long, device="spyre")
    torch.kthvalue(x.to("spyre"), 2, 1, out=(v, i))
    want = torch.kthvalue(x, 2, 1)
    assert torch.equal(v.cpu(), want.values) and torch.equal(i.cpu(), want.indices)
    assert torch_spyre.fallback_counts() == {}
    with pytest.raises(RuntimeError, match="out of range"):
        torch.kthvalue(x.to("spyre"), 7, 1)  # k out of range: the CPU's error
    d = x.double()
    assert torch.equal(torch.median(d.to("spyre"), 0).values.cpu(), torch.median(d, 0).values)
    assert "aten::median.dim_values" in torch_spyre.fallback_counts()


@pytest.mark.parametrize("dtype", INTS)
def test_whole_tensor_median_of_integers(strict, dtype):
    for shape in [(7,), (4, 6), (1,)]:
        x = data(shape, dtype, seed=2)
        for op in (torch.median, torch.nanmedian):
            got = op(x.to("spyre"))
            assert got.device.type == "spyre" and got.shape == ()
            assert torch.equal(got.cpu(), op(x))

"""tril / triu on the card against the CPU, bit-exact, with no fallback: float, integer and
bool inputs, diagonals inside and beyond the matrix, batched and non-square shapes, NaN above
the band, in place, out=, empty."""

import pytest
import torch

import torch_spyre
from conftest import assert_same, make

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 5), (3, 8), (2, 7, 4), (1, 1)])
@pytest.mark.parametrize("k", [0, 1, -2, 9, -9])
def test_tril_triu(fallback_reset, dtype, shape, k):
    x = make(shape, torch.int64).to(dtype) if dtype == torch.int32 else make(shape, dtype)
    for fn in (torch.tril, torch.triu):
        assert_same(fn(x.to("spyre"), k).cpu(), fn(x, k))
    assert torch_spyre.fallback_counts() == {}


def same_nan(a, b):
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_nan_in_place_out_and_empty(fallback_reset):
    x = make((4, 6), torch.float32)
    x[0, 5] = float("nan")
    x[3, 0] = float("nan")
    for fn in (torch.tril, torch.triu):  # NaN kept inside the band, zeroed outside
        same_nan(fn(x.to("spyre")).cpu(), fn(x))
    d = x.to("spyre")
    d.tril_(1)
    same_nan(d.cpu(), x.tril(1))
    out = torch.empty(0, device="spyre")
    torch.triu(x.to("spyre"), -1, out=out)
    same_nan(out.cpu(), torch.triu(x, -1))
    e = torch.zeros(0, 3)
    assert_same(torch.tril(e.to("spyre")).cpu(), torch.tril(e))
    assert torch_spyre.fallback_counts() == {}

"""tril / triu on the card against the CPU, bit-exact, with no fallback: float, integer and
bool inputs, diagonals inside and beyond the matrix, batched and non-square shapes, NaN above
the band, in place, out=, empty; tril_indices / triu_indices made on the card."""

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


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_tril_and_triu_indices(strict, dtype):
    # the band's coordinates, made on the card (an arange and a searchsorted of the rows'
    # starts): bit-exact for square, wide, tall, single and empty shapes and offsets inside and
    # past the matrix (rows of no element included)
    for rows, cols in ((5, 7), (7, 5), (1, 1), (0, 3), (4, 0), (33, 17)):
        for offset in (-9, -2, -1, 0, 1, 3, 20):
            for fn in (torch.tril_indices, torch.triu_indices):
                got = fn(rows, cols, offset, dtype=dtype, device="spyre")
                assert got.device.type == "spyre"
                assert_same(got.cpu(), fn(rows, cols, offset, dtype=dtype))


def test_band_indices_errors_are_the_cpus(fallback_reset):
    with pytest.raises(RuntimeError):
        torch.tril_indices(3, 3, dtype=torch.float32, device="spyre")

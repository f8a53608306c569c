"""torch.arange on the card against the CPU with no fallback: int64 and int32 (positions
beyond 2^32 too), the float types, negative steps, float arguments with integer values, odd
lengths."""

import pytest
import torch

import torch_spyre
from conftest import assert_same


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.float16,
                                   torch.bfloat16])
@pytest.mark.parametrize("args", [(7,), (3, 200), (100, -5, -7), (0, 250, 3), (-2.0, 9.0)])
def test_arange(fallback_reset, dtype, args):
    got = torch.arange(*args, dtype=dtype, device="spyre")
    assert got.device.type == "spyre"
    assert_same(got.cpu(), torch.arange(*args, dtype=dtype))
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
@pytest.mark.parametrize("args", [(3, 1000), (0, 50000, 3), (7000, -9000, -13)])
def test_arange_long(fallback_reset, dtype, args):
    got = torch.arange(*args, dtype=dtype, device="spyre")
    assert_same(got.cpu(), torch.arange(*args, dtype=dtype))
    assert torch_spyre.fallback_counts() == {}


def test_arange_int64_large_and_out(fallback_reset):
    start = 2**40 + 3
    got = torch.arange(start, start + 3 * 2**33, 2**33, device="spyre")
    assert_same(got.cpu(), torch.arange(start, start + 3 * 2**33, 2**33))
    out = torch.empty(0, dtype=torch.int64, device="spyre")
    torch.arange(5, 17, out=out)
    assert_same(out.cpu(), torch.arange(5, 17))
    assert torch_spyre.fallback_counts() == {}


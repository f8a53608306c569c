"""nonzero on the card (flags, a cumulative sum for the rows, one scatter) against the CPU with
no fallback: bool, fp32 (NaN counts, -0.0 does not), fp16, int64 and int8 of ranks 1 to 4,
transposed inputs, no and all elements nonzero, empty and 0-d tensors, `as_tuple`, and boolean
mask indices (`x[mask]` over one or several dims: nonzero of the flat mask, then one index
tensor)."""

import pytest
import torch

import torch_spyre
from conftest import assert_same


@pytest.fixture
def no_fallback(fallback_reset):
    yield
    assert torch_spyre.fallback_counts() == {}


def sparse(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    keep = torch.rand(shape, generator=g) < 0.3
    x = torch.randn(shape, generator=g) * keep
    if dtype == torch.bool:
        return keep
    if dtype.is_floating_point:
        return x.to(dtype)
    return (x * 100).round().to(dtype)


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.float16, torch.int64,
                                   torch.int8])
@pytest.mark.parametrize("shape", [(17,), (6, 9), (3, 4, 5), (2, 3, 2, 7)])
def test_nonzero(no_fallback, dtype, shape):
    x = sparse(shape, dtype, seed=len(shape))
    assert_same(torch.nonzero(x.to("spyre")).cpu(), torch.nonzero(x))


def test_special_values_and_layouts(no_fallback):
    x = torch.tensor([[0.0, -0.0, float("nan"), 1.0], [float("inf"), 0.0, -2.0, 0.0]])
    d = x.to("spyre")
    assert_same(torch.nonzero(d).cpu(), torch.nonzero(x))
    assert_same(torch.nonzero(d.t()).cpu(), torch.nonzero(x.t()))
    for t in (torch.zeros(3, 4), torch.ones(3, 4), torch.zeros(0, 4), torch.tensor(5.0),
              torch.tensor(0.0)):
        assert_same(torch.nonzero(t.to("spyre")).cpu(), torch.nonzero(t))
    got = torch.nonzero(d, as_tuple=True)
    want = torch.nonzero(x, as_tuple=True)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same(g.cpu(), w)


def test_boolean_mask_index_along_dim_0(no_fallback):
    x = torch.randn(10, 6)
    mask = torch.tensor([True, False, True, True, False, False, True, False, False, True])
    assert_same(x.to("spyre")[mask.to("spyre")].cpu(), x[mask])


def test_boolean_mask_over_several_dims(no_fallback):
    # the encoder's y[~pad]: a [2, 10] mask over the first two dims of [2, 10, 8]
    x = torch.randn(2, 10, 8)
    pad = torch.zeros(2, 10, dtype=torch.bool)
    pad[1, 7:] = True
    d, dp = x.to("spyre"), pad.to("spyre")
    assert_same(d[~dp].cpu(), x[~pad])
    m = torch.rand(10, 8) < 0.4  # over the last two dims
    assert_same(d[:, m.to("spyre")].cpu(), x[:, m])
    assert_same(d[torch.zeros(2, 10, dtype=torch.bool).to("spyre")].cpu(),
                x[torch.zeros(2, 10, dtype=torch.bool)])


def test_nonzero_of_a_mask_past_2_to_24_elements(no_fallback):
    """Past 2^24 elements the result rows come from a binary search of the ranks (the scatter of
    every position took ~1 GB of int64 temporaries and ran on the CPU)."""
    n = (1 << 24) + 4096
    g = torch.Generator().manual_seed(3)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[torch.randint(0, n, (700,), generator=g)] = True
    mask[0] = mask[n - 1] = True
    assert_same(mask.to("spyre").nonzero().cpu(), mask.nonzero())

"""torch.histc on the card against the CPU in strict mode: the CPU's bin rule (edges rounded to
the input's type, elements on bin edges, the last bin's right edge, values outside the range and
NaN skipped), the data's own range when min == max, the CPU's errors."""

import pytest
import torch

import torch_spyre
from conftest import FLOATS, assert_same, make

NAN, INF = float("nan"), float("inf")


def edge_data(dtype):
    """Values on and next to bin edges of [-1, 1] with 8 bins, outside values, NaN, infinities."""
    edges = torch.linspace(-1, 1, 9)
    x = torch.cat([edges, edges + 1e-3, edges - 1e-3, torch.tensor([NAN, INF, -INF, 2.0, -3.0]),
                   make((200,), torch.float32) * 0.6])
    return x.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bins,lo,hi", [(8, -1, 1), (5, -1, 1), (100, -0.7, 0.9), (1, -1, 1),
                                        (3, 0.1, 0.3)])
def test_histc_bins_and_edges(strict, dtype, bins, lo, hi):
    x = edge_data(dtype)
    assert_same(torch.histc(x.to("spyre"), bins, lo, hi).cpu(), torch.histc(x, bins, lo, hi))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1000,), (7, 13), (3, 4, 5)])
def test_histc_data_range(strict, dtype, shape):
    x = make(shape, dtype)
    for bins in (10, 64):
        assert_same(torch.histc(x.to("spyre"), bins).cpu(), torch.histc(x, bins))
    c = torch.full((5, 7), 3.0, dtype=dtype)  # min == max: widened by 1 on both sides
    assert_same(torch.histc(c.to("spyre"), 4).cpu(), torch.histc(c, 4))
    out = torch.empty(0, dtype=dtype, device="spyre")
    torch.histc(x.to("spyre"), 6, -1, 1, out=out)
    assert_same(out.cpu(), torch.histc(x, 6, -1, 1))


def test_histc_empty_errors_and_fallback(fallback_reset):
    e = torch.empty(0)
    assert_same(torch.histc(e.to("spyre"), 5).cpu(), torch.histc(e, 5))
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histc(torch.tensor([1.0, INF]).to("spyre"), 4)
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(torch.tensor([1.0]).to("spyre"), 4, 2, 1)
    assert torch_spyre.fallback_counts() == {}
    d = make((50,), torch.float64)
    assert_same(torch.histc(d.to("spyre"), 7).cpu(), torch.histc(d, 7))
    assert set(torch_spyre.fallback_counts()) == {"aten::histc"}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_counts_are_exact_then_rounded(strict, dtype):
    # the CPU adds ones in the 16-bit type (per thread), where 2048 + 1 (fp16) and 256 + 1
    # (bf16) round back down; the card counts exactly and rounds the count once
    c = torch.full((3000,), 0.5, dtype=dtype)
    got = torch.histc(c.to("spyre"), 2, 0, 1).cpu()
    assert_same(got, torch.tensor([0.0, 3000.0]).to(dtype))


@pytest.mark.parametrize("bins", [1, 8, 37])
@pytest.mark.parametrize("range_", [None, (-1.0, 1.0), (0.1, 0.3), (2.0, 2.0)])
@pytest.mark.parametrize("density", [False, True])
def test_histogram_bin_count(strict, bins, range_, density):
    x = edge_data(torch.float32)
    if range_ is None:
        x = x[x.isfinite()]  # the data's own range must be finite (the CPU's error)
    want = torch.histogram(x, bins, range=range_, density=density)
    got = torch.histogram(x.to("spyre"), bins, range=range_, density=density)
    assert_same(got.bin_edges.cpu(), want.bin_edges)
    torch.testing.assert_close(got.hist.cpu(), want.hist, rtol=0 if not density else 1e-6,
                               atol=0, equal_nan=True)


@pytest.mark.parametrize("density", [False, True])
def test_histogram_weights_and_bin_tensor(strict, density):
    x = edge_data(torch.float32).view(-1)
    w = make(x.shape, torch.float32, seed=1).abs()
    want = torch.histogram(x, 8, range=(-1.0, 1.0), weight=w, density=density)
    got = torch.histogram(x.to("spyre"), 8, range=(-1.0, 1.0), weight=w.to("spyre"),
                          density=density)
    torch.testing.assert_close(got.hist.cpu(), want.hist, rtol=1e-5, atol=1e-5)
    edges = torch.tensor([-1.0, -0.5, -0.1, 0.0, 0.25, 0.999, 1.0])
    for weight in (None, w):
        want = torch.histogram(x, edges, weight=weight, density=density)
        got = torch.histogram(x.to("spyre"), edges.to("spyre"),
                              weight=None if weight is None else weight.to("spyre"),
                              density=density)
        assert_same(got.bin_edges.cpu(), want.bin_edges)
        torch.testing.assert_close(got.hist.cpu(), want.hist, rtol=1e-5, atol=1e-5)


def test_histogram_empty_and_fallback(fallback_reset):
    e = torch.empty(0)
    for density in (False, True):
        want = torch.histogram(e, 4, density=density)
        got = torch.histogram(e.to("spyre"), 4, density=density)
        torch.testing.assert_close(got.hist.cpu(), want.hist, equal_nan=True)
        assert_same(got.bin_edges.cpu(), want.bin_edges)
    assert torch_spyre.fallback_counts() == {}
    d = make((40,), torch.float64)
    torch.testing.assert_close(torch.histogram(d.to("spyre"), 5).hist.cpu(),
                               torch.histogram(d, 5).hist)
    assert set(torch_spyre.fallback_counts()) == {"aten::histogram.bin_ct"}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_bincount(strict, dtype):
    """bincount on the card: counts and float32 weights, minlength above and below the data's
    range, empty input; a negative value is the CPU's error."""
    g = torch.Generator().manual_seed(9)
    x = torch.randint(0, 37, (500,), generator=g).to(dtype)
    w = torch.randn(500, generator=g)
    for kw in ({}, {"minlength": 50}, {"minlength": 3}):
        got = torch.bincount(x.to("spyre"), **kw).cpu()
        assert got.dtype == torch.int64 and torch.equal(got, torch.bincount(x, **kw))
        got = torch.bincount(x.to("spyre"), weights=w.to("spyre"), **kw).cpu()
        torch.testing.assert_close(got, torch.bincount(x, weights=w, **kw), rtol=1e-5, atol=1e-5)
    empty = torch.empty(0, dtype=dtype)
    assert torch.equal(torch.bincount(empty.to("spyre"), minlength=4).cpu(),
                       torch.bincount(empty, minlength=4))
    if dtype != torch.uint8:
        with pytest.raises(RuntimeError, match="non-negative"):
            torch.bincount(torch.tensor([1, -2, 3], dtype=dtype).to("spyre"))

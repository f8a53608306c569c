"""The rest of the index family on the card with TORCH_SPYRE_STRICT=1 against the CPU: index_put_
(x[idx] = v, x[idx] += v with accumulate=True: one index tensor on any dim, several on adjacent
dims, negative positions, boolean masks, duplicates summed as torch sums them, broadcast values),
masked_scatter, index_add (any dim, alpha, duplicates), isin and scatter_reduce ("sum", "mean", "amax", "amin", "prod" for floats and
integers; include_self True and False) on odd shapes, every dtype claimed, empty tensors and
strided inputs."""

import pytest
import torch

from conftest import make

ACC_TYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32]


def small(shape, dtype, seed):
    """Small integers in every dtype: sums of duplicates are exact, so compared bit for bit."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-8, 9, shape, generator=g).to(dtype)


def check(x, indices, v, accumulate):
    put = torch.ops.aten.index_put_  # takes None entries (a whole dim) in the index list
    want = put(x.clone(), list(indices), v, accumulate)
    dev = x.to("spyre")
    got = put(dev, [None if i is None else i.to("spyre") for i in indices], v.to("spyre"),
              accumulate)
    assert got is dev
    assert torch.equal(dev.cpu(), want), f"\n{dev.cpu()}\n!=\n{want}"


@pytest.mark.parametrize("dtype", ACC_TYPES)
def test_accumulate_duplicates_dim0(strict, dtype):
    x = small((7, 5), dtype, 1)
    idx = torch.tensor([3, 0, 3, 6, 3, -1])  # 3 three times, -1 is 6
    check(x, (idx,), small((6, 5), dtype, 2), True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_put_without_accumulate(strict, dtype):
    x = make((9, 3, 5), dtype, 3)
    idx = torch.tensor([[4, 0], [8, 2]])
    check(x, (idx,), make((2, 2, 3, 5), dtype, 4), False)


def test_index_on_a_later_dim_and_broadcast_values(strict):
    x = small((4, 11, 3), torch.float32, 5)
    idx = torch.tensor([10, 2, 2, 0])
    check(x, (None, idx), torch.tensor([1.0, 2.0, 3.0]), True)  # [4, 4, 3] <- [3]
    check(x, (None, idx), torch.tensor(2.5), False)


def test_several_index_tensors(strict):
    x = small((5, 6, 3), torch.float32, 6)
    rows = torch.tensor([0, 4, 4, -5, 2])
    cols = torch.tensor([[1], [5]])  # broadcasts with rows to [2, 5]
    check(x, (rows, cols), small((2, 5, 3), torch.float32, 7), True)
    check(x, (None, torch.tensor([0, 5, -1]), torch.tensor([2, 0, 1])),
          torch.tensor(9.0), True)


def test_boolean_mask(strict):
    x = small((6, 7), torch.float32, 8)
    mask = torch.rand(6, 7, generator=torch.Generator().manual_seed(0)) > 0.5
    check(x, (mask,), torch.tensor(-3.0), False)
    check(x, (mask,), small((int(mask.sum()),), torch.float32, 9), True)


def test_strided_target_and_empty_index(strict):
    base = small((8, 10), torch.float32, 10)
    want = base.clone()
    want.t().index_put_((torch.tensor([1, 1, 9]),), torch.ones(3, 8), accumulate=True)
    dev = base.to("spyre")
    dev.t().index_put_((torch.tensor([1, 1, 9]).to("spyre"),), torch.ones(3, 8).to("spyre"),
                       accumulate=True)
    assert torch.equal(dev.cpu(), want)
    check(base, (torch.zeros(0, dtype=torch.long),), torch.zeros(0, 10), True)


def test_out_of_range_is_an_error(strict):
    """Column 5 of 5 with row 1 would be element 10 (row 2) in the flat index: the launch fails
    instead (the scatter's bounds check, reported at the synchronize)."""
    dev = torch.zeros(4, 5, device="spyre")
    with pytest.raises(RuntimeError, match="division by zero"):
        dev.index_put_((torch.tensor([1]).to("spyre"), torch.tensor([5]).to("spyre")),
                       torch.tensor(1.0).to("spyre"), accumulate=True)
        torch.spyre.synchronize()
    assert dev.cpu().sum() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_masked_scatter(strict, dtype):
    x = make((5, 7), dtype, 11)
    mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(1)) > 0.4
    source = make((6, 7), dtype, 12)  # more elements than the mask's ones
    want = x.clone().masked_scatter_(mask, source)
    got = x.to("spyre").masked_scatter_(mask.to("spyre"), source.to("spyre"))
    assert torch.equal(got.cpu(), want)
    row = mask[2]  # [7] broadcast over the rows; the out-of-place form
    want = torch.masked_scatter(x, row, source)
    got = torch.masked_scatter(x.to("spyre"), row.to("spyre"), source.to("spyre"))
    assert torch.equal(got.cpu(), want)
    empty = torch.zeros(0, 7, dtype=dtype)
    got = empty.to("spyre").masked_scatter_(torch.zeros(0, 7, dtype=torch.bool).to("spyre"),
                                           source.to("spyre"))
    assert got.shape == (0, 7)


def test_masked_scatter_short_source(strict):
    x = torch.zeros(3, 4, device="spyre")
    with pytest.raises(RuntimeError, match="at least as many elements"):
        x.masked_scatter_(torch.ones(3, 4, dtype=torch.bool, device="spyre"),
                          torch.ones(5, device="spyre"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32])
@pytest.mark.parametrize("invert", [False, True])
def test_isin(strict, dtype, invert):
    elements = small((6, 13), dtype, 13)
    test = small((9,), dtype, 14)
    want = torch.isin(elements, test, invert=invert)
    got = torch.isin(elements.to("spyre"), test.to("spyre"), invert=invert)
    assert torch.equal(got.cpu(), want)
    strided = elements.t()
    assert torch.equal(torch.isin(strided.to("spyre"), test.to("spyre")).cpu(),
                       torch.isin(strided, test))


def test_isin_nan_and_empty(strict):
    elements = torch.tensor([1.0, float("nan"), 2.0, -0.0])
    test = torch.tensor([float("nan"), 0.0, 2.0])
    assert torch.equal(torch.isin(elements.to("spyre"), test.to("spyre")).cpu(),
                       torch.isin(elements, test))
    assert torch.isin(elements.to("spyre"), test[:0].to("spyre")).cpu().sum() == 0
    assert torch.isin(elements[:0].to("spyre"), test.to("spyre")).shape == (0,)


@pytest.mark.parametrize("dtype", ACC_TYPES)
@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(strict, dtype, reduce, include_self):
    x = small((5, 9), dtype, 15)
    index = torch.randint(0, 9, (5, 6), generator=torch.Generator().manual_seed(2))
    src = small((5, 7), dtype, 16)  # wider than the index: only its corner takes part
    want = x.scatter_reduce(1, index, src, reduce, include_self=include_self)
    got = x.to("spyre").scatter_reduce(1, index.to("spyre"), src.to("spyre"), reduce,
                                       include_self=include_self)
    assert torch.equal(got.cpu(), want), f"\n{got.cpu()}\n!=\n{want}"


def test_scatter_reduce_dim0_strided_and_empty(strict):
    x = small((9, 4), torch.float32, 17)
    index = torch.randint(0, 4, (4, 6), generator=torch.Generator().manual_seed(3)).t()
    src = small((6, 4), torch.float32, 18)
    for reduce in ["sum", "mean"]:
        want = x[:, :4].t().scatter_reduce(0, index[:, :4], src, reduce, include_self=False)
        got = x.to("spyre")[:, :4].t().scatter_reduce(0, index[:, :4].to("spyre"),
                                                      src.to("spyre"), reduce,
                                                      include_self=False)
        assert torch.equal(got.cpu(), want)
    empty = torch.zeros(5, 0, dtype=torch.long)
    got = x.to("spyre").scatter_reduce(1, empty.to("spyre"), src.to("spyre")[:5], "sum")
    assert torch.equal(got.cpu(), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_extremes(strict, dtype, reduce, include_self):
    """Many duplicate targets, ties, a NaN (it wins, as torch propagates it) and infinities."""
    x = small((5, 9), dtype, 19)
    x[0, 0] = float("-inf")
    index = torch.randint(0, 9, (5, 11), generator=torch.Generator().manual_seed(4))
    src = small((5, 12), dtype, 20)
    src[1, 3] = float("nan")
    src[2, 0] = float("inf")
    want = x.scatter_reduce(1, index, src, reduce, include_self=include_self)
    dev = x.to("spyre")
    got = dev.scatter_reduce(1, index.to("spyre"), src.to("spyre"), reduce,
                             include_self=include_self)
    assert torch.equal(dev.cpu(), x)  # the input is not written
    assert torch.equal(got.cpu().isnan(), want.isnan())
    assert torch.equal(got.cpu().nan_to_num(), want.nan_to_num()), f"\n{got.cpu()}\n!=\n{want}"


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8])
@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_integer_extremes(strict, dtype, reduce, include_self):
    """Duplicate targets, ties and the type's extremes (amin of the smallest value: negating
    it would wrap)."""
    g = torch.Generator().manual_seed(6)
    info = torch.iinfo(dtype)
    x = torch.randint(-5 if info.min < 0 else 0, 6, (5, 9), generator=g).to(dtype)
    src = torch.randint(-5 if info.min < 0 else 0, 6, (5, 12), generator=g).to(dtype)
    src[1, 3], src[2, 0], x[3, 4] = info.min, info.max, info.min
    index = torch.randint(0, 9, (5, 11), generator=g)
    want = x.scatter_reduce(1, index, src, reduce, include_self=include_self)
    dev = x.to("spyre")
    got = dev.scatter_reduce(1, index.to("spyre"), src.to("spyre"), reduce,
                             include_self=include_self)
    assert torch.equal(dev.cpu(), x)  # the input is not written
    assert got.dtype == dtype and torch.equal(got.cpu(), want), f"\n{got.cpu()}\n!=\n{want}"


def test_scatter_reduce_extremes_dim0_corner(strict):
    x = small((7, 6), torch.float32, 21)
    index = torch.randint(0, 7, (4, 6), generator=torch.Generator().manual_seed(5))[:, :4]
    src = small((5, 6), torch.float32, 22).t()  # strided, larger than the index
    for reduce in ["amax", "amin"]:
        want = x.scatter_reduce(0, index, src, reduce, include_self=False)
        got = x.to("spyre").scatter_reduce(0, index.to("spyre"), src.to("spyre"), reduce,
                                           include_self=False)
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_prod(strict, dtype, include_self):
    """Runs of 1 to 11 duplicate targets (the segmented scan's rounds), a zero, a NaN and an
    infinity; values near 1 so a long run's product stays in range. The card multiplies in a
    tree order, the CPU in sequence: equal up to rounding."""
    g = torch.Generator().manual_seed(7)
    x = (1 + (torch.rand(5, 9, generator=g) - 0.5) / 2).to(dtype)
    src = (1 + (torch.rand(5, 12, generator=g) - 0.5) / 2).to(dtype)
    src[1, 3], src[2, 0], src[3, 5] = float("nan"), float("inf"), 0.0
    index = torch.randint(0, 9, (5, 11), generator=g)
    index[4] = 2  # one target 11 times
    want = x.float().scatter_reduce(1, index, src.float(), "prod", include_self=include_self)
    dev = x.to("spyre")
    got = dev.scatter_reduce(1, index.to("spyre"), src.to("spyre"), "prod",
                             include_self=include_self)
    assert torch.equal(dev.cpu(), x)  # the input is not written
    assert got.dtype == dtype
    tol = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 6e-2}[dtype]
    torch.testing.assert_close(got.cpu().float(), want, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_integer_prod(strict, dtype, include_self):
    """Exact, wrapping as the CPU's products wrap; strided dim-0 operands larger than the
    index."""
    g = torch.Generator().manual_seed(8)
    lo = -4 if torch.iinfo(dtype).min < 0 else 0
    x = torch.randint(lo, 5, (7, 6), generator=g).to(dtype)
    src = torch.randint(lo, 5, (9, 8), generator=g).to(dtype).t()
    index = torch.randint(0, 7, (6, 6), generator=g)[:, :5]
    want = x.scatter_reduce(0, index, src, "prod", include_self=include_self)
    got = x.to("spyre").scatter_reduce(0, index.to("spyre"), src.to("spyre"), "prod",
                                       include_self=include_self)
    assert got.dtype == dtype and torch.equal(got.cpu(), want), f"\n{got.cpu()}\n!=\n{want}"


@pytest.mark.parametrize("dtype", ACC_TYPES + [torch.int8])
def test_index_add(strict, dtype):
    x = small((5, 7, 3), dtype, 20)
    for dim, n in ((0, 6), (1, 9), (2, 4), (-1, 2)):
        idx = torch.randint(0, x.size(dim), (n,), generator=torch.Generator().manual_seed(n))
        shape = list(x.shape)
        shape[dim] = n
        src = small(tuple(shape), dtype, 21 + n)
        for alpha in (1, 3):
            want = x.index_add(dim, idx, src, alpha=alpha)
            got = x.to("spyre").index_add(dim, idx.to("spyre"), src.to("spyre"), alpha=alpha)
            assert torch.equal(got.cpu(), want), (dim, alpha)
        d = x.to("spyre")
        d.index_add_(dim, idx.to("spyre"), src.to("spyre"))  # in place, duplicates summed
        assert torch.equal(d.cpu(), x.index_add(dim, idx, src))


def test_index_add_beyond_one_launch(strict):
    """index_add along the last dim of 8192 rows (a million positions: more work than one launch
    may do, which the library splits into launches over the rows) on the card, the CPU's sums
    bit for bit (small integers in fp32: exact in any order)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-50, 50, (8192, 130), generator=g).float()
    idx = torch.randint(0, 130, (128,), generator=g)
    src = torch.randint(-50, 50, (8192, 128), generator=g).float()
    got = x.to("spyre").index_add_(1, idx.to("spyre"), src.to("spyre"))
    assert torch.equal(got.cpu(), x.index_add(1, idx, src))


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_index_reduce(strict, reduce, include_self, dtype):
    g = torch.Generator().manual_seed(7)
    self_ = (torch.randn(6, 5, 4, generator=g) * 4).to(dtype)
    src = (torch.randn(6, 7, 4, generator=g) * 4).to(dtype)
    if dtype.is_floating_point:
        src[2, 3, 1] = float("nan")
    index = torch.tensor([0, 4, 4, 1, 0, 4, 2])  # repeats; index 3 never reached
    got = self_.to("spyre").index_reduce(1, index.to("spyre"), src.to("spyre"), reduce,
                                         include_self=include_self).cpu()
    want = self_.index_reduce(1, index, src, reduce, include_self=include_self)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-5, atol=1e-5)
    t = self_.to("spyre")
    t.index_reduce_(0, index[:3].to("spyre"), src[:3, :5].to("spyre"), reduce,
                    include_self=include_self)
    torch.testing.assert_close(
        t.cpu(), self_.clone().index_reduce_(0, index[:3], src[:3, :5], reduce,
                                             include_self=include_self),
        equal_nan=True, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_max_unpool_round_trip(strict, dtype):
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, 3, 8, 10, generator=g).to(dtype)
    for kw in ({"kernel_size": 2}, {"kernel_size": 3, "stride": 1, "padding": 1}):
        # overlapping windows (stride 1) repeat indices: the same value lands there
        p, i = torch.nn.functional.max_pool2d(x, return_indices=True, **kw)
        got = torch.nn.functional.max_unpool2d(p.to("spyre"), i.to("spyre"),
                                               output_size=x.shape[-2:], **kw).cpu()
        assert torch.equal(got, torch.nn.functional.max_unpool2d(p, i, output_size=x.shape[-2:],
                                                                 **kw))
    # without the batch dim, and 3-D
    p, i = torch.nn.functional.max_pool2d(x[0], 2, return_indices=True)
    assert torch.equal(torch.nn.functional.max_unpool2d(p.to("spyre"), i.to("spyre"), 2).cpu(),
                       torch.nn.functional.max_unpool2d(p, i, 2))
    v = torch.randn(1, 2, 4, 6, 6, generator=g).to(dtype)
    p, i = torch.nn.functional.max_pool3d(v, 2, return_indices=True)
    assert torch.equal(torch.nn.functional.max_unpool3d(p.to("spyre"), i.to("spyre"), 2).cpu(),
                       torch.nn.functional.max_unpool3d(p, i, 2))


def test_max_unpool_bad_index_keeps_the_cpu_error(fallback_reset):
    p = torch.ones(1, 1, 2, 2)
    i = torch.tensor([[[[0, 1], [2, 99]]]])
    with pytest.raises(RuntimeError, match="invalid max index"):
        torch.nn.functional.max_unpool2d(p.to("spyre"), i.to("spyre"), 2)

"""cummax/cummin (floats, int64, int32, bool; values and indices: ties go to the later index, a
NaN takes over at its own index, as the CPU's sequential scan), median/nanmedian of a whole
tensor, cdist (every p, both of torch's forms, batches, the sliced direct form), torch.cross and
addbmm on the card under strict mode against the CPU."""

import math

import pytest
import torch

NAN = float("nan")
INF = float("inf")


def same(got, want):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    assert torch.equal(got, want) or torch.allclose(got, want, equal_nan=True, rtol=0, atol=0), (
        got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.bool])
@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
def test_cummax_cummin_exact(strict, dtype, op):
    g = torch.Generator().manual_seed(1)
    # few distinct values: many ties
    x = torch.randint(-3, 4, (5, 37), generator=g)
    x = x.gt(0) if dtype == torch.bool else x.to(dtype)  # bools: as int32 on the card
    if dtype.is_floating_point:
        x[1, 4] = NAN
        x[1, 20] = NAN
        x[2, 0] = NAN
        x[3, 9] = INF
        x[4, 30] = -INF
    for dim in (1, 0, -1):
        v, i = op(x.to("spyre"), dim)
        cv, ci = op(x, dim)
        same(v, cv)
        same(i, ci)
    # one element, and out=
    v, i = op(x[:, :1].to("spyre"), 1)
    same(v, op(x[:, :1], 1).values)
    vo = torch.empty(0, dtype=dtype, device="spyre")
    io = torch.empty(0, dtype=torch.long, device="spyre")
    op(x.to("spyre"), 1, out=(vo, io))
    same(vo, op(x, 1).values)
    same(io, op(x, 1).indices)


@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
def test_cummax_cummin_in_blocks(strict, op):
    # past 2^21 elements the scan runs in blocks along dim, each combined with the running pair
    # of the blocks before it (a 16.8M-element cummax ran out of the simulator's memory): ties
    # and a NaN on both sides of a block boundary
    n = 700_000  # 3 x n: two blocks of 699,050 positions along dim 1
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-50, 50, (3, n), generator=g).float()
    x[0, 10] = x[0, 699_051] = 1000.0 * (1 if op is torch.cummax else -1)  # a tie across
    x[1, 699_049] = NAN
    x[2, 699_060] = NAN
    v, i = op(x.to("spyre"), 1)
    cv, ci = op(x, 1)
    same(v, cv)
    same(i, ci)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_median_nanmedian_whole_tensor(strict, dtype):
    g = torch.Generator().manual_seed(2)
    for n in (1, 2, 7, 64):
        x = torch.randn(n, generator=g).to(dtype)
        same(torch.median(x.to("spyre")), torch.median(x))
        same(torch.nanmedian(x.to("spyre")), torch.nanmedian(x))
    x = torch.randn(4, 9, generator=g).to(dtype)
    x[1, 3] = NAN
    x[2, 2] = NAN
    same(torch.median(x.to("spyre")), torch.median(x))  # NaN
    same(torch.nanmedian(x.to("spyre")), torch.nanmedian(x))  # ignores both
    allnan = torch.full((3,), NAN, dtype=dtype)
    same(torch.nanmedian(allnan.to("spyre")), torch.nanmedian(allnan))


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, 0.5, INF])
def test_cdist_direct(strict, p):
    g = torch.Generator().manual_seed(3)
    a = torch.randn(2, 5, 7, generator=g)
    b = torch.randn(2, 6, 7, generator=g)
    b[0, 1] = a[0, 1]  # a zero distance
    got = torch.cdist(a.to("spyre"), b.to("spyre"), p=p).cpu()
    torch.testing.assert_close(got, torch.cdist(a, b, p=p), rtol=2e-5, atol=2e-5)


def test_cdist_matrix_product_form_and_slices(strict):
    g = torch.Generator().manual_seed(4)
    a = torch.randn(40, 16, generator=g)
    b = torch.randn(30, 16, generator=g)
    for mode in ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                 "donot_use_mm_for_euclid_dist"):
        got = torch.cdist(a.to("spyre"), b.to("spyre"), compute_mode=mode).cpu()
        torch.testing.assert_close(got, torch.cdist(a, b, compute_mode=mode), rtol=1e-4,
                                   atol=1e-4)
    # rows enough that the direct form runs in slices of x1's rows
    a = torch.randn(600, 64, generator=g)
    b = torch.randn(500, 64, generator=g)
    got = torch.cdist(a.to("spyre"), b.to("spyre"), p=1.0).cpu()
    torch.testing.assert_close(got, torch.cdist(a, b, p=1.0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cross(strict, dtype):
    g = torch.Generator().manual_seed(5)
    a = torch.randn(4, 3, 5, generator=g).to(dtype)
    b = torch.randn(4, 3, 5, generator=g).to(dtype)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(torch.cross(a.to("spyre"), b.to("spyre"), dim=1).cpu(),
                               torch.cross(a, b, dim=1), **tol)
    c = torch.randn(1, 3, 5, generator=g).to(dtype)  # broadcast
    torch.testing.assert_close(torch.linalg.cross(a.to("spyre"), c.to("spyre"), dim=1).cpu(),
                               torch.linalg.cross(a, c, dim=1), **tol)
    v, w = torch.randn(3, generator=g), torch.randn(3, generator=g)
    torch.testing.assert_close(torch.linalg.cross(v.to("spyre"), w.to("spyre")).cpu(),
                               torch.linalg.cross(v, w))


def test_addbmm(strict):
    g = torch.Generator().manual_seed(6)
    b1 = torch.randn(5, 8, 16, generator=g)
    b2 = torch.randn(5, 16, 12, generator=g)
    s = torch.randn(8, 12, generator=g)
    for beta, alpha in ((1, 1), (0.5, 2.0), (0, 1)):
        got = torch.addbmm(s.to("spyre"), b1.to("spyre"), b2.to("spyre"), beta=beta,
                           alpha=alpha).cpu()
        torch.testing.assert_close(got, torch.addbmm(s, b1, b2, beta=beta, alpha=alpha),
                                   rtol=1e-4, atol=1e-4)
    # beta = 0 ignores NaN in self, as the CPU does
    nan_self = torch.full((8, 12), NAN)
    got = torch.addbmm(nan_self.to("spyre"), b1.to("spyre"), b2.to("spyre"), beta=0).cpu()
    assert not math.isnan(got.sum().item())
    # a broadcast self, and the in-place form
    row = torch.randn(12, generator=g)
    torch.testing.assert_close(torch.addbmm(row.to("spyre"), b1.to("spyre"), b2.to("spyre")).cpu(),
                               torch.addbmm(row, b1, b2), rtol=1e-4, atol=1e-4)
    t = s.to("spyre")
    t.addbmm_(b1.to("spyre"), b2.to("spyre"))
    torch.testing.assert_close(t.cpu(), s.addbmm(b1, b2), rtol=1e-4, atol=1e-4)

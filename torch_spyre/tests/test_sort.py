"""sort, argsort and topk on the card (spyre_op_sort) against the CPU with no fallback: fp32,
fp16 and bf16 along every dim (negative dims, moved last on the card), ascending and
descending, stable sorts bit for bit (values and indices), unstable sorts and topk by values and
valid indices (their order of ties is open), NaN largest, infinities and signed zeros, dims of
size 1, empty and 0-d tensors, transposed inputs and `out=`. Integer sorts run on the CPU
fallback."""

import pytest
import torch

import torch_spyre
from conftest import FLOATS, assert_same

SPECIALS = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0]


def data(shape, dtype, seed=0):
    """Many ties (quarter steps), NaN, infinities and signed zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-20, 21, shape, generator=g).float() / 4
    pick = torch.randint(0, 8, shape, generator=g)
    special = torch.tensor(SPECIALS)[torch.randint(0, len(SPECIALS), shape, generator=g)]
    return torch.where(pick == 0, special, x).to(dtype)


def same_values(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.shape, want.shape)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(), want.nan_to_num()), f"\n{got}\n!=\n{want}"


def valid_indices(x, dim, values, indices):
    """indices pick values out of x along dim, each position of a row at most once."""
    assert indices.dtype == torch.int64
    same_values(torch.gather(x, dim, indices), values)
    s = indices.sort(dim=dim).values
    if s.shape[dim] > 1:
        assert (s.diff(dim=dim) > 0).all()


@pytest.fixture
def no_fallback(fallback_reset):
    yield
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort(no_fallback, dtype, dim, descending):
    x = data((6, 33, 5), dtype, seed=dim + 7)
    got = torch.sort(x.to("spyre"), dim=dim, descending=descending, stable=True)
    want = torch.sort(x, dim=dim, descending=descending, stable=True)
    same_values(got.values.cpu(), want.values)
    assert_same(got.indices.cpu(), want.indices)


@pytest.mark.parametrize("dtype", FLOATS)
def test_unstable_sort_and_argsort(no_fallback, dtype):
    x = data((8, 33), dtype, seed=3)
    d = x.to("spyre")
    for dim, desc in [(1, False), (0, True), (-1, True)]:
        v, i = torch.sort(d, dim=dim, descending=desc)
        same_values(v.cpu(), torch.sort(x, dim=dim, descending=desc).values)
        valid_indices(x, dim, v.cpu(), i.cpu())
    # argsort (the census's sort_scan) and msort
    a = torch.argsort(d, dim=0).cpu()
    valid_indices(x, 0, torch.sort(x, dim=0).values, a)
    assert_same(torch.argsort(d, dim=1, stable=True).cpu(), torch.argsort(x, dim=1, stable=True))
    same_values(torch.msort(d).cpu(), torch.msort(x))


@pytest.mark.parametrize("dtype", FLOATS)
def test_topk(no_fallback, dtype):
    x = data((4, 96), dtype, seed=5)
    d = x.to("spyre")
    for k, dim, largest in [(5, -1, True), (7, 1, False), (2, 0, True), (96, 1, True),
                            (1, 1, False), (0, 1, True)]:
        v, i = torch.topk(d, k, dim=dim, largest=largest)
        same_values(v.cpu(), torch.topk(x, k, dim=dim, largest=largest).values)
        valid_indices(x, dim, v.cpu(), i.cpu())


def test_generate_top_k_sampling_step(no_fallback):
    logits = torch.randn(1, 96)
    v, i = torch.topk(logits.to("spyre"), 5, dim=-1)
    assert_same(v.cpu(), torch.topk(logits, 5, dim=-1).values)
    assert_same(i.cpu(), torch.topk(logits, 5, dim=-1).indices)  # distinct values: one answer


def test_edge_shapes_and_layouts(no_fallback):
    for shape, dim in [((0, 4), 1), ((3, 0), 1), ((4, 1), 1), ((1, 4), 0), ((5,), 0)]:
        x = data(shape, torch.float32, seed=1)
        got = torch.sort(x.to("spyre"), dim=dim, stable=True)
        want = torch.sort(x, dim=dim, stable=True)
        same_values(got.values.cpu(), want.values)
        assert_same(got.indices.cpu(), want.indices)
    z = torch.tensor(2.5)
    got = torch.sort(z.to("spyre"))
    assert_same(got.values.cpu(), torch.sort(z).values)
    assert_same(got.indices.cpu(), torch.sort(z).indices)
    x = data((5, 9, 4), torch.float16, seed=2)
    d = x.to("spyre")
    got = torch.sort(d.transpose(0, 2), dim=1, stable=True)
    want = torch.sort(x.transpose(0, 2), dim=1, stable=True)
    same_values(got.values.cpu(), want.values)
    assert_same(got.indices.cpu(), want.indices)
    v, i = torch.empty(0, device="spyre", dtype=torch.float16), torch.empty(
        0, device="spyre", dtype=torch.int64)
    torch.sort(d, dim=-1, descending=True, stable=True, out=(v, i))
    want = torch.sort(x, dim=-1, descending=True, stable=True)
    same_values(v.cpu(), want.values)
    assert_same(i.cpu(), want.indices)


def test_integer_sort_falls_back(fallback_reset):
    x = torch.randint(-50, 50, (4, 9))
    got = torch.sort(x.to("spyre"), stable=True)
    assert_same(got.values.cpu(), torch.sort(x, stable=True).values)
    assert torch_spyre.fallback_counts() == {"aten::sort.values_stable": 1}

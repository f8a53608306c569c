"""sort, argsort and topk on the card (spyre_op_sort) against the CPU with no fallback: fp32,
fp16 and bf16 along every dim (negative dims, moved last on the card), ascending and
descending, stable sorts bit for bit (values and indices), unstable sorts and topk by values and
valid indices (their order of ties is open), NaN largest, infinities and signed zeros, dims of
size 1, empty and 0-d tensors, transposed inputs and `out=`. Integer keys (int64, int32, int8,
uint8) and bool keys through the radix of float sorts, bit-exact; rows longer than one sort
program takes (blocks); `torch.unique`."""

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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_longer_than_one_sort_program(no_fallback, dtype):
    """Rows past the library's ~32768 elements (a vocabulary's logits: top-p sorts them, top-k
    picks from them) sort in blocks on the card: stable sorts bit for bit, with ties, NaN and
    infinities (a merge-split over 8192-element blocks, the last one padded), top-k from the
    blocks' candidates; along dim 0 too (moved last)."""
    x = data((2, 40001), dtype, seed=11)
    d = x.to("spyre")
    for descending in (True, False):
        got = torch.sort(d, dim=-1, descending=descending, stable=True)
        want = torch.sort(x, dim=-1, descending=descending, stable=True)
        same_values(got.values.cpu(), want.values)
        assert_same(got.indices.cpu(), want.indices)
        v, i = torch.topk(d, 50, dim=-1, largest=descending)
        same_values(v.cpu(), torch.topk(x, 50, dim=-1, largest=descending).values)
        valid_indices(x, -1, v.cpu(), i.cpu())
    col = x[0].unsqueeze(1)  # [40001, 1], sorted along dim 0
    assert_same(torch.argsort(col.to("spyre"), dim=0, stable=True).cpu(),
                torch.argsort(col, dim=0, stable=True))


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


INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]


def int_data(shape, dtype, seed=0):
    """Many ties and the type's extremes (int64: beyond 2^53, where a float key would tie)."""
    g = torch.Generator().manual_seed(seed)
    info = torch.iinfo(dtype)
    x = torch.randint(-6, 7, shape, generator=g) if info.min < 0 else torch.randint(0, 9, shape,
                                                                                   generator=g)
    x = x.to(dtype)
    big = torch.tensor([info.min, info.max, info.max - 1, info.min + 1]).to(dtype)
    pick = torch.randint(0, 6, shape, generator=g)
    return torch.where(pick < 4, big[pick.clamp(max=3)], x)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_integer_stable_sort(no_fallback, dtype, dim, descending):
    """An LSD radix of stable float sorts: bit-exact values and indices (the stable order)."""
    x = int_data((7, 37), dtype, seed=5)
    got = torch.sort(x.to("spyre"), dim=dim, descending=descending, stable=True)
    want = torch.sort(x, dim=dim, descending=descending, stable=True)
    assert_same(got.values.cpu(), want.values)
    assert_same(got.indices.cpu(), want.indices)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_argsort_topk_and_strided(no_fallback, dtype):
    x = int_data((6, 40), dtype, seed=6)
    d = x.to("spyre")
    assert_same(torch.argsort(d, dim=1, stable=True).cpu(), torch.argsort(x, dim=1, stable=True))
    v, i = torch.topk(d, 5, dim=1)
    valid_indices(x, 1, v.cpu(), i.cpu())
    same_values(v.cpu(), torch.topk(x, 5, dim=1).values)
    got = torch.sort(d.t(), dim=1, stable=True)  # a transposed input
    want = torch.sort(x.t(), dim=1, stable=True)
    assert_same(got.values.cpu(), want.values)
    assert_same(got.indices.cpu(), want.indices)
    e = torch.sort(torch.zeros(0, 3, dtype=dtype, device="spyre"), dim=0)
    assert e.values.shape == (0, 3)


@pytest.mark.parametrize("descending", [False, True])
def test_bool_sort_on_the_card(no_fallback, descending):
    """bool keys as 0/1 (one float digit): the stable order bit for bit, along either dim, and
    argsort; topk of bool is torch's error, as on the CPU."""
    x = torch.rand(6, 33, generator=torch.Generator().manual_seed(8)) > 0.5
    d = x.to("spyre")
    for dim in (0, -1):
        got = torch.sort(d, dim=dim, descending=descending, stable=True)
        want = torch.sort(x, dim=dim, descending=descending, stable=True)
        assert_same(got.values.cpu(), want.values)
        assert_same(got.indices.cpu(), want.indices)
    assert_same(torch.argsort(d, dim=1, descending=descending, stable=True).cpu(),
                torch.argsort(x, dim=1, descending=descending, stable=True))
    assert torch_spyre.fallback_counts() == {}
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        torch.topk(d, 4, dim=1, largest=descending)
    torch_spyre.reset_fallback_counts()  # the CPU's error came through its fallback


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32])
def test_unique(no_fallback, dtype):
    """torch.unique(sorted, return_inverse, return_counts) of the flattened input (one host read
    of the number of values, as on CUDA); NaN each its own value."""
    x = int_data((5, 13), dtype, seed=7) if not dtype.is_floating_point else data((5, 13), dtype)
    got = torch.unique(x.to("spyre"), sorted=True, return_inverse=True, return_counts=True)
    want = torch.unique(x, sorted=True, return_inverse=True, return_counts=True)
    same_values(got[0].cpu(), want[0])
    assert_same(got[1].cpu(), want[1])
    assert_same(got[2].cpu(), want[2])
    same_values(torch.unique(x.to("spyre").t()).cpu(), torch.unique(x.t()))
    e = torch.unique(torch.zeros(0, dtype=dtype, device="spyre"), return_counts=True)
    assert e[0].shape == (0,) and e[1].shape == (0,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32,
                                   torch.int8, torch.uint8])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_dim(no_fallback, dtype, dim):
    """torch.unique(dim=): slices sorted lexicographically, duplicates (and rows equal but for
    their last element) among them, inverse and counts, along every dim of a 3-D tensor."""
    g = torch.Generator().manual_seed(11)
    x = torch.randint(0, 3, (6, 4, 3), generator=g).to(dtype)
    x[4] = x[1]  # a repeated slice along dim 0
    x[:, 3] = x[:, 0]  # ... along dim 1
    got = torch.unique(x.to("spyre"), dim=dim, return_inverse=True, return_counts=True)
    want = torch.unique(x, dim=dim, return_inverse=True, return_counts=True)
    for a, b in zip(got, want):
        assert_same(a.cpu(), b)
    # a transposed input, and the values alone
    assert_same(torch.unique(x.to("spyre").transpose(0, 2), dim=1).cpu(),
                torch.unique(x.transpose(0, 2), dim=1))


def test_unique_dim_long_rows_fall_back(fallback_reset):
    """A slice of more than 256 elements takes the CPU (one stable sort per element): right
    answers, one fallback counted."""
    x = torch.randint(0, 2, (5, 300), generator=torch.Generator().manual_seed(12))
    assert_same(torch.unique(x.to("spyre"), dim=0).cpu(), torch.unique(x, dim=0))
    assert torch_spyre.fallback_counts() == {"aten::unique_dim": 1}

"""Gathers and scatters by index tensors on the card against the CPU, with no fallback:
torch.gather, index_select along every dim, advanced indexing by one index tensor (negative
indices), scatter_add with duplicate indices, index_copy_ (a KV cache update), the embedding
backward with padding_idx, nn.Embedding's max_norm (embedding_renorm_); every data dtype, int64
indices (int32 where torch takes them), odd shapes, strided
views; an index out of range fails the launch and the card keeps working."""

import pytest
import torch

import torch_spyre
from conftest import FLOATS, assert_same, close, make

DTYPES = FLOATS + [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool]


def rand_index(shape, bound, seed, dtype=torch.int64, negative=False):
    g = torch.Generator().manual_seed(seed)
    lo = -bound if negative else 0
    return torch.randint(lo, bound, shape, generator=g).to(dtype)


def data(shape, dtype, seed=0):
    """make() with the narrow integer types drawn from their own range."""
    if dtype in (torch.int32, torch.int8, torch.uint8):
        info = torch.iinfo(dtype)
        g = torch.Generator().manual_seed(seed)
        return torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(dtype)
    return make(shape, dtype, seed)


def exact_floats(shape, dtype, seed):
    """Small integers (any sum is exact, so the order of additions does not matter)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-8, 9, shape, generator=g).to(dtype)


@pytest.fixture
def no_fallback(fallback_reset):
    yield
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_gather(no_fallback, dtype, dim):
    x = data((3, 7, 5), dtype)
    shape = [3, 7, 5]
    shape[dim] = 9
    idx = rand_index(shape, x.shape[dim], seed=dim + 5)  # torch.gather takes int64 only
    got = torch.gather(x.to("spyre"), dim, idx.to("spyre"))
    assert_same(got.cpu(), torch.gather(x, dim, idx))


def test_gather_index_smaller_than_input(no_fallback):
    x = make((4, 9, 6), torch.float32)
    idx = rand_index((2, 5, 3), 9, seed=1)
    assert_same(torch.gather(x.to("spyre"), 1, idx.to("spyre")).cpu(), torch.gather(x, 1, idx))
    # a strided (transposed) input
    xt = x.transpose(0, 2)
    idx = rand_index((6, 9, 2), 4, seed=2)
    assert_same(torch.gather(xt.to("spyre"), 2, idx.to("spyre")).cpu(),
                torch.gather(xt, 2, idx))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, 2, -2])
def test_index_select(no_fallback, dtype, dim):
    x = data((5, 6, 7), dtype)
    idx = rand_index((11,), x.shape[dim], seed=3)
    for itype in (torch.int64, torch.int32):
        got = torch.index_select(x.to("spyre"), dim, idx.to(itype).to("spyre"))
        assert_same(got.cpu(), torch.index_select(x, dim, idx))
    # a 0-dim index and an empty one
    i0 = torch.tensor(2)
    assert_same(torch.index_select(x.to("spyre"), dim, i0.to("spyre")).cpu(),
                torch.index_select(x, dim, i0))
    ie = torch.zeros(0, dtype=torch.int64)
    assert_same(torch.index_select(x.to("spyre"), dim, ie.to("spyre")).cpu(),
                torch.index_select(x, dim, ie))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_advanced_index(no_fallback, dtype):
    x = make((4, 6, 5), dtype)
    xs = x.to("spyre")
    idx = rand_index((3, 2), 6, seed=4, negative=True)
    assert_same(xs[:, idx.to("spyre")].cpu(), x[:, idx])
    i0 = rand_index((7,), 4, seed=5, negative=True)
    assert_same(xs[i0.to("spyre")].cpu(), x[i0])
    i2 = rand_index((2, 3), 5, seed=6, negative=True).to(torch.int32)
    assert_same(xs[..., i2.to("spyre")].cpu(), x[..., i2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_add_duplicates(no_fallback, dtype, dim):
    base = exact_floats((5, 8), dtype, seed=7)
    src = exact_floats((6, 8) if dim == 0 else (5, 13), dtype, seed=8)
    idx = rand_index(src.shape, base.shape[dim], seed=9)  # many duplicates
    got = base.to("spyre").scatter_add(dim, idx.to("spyre"), src.to("spyre"))
    assert_same(got.cpu(), base.scatter_add(dim, idx, src))
    # in place, with an index covering only part of src
    b = base.to("spyre")
    part = idx[:4] if dim == 0 else idx[:, :7]  # shorter along dim or along src's last dim
    b.scatter_add_(dim, part.to("spyre"), src.to("spyre"))
    assert_same(b.cpu(), base.clone().scatter_add_(dim, part, src))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_scatter_and_scatter_add_of_an_index_covering_a_corner(no_fallback, dtype, dim):
    # index smaller than self in a dim other than `dim`: only that corner of self is written
    # (OpInfo's scatter_add samples: index [5, 5] into [10, 5] along dim 1); it fell back
    base = exact_floats((9, 10, 8), dtype, seed=3)
    shape = [6, 7, 5]
    shape[dim] = 11
    src = exact_floats(tuple(shape), dtype, seed=4)
    idx = rand_index(tuple(shape), base.shape[dim], seed=5)  # duplicates
    got = base.to("spyre").scatter_add(dim, idx.to("spyre"), src.to("spyre"))
    assert_same(got.cpu(), base.scatter_add(dim, idx, src))
    b = base.to("spyre")
    b.scatter_add_(dim, idx.to("spyre"), src.to("spyre"))
    assert_same(b.cpu(), base.clone().scatter_add_(dim, idx, src))
    # scatter without accumulation: distinct positions along dim
    shape[dim] = 3
    perm = torch.zeros(tuple(shape), dtype=torch.long)
    flat = perm.movedim(dim, -1).reshape(-1, 3)
    for r in range(flat.shape[0]):
        flat[r] = torch.randperm(base.shape[dim], generator=torch.Generator().manual_seed(r))[:3]
    perm = flat.reshape(perm.movedim(dim, -1).shape).movedim(-1, dim).contiguous()
    got = base.to("spyre").scatter(dim, perm.to("spyre"), src.to("spyre"))
    assert_same(got.cpu(), base.scatter(dim, perm, src))


def test_scatter_add_fp32_accumulates_in_index_order(no_fallback):
    # duplicates onto one element: the sum in ascending index order, as the CPU does
    base = torch.zeros(3)
    src = torch.tensor([1e8, 1.0, -1e8, 1.0, 0.5, 3.0])
    idx = torch.tensor([1, 1, 1, 1, 0, 2])
    got = base.to("spyre").scatter_add(0, idx.to("spyre"), src.to("spyre"))
    assert_same(got.cpu(), base.scatter_add(0, idx, src))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_several_index_tensors_in_a_read(strict, dtype):
    """x[i, j] and x[:, i, j] with integer index tensors on adjacent dims (broadcast shapes,
    negative positions): one flat index over those dims on the card (MoE routing's
    w[tok, slot])."""
    x = make((5, 6, 7), torch.float32).to(dtype) if dtype != torch.int64 else \
        torch.arange(210).view(5, 6, 7)
    i = torch.tensor([[0, 4], [-1, 2]])
    j = torch.tensor([5, -6])
    d = x.to("spyre")
    assert_same(d[i.to("spyre"), j.to("spyre")].cpu(), x[i, j])
    assert_same(d[:, i.to("spyre"), j.to("spyre")].cpu(), x[:, i, j])
    a, b, c = torch.tensor([4]), torch.tensor([[1], [-2]]), torch.tensor([6, 0, 3])
    assert_same(d[a.to("spyre"), b.to("spyre"), c.to("spyre")].cpu(), x[a, b, c])
    tok, slot = torch.where(torch.tensor([[True, False], [False, True], [True, True]]))
    w = torch.randn(3, 2)
    assert_same(w.to("spyre")[tok.to("spyre"), slot.to("spyre"), None].cpu(), w[tok, slot, None])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_src_and_value(strict, dtype, dim):
    """scatter with a src tensor (an index covering part of src) and with a number (F.one_hot),
    functional, in place, out=; each target once (torch leaves the order of repeats open)."""
    base = make((6, 9), torch.float32).to(dtype) if dtype != torch.bool else \
        make((6, 9), torch.float32) > 0
    src = make((6, 9), torch.float32, seed=2).to(dtype) if dtype != torch.bool else \
        make((6, 9), torch.float32, seed=2) > 0
    n = base.shape[dim]
    g = torch.Generator().manual_seed(7)
    perm = torch.stack([torch.randperm(n, generator=g) for _ in range(base.shape[1 - dim % 2])])
    idx = perm if dim % 2 == 1 else perm.t()  # a permutation along dim: no repeated target
    idx = idx.narrow(dim, 0, n - 2).contiguous()
    d = dict(base=base.to("spyre"), idx=idx.to("spyre"), src=src.to("spyre"))
    assert_same(d["base"].scatter(dim, d["idx"], d["src"]).cpu(), base.scatter(dim, idx, src))
    value = True if dtype == torch.bool else 3
    assert_same(d["base"].scatter(dim, d["idx"], value).cpu(), base.scatter(dim, idx, value))
    b = d["base"].clone()
    b.scatter_(dim, d["idx"], d["src"])
    assert_same(b.cpu(), base.clone().scatter_(dim, idx, src))
    out = torch.empty(0, dtype=dtype, device="spyre")
    torch.scatter(d["base"], dim, d["idx"], d["src"], out=out)
    assert_same(out.cpu(), base.scatter(dim, idx, src))
    if dtype == torch.int64:
        labels = torch.tensor([3, 0, 4, 4, 1])
        assert_same(torch.nn.functional.one_hot(labels.to("spyre"), 6).cpu(),
                    torch.nn.functional.one_hot(labels, 6))


def test_large_dim0_gather_and_scatter_add(no_fallback):
    """Index tensors and rows larger than a core's scratchpad (a [20001, 16] int64 index is
    2.56 MB) pass in tiles on the card: gather along dim 0 (the int64 gather scatter_reduce
    amax makes of its index, too) and scatter_add along dim 0 with duplicates."""
    x = make((20001, 16), torch.float32)
    idx = torch.randint(0, 20001, (20001, 16), generator=torch.Generator().manual_seed(3))
    dx, di = x.to("spyre"), idx.to("spyre")
    assert_same(torch.gather(dx, 0, di).cpu(), torch.gather(x, 0, idx))
    assert_same(torch.gather(di, 0, di).cpu(), torch.gather(idx, 0, idx))
    want = torch.zeros(20001, 16).scatter_add_(0, idx, x)
    assert_same(torch.zeros(20001, 16).to("spyre").scatter_add_(0, di, dx).cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_index_copy_kv_cache(no_fallback, dtype):
    cache = torch.zeros(2, 3, 16, 8, dtype=dtype)
    new = make((2, 3, 4, 8), dtype)
    pos = torch.tensor([5, 6, 7, 15])
    c = cache.to("spyre")
    c.index_copy_(2, pos.to("spyre"), new.to("spyre"))
    assert_same(c.cpu(), cache.clone().index_copy_(2, pos, new))
    # along the last dim and dim 0, out of place
    x = make((4, 9), dtype)
    s = make((4, 3), dtype, seed=3)
    p = torch.tensor([8, 0, 4])
    assert_same(x.to("spyre").index_copy(1, p.to("spyre"), s.to("spyre")).cpu(),
                x.index_copy(1, p, s))
    s0 = make((2, 9), dtype, seed=4)
    p0 = torch.tensor([3, 1])
    assert_same(x.to("spyre").index_copy(0, p0.to("spyre"), s0.to("spyre")).cpu(),
                x.index_copy(0, p0, s0))


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_backward(no_fallback, padding_idx):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(20, 24, padding_idx=padding_idx)
    idx = rand_index((3, 7), 20, seed=10)
    idx[0, :3] = 3  # repeated, and the padding row
    g = exact_floats((3, 7, 24), torch.float32, seed=11)
    out = emb(idx)
    out.backward(g)
    emb_s = torch.nn.Embedding(20, 24, padding_idx=padding_idx).to("spyre")
    with torch.no_grad():
        emb_s.weight.copy_(emb.weight.to("spyre"))
    out_s = emb_s(idx.to("spyre"))
    assert_same(out_s.detach().cpu(), out.detach())
    out_s.backward(g.to("spyre"))
    assert_same(emb_s.weight.grad.cpu(), emb.weight.grad)


def test_index_out_of_range_fails_the_launch():
    x = make((7, 5), torch.float32).to("spyre")
    cases = [
        lambda: torch.index_select(x, 0, torch.tensor([0, 7, 2]).to("spyre")),
        lambda: torch.index_select(x, 1, torch.tensor([-1]).to("spyre")),  # no negatives here
        lambda: torch.gather(x, 1, torch.full((2, 5), 5).to("spyre")),
        lambda: x.scatter_add(0, torch.full((1, 5), 9).to("spyre"), x[:1]),
        lambda: x.index_copy(1, torch.tensor([5]).to("spyre"), x[:, :1]),
        lambda: x[torch.tensor([-8]).to("spyre")],  # advanced indexing: [-7, 7) is valid
    ]
    for f in cases:
        with pytest.raises(RuntimeError, match="division by zero"):
            f()
            torch.spyre.synchronize()
    # the card works afterwards
    assert_same(x[torch.tensor([-7]).to("spyre")].cpu(), x.cpu()[torch.tensor([-7])])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_forward_backward(no_fallback, reduction, weighted):
    logp = torch.log_softmax(make((6, 11), torch.float32), dim=1)
    target = rand_index((6,), 11, seed=12)
    target[2] = -100  # ignore_index
    w = make((11,), torch.float32, seed=13).abs() + 0.5 if weighted else None
    x = logp.clone().requires_grad_()
    ref = torch.nn.functional.nll_loss(x, target, weight=w, reduction=reduction)
    xs = logp.to("spyre").requires_grad_()
    got = torch.nn.functional.nll_loss(xs, target.to("spyre"),
                                       weight=None if w is None else w.to("spyre"),
                                       reduction=reduction)
    torch.testing.assert_close(got.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-6)
    g = make(ref.shape, torch.float32, seed=14)
    ref.backward(g)
    got.backward(g.to("spyre"))
    torch.testing.assert_close(xs.grad.cpu(), x.grad, rtol=1e-5, atol=1e-6)


def test_nll_loss_one_sample_and_ignore_only(no_fallback):
    logp = torch.log_softmax(make((7,), torch.float32), dim=0)
    t = torch.tensor(4)
    assert_same(torch.nn.functional.nll_loss(logp.to("spyre"), t.to("spyre")).cpu(),
                torch.nn.functional.nll_loss(logp, t))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_reads_from_a_vector_larger_than_the_scratchpad(no_fallback, dtype):
    """index_select, gather and x[idx] of a 1-D table of 4 MiB and more (the index programs keep
    a table's slab in a core's 2 MiB): each element read from its 128-byte row."""
    n = 1 << 21
    x = make((n,), dtype)
    g = torch.Generator().manual_seed(6)
    idx = torch.randint(0, n, (300,), generator=g)
    idx[0], idx[1] = 0, n - 1
    d, di = x.to("spyre"), idx.to("spyre")
    assert_same(d.index_select(0, di).cpu(), x.index_select(0, idx))
    assert_same(d.gather(0, di).cpu(), x.gather(0, idx))
    neg = idx - n  # x[idx] wraps negative indices
    assert_same(d[neg.to("spyre")].cpu(), x[neg])
    assert_same(d[di.view(3, 100)].cpu(), x[idx.view(3, 100)])


@pytest.mark.parametrize("n", [(1 << 17) + 3, (1 << 22) + 1000])
def test_flip_and_index_select_of_long_dims(no_fallback, n):
    """A flipped dim past 2^16 is reversed in blocks of 4096 (padded; one index_select of n
    positions left the index program's reach past 2^20), and index_select along a later dim
    whose spread index is too large for one gather runs in chunks of the leading dim."""
    x = make((n,), torch.float32)
    d = x.to("spyre")
    assert_same(d.flip(0).cpu(), x.flip(0))
    m = make((3, n // 64, 2), torch.float16)
    assert_same(m.to("spyre").flip(1).cpu(), m.flip(1))
    t = make((300, 4096), torch.float32)
    r = torch.randperm(4096, generator=torch.Generator().manual_seed(2))[:4000]
    assert_same(t.to("spyre").index_select(1, r.to("spyre")).cpu(), t.index_select(1, r))


@pytest.mark.parametrize("n", [(1 << 20) + 64, (1 << 19) + 7])
def test_scatters_into_a_vector_larger_than_the_scratchpad(no_fallback, n):
    """scatter_add, index_add, index_put_ (set and accumulate, negative positions) and scatter
    into a 1-D table past the scratchpad: the touched 128-byte rows gathered, written and copied
    back (a length off a whole row through a padded copy); repeated targets add in order of
    position (fp32 bit for bit the CPU's) or keep the last write; a position past the end
    raises."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(n, generator=g)
    idx = torch.cat([torch.randint(0, n, (9000,), generator=g), torch.randint(0, 50, (400,), generator=g),
                     torch.tensor([n - 1, 0, n - 1])])
    v = torch.randn(idx.numel(), generator=g)
    d, di, dv = x.to("spyre"), idx.to("spyre"), v.to("spyre")
    assert_same(d.scatter_add(0, di, dv).cpu(), x.scatter_add(0, idx, v))
    assert_same(d.index_add(0, di, dv, alpha=2).cpu(), x.index_add(0, idx, v, alpha=2))
    assert_same(d.clone().index_put_((di,), dv, accumulate=True).cpu(),
                x.clone().index_put_((idx,), v, accumulate=True))
    uniq = torch.randperm(n, generator=g)[:3000] - n // 2  # negative ones count from the end
    u = torch.randn(3000, generator=g)
    assert_same(d.clone().index_put_((uniq.to("spyre"),), u.to("spyre")).cpu(),
                x.clone().index_put_((uniq,), u))
    rep = torch.tensor([5, 9, 5, 5, n - 2])  # the CPU's loop: the last write of 5 wins
    assert_same(d.scatter(0, rep.to("spyre"), dv[:5]).cpu(), x.scatter(0, rep, v[:5]))
    with pytest.raises(RuntimeError):
        d.clone().index_add_(0, torch.tensor([3, n]).to("spyre"), dv[:2])
        torch.spyre.synchronize()


def test_one_row_writes_into_a_large_kv_cache(no_fallback):
    """index_copy_ / index_put_ of one position along the sequence dim of a KV cache past
    1 MiB: the rows copied by DMA (the scatter program read and wrote every head's slab: 82.5
    us modeled at 4096 positions, and a cache past the scratchpad fell back to the CPU);
    negative positions of index_put_ wrap, out-of-range ones stop the job."""
    g = torch.Generator().manual_seed(13)
    cache = torch.randn(1, 4, 8192, 128, generator=g).half()
    d = cache.to("spyre")
    for p in (0, 77, 8191):
        k = torch.randn(1, 4, 1, 128, generator=g).half()
        pos = torch.tensor([p])
        d.index_copy_(2, pos.to("spyre"), k.to("spyre"))
        cache.index_copy_(2, pos, k)
    v = torch.randn(1, 4, 2, 128, generator=g).half()
    two = torch.tensor([-3, 100])
    d[:, :, two.to("spyre")] = v.to("spyre")
    cache[:, :, two] = v
    assert_same(d.cpu(), cache)
    with pytest.raises(RuntimeError, match="program fault"):
        d.index_copy_(2, torch.tensor([8192]).to("spyre"), v[:, :, :1].to("spyre"))
        torch.spyre.synchronize()


def test_scatter_of_more_positions_than_one_program(no_fallback):
    """histc / bincount of millions of inputs: their index_add runs in chunks of 2^20 positions
    in order (fp32 sums of repeated targets in order of position, as the CPU's)."""
    m = (1 << 21) + 5
    g = torch.Generator().manual_seed(12)
    idx = torch.randint(0, 300, (m,), generator=g)
    v = torch.randn(m, generator=g)
    t = torch.zeros(300)
    assert_same(t.to("spyre").index_add(0, idx.to("spyre"), v.to("spyre")).cpu(),
                t.index_add(0, idx, v))
    assert_same(idx.to("spyre").bincount(minlength=301).cpu(), idx.bincount(minlength=301))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_index_add_and_embedding_backward_into_a_table_larger_than_the_scratchpad(no_fallback,
                                                                                   dtype):
    """index_add along dim 0 and the embedding gradient of a table too large for the scatter
    program (a real vocabulary): the distinct rows gathered, each index's rows added in order
    of position and written back by row copies (fp32 bit for bit the CPU's sums; fp16 as the
    card's index_add of a small table, within fp16 rounding of the CPU)."""
    V, D = 20000, 64
    g = torch.Generator().manual_seed(8)
    table = torch.randn(V, D, generator=g).to(dtype)
    idx = torch.cat([torch.randint(0, 40, (150,), generator=g),
                     torch.randint(0, V, (50,), generator=g), torch.tensor([V - 1, 0, V - 1])])
    src = torch.randn(idx.numel(), D, generator=g).to(dtype)
    got = table.to("spyre").index_add_(0, idx.to("spyre"), src.to("spyre"))
    if dtype == torch.float32:
        assert_same(got.cpu(), table.index_add(0, idx, src))
    else:
        close(got.cpu(), table.float().index_add(0, idx, src.float()).to(dtype), dtype, scale=8)
    emb = torch.nn.Embedding(V, D, padding_idx=3).to(dtype)
    dev = torch.nn.Embedding(V, D, padding_idx=3).to(dtype).to("spyre")
    dev.load_state_dict(emb.state_dict())
    tokens = torch.cat([idx, torch.tensor([3, 3])]).view(5, -1)
    grad = torch.randn(5, tokens.size(1), D, generator=g).to(dtype)
    emb(tokens).backward(grad)
    dev(tokens.to("spyre")).backward(grad.to("spyre"))
    if dtype == torch.float32:
        assert_same(dev.weight.grad.cpu(), emb.weight.grad)
    else:
        close(dev.weight.grad.cpu(), emb.weight.grad, dtype, scale=4)


@pytest.mark.parametrize("norm_type", [2.0, 1.0])
@pytest.mark.parametrize("max_norm", [0.5, 1.0, 100.0])
def test_embedding_max_norm_renormalizes_on_the_card(no_fallback, norm_type, max_norm):
    # embedding_renorm_: each named row (repeated ones once) rescaled where its norm exceeds
    # max_norm, the others untouched
    def run(dev):
        torch.manual_seed(0)
        e = torch.nn.Embedding(10, 4, max_norm=max_norm, norm_type=norm_type).to(dev)
        out = e(torch.tensor([[1, 2, 1], [7, 3, 9]]).to(dev))
        out.sum().backward()
        return [out.detach(), e.weight.detach(), e.weight.grad, e(torch.tensor([0, 5]).to(dev))]

    for got, want in zip(run("spyre"), run("cpu")):
        close(got.detach().cpu(), want.detach(), torch.float32)

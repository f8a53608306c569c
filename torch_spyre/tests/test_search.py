"""searchsorted (1-D and batched boundaries, left/right/side, sorter, out_int32, out=),
bucketize and repeat_interleave with a repeats tensor on the card under strict mode, bit for bit
with the CPU (ties on the boundaries, values outside them, NaN, integers); the CPU's errors
stay."""

import pytest
import torch


NAN = float("nan")


def same(got, want):
    assert got.device.type == "cpu" and got.dtype == want.dtype and torch.equal(got, want), (
        got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32])
def test_searchsorted_and_bucketize(strict, dtype):
    g = torch.Generator().manual_seed(0)
    b = torch.tensor([-3, -1, 0, 0, 2, 5, 9]).to(dtype)
    v = torch.cat([torch.randint(-6, 12, (40,), generator=g), torch.tensor([-1, 0, 5, 9])])
    v = v.to(dtype)
    if dtype.is_floating_point:
        v = torch.cat([v, torch.tensor([NAN, 0.5, -7.5], dtype=dtype)])
    for kw in [{}, {"right": True}, {"side": "right"}, {"side": "left"}, {"out_int32": True}]:
        same(torch.searchsorted(b.to("spyre"), v.to("spyre"), **kw).cpu(),
             torch.searchsorted(b, v, **kw))
    v2 = v[:40].reshape(5, 8)
    for right in (False, True):
        same(torch.bucketize(v2.to("spyre"), b.to("spyre"), right=right).cpu(),
             torch.bucketize(v2, b, right=right))
    # batched boundaries, and a sorter for unsorted ones
    bb = torch.sort(torch.randint(-5, 5, (3, 6), generator=g).to(dtype), dim=-1).values
    vv = torch.randint(-6, 6, (3, 4), generator=g).to(dtype)
    same(torch.searchsorted(bb.to("spyre"), vv.to("spyre")).cpu(), torch.searchsorted(bb, vv))
    u = torch.randperm(7, generator=g)
    unsorted, sorter = b[u], torch.argsort(b[u], stable=True)
    same(torch.searchsorted(unsorted.to("spyre"), v.to("spyre"), sorter=sorter.to("spyre")).cpu(),
         torch.searchsorted(unsorted, v, sorter=sorter))
    out = torch.empty(0, dtype=torch.long, device="spyre")
    torch.searchsorted(b.to("spyre"), v.to("spyre"), out=out)
    same(out.cpu(), torch.searchsorted(b, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_large_searches_are_a_binary_search_on_the_card(strict, dtype):
    """Beyond 2^24 compares the card runs a binary search (each boundary fetched from its
    128-byte row): 1-D boundaries of 4.8M elements (more than a core's scratchpad), batched
    boundaries with a sorter, NaN boundaries and values, both sides, out_int32."""
    g = torch.Generator().manual_seed(5)
    if dtype == torch.int64:
        b = torch.arange(0, 2**25, 7)
        v = torch.randint(-5, 2**25 + 10, (1000,), generator=g)
    else:
        b = torch.sort(torch.randn(300001, generator=g)).values
        b[-3:] = NAN
        v = torch.cat([torch.randn(100, generator=g), torch.tensor([NAN, float("inf"),
                                                                    -float("inf")]), b[:60]])
    db, dv = b.to("spyre"), v.to("spyre")
    for right in (False, True):
        same(torch.searchsorted(db, dv, right=right).cpu(), torch.searchsorted(b, v, right=right))
    same(torch.searchsorted(db, dv, out_int32=True).cpu(), torch.searchsorted(b, v, out_int32=True))
    same(torch.bucketize(dv, db, right=True).cpu(), torch.bucketize(v, b, right=True))
    u = torch.randn(3, 70001, generator=g).to(dtype) if dtype.is_floating_point else \
        torch.randint(-1000, 1000, (3, 70001), generator=g)
    q = u[:, :100].clone()
    order = torch.argsort(u, dim=-1)
    same(torch.searchsorted(u.to("spyre"), q.to("spyre"), sorter=order.to("spyre")).cpu(),
         torch.searchsorted(u, q, sorter=order))
    s = torch.sort(u, dim=-1).values
    same(torch.searchsorted(s.to("spyre"), q.to("spyre"), side="right").cpu(),
         torch.searchsorted(s, q, side="right"))


def test_repeat_interleave(strict):
    for reps in ([2, 1, 3], [0, 4, 0, 1], [5], [1, 1, 1, 1]):
        r = torch.tensor(reps)
        same(torch.repeat_interleave(r.to("spyre")).cpu(), torch.repeat_interleave(r))
        same(torch.repeat_interleave(r.int().to("spyre")).cpu(), torch.repeat_interleave(r.int()))
    r = torch.tensor([2, 0, 3])
    same(torch.repeat_interleave(r.to("spyre"), output_size=5).cpu(),
         torch.repeat_interleave(r, output_size=5))
    x = torch.arange(12.0).reshape(3, 4)  # x.repeat_interleave(repeats tensor, dim)
    same(x.to("spyre").repeat_interleave(r.to("spyre"), dim=0).cpu(),
         x.repeat_interleave(r, dim=0))


def test_errors_stay_the_cpus(fallback_reset):
    with pytest.raises(RuntimeError, match="negative"):
        torch.repeat_interleave(torch.tensor([1, -1], device="spyre"))
    with pytest.raises(RuntimeError):
        torch.searchsorted(torch.tensor([1.0, 2.0], device="spyre"),
                           torch.tensor([1.0], device="spyre"), right=True, side="left")

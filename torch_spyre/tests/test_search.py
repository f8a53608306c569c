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

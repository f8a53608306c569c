"""Masks of torch's math attention on the card: where with out= (its _safe_softmax) and
isposinf / isneginf, against the CPU, with no fallback; and the math attention path with a
boolean mask whose head rows are too short for the fused kernel."""

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import FLOATS, assert_same, close, make


@pytest.mark.parametrize("dtype", FLOATS)
def test_where_out(fallback_reset, dtype):
    x, y = make((5, 12), dtype), make((1, 12), dtype, seed=1)
    cond = make((5, 12), torch.float32, seed=2) > 0
    out = torch.empty(0, dtype=dtype, device="spyre")
    torch.where(cond.to("spyre"), x.to("spyre"), y.to("spyre"), out=out)
    assert_same(out.cpu(), torch.where(cond, x, y))
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.bool])
def test_isposinf_isneginf(fallback_reset, dtype):
    x = make((4, 9), dtype)
    if dtype.is_floating_point:
        x[0, :4] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0])
    for fn in (torch.isposinf, torch.isneginf):
        r = fn(x.to("spyre"))
        assert r.dtype == torch.bool and r.device.type == "spyre"
        assert_same(r.cpu(), fn(x))
        out = torch.empty(0, dtype=torch.bool, device="spyre")
        fn(x.to("spyre"), out=out)
        assert_same(out.cpu(), fn(x))
    assert torch_spyre.fallback_counts() == {}


def test_math_attention_with_a_boolean_mask(fallback_reset):
    # head_dim 16 fp32 (64-byte rows): torch's math path with its _safe_softmax; fully masked
    # rows give zeros there, as on the CPU
    q, k, v = (make((1, 2, 5, 16), torch.float32, seed=s) for s in range(3))
    mask = make((5, 5), torch.float32, seed=4) > 0
    mask[2] = False  # a fully masked query row
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = F.scaled_dot_product_attention(q.to("spyre"), k.to("spyre"), v.to("spyre"),
                                         attn_mask=mask.to("spyre"))
    close(got.cpu(), want, torch.float32)
    left = {k for k in torch_spyre.fallback_counts() if not k.startswith("aten::all")}
    assert left == set(), left  # all() over a bool mask: integer reductions are not on the card


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool])
def test_where_and_masked_fill_of_integers(fallback_reset, dtype):
    """Exact selects of integer and bool values (the types' extremes: the wrapping difference
    must wrap back), broadcasts, a 0-dim CPU value, out=, masked_fill with a number and a
    0-dim tensor."""
    g = torch.Generator().manual_seed(5)
    if dtype == torch.bool:
        a = torch.randint(0, 2, (5, 7), generator=g).bool()
        b = torch.tensor([True, False, True, False, False, True, True])
    else:
        info = torch.iinfo(dtype)
        a = torch.randint(0, 9, (5, 7), generator=g).to(dtype)
        a[0, 0], a[1, 1] = info.min, info.max
        b = torch.full((7,), info.max, dtype=dtype)
        b[3] = info.min
    cond = torch.randint(0, 2, (5, 1, 7), generator=g).bool()
    on = lambda t: t.to("spyre")
    assert_same(torch.where(on(cond), on(a), on(b)).cpu(), torch.where(cond, a, b))
    assert_same(torch.where(on(cond), on(a), b[0]).cpu(), torch.where(cond, a, b[0]))
    assert_same(torch.where(on(cond[0, 0, 0]), on(b[0]), on(a[1, 1])).cpu(),
                torch.where(cond[0, 0, 0], b[0], a[1, 1]))  # all 0-dim
    out = torch.empty(0, dtype=dtype, device="spyre")
    torch.where(on(cond), on(b), on(a), out=out)
    assert_same(out.cpu(), torch.where(cond, b, a))
    mask = cond[:, 0]
    fill = True if dtype == torch.bool else 3
    assert_same(on(a).masked_fill(on(mask), fill).cpu(), a.masked_fill(mask, fill))
    assert_same(on(a).masked_fill(on(mask), b[3]).cpu(), a.masked_fill(mask, b[3]))
    assert torch_spyre.fallback_counts() == {}

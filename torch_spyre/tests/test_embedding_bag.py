"""F.embedding_bag / nn.EmbeddingBag on the card against the CPU in strict mode: sum, mean and
max; 1-D input with offsets (empty bags too) and 2-D input; per_sample_weights;
include_last_offset; padding_idx; the secondary outputs of aten::_embedding_bag; the weight
and per_sample_weights gradients."""

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import FLOATS, assert_same, close, make

V, D = 12, 5
INDICES = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 0, 8, 7])
OFFSETS = [
    torch.tensor([0, 3, 3, 7, 13]),  # an empty bag, a bag of one
    torch.tensor([0]),
    torch.tensor([0, 0, 14 - 1, 14]),  # empty first bag, empty last bag (without include_last)
]


def both(fn, *tensors):
    """fn on the CPU tensors (weights in fp32) and on their spyre copies."""
    cpu = fn(*[t.float() if t is not None and t.is_floating_point() else t for t in tensors])
    dev = fn(*[t.to("spyre") if t is not None else None for t in tensors])
    return cpu, dev


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("offsets,include_last_offset", [
    (OFFSETS[0], False), (OFFSETS[1], False), (OFFSETS[2], False), (OFFSETS[0], True),
    (OFFSETS[2], True)])  # (the CPU crashes on a single offset with include_last_offset)
@pytest.mark.parametrize("padding_idx", [None, 5])
def test_forward(strict, dtype, mode, offsets, padding_idx, include_last_offset):
    w = make((V, D), dtype)
    kw = dict(mode=mode, padding_idx=padding_idx, include_last_offset=include_last_offset)
    want, got = both(lambda w_, i, o: F.embedding_bag(i, w_, o, **kw), w, INDICES, offsets)
    if mode == "max":  # values moved, not computed
        assert_same(got.cpu(), want.to(dtype))
    else:
        close(got.cpu(), want.to(dtype), dtype, scale=4)


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding_idx", [-1, 1])
@pytest.mark.parametrize("op", [torch.ops.aten._embedding_bag,
                                torch.ops.aten._embedding_bag_forward_only])
def test_secondary_outputs_are_the_cpus(strict, mode, padding_idx, op):
    w = make((V, D), torch.float32)
    for offsets in OFFSETS:
        want = op(w, INDICES, offsets, False, mode, False, None, False, padding_idx)
        got = op(w.to("spyre"), INDICES.to("spyre"), offsets.to("spyre"), False, mode, False,
                 None, False, padding_idx)
        close(got[0].cpu(), want[0], torch.float32, scale=4)
        for g, c in zip(got[1:], want[1:]):
            assert_same(g.cpu(), c)


def test_max_ties_nan_and_infinities(strict):
    w = torch.tensor([[1.0, 2.0, float("nan")], [1.0, float("nan"), 5.0], [-float("inf"), 2.0, 5.0],
                      [3.0, -1.0, float("nan")]])
    idx = torch.tensor([0, 1, 2, 1, 0, 3, 2, 2, 3])
    offsets = torch.tensor([0, 3, 5, 6])
    for ix in (idx, idx.int()):
        want = torch.ops.aten._embedding_bag(w, ix, offsets.to(ix.dtype), False, 2, False, None,
                                             False, -1)
        got = torch.ops.aten._embedding_bag(w.to("spyre"), ix.to("spyre"),
                                            offsets.to(ix.dtype).to("spyre"), False, 2, False,
                                            None, False, -1)
        for g, c in zip(got, want):  # bit for bit, NaN where the CPU has NaN
            torch.testing.assert_close(g.cpu(), c, rtol=0, atol=0, equal_nan=True)
        assert torch.isnan(got[0]).any().item()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_2d_input_and_module(strict, dtype, mode):
    torch.manual_seed(0)
    cpu = torch.nn.EmbeddingBag(V, D, mode=mode, padding_idx=2).to(dtype)
    dev = torch.nn.EmbeddingBag(V, D, mode=mode, padding_idx=2).to(dtype)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("spyre")
    x = INDICES[:12].view(3, 4)
    with torch.no_grad():
        close(dev(x.to("spyre")).cpu(), cpu.float()(x).to(dtype), dtype, scale=4)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("padding_idx", [None, 5])
def test_per_sample_weights_forward_and_backward(strict, dtype, padding_idx):
    w, psw = make((V, D), dtype), make((INDICES.numel(),), dtype, seed=1)
    offsets = OFFSETS[0]
    up = make((offsets.numel(), D), dtype, seed=2)
    res = []
    for dev in ("cpu", "spyre"):
        wl = (w.float() if dev == "cpu" else w).to(dev).detach().clone().requires_grad_()
        pl = (psw.float() if dev == "cpu" else psw).to(dev).detach().clone().requires_grad_()
        y = F.embedding_bag(INDICES.to(dev), wl, offsets.to(dev), mode="sum",
                            per_sample_weights=pl, padding_idx=padding_idx)
        y.backward(up.to(dev).to(y.dtype))
        res.append((y.detach().cpu(), wl.grad.cpu(), pl.grad.cpu()))
    for want, got in zip(*res):
        close(got, want.to(dtype), dtype, scale=4)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 5])
def test_weight_gradient(strict, dtype, mode, padding_idx):
    w = make((V, D), dtype)
    offsets = OFFSETS[0]
    up = make((offsets.numel(), D), dtype, seed=2)
    grads = []
    for dev in ("cpu", "spyre"):
        wl = (w.float() if dev == "cpu" else w).to(dev).detach().clone().requires_grad_()
        y = F.embedding_bag(INDICES.to(dev), wl, offsets.to(dev), mode=mode,
                            padding_idx=padding_idx)
        y.backward(up.to(dev).to(y.dtype))
        grads.append(wl.grad.cpu())
    close(grads[1], grads[0].to(dtype), dtype, scale=4)


def test_what_stays_on_the_cpu(fallback_reset):
    w = make((V, D), torch.float64)
    want = F.embedding_bag(INDICES, w, OFFSETS[0])
    torch.testing.assert_close(F.embedding_bag(INDICES.to("spyre"), w.to("spyre"),
                                               OFFSETS[0].to("spyre")).cpu(), want)
    assert set(torch_spyre.fallback_counts()) == {"aten::_embedding_bag_forward_only"}
    with pytest.raises(RuntimeError, match="offsets\\[0\\] has to be 0"):
        F.embedding_bag(INDICES.to("spyre"), w.float().to("spyre"),
                        torch.tensor([1, 3]).to("spyre"))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_many_bags(strict, mode):
    g = torch.Generator().manual_seed(3)
    n, bags, v = 20000, 2000, 500
    idx = torch.randint(0, v, (n,), generator=g)
    offsets = torch.sort(torch.randint(0, n, (bags,), generator=g)).values
    offsets[0] = 0
    w = make((v, 16), torch.float32)
    got = F.embedding_bag(idx.to("spyre"), w.to("spyre"), offsets.to("spyre"), mode=mode)
    want = F.embedding_bag(idx, w, offsets, mode=mode)
    if mode == "max":
        assert_same(got.cpu(), want)
    else:
        close(got.cpu(), want, torch.float32, scale=8)

"""Ops composed of device ops under strict mode (no fallback) against the CPU: var/std/
var_mean/std_mean with a correction (all dims, one, several, keepdim, fp16/bf16), prod (all and
along a dim, floats to rounding, integers exact and wrapping, empty dims), count_nonzero,
argmin, argmax and max along a dim (NaN first, ties keep the first index, integer extremes),
isnan, nan_to_num (defaults and given values), flip and roll (several dims, negative shifts, no
dims, empty tensors), fake quantization per tensor and per channel (bit for bit, NaN and
infinities, ties, the gradient mask); channel_shuffle (and its gradient);
min/max/amin/amax/aminmax of bools (torch.distributions' argument checks) and aminmax of
integers."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_leaves

from conftest import FLOATS, assert_same, tol


def close(got, want, dtype):
    assert got.device.type == "cpu" and got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.float(), want.float(), rtol=tol(dtype), atol=tol(dtype),
                               equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_var_std(strict, dtype):
    x = (torch.randn(4, 7, 5, generator=torch.Generator().manual_seed(1)) * 3 + 1).to(dtype)
    d = x.to("spyre")
    for kw in [{}, {"dim": 1}, {"dim": (0, 2), "keepdim": True}, {"dim": -1, "correction": 0},
               {"dim": (1,), "correction": 1.3}, {"dim": 0, "correction": 4}]:
        close(torch.var(d, **kw).cpu(), torch.var(x.float(), **kw).to(dtype), dtype)
        close(torch.std(d, **kw).cpu(), torch.std(x.float(), **kw).to(dtype), dtype)
        for f in (torch.var_mean, torch.std_mean):
            got, want = f(d, **kw), f(x.float(), **kw)
            close(got[0].cpu(), want[0].to(dtype), dtype)
            close(got[1].cpu(), want[1].to(dtype), dtype)
    # fewer elements than the correction: inf / NaN as the CPU
    close(torch.var(d[:1], dim=0).cpu(), torch.var(x[:1].float(), dim=0).to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.int8, torch.bool])
def test_prod(strict, dtype):
    g = torch.Generator().manual_seed(2)
    if dtype.is_floating_point:
        x = (1 + (torch.rand(3, 11, 5, generator=g) - 0.5) / 2).to(dtype)
    else:
        x = torch.randint(-3 if dtype != torch.bool else 0, 4, (3, 11, 5), generator=g).to(dtype)
    d = x.to("spyre")
    want_all = torch.prod(x.float() if dtype.is_floating_point else x)
    got_all = torch.prod(d).cpu()
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            want = torch.prod(x.float() if dtype.is_floating_point else x, dim, keepdim=keepdim)
            got = torch.prod(d, dim, keepdim=keepdim).cpu()
            if dtype.is_floating_point:
                close(got, want.to(dtype), dtype)
            else:
                assert_same(got, want)  # int64 products wrap alike
    if dtype.is_floating_point:
        close(got_all, want_all.to(dtype), dtype)
    else:
        assert_same(got_all, want_all)
    e = torch.zeros(3, 0, dtype=dtype)
    assert_same(torch.prod(e.to("spyre"), 1).cpu(), torch.prod(e, 1))


def test_count_nonzero_and_isnan(strict):
    x = torch.tensor([[0.0, float("nan"), -0.0, 2.0], [1.0, 0.0, float("inf"), float("nan")]])
    for t in (x, x.to(torch.bfloat16), (x.nan_to_num() * 2).long(), x.bool()):
        assert_same(torch.count_nonzero(t.to("spyre")).cpu(), torch.count_nonzero(t))
        assert_same(torch.count_nonzero(t.to("spyre"), dim=1).cpu(), torch.count_nonzero(t, dim=1))
        assert_same(torch.isnan(t.to("spyre")).cpu(), torch.isnan(t))
        assert_same(torch.isnan(t.to("spyre").t()).cpu(), torch.isnan(t.t()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32,
                                   torch.int8, torch.uint8])
def test_argmin(strict, dtype):
    g = torch.Generator().manual_seed(3)
    if dtype.is_floating_point:
        x = torch.randint(-3, 4, (4, 9), generator=g).to(dtype)
        x[1, 5] = float("nan")  # NaN wins, as torch
        x[3, 2] = float("-inf")
    else:
        info = torch.iinfo(dtype)
        x = torch.randint(0, 5, (4, 9), generator=g).to(dtype)
        x[0, 7], x[2, 1] = info.min, info.max
    d = x.to("spyre")
    assert_same(torch.argmin(d).cpu(), torch.argmin(x))
    assert_same(torch.argmax(d).cpu(), torch.argmax(x))
    assert_same(torch.argmax(d, keepdim=True).cpu(), torch.argmax(x, keepdim=True))
    for dim in (0, 1):
        for keepdim in (False, True):
            assert_same(torch.argmin(d, dim, keepdim).cpu(), torch.argmin(x, dim, keepdim))
            assert_same(torch.argmax(d, dim, keepdim).cpu(), torch.argmax(x, dim, keepdim))
            got, want = torch.max(d, dim, keepdim), torch.max(x, dim, keepdim)
            torch.testing.assert_close(got.values.cpu(), want.values, rtol=0, atol=0,
                                       equal_nan=True)
            assert_same(got.indices.cpu(), want.indices)


@pytest.mark.parametrize("dtype", FLOATS)
def test_nan_to_num(strict, dtype):
    x = torch.tensor([float("nan"), float("inf"), float("-inf"), -1.5, 0.0, 3.0]).to(dtype)
    d = x.to("spyre")
    assert_same(torch.nan_to_num(d).cpu(), torch.nan_to_num(x))
    assert_same(torch.nan_to_num(d, nan=7.0, posinf=1.0, neginf=-2.0).cpu(),
                torch.nan_to_num(x, nan=7.0, posinf=1.0, neginf=-2.0))
    y = d.clone()
    y.nan_to_num_(0.5)
    assert_same(y.cpu(), torch.nan_to_num(x, 0.5))
    i = torch.tensor([3, -4])
    assert_same(torch.nan_to_num(i.to("spyre")).cpu(), i)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_flip_and_roll(strict, dtype):
    x = torch.arange(2 * 5 * 3).view(2, 5, 3).to(dtype)
    d = x.to("spyre")
    for dims in [(0,), (1, 2), (-1,), (0, 1, 2), ()]:
        assert_same(torch.flip(d, dims).cpu(), torch.flip(x, dims))
    assert_same(torch.flip(d.transpose(0, 2), (0,)).cpu(), torch.flip(x.transpose(0, 2), (0,)))
    assert_same(torch.fliplr(d).cpu(), torch.fliplr(x))
    for shifts, dims in [(1, 0), (-2, 1), ((1, 7), (0, 2)), (4, None), (-11, None), (0, 1)]:
        assert_same(torch.roll(d, shifts, dims).cpu(), torch.roll(x, shifts, dims))
    e = torch.zeros(0, 3, dtype=dtype)
    assert_same(torch.flip(e.to("spyre"), (0, 1)).cpu(), torch.flip(e, (0, 1)))
    assert_same(torch.roll(e.to("spyre"), 2, 1).cpu(), torch.roll(e, 2, 1))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool])
def test_integer_operands_of_float_results(strict, dtype):
    """True division of integers, integers times / plus a float number, an integer tensor with a
    float tensor: converted on the card, computed in the float result type as torch does."""
    g = torch.Generator().manual_seed(6)
    a = torch.randint(0, 50, (4, 9), generator=g).to(dtype)
    b = torch.randint(1, 7, (9,), generator=g).to(dtype)
    f = torch.randn(4, 9, generator=g)
    on = lambda t: t.to("spyre")
    if dtype != torch.bool:
        assert_same(torch.div(on(a), on(b)).cpu(), torch.div(a, b))
        assert_same((on(a) / 3).cpu(), a / 3)
    assert_same((on(a) * 0.5).cpu(), a * 0.5)
    assert_same((on(a) + 1.25).cpu(), a + 1.25)
    assert_same((on(a) * on(f)).cpu(), a * f)
    if dtype != torch.bool:  # torch refuses bool subtraction
        assert_same((on(f) - on(a)).cpu(), f - a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int8,
                                   torch.bool])
def test_equal_and_min(strict, dtype):
    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, 5, (3, 8), generator=g).to(dtype)
    d = x.to("spyre")
    assert torch.equal(d, x.clone().to("spyre"))
    y = x.clone()
    y[2, 7] = not bool(y[2, 7]) if dtype == torch.bool else y[2, 7] + 1
    assert not torch.equal(d, y.to("spyre"))
    assert not torch.equal(d, d[:2])  # sizes differ
    if dtype.is_floating_point:
        n = x.clone()
        n[1, 1] = float("nan")
        assert not torch.equal(n.to("spyre"), n.to("spyre"))  # NaN differs from itself
    if dtype != torch.bool:  # min of bool: the CPU's kernels, through the fallback
        assert_same(torch.min(d).cpu(), torch.min(x))
        for dim in (0, 1):
            got, want = torch.min(d, dim, keepdim=dim == 1), torch.min(x, dim, keepdim=dim == 1)
            assert_same(got.values.cpu(), want.values)
            assert_same(got.indices.cpu(), want.indices)


@pytest.mark.parametrize("dtype", FLOATS)
def test_fake_quantize(strict, dtype):
    # quantization-aware training: the CPU's values bit for bit (round half to even, NaN and
    # infinities to quant_min), and its mask in the gradient
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 8, generator=g) * 3
    x[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.025])
    x[1] = torch.arange(8) * 0.05 - 0.175  # halfway between two steps
    x = x.to(dtype)
    sc0, sc1 = torch.rand(6, generator=g) * 0.1 + 0.01, torch.rand(8, generator=g) * 0.1 + 0.01
    zp0 = torch.randint(-3, 3, (6,), generator=g, dtype=torch.int32)
    zp1 = torch.randint(0, 3, (8,), generator=g, dtype=torch.int32)

    def run(dev):
        t = x.to(dev).requires_grad_()
        outs = [torch.fake_quantize_per_tensor_affine(t, 0.05, 3, -128, 127),
                torch.fake_quantize_per_tensor_affine(t, 0.1, 0, 0, 15),
                torch.fake_quantize_per_channel_affine(t, sc0.to(dev), zp0.to(dev), 0, -128, 127),
                torch.fake_quantize_per_channel_affine(t, sc1.to(dev), zp1.to(dev), 1, 0, 255)]
        sum((k + 1) * o.sum() for k, o in enumerate(outs)).backward()
        return [o.detach().cpu() for o in outs] + [t.grad.cpu()]

    for got, want in zip(run("spyre"), run("cpu")):
        assert_same(got, want)


def test_bool_extremes_and_integer_aminmax(strict):
    # torch.distributions validates a scale_tril with (diag > 0).min(-1): bools as their bytes
    g = torch.Generator().manual_seed(4)
    b = torch.rand(5, 7, generator=g) > 0.4
    b[1], b[2] = True, False  # rows all true and all false
    d = b.to("spyre")
    for f in [lambda x: x.min(1), lambda x: x.max(0), lambda x: x.min(-1, keepdim=True),
              lambda x: x.t().max(1), lambda x: x.min(), lambda x: x.max(), lambda x: x.amin(1),
              lambda x: x.amax((0, 1), keepdim=True), lambda x: torch.aminmax(x, dim=1),
              lambda x: torch.aminmax(x), lambda x: torch.aminmax(x[:, 2:], keepdim=True)]:
        for got, want in zip(tree_leaves(f(d)),
                             tree_leaves(f(b))):
            assert_same(got.cpu(), want)
    for dtype in [torch.int64, torch.int32, torch.int8, torch.uint8]:
        x = torch.randint(0, 100, (4, 9), generator=g).to(dtype)
        for kw in [{}, {"dim": 0}, {"dim": 1, "keepdim": True}]:
            for got, want in zip(torch.aminmax(x.to("spyre"), **kw), torch.aminmax(x, **kw)):
                assert_same(got.cpu(), want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_channel_shuffle(strict, dtype):
    # nn.ChannelShuffle (ShuffleNet): a view and a copy on the card, the gradient the same
    x = (torch.randn(2, 12, 3, 5, generator=torch.Generator().manual_seed(6))).to(dtype)
    for groups in (1, 3, 4, 12):
        d = x.to("spyre").requires_grad_()
        y = torch.nn.ChannelShuffle(groups)(d)
        assert_same(y.detach().cpu(), torch.nn.ChannelShuffle(groups)(x))
        y.backward(torch.arange(y.numel(), dtype=dtype).view(y.shape).to("spyre"))
        c = x.clone().requires_grad_()
        g = torch.arange(y.numel(), dtype=dtype).view(y.shape)
        torch.nn.ChannelShuffle(groups)(c).backward(g)
        assert_same(d.grad.cpu(), c.grad)
    three = x[:, :, 1]
    assert_same(F.channel_shuffle(three.to("spyre"), 2).cpu(), F.channel_shuffle(three, 2))

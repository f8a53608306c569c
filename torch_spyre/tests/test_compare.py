"""Comparisons, maximum/minimum and clamp on the card against CPU: bool results of
eq/ne/lt/le/gt/ge (tensor and number operands, broadcasting, NaN, numbers rounded to 16-bit
types as torch does, in-place and out=), maximum/minimum (NaN-propagating), clamp with number
and tensor bounds (lo > hi, one bound), under strict mode (no fallback); integer operands compare
exactly on the card too."""

import operator

import pytest
import torch

import torch_spyre
from conftest import FLOATS, make

COMPARES = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt,
    "le": operator.le, "gt": operator.gt, "ge": operator.ge,
}


def with_ties(shape, dtype, seed):
    """Values from a small set (so equal elements occur) with a NaN."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=g).to(dtype) / 2
    if x.numel():
        x.view(-1)[0] = float("nan")
    return x


def assert_same(actual, expected):
    """Bit-exact equality with a CPU reference, NaN where the CPU has NaN."""
    assert actual.device.type == "cpu"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


@pytest.fixture
def strict(monkeypatch, fallback_reset):
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(COMPARES))
@pytest.mark.parametrize("shapes", [((4, 33), (4, 33)), ((4, 33), (33,)), ((4, 1), (4, 33)),
                                    ((2, 3, 5), (3, 1)), ((), (7,)), ((0, 3), (3,))])
def test_compare_tensors(strict, dtype, name, shapes):
    a, b = with_ties(shapes[0], dtype, 1), with_ties(shapes[1], dtype, 2)
    f = COMPARES[name]
    assert_same(f(a.to("spyre"), b.to("spyre")).cpu(), f(a, b))
    assert_same(getattr(torch, name)(b.to("spyre"), a.to("spyre")).cpu(), getattr(torch, name)(b, a))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(COMPARES))
def test_compare_numbers_rounded_as_torch(strict, dtype, name):
    x = torch.tensor([0.1, 0.2, 1 / 3, -0.0, float("inf"), float("nan")]).to(dtype)
    f = COMPARES[name]
    for number in (0.1, 1 / 3, 0.0, 2, float("inf")):
        assert_same(f(x.to("spyre"), number).cpu(), f(x, number))
        t = torch.tensor(number)  # a CPU 0-dim tensor operand
        assert_same(f(x.to("spyre"), t).cpu(), f(x, t))


def test_compare_mixed_types_views_out_and_in_place(strict):
    a = make((6, 40), torch.float16)
    b = make((6, 40), torch.float32, seed=1)
    assert_same((a.to("spyre") < b.to("spyre")).cpu(), a < b)
    t = a.t()  # a transposed view is read in place of a dense copy
    assert_same((t.to("spyre") >= 0).cpu(), t >= 0)
    d = a.to("spyre")
    assert_same((d.t() >= 0).cpu(), t >= 0)
    out = torch.empty(6, 40, dtype=torch.bool).to("spyre")
    r = torch.gt(d, b.to("spyre"), out=out)
    assert r is out
    assert_same(out.cpu(), a > b)
    big = torch.zeros(6, 80, dtype=torch.bool).to("spyre")
    torch.eq(d, 0.5, out=big[:, ::2])  # a strided out= view
    ref = torch.zeros(6, 80, dtype=torch.bool)
    ref[:, ::2] = a == 0.5
    assert_same(big.cpu(), ref)
    resized = torch.empty(0, dtype=torch.bool).to("spyre")
    torch.ne(d, b.to("spyre"), out=resized)
    assert_same(resized.cpu(), a != b)
    assert torch_spyre.fallback_counts() == {}


def test_compare_in_place_keeps_the_float_type(fallback_reset):
    # x.lt_(y) writes 1.0 / 0.0 in x's type: a float out= is not this kernel's (fallback)
    a, b = make((4, 8), torch.float32), make((4, 8), torch.float32, seed=1)
    d = a.to("spyre")
    d.lt_(b.to("spyre"))
    assert_same(d.cpu(), a.clone().lt_(b))


@pytest.mark.parametrize("name", ["eq", "lt"])
def test_compare_integers_on_card(strict, name):
    # exact above 2^24 (test_intops.py covers every integer dtype and form)
    a = torch.tensor([1, 2, 3, 2**40, 2**40 + 1])
    b = torch.tensor([2, 2, 2, 2**40, 2**40])
    r = getattr(torch, name)(a.to("spyre"), b.to("spyre"))
    assert_same(r.cpu(), getattr(torch, name)(a, b))
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("fn", [torch.maximum, torch.minimum, torch.max, torch.min])
def test_maximum_minimum(strict, dtype, fn):
    a, b = with_ties((5, 70), dtype, 1), with_ties((70,), dtype, 2)
    b[3] = float("nan")
    assert_same(fn(a.to("spyre"), b.to("spyre")).cpu(), fn(a, b))
    assert_same(fn(b.to("spyre"), a.to("spyre")).cpu(), fn(b, a))


def test_maximum_promotes_and_in_place(strict):
    a, b = make((3, 50), torch.bfloat16), make((3, 50), torch.float32, seed=1)
    assert_same(torch.maximum(a.to("spyre"), b.to("spyre")).cpu(), torch.maximum(a, b))
    d = b.to("spyre")
    d.clamp_(min=0.25)
    assert_same(d.cpu(), b.clamp(min=0.25))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bounds", [(-0.5, 0.5), (None, 0.3), (-0.3, None), (0.5, -0.5),
                                    (0.1, 0.1)])
def test_clamp_numbers(strict, dtype, bounds):
    x = make((7, 90), dtype)
    x[0, 0] = float("nan")
    lo, hi = bounds
    assert_same(torch.clamp(x.to("spyre"), lo, hi).cpu(), torch.clamp(x, lo, hi))
    if lo is not None:
        assert_same(torch.clamp_min(x.to("spyre"), lo).cpu(), torch.clamp_min(x, lo))
    if hi is not None:
        assert_same(x.to("spyre").clamp_max_(hi).cpu(), x.clone().clamp_max_(hi))


@pytest.mark.parametrize("dtype", FLOATS)
def test_clamp_tensor_bounds_broadcast(strict, dtype):
    x = make((4, 6, 64), dtype)
    lo = make((6, 1), dtype, seed=1) - 0.5
    hi = make((64,), dtype, seed=2).abs()
    d = [t.to("spyre") for t in (x, lo, hi)]
    assert_same(torch.clamp(d[0], d[1], d[2]).cpu(), torch.clamp(x, lo, hi))
    assert_same(torch.clamp(d[0], min=d[1]).cpu(), torch.clamp(x, min=lo))
    assert_same(torch.clamp_max(d[0], d[2]).cpu(), torch.clamp_max(x, hi))
    # bounds larger than self broadcast the result, as on the CPU
    small = x[:, :1, :1]
    assert_same(torch.clamp(small.to("spyre"), d[1], d[2]).cpu(), torch.clamp(small, lo, hi))


def test_clamp_out_and_errors(strict):
    x = make((5, 64), torch.float32)
    out = torch.empty(5, 64).to("spyre")
    assert torch.clamp(x.to("spyre"), -1, 1, out=out) is out
    assert_same(out.cpu(), torch.clamp(x, -1, 1))
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max'"):
        torch.clamp(x.to("spyre"))


def test_clamp_with_both_bounds_is_one_launch(strict):
    x = make((16, 256), torch.float16)
    lo_t, hi_t = make((256,), torch.float16, seed=3) - 1, make((16, 1), torch.float32, seed=4)
    for lo, hi in ((-0.5, 0.5), (lo_t, hi_t)):
        dev = [b.to("spyre") if isinstance(b, torch.Tensor) else b for b in (lo, hi)]
        with torch_spyre.profiler.profile() as prof:
            y = torch.clamp(x.to("spyre"), *dev)
        clamps = [e for e in prof.events if e.aten_op == "aten::clamp"]
        assert len(clamps) == 1 and clamps[0].op == "clamp" and clamps[0].launches == 1
        assert_same(y.cpu(), torch.clamp(x, lo, hi))


def test_clamp_integers_on_card(strict):
    """Integer clamps run on the card (test_intops.py covers the dtypes); a float bound on an
    integer tensor promotes to float as on the CPU."""
    x = torch.arange(-5, 5)
    assert_same(torch.clamp(x.to("spyre"), -2, 3).cpu(), torch.clamp(x, -2, 3))
    assert_same(torch.clamp(x.to("spyre").float(), -2.5, 3).cpu(), torch.clamp(x.float(), -2.5, 3))


@pytest.mark.parametrize("dtype", FLOATS)
def test_zero_dim_tensor_with_numbers(strict, dtype):
    """A 0-dim spyre tensor against a number keeps its dtype (the number is a wrapped number,
    as torch types it): compares and clamp run on the card (they fell back before)."""
    for v in (0.1, -2.0, float("nan")):
        x = torch.tensor(v).to(dtype)
        for name, f in COMPARES.items():
            assert_same(f(x.to("spyre"), 0.1).cpu(), f(x, 0.1))
        assert_same(x.to("spyre").clamp(-1, 0.05).cpu(), x.clamp(-1, 0.05))
        assert_same(x.to("spyre").clamp_min(0).cpu(), x.clamp_min(0))
        assert_same(x.to("spyre").clamp_max(-3).cpu(), x.clamp_max(-3))

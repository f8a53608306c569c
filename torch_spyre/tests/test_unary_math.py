"""The float unary math set on the card against the CPU under TORCH_SPYRE_STRICT=1: floor, ceil,
trunc, round, sign, sgn, erf, erfc, log1p, expm1, exp2, log2, log10, tan, asin, acos, atan, sinh,
cosh, asinh, acosh, atanh in fp32/fp16/bf16 on odd shapes, strided views, 0-dim and empty tensors,
the special values (+-0, +-inf, NaN, arguments outside the domain, poles, halfway cases of round),
the in-place and out= forms; floor/ceil/trunc/round of integer tensors (a copy, as torch)."""

import pytest
import torch

import torch_spyre
from conftest import FLOATS, make

# name -> input scaling that covers the op's domain (and some of its outside)
DOMAIN = {
    "floor": lambda x: x * 3,
    "ceil": lambda x: x * 3,
    "trunc": lambda x: x * 3,
    "round": lambda x: x * 3,
    "sign": lambda x: x,
    "sgn": lambda x: x,
    "erf": lambda x: x * 2,
    "erfc": lambda x: x * 3,
    "log1p": lambda x: x.abs() * 3 - 0.95,
    "expm1": lambda x: x * 5,
    "exp2": lambda x: x * 10,
    "log2": lambda x: x.abs() * 10,
    "log10": lambda x: x.abs() * 10,
    "tan": lambda x: x * 3,
    "asin": lambda x: x * 0.6,
    "acos": lambda x: x * 0.6,
    "atan": lambda x: x * 20,
    "sinh": lambda x: x * 5,
    "cosh": lambda x: x * 5,
    "asinh": lambda x: x * 20,
    "acosh": lambda x: x.abs() * 5 + 1,
    "atanh": lambda x: x * 0.6,
}
EXACT = {"floor", "ceil", "trunc", "round", "sign", "sgn"}
SPECIALS = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5,
            1.5, -1.5, 2.5, -2.5, 1e-3, -1e-3, 10.0, 100.0]
# one ulp of the dtype (the card rounds the double value once, the CPU computes in float: the
# two may differ by an ulp)
RTOL = {torch.float32: 2.5e-7, torch.float16: 1e-3, torch.bfloat16: 8e-3}
# the CPU's vectorized fp32 erf is a polynomial with up to ~3e-7 absolute error; the card's is
# the correctly rounded value (checked against float64 below)
CPU_ATOL = {"erf": 1e-6}


@pytest.fixture(autouse=True)
def strict(monkeypatch, fallback_reset):
    """A CPU fallback raises (TORCH_SPYRE_STRICT is read at every call)."""
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")
    yield
    assert torch_spyre.fallback_counts() == {}


def check(name, actual, expected, atol=None):
    assert actual.device.type == "cpu" and actual.dtype == expected.dtype, (
        name, actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (name, actual.shape, expected.shape)
    if name in EXACT or not expected.is_floating_point():
        # equal with the sign of zero (a NaN's sign is not part of its value)
        same = actual == expected
        if expected.is_floating_point():
            same = (same & (actual.signbit() == expected.signbit())) | (
                actual.isnan() & expected.isnan())
        assert bool(same.all()), (name, actual[~same], expected[~same])
        return
    if atol is None:
        atol = CPU_ATOL.get(name, 0.0) if expected.dtype == torch.float32 else 0.0
    torch.testing.assert_close(actual, expected, rtol=RTOL[expected.dtype],
                               atol=max(atol, torch.finfo(expected.dtype).tiny), equal_nan=True,
                               msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(DOMAIN))
def test_functional_on_odd_shapes_views_and_special_values(dtype, name):
    fn = getattr(torch, name)
    x = DOMAIN[name](make((5, 3, 41), torch.float32)).to(dtype)
    r = fn(x.to("spyre")).cpu()
    check(name, r, fn(x))
    # within an ulp of the true value (float64 rounded to the type)
    check(name, r, fn(x.double()).to(dtype), atol=0.0)
    # a strided (transposed) view and a sliced view
    check(name, fn(x.to("spyre").transpose(0, 2)).cpu(), fn(x.transpose(0, 2)))
    check(name, fn(x.to("spyre")[:, 1, ::3]).cpu(), fn(x[:, 1, ::3]))
    s = torch.tensor(SPECIALS, dtype=dtype)
    check(name, fn(s.to("spyre")).cpu(), fn(s))
    # 0-dim and empty
    z = torch.tensor(0.75, dtype=dtype)
    check(name, fn(z.to("spyre")).cpu(), fn(z))
    assert fn(torch.empty(0, 3, dtype=dtype, device="spyre")).shape == (0, 3)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(DOMAIN))
def test_in_place_and_out(dtype, name):
    fn = getattr(torch, name)
    x = DOMAIN[name](make((7, 33), torch.float32, seed=3)).to(dtype)
    # in place on a view (a column block of a wider tensor)
    d = x.to("spyre")
    getattr(d[:, 5:20], name + "_")()
    ref = x.clone()
    getattr(ref[:, 5:20], name + "_")()
    check(name, d.cpu(), ref)
    # out=: the right size, and one resized from a wrong size
    out = torch.empty(7, 33, dtype=dtype, device="spyre")
    r = fn(x.to("spyre"), out=out)
    assert r.data_ptr() == out.data_ptr()
    check(name, out.cpu(), fn(x))
    out = torch.empty(3, dtype=dtype, device="spyre")
    fn(x.to("spyre"), out=out)
    check(name, out.cpu(), fn(x))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8])
@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round"])
def test_rounding_integers_is_a_copy(dtype, name):
    fn = getattr(torch, name)
    lo, hi = (0, 256) if dtype == torch.uint8 else (-128, 128)
    x = torch.randint(lo, hi, (5, 17), generator=torch.Generator().manual_seed(5), dtype=dtype)
    d = x.to("spyre")
    r = fn(d)
    assert r.data_ptr() != d.data_ptr()  # a new tensor, as the CPU's
    check(name, r.cpu(), fn(x))
    check(name, fn(d.t()).cpu(), fn(x.t()))
    out = torch.empty(5, 17, dtype=dtype, device="spyre")
    fn(d, out=out)
    check(name, out.cpu(), fn(x))
    getattr(d, name + "_")()
    check(name, d.cpu(), x)


def test_round_halfway_cases_go_to_even():
    x = torch.arange(-8, 9, dtype=torch.float32) + 0.5  # -7.5 .. 8.5
    r = torch.round(x.to("spyre")).cpu()
    check("round", r, torch.round(x))
    assert r[7].item() == 0.0 and r[7].signbit()  # round(-0.5) = -0
    assert r[10].item() == 2.0  # round(2.5) = 2


@pytest.mark.parametrize("dtype", FLOATS)
def test_round_decimals_as_the_cpu_computes_it(dtype):
    x = (make((6, 35), torch.float32, seed=7) * 50).to(dtype)
    d = x.to("spyre")
    for decimals in [-2, -1, 0, 1, 2, 3]:
        check("round", torch.round(d, decimals=decimals).cpu(), torch.round(x, decimals=decimals))
        check("round", torch.round(d.t(), decimals=decimals).cpu(),
              torch.round(x.t(), decimals=decimals))
    out = torch.empty(6, 35, dtype=dtype, device="spyre")
    torch.round(d, decimals=2, out=out)
    check("round", out.cpu(), torch.round(x, decimals=2))
    v = x.to("spyre")
    v[:, 3:9].round_(decimals=1)
    ref = x.clone()
    ref[:, 3:9].round_(decimals=1)
    check("round", v.cpu(), ref)
    s = torch.tensor(SPECIALS, dtype=dtype)
    check("round", torch.round(s.to("spyre"), decimals=1).cpu(), torch.round(s, decimals=1))

"""Elementwise ops on the card against CPU: add/sub/mul/div/rsub (tensors, numbers, 0-dim
tensors, broadcasting, type promotion, in-place, out=, non-contiguous, empty), where and
masked_fill, the unary math ops with their in-place and out= forms; with no CPU fallback.
Integers run exactly on the card; what the library does not take (a rounding mode) gives the
CPU's answer through the fallback."""

import operator

import pytest
import torch

import torch_spyre
from conftest import FLOATS, close, make

BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}

SHAPES = [
    ((5, 7), (5, 7)),  # same shape
    ((3, 5, 7), (7,)),  # a row
    ((5, 7), (5, 1)),  # a column
    ((3, 1, 4), (1, 5, 1)),  # a general broadcast (expanded on the card)
    ((2, 3, 129), (1, 3, 1)),  # neither a row nor a column of the output
    ((), ()),  # 0-dim
    ((0, 4), (4,)),  # empty
    ((1000,), (1,)),
]


def operands(sa, sb, dtype):
    a = make(sa, dtype)
    b = make(sb, dtype, seed=1)
    return a, b.abs() + 0.5  # no division by ~0


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_binary_tensors(fallback_reset, dtype, name, sa, sb):
    fn = BINARY[name]
    a, b = operands(sa, sb, dtype)
    r = fn(a.to("spyre"), b.to("spyre"))
    assert r.device.type == "spyre"
    close(r.cpu(), fn(a, b), dtype)
    r = fn(b.to("spyre"), a.to("spyre"))  # the broadcast operand first
    close(r.cpu(), fn(b, a), dtype)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_numbers_scalars_and_alpha(fallback_reset, dtype):
    a = make((6, 33), dtype)
    d = a.to("spyre")
    close((d + 2.5).cpu(), a + 2.5, dtype)
    close((d * 3).cpu(), a * 3, dtype)
    close((d / 4.0).cpu(), a / 4.0, dtype)
    close((1 - d).cpu(), 1 - a, dtype)  # rsub
    close((2.0 / (d.abs() + 1)).cpu(), 2.0 / (a.abs() + 1), dtype)  # a number first
    close(torch.rsub(d, d * 2, alpha=3).cpu(), torch.rsub(a, a * 2, alpha=3), dtype)
    close(torch.add(d, d, alpha=0.5).cpu(), torch.add(a, a, alpha=0.5), dtype)
    e = make((6, 33), dtype, seed=1)
    close(torch.sub(d, e.to("spyre"), alpha=2).cpu(), torch.sub(a, e, alpha=2), dtype)
    close((d * torch.tensor(1.5)).cpu(), a * torch.tensor(1.5), dtype)  # a CPU 0-dim tensor
    s = torch.tensor(0.75)
    close((d - s.to("spyre")).cpu(), a - s, dtype)  # a spyre 0-dim fp32 tensor: stays dtype
    assert (d - s.to("spyre")).dtype == dtype
    assert torch_spyre.fallback_counts() == {}


def test_type_promotion(fallback_reset):
    h, f = make((4, 64), torch.float16), make((4, 64), torch.float32, seed=1)
    r = h.to("spyre") + f.to("spyre")
    assert r.dtype == torch.float32
    close(r.cpu(), h + f, torch.float32)
    b = make((64,), torch.bfloat16, seed=2)
    r = b.to("spyre") * f.to("spyre")
    assert r.dtype == torch.float32
    close(r.cpu(), b * f, torch.float32)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_non_contiguous_inputs(fallback_reset, dtype):
    a, b = make((40, 24), dtype), make((24, 40), dtype, seed=1)
    da, db = a.to("spyre"), b.to("spyre")
    close((da + db.t()).cpu(), a + b.t(), dtype)  # a transposed view
    close((da[:, 1:] * da[:, :-1]).cpu(), a[:, 1:] * a[:, :-1], dtype)  # unaligned slices
    close((da[::2] - 1).cpu(), a[::2] - 1, dtype)  # a stepped slice
    close(torch.div(da.t(), 3).cpu(), torch.div(a.t(), 3), dtype)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_in_place_and_out(fallback_reset, dtype):
    a, b = make((8, 48), dtype), make((48,), dtype, seed=1)
    d, db = a.to("spyre"), b.to("spyre")
    ptr = d.data_ptr()
    ref = a.clone()
    for op, arg in [(operator.iadd, db), (operator.imul, 1.5), (operator.isub, 0.25),
                    (operator.itruediv, db.abs() + 1)]:
        d = op(d, arg)
        ref = op(ref, arg.cpu() if isinstance(arg, torch.Tensor) else arg)
    assert d.data_ptr() == ptr
    close(d.cpu(), ref, dtype)
    d.add_(db, alpha=2)
    ref.add_(b, alpha=2)
    close(d.cpu(), ref, dtype)
    # in place on a view: only its elements change
    d[2:5, ::3].mul_(2)
    ref[2:5, ::3].mul_(2)
    close(d.cpu(), ref, dtype)
    # out= into a fresh tensor, a view, and one of the wrong size (resized)
    out = torch.empty(8, 48, dtype=dtype, device="spyre")
    assert torch.mul(d, db, out=out) is out
    close(out.cpu(), ref * b, dtype)
    big = torch.zeros(8, 96, dtype=dtype, device="spyre")
    torch.add(d, 1, out=big[:, 48:])
    close(big.cpu(), torch.cat([torch.zeros(8, 48, dtype=dtype), ref + 1], 1), dtype)
    small = torch.empty(0, dtype=dtype, device="spyre")
    torch.sub(d, db, out=small)
    assert small.shape == (8, 48)
    close(small.cpu(), ref - b, dtype)
    assert torch_spyre.fallback_counts() == {}


def test_integers_on_card_rounding_modes_fall_back(fallback_reset):
    a = torch.arange(12).reshape(3, 4)
    r = a.to("spyre") * 3 + 1  # exact integer math on the card (test_intops.py)
    assert torch.equal(r.cpu(), a * 3 + 1)
    assert torch_spyre.fallback_counts() == {}
    r = torch.div(a.to("spyre"), 5, rounding_mode="trunc")
    assert torch.equal(r.cpu(), torch.div(a, 5, rounding_mode="trunc"))
    assert "aten::div.out_mode" in torch_spyre.fallback_counts()


def test_overlap_errors_are_the_cpus(fallback_reset):
    d = torch.ones(8, device="spyre")
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.add(d[1:], 1, out=d[:-1])


@pytest.mark.parametrize("dtype", FLOATS)
def test_where_and_masked_fill(fallback_reset, dtype):
    x, y = make((6, 130), dtype), make((6, 130), dtype, seed=1)
    c = make((6, 130), torch.bool, seed=2)
    dx, dy, dc = x.to("spyre"), y.to("spyre"), c.to("spyre")
    close(torch.where(dc, dx, dy).cpu(), torch.where(c, x, y), dtype)
    close(torch.where(dc, dx, 0.0).cpu(), torch.where(c, x, 0.0), dtype)
    close(torch.where(dc, -1.5, dy).cpu(), torch.where(c, -1.5, y), dtype)
    col = c[:, :1].contiguous()
    close(torch.where(col.to("spyre"), dx, dy).cpu(), torch.where(col, x, y), dtype)
    row = make((130,), dtype, seed=3)
    close(torch.where(dc, row.to("spyre"), dy).cpu(), torch.where(c, row, y), dtype)
    mask = c[:1].contiguous()  # [1, 130] broadcast over rows
    close(dx.masked_fill(mask.to("spyre"), float("-inf")).cpu(),
          x.masked_fill(mask, float("-inf")), dtype)
    d = dx.clone()
    d.masked_fill_(dc, torch.tensor(2.0))
    close(d.cpu(), x.masked_fill(c, 2.0), dtype)
    e = torch.empty(0, 3, dtype=dtype, device="spyre")
    assert torch.where(torch.zeros(0, 3, dtype=torch.bool, device="spyre"), e, e).shape == (0, 3)
    assert torch_spyre.fallback_counts() == {}


UNARY = [torch.neg, torch.abs, lambda x: torch.sqrt(x.abs()), lambda x: torch.rsqrt(x.abs() + 0.1),
         lambda x: torch.log(x.abs() + 0.1), lambda x: torch.reciprocal(x.abs() + 0.5), torch.sin,
         torch.cos]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("fn", UNARY)
def test_unary_math(fallback_reset, dtype, fn):
    x = make((5, 3, 41), dtype)
    close(fn(x.to("spyre")).cpu(), fn(x), dtype)
    close(fn(x.to("spyre").transpose(0, 2)).cpu(), fn(x.transpose(0, 2)), dtype)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_in_place_out_and_empty(fallback_reset, dtype):
    x = make((7, 50), dtype)
    d = x.to("spyre")
    d.sigmoid_()
    close(d.cpu(), torch.sigmoid(x), dtype)
    d.relu_()
    out = torch.empty(7, 50, dtype=dtype, device="spyre")
    torch.exp(d, out=out)
    close(out.cpu(), torch.exp(torch.sigmoid(x)), dtype)
    v = x.to("spyre")
    v[:, 10:20].neg_()
    ref = x.clone()
    ref[:, 10:20].neg_()
    close(v.cpu(), ref, dtype)
    assert torch.tanh(torch.empty(0, 5, dtype=dtype, device="spyre")).shape == (0, 5)
    close(torch.exp(torch.tensor(0.5, dtype=dtype).to("spyre")).cpu(),
          torch.exp(torch.tensor(0.5, dtype=dtype)), dtype)
    assert torch_spyre.fallback_counts() == {}


def test_random_shapes_dtypes_and_broadcasts(fallback_reset):
    g = torch.Generator().manual_seed(11)
    for case in range(40):
        nd = int(torch.randint(0, 5, (1,), generator=g))
        out = [int(torch.randint(1, 9, (1,), generator=g)) for _ in range(nd)]
        # each operand keeps a random subset of the output's trailing dims, others become 1
        sa = [d if torch.rand(1, generator=g) < 0.7 else 1 for d in out]
        sb = [d if torch.rand(1, generator=g) < 0.7 else 1 for d in out][int(
            torch.randint(0, nd + 1, (1,), generator=g)):]
        da, db = FLOATS[case % 3], FLOATS[(case // 3) % 3]
        name = list(BINARY)[case % 4]
        a, b = make(sa, da, seed=case), make(sb, db, seed=case + 100).abs() + 0.5
        r = BINARY[name](a.to("spyre"), b.to("spyre"))
        ref = BINARY[name](a, b)
        assert r.dtype == ref.dtype, (case, r.dtype, ref.dtype)
        close(r.cpu(), ref, ref.dtype)
    assert torch_spyre.fallback_counts() == {}

"""Integer and bool math on the card against CPU, bit for bit, under strict mode (no fallback):
add/sub (with alpha)/mul, floor_divide, remainder, bitwise and/or/xor/not, shifts, compares,
maximum/minimum, neg/abs for int64, int32, int8, uint8 and bool, with tensor and number
operands, odd shapes, strided views, broadcasts, empty tensors, overflow wraparound, negative
division; casts between int64/uint8 and every other dtype on the card; zero divisors; integer
matrix products (mm, bmm, matmul: int8 matmul emulation with int32 accumulation, wraparound;
addmm, baddbmm, addbmm with integer scales); integer tensors raised to a number (wrapping for
integral exponents, the default float type for float ones); gcd and lcm of int64/int32 (the
types' minimum, zeros, consecutive Fibonacci numbers: Euclid's longest runs, lcm's wraparound)."""

import operator

import pytest
import torch

from conftest import assert_same, close, profiled_launches

INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]
ALL = INTS + [torch.bool]

SHAPES = [((5, 37), (5, 37)), ((5, 37), (37,)), ((5, 1), (5, 37)), ((2, 3, 5), (3, 1)),
          ((), (7,)), ((0, 3), (3,))]


def ints(shape, dtype, seed, lo=None, hi=None):
    """Deterministic values spanning the dtype's range, with its extremes and small numbers."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    info = torch.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    x = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64)
    if dtype == torch.int64 and lo == info.min:  # randint stays below 2^63 - 1: widen
        x = x * 3 + torch.randint(0, 3, shape, generator=g)
    x = x.to(dtype)
    special = [v for v in (0, 1, -1, 7, -7, info.min, info.max) if lo <= v <= hi]
    flat = x.view(-1)
    for i, v in enumerate(special[: flat.numel()]):
        flat[(i * 5) % flat.numel()] = v
    return x


def both(f, *args):
    """f on the CPU tensors and on their spyre copies; the card's result compared exactly."""
    dev = [a.to("spyre") if isinstance(a, torch.Tensor) else a for a in args]
    assert_same(f(*dev).cpu(), f(*args))


ARITH = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
         "maximum": torch.maximum, "minimum": torch.minimum,
         "and": operator.and_, "or": operator.or_, "xor": operator.xor}
COMPARES = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt,
            "le": operator.le, "gt": operator.gt, "ge": operator.ge}


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("name", list(ARITH) + list(COMPARES))
@pytest.mark.parametrize("shapes", SHAPES)
def test_binary_tensors(strict, dtype, name, shapes):
    if dtype == torch.bool and name == "sub":
        pytest.skip("torch refuses bool subtraction")
    f = {**ARITH, **COMPARES}[name]
    a, b = ints(shapes[0], dtype, 1), ints(shapes[1], dtype, 2)
    both(f, a, b)
    both(f, b, a)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("name", list(ARITH) + list(COMPARES))
def test_binary_numbers(strict, dtype, name):
    if name in ("maximum", "minimum"):
        pytest.skip("torch.maximum takes tensors only")
    f = {**ARITH, **COMPARES}[name]
    a = ints((3, 41), dtype, 3)
    for n in (0, 1, -1, 3, 100, -128):
        if dtype == torch.uint8 and n < 0 and name in ARITH:
            continue  # torch refuses a negative number with uint8 arithmetic in some versions
        both(lambda x: f(x, n), a)


@pytest.mark.parametrize("dtype", INTS)
def test_alpha_and_wraparound(strict, dtype):
    a, b = ints((4, 33), dtype, 5), ints((4, 33), dtype, 6)
    for alpha in (1, 2, -3):
        if dtype == torch.uint8 and alpha < 0:
            continue
        both(lambda x, y: torch.add(x, y, alpha=alpha), a, b)
        both(lambda x, y: torch.sub(x, y, alpha=alpha), a, b)
        both(lambda x: torch.add(x, 5, alpha=alpha), a)
    info = torch.iinfo(dtype)
    top = torch.full((5,), info.max, dtype=dtype)
    both(lambda x: x + 1, top)
    both(lambda x: x * x, top)
    both(lambda x: x * 3, torch.full((5,), info.min, dtype=dtype))
    # above 2^24: exact (no fp32 rounding)
    if dtype in (torch.int64, torch.int32):
        both(lambda x: x + 2, torch.tensor([2**24 + 1, 2**30 + 7], dtype=dtype))


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("name", ["floor_divide", "remainder"])
@pytest.mark.parametrize("shapes", [((5, 37), (5, 37)), ((5, 37), (37,)), ((5, 37), ()),
                                    ((0, 3), (3,))])
def test_floor_divide_remainder(strict, dtype, name, shapes):
    f = getattr(torch, name)
    a = ints(shapes[0], dtype, 7)
    b = ints(shapes[1], dtype, 8)
    b[b == 0] = 3
    if dtype in (torch.int64, torch.int32, torch.int8):
        # torch's CPU kernel traps on MIN / -1: keep it out of the comparison
        a[a == torch.iinfo(dtype).min] = 5
    both(f, a, b)
    both(lambda x: f(x, 3), a)
    if dtype != torch.uint8:
        both(lambda x: f(x, -3), a)
        both(lambda x: x // -2, torch.tensor([-7, 7, -1, 0, 1], dtype=dtype))
        both(lambda x: x % -2, torch.tensor([-7, 7, -1, 0, 1], dtype=dtype))


def test_zero_divisor():
    x = torch.tensor([1, 2, 3]).to("spyre")
    # a number: ZeroDivisionError at once, as on the CPU
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        x // 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.remainder(x, 0)
    # a tensor holding a zero: the launch fails on the card and the next synchronize says so
    y = torch.tensor([1, 0, 1]).to("spyre")
    with pytest.raises(RuntimeError, match="zero divisor"):
        x // y
        torch.spyre.synchronize()
    # the card keeps working afterwards
    assert_same((x // 2).cpu(), torch.tensor([0, 1, 1]))


@pytest.mark.parametrize("dtype", INTS)
def test_shifts(strict, dtype):
    w = torch.iinfo(dtype).bits
    a = ints((3, 40), dtype, 9)
    counts = (torch.arange(120) % (w + 3)).reshape(3, 40).to(dtype)
    both(operator.lshift, a, counts)
    both(operator.rshift, a, counts)
    both(torch.bitwise_left_shift, a, counts)
    both(torch.bitwise_right_shift, a, counts)
    for s in (0, 1, w - 1):
        both(lambda x: x << s, a)
        both(lambda x: x >> s, a)


@pytest.mark.parametrize("dtype", ALL)
def test_unary(strict, dtype):
    a = ints((7, 19), dtype, 10)
    both(torch.bitwise_not, a)
    if dtype != torch.bool:
        both(torch.neg, a)
        both(torch.abs, a)
        both(lambda x: -x, a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_neg_abs_floats(strict, dtype):
    a = torch.tensor([1.5, -0.0, 0.0, float("inf"), -3.25, float("nan")], dtype=dtype)
    for f in (torch.neg, torch.abs):
        got, want = f(a.to("spyre")).cpu(), f(a)
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def test_mixed_dtypes_promote_on_card(strict):
    a = ints((4, 9), torch.int32, 11)
    b = ints((4, 9), torch.int64, 12)
    c = ints((4, 9), torch.int8, 13)
    m = ints((4, 9), torch.bool, 14)
    both(operator.add, a, b)
    both(operator.mul, c, a)
    both(operator.add, m, c)
    both(operator.lt, c, b)
    both(lambda x: x + True, c)


def test_strided_views_and_inplace(strict):
    a = ints((6, 40), torch.int64, 15)
    b = ints((40, 6), torch.int64, 16)
    both(lambda x, y: x + y.t(), a, b)
    both(lambda x, y: x[:, ::3] * y.t()[:, ::3], a, b)
    both(lambda x: x[1:, 2:] == 7, a)
    x, xs = a.clone(), a.to("spyre")
    x.add_(5), xs.add_(5)
    x.mul_(-2), xs.mul_(-2)
    x.floor_divide_(3), xs.floor_divide_(3)
    x.bitwise_and_(0xFF), xs.bitwise_and_(0xFF)
    assert_same(xs.cpu(), x)
    out = torch.empty(6, 40, dtype=torch.int64).to("spyre")
    torch.add(a.to("spyre"), 1, out=out)
    assert_same(out.cpu(), a + 1)


CASTS = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int8,
         torch.uint8, torch.bool]


@pytest.mark.parametrize("src", CASTS)
@pytest.mark.parametrize("dst", CASTS)
def test_casts_with_int64_and_uint8(strict, src, dst):
    if src == dst or not ({src, dst} & {torch.int64, torch.uint8}):
        pytest.skip("covered by test_copy")
    if src.is_floating_point:
        x = torch.tensor([0.0, -0.0, 1.5, -1.5, 2.9, -2.9, 100.75, 250.0, 127.0, -100.0],
                         dtype=src)
        if dst in (torch.uint8,):
            x = x.abs()  # negative floats to uint8 are undefined in torch
    else:
        x = ints((7, 13), src, 17)
        if dst.is_floating_point and src == torch.int64:
            x = torch.cat([x.view(-1), torch.tensor([2**24 + 1, 2**53 + 1, -(2**62) - 1,
                                                     65519, 65520], dtype=src)])
    both(lambda t: t.to(dst), x)


def test_empty_and_scalar_tensors(strict):
    for dtype in ALL:
        e = torch.empty(0, 5, dtype=dtype)
        both(lambda x: x | x, e)
        s = ints((), dtype, 18)
        both(lambda x: x ^ x, s)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("shape,dims", [((5, 37), None), ((5, 37), 1), ((5, 37), 0),
                                        ((2, 3, 7), (0, 2)), ((129,), None), ((), None)])
def test_reductions(strict, dtype, shape, dims):
    x = ints(shape, dtype, 19)
    kw = {} if dims is None else {"dim": dims}
    both(lambda t: t.sum(**kw), x)
    both(lambda t: t.any(**kw) if dims is None or isinstance(dims, int) else t.any(dim=dims), x)
    both(lambda t: t.all(**kw) if dims is None or isinstance(dims, int) else t.all(dim=dims), x)
    if dtype != torch.bool:
        both(lambda t: torch.amax(t, **({} if dims is None else {"dim": dims})), x)
        both(lambda t: torch.amin(t, **({} if dims is None else {"dim": dims})), x)
    if dims is not None:
        both(lambda t: t.sum(dim=dims, keepdim=True), x)


def test_reductions_exact_beyond_fp32(strict):
    x = torch.tensor([2**40 + 1, 2**40 + 3, -5, 2**62, 2**62])  # the sum wraps like torch's
    both(torch.sum, x)
    both(torch.amax, x)
    both(lambda t: t.max(), x)
    m = torch.tensor([[True, False], [True, True]])
    both(lambda t: t.sum(), m)
    both(lambda t: t.all(dim=1), m)
    both(lambda t: (t == t).all(), torch.tensor([1.0, float("nan")]))


@pytest.mark.parametrize("dtype", INTS)
def test_number_first(strict, dtype):
    """A number as the first operand (C++'s `t.mul_(k)` reaches mul.out as `k * t`; `1 - t`,
    `5 < t`): on the card, exact."""
    x = ints((5, 37), dtype, 45)
    both(lambda t: torch.ops.aten.mul_.Scalar(t.clone(), 3), x)
    both(lambda t: 1 - t, x)
    both(lambda t: torch.rsub(t, 7, alpha=2), x)
    both(lambda t: torch.ops.aten.lt.Tensor(torch.tensor(5, dtype=dtype), t), x)
    both(lambda t: torch.ops.aten.maximum(torch.tensor(3, dtype=dtype), t), x)
    both(lambda t: torch.ops.aten.bitwise_and.Tensor(torch.tensor(6, dtype=dtype), t), x)


@pytest.mark.parametrize("dtype", INTS)
def test_clamp(strict, dtype):
    """clamp/clamp_min/clamp_max of integers with number and tensor bounds (broadcast, lo > hi:
    hi wins), in place and out=: exact, on the card."""
    x = ints((5, 37), dtype, 41)
    lo, hi = ints((37,), dtype, 42), ints((5, 1), dtype, 43)
    small = 0 if dtype == torch.uint8 else -3
    both(lambda t: torch.clamp(t, small, 5), x)
    both(lambda t: torch.clamp(t, 9, 2), x)  # lo > hi
    both(lambda t: torch.clamp_min(t, small), x)
    both(lambda t: torch.clamp_max(t, 4), x)
    both(lambda t, a, b: torch.clamp(t, a, b), x, lo, hi)
    both(lambda t, a: torch.clamp(t, min=a), x, lo)
    both(lambda t, b: torch.clamp_max(t, b), x, hi)
    both(lambda t: t[:, ::3].clone().clamp_(small, 2), x)
    both(lambda t: torch.clamp(t, 2, 6, out=torch.empty_like(t)), x)


@pytest.mark.parametrize("src", ALL + [torch.float16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_sum_mean_with_dtype(strict, src, dtype):
    """sum/mean(x, dtype=D) = x.to(D) reduced, the cast on the card: bool or integer counts in
    a float, fp16 accumulated as fp32."""
    wide = src in (torch.int64, torch.int32) and dtype.is_floating_point
    x = ints((6, 37), src, 44, *((-200, 200) if wide else ())) if not src.is_floating_point \
        else torch.randn(6, 37).to(src)  # integers a bf16 holds exactly
    for kw in ({}, {"dim": 1}, {"dim": 0, "keepdim": True}):
        fs = [lambda t: t.sum(dtype=dtype, **kw)]
        if dtype.is_floating_point:
            fs.append(lambda t: t.mean(dtype=dtype, **kw))
        for f in fs:
            r, ref = f(x.to("spyre")).cpu(), f(x)
            if dtype.is_floating_point:  # float sums: the card's order, not the CPU's
                close(r, ref.float().to(dtype), dtype, scale=4)
            else:
                assert_same(r, ref)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8])
def test_byte_products_on_the_matrix_unit(strict, dtype):
    """int8 and uint8 mm / bmm / matmul and torch._int_mm run as one matrix-unit program (I8 MM:
    exact products, int32 sums) instead of K elementwise passes: the CPU's bits, its wrapping
    byte sums included, for odd shapes, a transposed operand and a broadcast batch."""
    g = torch.Generator().manual_seed(9)
    info = torch.iinfo(dtype)
    for m, k, n in [(37, 300, 70), (1, 5, 3), (64, 128, 128)]:
        a = torch.randint(info.min, info.max + 1, (m, k), generator=g, dtype=dtype)
        b = torch.randint(info.min, info.max + 1, (k, n), generator=g, dtype=dtype)
        da, db = a.to("spyre"), b.to("spyre")
        got, ops, launched = profiled_launches(torch.mm, da, db)
        assert_same(got.cpu(), a @ b)
        # one product and the cast of its int32 sums (the elementwise form runs mul and sum)
        assert ops == ["aten::mm", "aten::_copy_from"] and launched <= 5, (ops, launched)
        assert_same(torch.mm(da, db.t().contiguous().t()).cpu(), a @ b)  # a transposed view
        assert_same(torch.matmul(da[None].expand(3, m, k), db).cpu(),
                    torch.matmul(a[None].expand(3, m, k), b))
        if dtype == torch.int8:
            want = a.int() @ b.int()  # exact int32 sums
            got, ops, launched = profiled_launches(torch._int_mm, da, db)
            assert_same(got.cpu(), want)
            assert ops == ["aten::_int_mm"] and launched <= 4, (ops, launched)
            out = torch.empty(0, dtype=torch.int32, device="spyre")
            assert_same(torch._int_mm(da, db, out=out).cpu(), want)
            assert_same(out.cpu(), want)
    # sums past int32 (140000 x 16384 for int8): the CPU's result is the low byte of the sum
    a = torch.full((2, 140000), info.min if dtype == torch.int8 else info.max, dtype=dtype)
    b = torch.full((140000, 128), info.min if dtype == torch.int8 else info.max, dtype=dtype)
    assert_same((a.to("spyre") @ b.to("spyre")).cpu(), a @ b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_weight_only_int8_linear(strict, dtype):
    """torch._weight_int8pack_mm (a weight-only int8 linear: int8 weights per output channel
    scaled) is one program on the card that reads the weight as int8, against the CPU's result
    (fp32 sums of exact products, scaled, rounded once): odd sizes, one row (a decode step)."""
    g = torch.Generator().manual_seed(21)
    for m, k, n in [(7, 200, 90), (1, 512, 256)]:
        x = torch.randn(m, k, generator=g).to(dtype)
        w = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
        sc = (torch.rand(n, generator=g) / 64).to(dtype)
        # the CPU's fp32 kernel on the same values, rounded once (its bf16 kernel in this torch
        # build crashes for K = 200 with several rows)
        want = torch._weight_int8pack_mm(x.float(), w, sc.float()).to(dtype)
        got, ops, launched = profiled_launches(
            torch._weight_int8pack_mm, x.to("spyre"), w.to("spyre"), sc.to("spyre"))
        assert ops == ["aten::_weight_int8pack_mm"], ops
        ref = (x.double() @ w.double().t()) * sc.double()
        rel = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
        torch.testing.assert_close(got.cpu().double(), ref, rtol=rel, atol=1e-4)
        torch.testing.assert_close(got.cpu(), want, rtol=rel, atol=1e-4)


LOGICAL = [torch.logical_and, torch.logical_or, torch.logical_xor]


@pytest.mark.parametrize("dtype", ALL + [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shapes", SHAPES)
def test_logical_ops(strict, dtype, shapes):
    """logical_not/and/or/xor of every dtype (nonzero is true; a float NaN too), broadcast, and
    into a float output (out=, in place)."""
    a = ints(shapes[0], dtype, 31) if not dtype.is_floating_point else \
        torch.randn(shapes[0]).round().to(dtype)
    b = ints(shapes[1], torch.int32, 32, -1, 2).to(dtype)
    if dtype.is_floating_point and a.numel():
        a.view(-1)[0] = float("nan")
    assert_same(torch.logical_not(a.to("spyre")).cpu(), torch.logical_not(a))
    for op in LOGICAL:
        assert_same(op(a.to("spyre"), b.to("spyre")).cpu(), op(a, b))
        assert_same(op(a.to("spyre"), torch.tensor(0).to(dtype)).cpu(),
                    op(a, torch.tensor(0).to(dtype)))  # a 0-d CPU operand
    out = torch.empty(0, dtype=torch.float32)
    want = torch.logical_or(a, b, out=out.clone())
    assert_same(torch.logical_or(a.to("spyre"), b.to("spyre"), out=out.to("spyre")).cpu(), want)
    x = a.clone()
    assert_same(x.to("spyre").logical_not_().cpu(), x.logical_not_())


@pytest.mark.parametrize("dtype", INTS)
def test_integer_matrix_products(strict, dtype):
    # int8 matmul emulation: int32 products of int8 values; sums that wrap as the CPU's gemm
    g = torch.Generator().manual_seed(5)
    info = torch.iinfo(dtype)
    for m, k, n in [(8, 16, 4), (300, 70, 33), (3, 0, 5)]:
        a = torch.randint(info.min, info.max, (m, k), generator=g, dtype=dtype)
        b = torch.randint(info.min, info.max, (k, n), generator=g, dtype=dtype)
        da, db = a.to("spyre"), b.to("spyre")
        assert_same((da @ db).cpu(), a @ b)
        assert_same(torch.mm(da, db.t().contiguous().t()).cpu(), a @ b)  # a transposed view
        assert_same(torch.bmm(da[None].expand(2, m, k), db[None].expand(2, k, n)).cpu(),
                    torch.bmm(a[None].expand(2, m, k), b[None].expand(2, k, n)))
    a8 = torch.randint(-128, 128, (6, 40), generator=g, dtype=torch.int8)
    b8 = torch.randint(-128, 128, (40, 7), generator=g, dtype=torch.int8)
    got = a8.to("spyre").to(torch.int32) @ b8.to("spyre").to(torch.int32)
    assert_same(got.cpu(), a8.int() @ b8.int())


@pytest.mark.parametrize("dtype", INTS)
def test_integer_addmm_baddbmm_addbmm(strict, dtype):
    """Integer addmm, baddbmm and addbmm (and their out= and in-place forms) on the card: the
    CPU's bits for integer alpha and beta (1, 0, negative, large: the terms wrap), a self that
    broadcasts (a bias row, a column, a scalar), beta = 0 (self not read), and no sums (K = 0)."""
    g = torch.Generator().manual_seed(33)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -1000), min(info.max, 1000)

    def r(*shape):
        return torch.randint(lo, hi, shape, generator=g, dtype=dtype)

    scales = [(1, 1), (0, 1), (3, -2), (-7, 5), (1, 0)]
    if dtype in (torch.int64, torch.int32):
        scales.append((info.max // 3, 123457))  # products and scaled terms past the type's range
    for m, k, n in [(9, 33, 17), (1, 4, 3), (5, 0, 6)]:
        a, b = r(m, k), r(k, n)
        for self_shape in [(m, n), (n,), (m, 1), ()]:
            s = r(*self_shape)
            for beta, alpha in scales:
                want = torch.addmm(s, a, b, beta=beta, alpha=alpha)
                got = torch.addmm(s.to("spyre"), a.to("spyre"), b.to("spyre"), beta=beta, alpha=alpha)
                assert_same(got.cpu(), want)
        out = torch.empty(0, dtype=dtype, device="spyre")
        torch.addmm(r(n).to("spyre"), a.to("spyre"), b.to("spyre"), beta=2, alpha=3, out=out)
        s = r(n)
        torch.addmm(s.to("spyre"), a.to("spyre"), b.to("spyre"), beta=2, alpha=3, out=out)
        assert_same(out.cpu(), torch.addmm(s, a, b, beta=2, alpha=3))
    # a NaN-free "garbage" self with beta = 0 is not read: the extremes of the type stay out
    a, b, s = r(3, 8, 5), r(3, 5, 4), torch.full((3, 8, 4), info.max, dtype=dtype)
    for beta, alpha in scales:
        want = torch.baddbmm(s, a, b, beta=beta, alpha=alpha)
        got = torch.baddbmm(s.to("spyre"), a.to("spyre"), b.to("spyre"), beta=beta, alpha=alpha)
        assert_same(got.cpu(), want)
        s2 = r(8, 4)
        want = torch.addbmm(s2, a, b, beta=beta, alpha=alpha)
        got = torch.addbmm(s2.to("spyre"), a.to("spyre"), b.to("spyre"), beta=beta, alpha=alpha)
        assert_same(got.cpu(), want)
    # in place
    s, ds = r(3, 8, 4), None
    ds = s.to("spyre")
    ds.baddbmm_(a.to("spyre"), b.to("spyre"), beta=-1, alpha=2)
    assert_same(ds.cpu(), s.baddbmm(a, b, beta=-1, alpha=2))
    s = r(8, 4)
    ds = s.to("spyre")
    ds.addbmm_(a.to("spyre"), b.to("spyre"), beta=3, alpha=-1)
    assert_same(ds.cpu(), s.addbmm(a, b, beta=3, alpha=-1))
    # a float scale for integer operands is refused (never truncated to an integer)
    with pytest.raises(RuntimeError):
        torch.addmm(r(4).to("spyre"), r(2, 3).to("spyre"), r(3, 4).to("spyre"), alpha=0.5)


@pytest.mark.parametrize("dtype", INTS)
def test_integer_pow_by_a_number(strict, dtype):
    # an integral exponent: repeated squaring in the tensor's type, wrapping as the CPU's
    x = ints((7, 9), dtype, 31)
    for e in (0, 1, 2, 3, 5, 13, 64):
        assert_same((x.to("spyre") ** e).cpu(), x ** e)
    out = torch.empty(0, dtype=dtype, device="spyre")
    torch.pow(x.to("spyre")[:, 2:7].t(), 3, out=out)  # a strided view, out=
    assert_same(out.cpu(), x[:, 2:7].t() ** 3)
    # a float exponent: the default float type's result, as the CPU's
    small = ints((5, 6), dtype, 32, lo=0, hi=100)
    close((small.to("spyre") ** 0.5).cpu(), small ** 0.5, torch.float32)
    close((small.to("spyre") ** -1.5).cpu(), small ** -1.5, torch.float32)


def test_integer_pow_by_a_negative_integer_is_refused_as_on_the_cpu(fallback_reset):
    with pytest.raises(RuntimeError, match="negative integer powers"):
        torch.full((3,), 2, device="spyre") ** -1


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("shapes", SHAPES)
def test_gcd_lcm(strict, dtype, shapes):
    info = torch.iinfo(dtype)
    for seed, lo, hi in ((31, None, None), (32, -1000, 1000)):
        a, b = ints(shapes[0], dtype, seed, lo, hi), ints(shapes[1], dtype, seed + 7, lo, hi)
        both(torch.gcd, a, b)
        both(torch.lcm, a, b)
    fib = (1836311903, 1134903170) if dtype == torch.int32 else (7540113804746346429,
                                                                 4660046610375530309)
    x = torch.tensor([0, 0, info.min, info.min, info.max, fib[0], -7, info.min, 12, 46341],
                     dtype=dtype)
    y = torch.tensor([0, 5, 0, info.min, info.min, fib[1], 0, 6, -18, 46340], dtype=dtype)
    both(torch.gcd, x, y)
    both(torch.lcm, x, y)
    both(torch.gcd, x, torch.tensor(6, dtype=dtype))  # a 0-dim operand in host memory
    d = x.to("spyre")
    d.gcd_(y.to("spyre"))
    assert_same(d.cpu(), torch.gcd(x, y))

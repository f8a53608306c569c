"""Copies host <-> device and device <-> device: contiguous, strided, broadcast, 0-dim,
empty, across cards, non_blocking with pinned memory; compared bit-exactly with the CPU."""

import re

import pytest
import torch

import torch_spyre
from conftest import DTYPES, assert_same, make


@pytest.fixture(autouse=True)
def no_fallback(fallback_reset):
    yield
    # Copies of one dtype never run CPU compute (the fallback).
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (1,), (7,), (33, 65), (4, 5, 6)], ids=str)
def test_roundtrip_contiguous(dtype, shape):
    a = make(shape, dtype)
    d = a.to("spyre")
    assert d.device.type == "spyre" and d.dtype == dtype and d.shape == a.shape
    assert_same(d.cpu(), a)
    e = d.clone()  # device -> device
    assert e.data_ptr() != d.data_ptr() or a.numel() == 0
    assert_same(e.to("cpu"), a)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_host_sources(dtype):
    a = make((6, 10, 12), dtype)
    for src in (a.transpose(0, 2), a[:, 2:7, ::3], a[1::2], a.permute(2, 0, 1)[3:], a[..., 5]):
        assert not src.is_contiguous()
        assert_same(src.to("spyre").cpu(), src.contiguous())
    big = make((100, 200), dtype)
    assert_same(big.t().to("spyre").cpu(), big.t().contiguous())


VIEWS = {
    "rows": lambda t: t[:, 3:8],  # rows of a 3-D tensor: spyre_memcpy_3d
    "slab": lambda t: t[::2, :, 4:9],
    "dense-inner": lambda t: t.transpose(1, 2)[:, :, 3:8].transpose(1, 2),
    "every-other": lambda t: t[:, :, ::2],  # innermost stride 2: read-modify-write
    "column": lambda t: t[:, 5, :].t(),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("view", VIEWS.values(), ids=VIEWS.keys())
def test_strided_device_destinations(dtype, view):
    a = make((8, 16, 24), dtype)
    d = a.to("spyre")
    ref = a.clone()
    patch = make(view(ref).shape, dtype, seed=1)
    view(d).copy_(patch)
    view(ref).copy_(patch)
    assert_same(d.cpu(), ref)  # the view's elements changed, nothing else
    shape = view(ref).shape
    dims = list(reversed(range(len(shape))))
    patch2 = make(tuple(reversed(shape)), dtype, seed=2).permute(dims)  # strided host source
    assert patch2.shape == shape and not patch2.is_contiguous()
    view(d).copy_(patch2)
    view(ref).copy_(patch2)
    assert_same(d.cpu(), ref)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_device_sources_to_host(dtype):
    a = make((9, 17, 20), dtype)
    d = a.to("spyre")
    for f in (
        lambda t: t[:, 2:9],
        lambda t: t[1::3, :, 5:15],
        lambda t: t.transpose(0, 2),
        lambda t: t[:, :, ::4],
        lambda t: t[4],
        lambda t: t[:, 3, 7],
        lambda t: t[2:4, 1:5, 9],
    ):
        assert_same(f(d).cpu(), f(a).contiguous())
        ref = f(a)
        if ref.dim() == 2:  # device view into a transposed host destination
            out = torch.empty(ref.shape[::-1], dtype=dtype).t()
            out.copy_(f(d))
            assert_same(out.contiguous(), ref.contiguous())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_device_to_device_strided(dtype):
    a = make((12, 34), dtype)
    d = a.to("spyre")
    e = torch.zeros(12, 20, dtype=dtype, device="spyre")
    e.copy_(d[:, 7:27])  # spyre_memcpy_3d device -> device
    assert_same(e.cpu(), a[:, 7:27])
    f = torch.zeros(34, 12, dtype=dtype, device="spyre")
    f.copy_(d.t())  # a transpose: by the cores (spyre_op_copy)
    assert_same(f.cpu(), a.t().contiguous())
    g = d.t().contiguous()
    assert g.is_contiguous()
    assert_same(g.cpu(), a.t().contiguous())
    # interleaved views of one buffer (their ranges overlap, their elements do not)
    h = a.to("spyre")
    h[:, 1::2].copy_(h[:, ::2])
    ref = a.clone()
    ref[:, 1::2].copy_(ref[:, ::2].clone())
    assert_same(h.cpu(), ref)


def copy_calls(fn):
    """The libspyre copy calls and layout fallbacks `fn` made (non-zero counters)."""
    torch_spyre._C._reset_copy_stats()
    fn()
    return {k: v for k, v in torch_spyre._C._copy_stats().items() if v}


def test_copy_paths():
    a = make((64, 256), torch.float32)
    d = a.to("spyre")
    assert copy_calls(lambda: a.to("spyre")) == {"htod": 1}
    assert copy_calls(lambda: d.cpu()) == {"dtoh": 1}
    assert copy_calls(lambda: d.clone()) == {"dtod": 1}
    assert copy_calls(lambda: d.to("spyre:1")) == {"dtod": 1}  # across cards
    # a column block: one 2-D spyre_memcpy_3d, whichever the direction
    assert copy_calls(lambda: d[:, 16:48].cpu()) == {"memcpy_3d": 1}
    assert copy_calls(lambda: d[:, 16:48].clone()) == {"memcpy_3d": 1}
    assert copy_calls(lambda: d[:, 16:48].copy_(a[:, :32])) == {"memcpy_3d": 1}
    # dimensions that merge are merged: this 5-D view is one 3-D copy ...
    b = make((3, 4, 5, 6, 7), torch.float16)
    db = b.to("spyre")
    assert copy_calls(lambda: db[:, :, 1:4, :, 2:5].cpu()) == {"memcpy_3d": 1}
    # ... this one keeps 5 dimensions: a loop of 2 x 2 calls over the outer two
    v = copy_calls(lambda: assert_same(db[::2, 1:3, ::2, 1:5, 2:5].cpu(),
                                       b[::2, 1:3, ::2, 1:5, 2:5].contiguous()))
    assert v == {"memcpy_3d": 4}
    # a transpose has no copy-engine copy: the cores make it dense, straight into t
    t = torch.empty(256, 64, device="spyre")
    assert copy_calls(lambda: t.copy_(d.t())) == {"layout": 1}
    # innermost stride 2: the view's byte range is read, updated on the host, written back
    assert copy_calls(lambda: d[:, ::2].copy_(a[:, ::2])) == {
        "host_staged": 1, "read_modify_write": 1, "dtoh": 1, "htod": 1}


@pytest.mark.parametrize("dtype", [torch.float64, torch.int16, torch.complex64,
                                   torch.complex128], ids=str)
def test_layouts_of_types_the_op_library_lacks_move_as_bits(dtype):
    """The cores move any element as a type of its width (spyre_op_copy moves bytes
    unchanged): a transpose or broadcast of a float64, int16 or complex tensor is made dense as
    int64 / fp16 / int32 bits (complex128 as two int64). It raised "spyre op library: no dtype
    for Double" before (permute_copy, transpose_copy, expand_copy, ... of those types)."""
    a = (torch.randn(40, 72, dtype=torch.float64) * 1000).to(dtype)
    if dtype.is_complex:
        a = a + 1j * torch.randn(40, 72, dtype=torch.float64).to(dtype)
    d = a.to("spyre")
    assert copy_calls(lambda: assert_same(d.t().contiguous().cpu(), a.t().contiguous())) == {
        "layout": 1, "dtoh": 1}
    t = torch.empty(72, 40, dtype=dtype, device="spyre")
    assert copy_calls(lambda: t.copy_(d.t())) == {"layout": 1}
    assert_same(t.cpu(), a.t().contiguous())
    col = a[:, :1].contiguous()
    e, dcol = torch.empty(40, 72, dtype=dtype, device="spyre"), col.to("spyre")
    assert copy_calls(lambda: e.copy_(dcol.expand(40, 72))) == {"layout": 1}
    assert_same(e.cpu(), col.expand(40, 72).contiguous())
    assert_same(torch.permute_copy(d.view(40, 8, 9), (2, 0, 1)).cpu(),
                a.view(40, 8, 9).permute(2, 0, 1).contiguous())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layouts_the_copy_engine_cannot_move_stay_on_the_card(dtype):
    """Transposes, broadcasts and overlapping views are made dense by the cores
    (spyre_op_copy), not staged through the host (a compiled backward's weight gradients read
    transposed views: each was a host round trip and ended the call's submission)."""
    a = make((40, 72), dtype)
    d = a.to("spyre")
    t = torch.empty(72, 40, dtype=dtype, device="spyre")
    assert copy_calls(lambda: t.copy_(d.t())) == {"layout": 1}  # into t itself
    assert_same(t.cpu(), a.t().contiguous())
    assert copy_calls(lambda: assert_same(d.t().contiguous().cpu(), a.t().contiguous())) == {
        "layout": 1, "dtoh": 1}
    # into a block of a bigger tensor: dense on the cores, then one 2-D copy-engine copy
    big = torch.zeros(72, 50, dtype=dtype, device="spyre")
    assert copy_calls(lambda: big[:, 5:45].copy_(d.t())) == {"layout": 1, "memcpy_3d": 1}
    ref = torch.zeros(72, 50, dtype=dtype)
    ref[:, 5:45] = a.t()
    assert_same(big.cpu(), ref)
    # a device source broadcast along the rows (stride 0 innermost)
    col = make((40, 1), dtype, seed=1)
    e, dcol = torch.empty(40, 72, dtype=dtype, device="spyre"), col.to("spyre")
    assert copy_calls(lambda: e.copy_(dcol.expand(40, 72))) == {"layout": 1}
    assert_same(e.cpu(), col.expand(40, 72).contiguous())
    # one half of a buffer into the other, transposed (ranges overlap, elements do not)
    w = make((48, 96), dtype, seed=2)
    dw = w.to("spyre")
    assert copy_calls(lambda: dw[:, :48].copy_(dw[:, 48:].t())) == {"layout": 1, "memcpy_3d": 1}
    w[:, :48] = w[:, 48:].t().clone()
    assert_same(dw.cpu(), w)
    # across cards: dense on the source's card, then one card-to-card copy
    back = torch.empty(72, 40, dtype=dtype, device="spyre:1")
    assert copy_calls(lambda: back.copy_(d.t())) == {"layout": 1, "dtod": 1}
    assert_same(back.cpu(), a.t().contiguous())
    # interleaved views of one buffer (ranges overlap, elements do not) into a destination
    # without a unit stride: through a temporary on the card, the cores, then one-element rows
    h, ref = a.to("spyre"), a.clone()
    assert copy_calls(lambda: h[:, 1::2].copy_(h[:, ::2])) == {"layout": 1, "memcpy_3d": 1}
    ref[:, 1::2] = ref[:, ::2].clone()
    assert_same(h.cpu(), ref)
    # a broadcast into a column; a transpose from another card into a column block
    g = torch.zeros(40, 6, dtype=dtype, device="spyre")
    assert "through_host" not in copy_calls(lambda: g[:, 2].copy_(dcol[:1, 0].expand(40)))
    ref = torch.zeros(40, 6, dtype=dtype)
    ref[:, 2] = col[0, 0]
    assert_same(g.cpu(), ref)
    far = torch.zeros(72, 3, 40, dtype=dtype, device="spyre:1")
    assert "through_host" not in copy_calls(lambda: far[:, 1].copy_(d.t()))
    assert_same(far[:, 1].cpu(), a.t().contiguous())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_destinations_without_a_unit_stride_get_rows_of_one_element(dtype):
    """A column, every other element: the cores' layout program writes dense destinations only,
    the copy engine moves rows of any width: one 2-D copy of one-element rows, no host trip."""
    a = make((30, 8), dtype)
    d = a.to("spyre")
    col = make((30,), dtype, seed=1)
    dcol = col.to("spyre")
    assert copy_calls(lambda: d[:, 3].copy_(dcol)) == {"memcpy_3d": 1}
    a[:, 3] = col
    assert_same(d.cpu(), a)
    half = make((30, 4), dtype, seed=2)
    dhalf = half.to("spyre")
    assert copy_calls(lambda: d[:, 1::2].copy_(dhalf)) == {"memcpy_3d": 1}
    a[:, 1::2] = half
    assert_same(d.cpu(), a)
    # torch.where's coordinates: columns of an int64 [n, 2] (MoE routing)
    m = make((9, 7), torch.float32, seed=3) > 0
    assert "through_host" not in copy_calls(lambda: torch.where(m.to("spyre")))
    for got, want in zip(torch.where(m.to("spyre")), torch.where(m)):
        assert_same(got.cpu(), want)


def test_a_device_copy_no_card_path_takes_is_a_counted_fallback(monkeypatch):
    """9 dims (past the cores' 8) whose reversed order leaves 3^7 row copies (past the copy
    engine's call budget): through the host, as CPU work (a warning once, strict forbids it)."""
    a = make((3,) * 9, torch.float32)
    d = a.to("spyre")
    name = "aten::_copy_from (a device layout no card path copies)"
    out = torch.empty((3,) * 9, device="spyre")
    with pytest.warns(UserWarning, match=re.escape(name)):
        assert copy_calls(lambda: out.copy_(d.permute(*reversed(range(9)))))["through_host"] == 1
    assert_same(out.cpu(), a.permute(*reversed(range(9))).contiguous())
    assert torch_spyre.fallback_counts() == {name: 1}
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")
    with pytest.raises(NotImplementedError, match=re.escape(name)):
        out.copy_(d.permute(*reversed(range(9))))
    torch_spyre.reset_fallback_counts()


def test_partial_overlap_is_rejected_like_cpu():
    d = torch.arange(10.0).to("spyre")
    with pytest.raises(RuntimeError, match="unsupported operation"):
        d[1:].copy_(d[:-1])


def test_broadcast_copies():
    row = make((1, 7), torch.float32)
    d = torch.empty(5, 7, device="spyre")
    d.copy_(row)  # host source broadcast
    assert_same(d.cpu(), row.expand(5, 7).contiguous())
    src = make((7,), torch.float16).to("spyre")
    assert_same(src.expand(4, 7).cpu(), make((7,), torch.float16).expand(4, 7).contiguous())
    e = torch.empty(3, 7, dtype=torch.float16, device="spyre")
    e.copy_(src)  # device source broadcast
    assert_same(e.cpu(), make((7,), torch.float16).expand(3, 7).contiguous())
    s = torch.tensor(2.5).to("spyre")
    assert_same(s.expand(2, 3).cpu(), torch.full((2, 3), 2.5))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_across_cards(dtype):
    a = make((50, 60), dtype)
    d0 = a.to("spyre:0")
    d1 = d0.to("spyre:1")
    assert d1.device.index == 1
    assert_same(d1.cpu(), a)
    back = torch.empty(60, 50, dtype=dtype, device="spyre:0")
    back.copy_(d1.t())  # strided, across cards
    assert_same(back.cpu(), a.t().contiguous())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_blocking_pinned(dtype):
    a = make((256, 1024), dtype)
    pinned = a.pin_memory()
    assert pinned.is_pinned()
    d = pinned.to("spyre", non_blocking=True)
    out = torch.empty_like(a).pin_memory()
    out.copy_(d, non_blocking=True)
    torch.spyre.current_stream().synchronize()
    assert_same(out, a)
    # Tensor.to("cpu", non_blocking=True) lands in pinned memory
    h = d.to("cpu", non_blocking=True)
    assert h.is_pinned()
    torch.spyre.synchronize()
    assert_same(h, a)


def test_non_blocking_pinned_buffer_outlives_the_copy():
    # The source's pinned block is freed right after an asynchronous copy: it is not reused
    # before the copy has run (an event guards it).
    a = make((1 << 20,), torch.float32)
    d = torch.empty_like(a, device="spyre")
    p = a.pin_memory()
    d.copy_(p, non_blocking=True)
    del p
    q = torch.empty_like(a).pin_memory()  # same size class
    q.fill_(0)
    torch.spyre.synchronize()
    assert_same(d.cpu(), a)


def test_non_blocking_pageable():
    a = make((1000,), torch.float32)
    d = a.to("spyre", non_blocking=True)
    a.fill_(0)  # the pageable source was taken before the call returned
    assert_same(d.cpu(), make((1000,), torch.float32))


def test_host_dtype_conversion():
    a = make((5, 6), torch.float32)
    d = a.to("spyre", dtype=torch.float16)  # converted on the host, then copied
    assert d.dtype == torch.float16
    assert_same(d.cpu(), a.half())
    h = torch.empty(5, 6, dtype=torch.float64)
    h.copy_(d)  # device -> host with conversion
    assert_same(h, a.half().double())


# Device -> device dtype conversions: the pairs the cores convert exactly as the CPU does run on
# the card (one elementwise launch: VUN COPY, VINT CVT for int64/uint8 and integer pairs, VSEL or
# VINT NE `x != 0` for bool); the others (dtypes the cores do not compute) run on the host and
# count as a CPU fallback naming the reason.
CAST_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.bool,
               torch.int64, torch.uint8]
FLOAT_TYPES = (torch.float32, torch.float16, torch.bfloat16)


def host_reason(src, dst):
    """Why src -> dst is not converted on the card (None: it is)."""
    if torch.int16 in (src, dst):
        return "a dtype the cores do not compute"
    return None


CARD_PAIRS = [(s, d) for s in CAST_DTYPES for d in CAST_DTYPES
              if s != d and host_reason(s, d) is None]
HOST_PAIRS = [(torch.int16, torch.float32), (torch.float16, torch.int16),
              (torch.int16, torch.int64)]
pair_id = "{0[0]}->{0[1]}".format


def cast_values(dtype, n, seed=0):
    """n values of `dtype` with the cases a conversion can get wrong: random bit patterns for the
    floats (NaN payloads, infinities, subnormals, huge values), rounding ties of every narrower
    type, signed zeros, integer extremes and integers above 2^24."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype == torch.int8:
        return torch.arange(n).remainder(256).sub(128).to(torch.int8)[torch.randperm(n, generator=g)]
    if dtype == torch.uint8:
        return torch.arange(n).remainder(256).to(torch.uint8)[torch.randperm(n, generator=g)]
    if dtype == torch.int64:
        special = torch.tensor([0, 1, -1, 2**63 - 1, -2**63, 2**24 + 1, 2**53 + 1, -(2**40) - 3,
                                65519, 65520, 127, 128, -129, 255, 256, 2**31, -2**31 - 1])
        out = torch.randint(-2**62, 2**62, (n,), generator=g) * torch.randint(-2, 3, (n,),
                                                                              generator=g)
        small = torch.randint(-300, 300, (n,), generator=g)
        out = torch.where(torch.rand(n, generator=g) < 0.5, small, out)
        out[: len(special)] = special[: n]
        return out
    if dtype == torch.int32:
        special = torch.tensor([0, 1, -1, 2**31 - 1, -2**31, 2**24 + 1, 2**24 + 2**16 + 1,
                                -(2**24 + 3), 65504, 65519, 65520, 127, 128, -129], dtype=torch.int32)
        small = torch.randint(-300, 300, (n,), generator=g, dtype=torch.int32)
        big = torch.randint(-2**31, 2**31, (n,), generator=g, dtype=torch.int32)
        out = torch.where(torch.rand(n, generator=g) < 0.5, small, big)
        out[: len(special)] = special[: n]
        return out
    bits = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
    width = torch.finfo(dtype).bits
    out = torch.randint(-2**(width - 1), 2**(width - 1), (n,), generator=g,
                        dtype=bits[dtype]).view(dtype)
    special = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0, -2.5, 0.49, 127.9,
               1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 1 + 2**-8, 1 + 3 * 2**-8,  # ties
               2**-24, 2**-25, 3 * 2**-25, 2**-126, 2**-130, 1e-45, 65504.0, 65519.0, 65520.0,
               3.3e38, 3.4e38, -3.4e38, 2**-133 * 3]
    sp = torch.tensor(special, dtype=torch.float32).to(dtype)
    m = min(n, len(sp))
    out[:m] = sp[:m]
    # half of the rest ordinary values (most random bit patterns are huge or tiny)
    k = (n - m) // 2
    out[m:m + k] = (torch.randn(k, generator=g) * 100).to(dtype)
    return out


TRUNC_CASES = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, 0.9999999, -0.9999999, 1e-30, -1e-40,
               -0.0, 126.99, -127.5, -128.9, 127.9, 8388607.5, -8388607.5, 8388609.0, 4194303.5,
               2**30 + 128.0, -2**31, 2**31 - 128.0, 65504.0, -65504.0, 1e9 + 0.5]


def for_integer(values, dtype):
    """values (a float type) that convert to integer `dtype` with a defined result (torch leaves
    NaN and values outside the type undefined), with truncation's hard cases first."""
    info = torch.iinfo(dtype)
    v = values.clone()
    cases = torch.tensor(TRUNC_CASES, dtype=torch.float32).to(v.dtype)
    m = min(len(cases), v.numel())
    v.view(-1)[:m] = cases[:m]
    f = v.float()
    ok = (f > float(info.min) - 1) & (f < float(info.max) + 1)  # NaN is not ok
    if dtype in (torch.int8, torch.uint8):  # and the ordinary values mostly in range
        shift = 125 if dtype == torch.int8 else 0
        v = torch.where(ok, v, (f.remainder(250) - shift).to(v.dtype))
        f = v.float()
        ok = (f > float(info.min) - 1) & (f < float(info.max) + 1)
    return torch.where(ok, v, torch.zeros_like(v))


def assert_same_values(actual, expected):
    """Bit-exact equality with the CPU, where a NaN only has to be a NaN: its bits are not
    specified (the CPU's own vectorized and scalar fp32 -> bf16 give different NaNs)."""
    assert actual.device.type == "cpu"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if actual.dtype in FLOAT_TYPES:
        nan = expected.isnan()
        assert torch.equal(actual.isnan(), nan), "NaNs differ"
        ib = torch.int32 if actual.dtype == torch.float32 else torch.int16
        a, e = actual.contiguous().view(ib)[~nan], expected.contiguous().view(ib)[~nan]
        bad = (a != e).nonzero()
        assert bad.numel() == 0, (
            f"{bad.numel()} differ, first: {actual[~nan][bad[0]]} != {expected[~nan][bad[0]]}")
    else:
        assert torch.equal(actual, expected), f"\n{actual}\n!=\n{expected}"


def on_card(fn):
    """Runs fn; asserts it made one cast launch, no CPU fallback and no host round trip."""
    torch_spyre.reset_fallback_counts()
    calls = copy_calls(fn)
    assert calls.get("cast") == 1, calls
    assert "through_host" not in calls and "dtoh" not in calls and "htod" not in calls, calls
    assert torch_spyre.fallback_counts() == {}
    return calls


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


# host data shape, source view, destination view (None: a fresh `.to(dtype)` result; else a
# view of a device tensor of the host data's shape, or of DST_SHAPES[layout])
CAST_LAYOUTS = {
    "contiguous": ((33, 70), lambda t: t, lambda t: t),
    "0-dim": ((), lambda t: t, lambda t: t),
    "to": ((5, 301), lambda t: t, None),
    "transposed-both": ((40, 24), lambda t: t.t(), lambda t: t.t()),  # the same permuted dense
    "to-transposed": ((40, 24), lambda t: t.t(), None),  # .to keeps the permuted layout
    "strided-src": ((12, 40), lambda t: t[::2, 3:37], None),
    "transposed-src": ((40, 24), lambda t: t.t()[:, 1:39], None),
    "unaligned-src": ((301,), lambda t: t[5:], None),
    "broadcast-src": ((1, 37), lambda t: t.expand(6, 37), None),
    "strided-dst": ((12, 40), lambda t: t, lambda t: t[:, 3:43]),  # into a column block
    "transposed-dst": ((24, 40), lambda t: t, lambda t: t.t()),
}
DST_SHAPES = {"strided-dst": (12, 50), "transposed-dst": (40, 24), "transposed-both": (40, 24)}


@pytest.mark.parametrize("layout", CAST_LAYOUTS.keys())
@pytest.mark.parametrize("pair", CARD_PAIRS, ids=pair_id)
def test_device_cast_on_card(pair, layout):
    sdt, ddt = pair
    shape, sview, dview = CAST_LAYOUTS[layout]
    host = cast_values(sdt, _numel(shape)).reshape(shape)
    if sdt in FLOAT_TYPES and ddt in (torch.int32, torch.int8, torch.int64, torch.uint8):
        host = for_integer(host, ddt)
    src = sview(host.to("spyre"))
    expected = sview(host).to(ddt)  # the CPU's conversion
    if dview is None:
        res = []
        on_card(lambda: res.append(src.to(ddt)))
        assert res[0].device.type == "spyre" and res[0].dtype == ddt
        assert res[0].stride() == expected.stride()
        assert_same_values(res[0].cpu(), expected)
        return
    # into a view of a larger destination: the elements outside the view keep their values
    dshape = DST_SHAPES.get(layout, shape)
    before = cast_values(ddt, _numel(dshape), seed=5).reshape(dshape)
    dst = before.to("spyre")
    ref = before.clone()
    dview(ref).copy_(expected)
    on_card(lambda: dview(dst).copy_(src))
    assert_same_values(dst.cpu(), ref)


CROSS_PAIRS = [(torch.float32, torch.float16), (torch.bfloat16, torch.float32),
               (torch.int32, torch.bfloat16), (torch.float16, torch.bool)]


@pytest.mark.parametrize("pair", CROSS_PAIRS, ids=pair_id)
def test_device_cast_across_cards(pair):
    # converted on the source's card, then one card-to-card copy of the result
    sdt, ddt = pair
    host = cast_values(sdt, 20 * 25).reshape(20, 25)
    d0 = host.to("spyre:0")
    res = []
    assert on_card(lambda: res.append(d0.to("spyre:1", ddt))) == {"cast": 1, "dtod": 1}
    assert res[0].device.index == 1
    assert_same_values(res[0].cpu(), host.to(ddt))
    back = torch.empty(25, 20, dtype=ddt, device="spyre:1")
    on_card(lambda: back.copy_(d0.t()))  # strided source, across cards
    assert_same_values(back.cpu(), host.t().to(ddt))


def test_device_cast_overlap():
    host = cast_values(torch.float16, 256)
    x = host.to("spyre")
    y = x.view(torch.bfloat16)  # the same bytes as another type: converted in place
    on_card(lambda: y.copy_(x))
    assert_same_values(y.cpu(), host.to(torch.bfloat16))
    # a partial overlap is an error, as on the CPU
    f = cast_values(torch.float32, 128).to("spyre")
    with pytest.raises(RuntimeError, match="unsupported operation"):
        f.view(torch.float16)[64:192].copy_(f[:128])
    with pytest.raises(RuntimeError, match="unsupported operation"):
        c = f.cpu()
        c.view(torch.float16)[64:192].copy_(c[:128])


def test_device_cast_methods():
    # the user-facing forms all reach the card's cast
    host = cast_values(torch.float32, 1000).reshape(10, 100)
    d = host.to("spyre")
    for fn, ref in ((lambda: d.half(), host.half()), (lambda: d.bfloat16(), host.bfloat16()),
                    (lambda: d.half().float(), host.half().float()),
                    (lambda: d.to(torch.zeros(1, dtype=torch.bfloat16, device="spyre").dtype),
                     host.bfloat16()),
                    (lambda: d.bool(), host.bool()), (lambda: d.ne(0).int(), host.ne(0).int())):
        res = []
        torch_spyre._C._reset_copy_stats()
        res.append(fn())
        assert torch_spyre._C._copy_stats()["cast"] >= 1
        assert torch_spyre._C._copy_stats()["through_host"] == 0
        assert_same_values(res[0].cpu(), ref)


HOST_NAMES = {torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16",
              torch.int32: "Int", torch.int8: "Char", torch.bool: "Bool", torch.int64: "Long",
              torch.int16: "Short"}


@pytest.mark.parametrize("pair", HOST_PAIRS, ids=pair_id)
def test_device_cast_through_host(pair):
    sdt, ddt = pair
    g = torch.Generator().manual_seed(3)
    if sdt.is_floating_point:  # in range: an out-of-range float -> int is undefined in torch
        host = (torch.randn(8, 9, generator=g) * 40).clamp(-127, 127).to(sdt)
    elif sdt == torch.int16:
        host = torch.randint(-300, 300, (8, 9), generator=g).to(sdt)
    else:
        host = cast_values(sdt, 72).reshape(8, 9)
    d = host.to("spyre")
    key = f"aten::_copy_from ({HOST_NAMES[sdt]} -> {HOST_NAMES[ddt]}, {host_reason(sdt, ddt)})"
    with pytest.warns(UserWarning, match=re.escape(key)):
        calls = copy_calls(lambda: d.to(ddt))
    assert "cast" not in calls and calls["through_host"] == 1
    assert_same(d.to(ddt).cpu(), host.to(ddt))
    assert torch_spyre.fallback_counts() == {key: 2}
    torch_spyre.reset_fallback_counts()


def test_item_and_tolist():
    d = torch.tensor([[3.5, -1.0]]).to("spyre")
    assert d[0, 0].item() == 3.5
    assert d.tolist() == [[3.5, -1.0]]
    assert torch.tensor(7).to("spyre").item() == 7
    assert torch.tensor(True).to("spyre").item() is True

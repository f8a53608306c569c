"""Copies host <-> device and device <-> device: contiguous, strided, broadcast, 0-dim,
empty, across cards, non_blocking with pinned memory; compared bit-exactly with the CPU."""

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
    f.copy_(d.t())  # a transpose: staged through the host
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
    # a transpose has no device copy: through the host
    t = torch.empty(256, 64, device="spyre")
    assert copy_calls(lambda: t.copy_(d.t())) == {
        "through_host": 1, "host_staged": 1, "dtoh": 1, "htod": 1}
    # innermost stride 2: the view's byte range is read, updated on the host, written back
    assert copy_calls(lambda: d[:, ::2].copy_(a[:, ::2])) == {
        "host_staged": 1, "read_modify_write": 1, "dtoh": 1, "htod": 1}


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


def test_device_dtype_conversion_counts_as_fallback():
    a = make((4, 4), torch.float32)
    d = a.to("spyre")
    with pytest.warns(UserWarning, match=r"aten::_copy_from \(Float -> BFloat16\)"):
        b = d.to(torch.bfloat16)
    assert b.device.type == "spyre"
    assert_same(b.cpu(), a.bfloat16())
    assert torch_spyre.fallback_counts() == {"aten::_copy_from (Float -> BFloat16)": 1}
    torch_spyre.reset_fallback_counts()


def test_item_and_tolist():
    d = torch.tensor([[3.5, -1.0]]).to("spyre")
    assert d[0, 0].item() == 3.5
    assert d.tolist() == [[3.5, -1.0]]
    assert torch.tensor(7).to("spyre").item() == 7
    assert torch.tensor(True).to("spyre").item() is True

"""Views by strides: each shares the spyre storage (no copy), and copying it back gives the
CPU view's values; writes through a view reach the base."""

import pytest
import torch

import torch_spyre
from conftest import DTYPES, assert_same, make

VIEWS = {
    "view": lambda t: t.view(6, 20),
    "view-neg": lambda t: t.view(-1, 4),
    "reshape": lambda t: t.reshape(2, 3, 20),
    "flatten": lambda t: t.flatten(),
    "transpose": lambda t: t.transpose(0, 2),
    "t": lambda t: t[0].t(),
    "permute": lambda t: t.permute(1, 2, 0),
    "slice": lambda t: t[1:, ::2, 3:9],
    "select": lambda t: t[:, 2],
    "narrow": lambda t: t.narrow(2, 4, 5),
    "as_strided": lambda t: t.as_strided((3, 4), (7, 2), 5),
    "expand": lambda t: t[:, :1, :].expand(3, 7, 10),
    "unsqueeze": lambda t: t.unsqueeze(1)[:, :, 2],
    "squeeze": lambda t: t[:, 1:2].squeeze(1),
    "diagonal": lambda t: t.diagonal(0, 1, 2),
    "unfold": lambda t: t.unfold(2, 3, 2),
    "split": lambda t: t.split(2, dim=2)[3],
    "unbind": lambda t: t.unbind(1)[2],
    "chain": lambda t: t.permute(2, 0, 1)[1::3].transpose(1, 2)[:, 1:, :],
}


@pytest.fixture(autouse=True)
def no_fallback(fallback_reset):
    yield
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
@pytest.mark.parametrize("f", VIEWS.values(), ids=VIEWS.keys())
def test_view_then_copy_back(f, dtype):
    a = make((3, 4, 10), dtype)
    d = a.to("spyre")
    v = f(d)
    assert v.device == d.device
    assert v.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()  # no copy
    assert v.shape == f(a).shape and v.stride() == f(a).stride()
    assert v.storage_offset() == f(a).storage_offset()
    assert_same(v.cpu(), f(a).contiguous())


def test_reshape_of_non_viewable_copies():
    a = make((4, 6), torch.float32)
    d = a.to("spyre")
    r = d.t().reshape(24)  # not expressible as a view: a device copy
    assert r.untyped_storage().data_ptr() != d.untyped_storage().data_ptr()
    assert_same(r.cpu(), a.t().reshape(24))


def test_view_dtype_and_complex_views():
    a = make((4, 6), torch.float32)
    d = a.to("spyre")
    assert_same(d.view(torch.int32).cpu(), a.view(torch.int32))
    c = torch.view_as_complex(d.view(4, 3, 2))
    assert c.dtype == torch.complex64
    assert_same(torch.view_as_real(c).cpu(), a.view(4, 3, 2))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_writes_through_views_reach_the_base(dtype):
    a = make((5, 8), dtype)
    d = a.to("spyre")
    ref = a.clone()
    src = make((3, 2), dtype, seed=3)
    d[1:4, 2:4] = src.to("spyre")  # copy_ into a view (device -> device)
    ref[1:4, 2:4] = src
    d.t()[5] = src[0, 0].to("spyre")  # a column through a transposed view
    ref.t()[5] = src[0, 0]
    assert_same(d.cpu(), ref)


def test_view_of_a_view_keeps_offsets():
    a = torch.arange(100, dtype=torch.int64)
    d = a.to("spyre")
    v = d[10:90].view(8, 10)[2:6, 3:7]
    assert v.storage_offset() == 10 + 2 * 10 + 3
    assert_same(v.cpu(), a[10:90].view(8, 10)[2:6, 3:7].contiguous())
    assert v.data_ptr() == d.data_ptr() + 8 * v.storage_offset()

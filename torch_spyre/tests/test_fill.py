"""fill_ / zero_ and the factories built on them, through libspyre's device fills."""

import pytest
import torch

import torch_spyre
from conftest import DTYPES, assert_same, make


@pytest.fixture(autouse=True)
def strict_no_fallback(fallback_reset, monkeypatch):
    # Strict mode makes any CPU fallback an error: fills must not use it.
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")
    yield
    assert torch_spyre.fallback_counts() == {}


VALUES = {torch.float32: -1.25, torch.float16: 3.5, torch.bfloat16: 0.1,
          torch.int64: -(2**40) - 3, torch.bool: True}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fill_and_zero(dtype):
    v = VALUES[dtype]
    for shape in [(), (1,), (1000,), (3, 70, 5)]:
        d = make(shape, dtype).to("spyre")
        d.fill_(v)
        assert_same(d.cpu(), torch.full(shape, v, dtype=dtype))
        d.zero_()
        assert_same(d.cpu(), torch.zeros(shape, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_factories(dtype):
    assert_same(torch.zeros(4, 5, dtype=dtype, device="spyre").cpu(), torch.zeros(4, 5, dtype=dtype))
    assert_same(torch.ones(4, 5, dtype=dtype, device="spyre").cpu(), torch.ones(4, 5, dtype=dtype))
    v = VALUES[dtype]
    assert_same(torch.full((2, 3), v, dtype=dtype, device="spyre:1").cpu(),
                torch.full((2, 3), v, dtype=dtype))
    e = torch.empty(6, dtype=dtype, device="spyre")
    assert_same(torch.zeros_like(e).cpu(), torch.zeros(6, dtype=dtype))
    assert_same(torch.ones_like(e).cpu(), torch.ones(6, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fill_strided_views(dtype):
    v = VALUES[dtype]
    a = make((6, 9, 4), dtype)
    for f in (lambda t: t[:, 2:5], lambda t: t[::2, :, 1], lambda t: t.transpose(0, 1)[3],
              lambda t: t[1:5, ::3, ::2]):
        d = a.to("spyre")
        ref = a.clone()
        f(d).fill_(v)
        f(ref).fill_(v)
        assert_same(d.cpu(), ref)
        f(d).zero_()
        f(ref).zero_()
        assert_same(d.cpu(), ref)


def test_fill_with_tensor_value():
    d = torch.empty(3, 4, device="spyre")
    d.fill_(torch.tensor(2.75))  # CPU 0-dim value
    assert_same(d.cpu(), torch.full((3, 4), 2.75))
    d.fill_(torch.tensor(-4.0).to("spyre"))  # spyre 0-dim value
    assert_same(d.cpu(), torch.full((3, 4), -4.0))
    with pytest.raises(RuntimeError, match="0-dimension"):
        d.fill_(torch.ones(2))


def test_fill_patterns_are_exact():
    # -0.0 and NaN payloads are not "all bytes equal": they take spyre_fill_async.
    d = torch.empty(257, device="spyre")
    d.fill_(-0.0)
    assert_same(d.cpu().view(torch.int32), torch.full((257,), -0.0).view(torch.int32))
    h = torch.empty(33, dtype=torch.float16, device="spyre").fill_(65504.0)
    assert_same(h.cpu(), torch.full((33,), 65504.0, dtype=torch.float16))


def test_fill_of_an_expanded_tensor_is_rejected():
    d = torch.zeros(1, 3, device="spyre").expand(4, 3)
    with pytest.raises(RuntimeError, match="more than one element"):
        d.fill_(1.0)


def test_copies_and_views_do_not_fall_back_under_strict():
    a = make((4, 6), torch.float32)
    d = a.to("spyre")
    assert_same(d.t().contiguous().cpu(), a.t().contiguous())
    assert_same(d[1:3].clone().cpu(), a[1:3])
    with pytest.raises(NotImplementedError, match=r"aten::special_bessel_j0"):
        torch.special.bessel_j0(d)  # an op with no spyre kernel
    torch_spyre.reset_fallback_counts()

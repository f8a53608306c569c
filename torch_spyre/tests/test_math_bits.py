"""Complex tensors and the conjugate/negative math bits on spyre: copies in every direction,
clone/resolve of conj and neg views, and the ops that produce them (torch.fft returns conjugate
views). Once a conj view's copy recursed through the math-bit fallback and clone until the
stack overflowed; the crashing cases run in a child process so a crash fails the test, not the
suite."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_spyre  # noqa: F401
from conftest import assert_same, make

COMPLEX = [torch.complex64, torch.complex128]


def cmake(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=dtype, generator=g)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize("shape", [(0,), (7,), (5, 6), (3, 0, 2)], ids=str)
def test_conj_views_copy_every_direction(dtype, shape):
    a = cmake(shape, dtype)
    d = a.to("spyre")
    v = d.conj()
    assert v.is_conj()
    assert_same(v.cpu().resolve_conj(), a.conj().resolve_conj())  # device -> host
    assert_same(v.clone().cpu(), a.conj().resolve_conj())  # clone of a conj view (d2d)
    assert_same(v.resolve_conj().cpu(), a.conj().resolve_conj())
    assert_same(torch.conj_physical(d).cpu(), torch.conj_physical(a))
    out = torch.empty(shape, dtype=dtype, device="spyre")
    out.copy_(v)  # conj view -> plain tensor on the card
    assert_same(out.cpu(), a.conj().resolve_conj())
    dst = torch.zeros(shape, dtype=dtype, device="spyre").conj()
    dst.copy_(a)  # host -> a conj view on the card: memory holds conj(a)
    assert_same(dst.conj().cpu(), a.conj().resolve_conj())
    h = torch.empty(shape, dtype=dtype).conj()
    h.copy_(v)  # conj -> conj, device -> host
    assert_same(h.resolve_conj(), a.conj().resolve_conj())


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.complex64], ids=str)
def test_neg_views_copy_and_resolve(dtype):
    a = make((4, 5), dtype) if not dtype.is_complex else cmake((4, 5), dtype)
    d = a.to("spyre")
    n = d._neg_view()
    assert n.is_neg()
    assert_same(n.cpu().resolve_neg(), -a)
    assert_same(n.clone().cpu(), -a)
    assert_same(n.resolve_neg().cpu(), -a)
    if dtype.is_complex:  # both bits at once
        both = d.conj()._neg_view()
        assert_same(both.clone().cpu(), -a.conj().resolve_conj())


def test_conj_view_of_a_broadcast_and_a_transpose():
    a = cmake((1, 6), torch.complex64)
    d = a.to("spyre")
    e = d.expand(4, 6).conj()
    assert_same(e.clone().cpu(), a.expand(4, 6).conj().resolve_conj())
    t = cmake((5, 3), torch.complex64)
    dt = t.to("spyre").t().conj()
    assert_same(dt.contiguous().cpu(), t.t().conj().resolve_conj())


def test_real_and_imag_views():
    a = cmake((3, 4), torch.complex64)
    d = a.to("spyre")
    assert_same(torch.view_as_real(d).cpu(), torch.view_as_real(a))
    assert_same(d.real.clone().cpu(), a.real.clone())
    assert_same(d.imag.clone().cpu(), a.imag.clone())
    assert_same(d.conj().imag.clone().cpu(), a.conj().imag.clone())


FFT_CASES = textwrap.dedent("""
    import torch, torch_spyre
    torch.manual_seed(0)
    x8 = torch.randn(8)
    x3 = torch.randn(5, 6, 7)
    c = torch.randn(4, 6, dtype=torch.complex64)
    cases = {
        "ifft": lambda t: torch.fft.ifft(t), "fft": lambda t: torch.fft.fft(t),
        "rfft": lambda t: torch.fft.rfft(t), "ihfft": lambda t: torch.fft.ihfft(t),
    }
    for name, f in cases.items():
        r = f(x8.to("spyre"))
        torch.testing.assert_close(r.cpu(), f(x8), msg=name)
    for name, f in {
        "hfft": lambda t: torch.fft.hfft(t, n=10, dim=1, norm="ortho"),
        "hfft2": lambda t: torch.fft.hfft2(t), "hfftn": lambda t: torch.fft.hfftn(t),
        "ihfft2": lambda t: torch.fft.ihfft2(t),
    }.items():
        torch.testing.assert_close(f(x3.to("spyre")).cpu(), f(x3), msg=name)
    torch.testing.assert_close(torch.fft.ifft(c.to("spyre")).cpu(), torch.fft.ifft(c))
    print("fft ok")
""")


def test_fft_ops_neither_crash_nor_differ():
    env = dict(os.environ, TORCH_SPYRE_STRICT="")
    p = subprocess.run([sys.executable, "-W", "ignore", "-c", FFT_CASES], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
    assert "fft ok" in p.stdout

"""Ops that run on the card through libspyre's op library (mm, bmm incl. empty operands, addmm
/ nn.Linear and addmm with alpha/beta and a broadcast self, relu,
gelu, silu, sigmoid, tanh, exp, softmax, log_softmax) against CPU within dtype tolerances, with
no CPU fallback; what the library does not take still gives CPU's answer through the fallback."""

import pytest
import torch

import torch_spyre
from conftest import FLOATS, close, make, run_python


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (5, 33, 7), (64, 128, 64), (17, 100, 130)])
def test_mm(fallback_reset, dtype, m, k, n):
    a, b = make((m, k), dtype), make((k, n), dtype, seed=1)
    r = a.to("spyre") @ b.to("spyre")
    assert r.device.type == "spyre"
    close(r.cpu(), (a.float() @ b.float()).to(dtype), dtype, scale=k ** 0.5)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_bmm_and_transposed_operands(fallback_reset, dtype):
    a, b = make((3, 10, 70), dtype), make((3, 70, 40), dtype, seed=1)
    r = torch.bmm(a.to("spyre"), b.to("spyre"))
    close(r.cpu(), torch.bmm(a.float(), b.float()).to(dtype), dtype, scale=8)
    w = make((40, 70), dtype, seed=2)
    r2 = a[0].to("spyre") @ w.to("spyre").t()  # a transposed view, read in place
    close(r2.cpu(), (a[0].float() @ w.float().t()).to(dtype), dtype, scale=8)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_transposed_first_operand_on_card(fallback_reset, dtype):
    """A^T @ B (nn.Linear's weight gradient grad^T @ x) and both operands transposed, in mm, bmm,
    addmm and baddbmm: the library takes no transposed A, so A is made dense on the card first;
    none of these may reach the CPU fallback."""
    g, x = make((70, 40), dtype), make((70, 33), dtype, seed=1)  # grad [rows, out], x [rows, in]
    gs, xs = g.to("spyre"), x.to("spyre")
    ref = (g.float().t() @ x.float()).to(dtype)
    close((gs.t() @ xs).cpu(), ref, dtype, scale=8)
    close(torch.mm(gs.t(), xs.t().contiguous().t()).cpu(), ref, dtype, scale=8)
    b = make((33, 70), dtype, seed=2)
    close((gs.t() @ b.to("spyre").t()).cpu(), (g.float().t() @ b.float().t()).to(dtype), dtype,
          scale=8)
    bias = make((33,), dtype, seed=3)
    close(torch.addmm(bias.to("spyre"), gs.t(), xs, beta=0.5, alpha=2.0).cpu(),
          (0.5 * bias.float() + 2.0 * (g.float().t() @ x.float())).to(dtype), dtype, scale=16)
    a3, b3 = make((3, 50, 10), dtype, seed=4), make((3, 50, 20), dtype, seed=5)
    ref3 = torch.bmm(a3.float().transpose(1, 2), b3.float()).to(dtype)
    close(torch.bmm(a3.to("spyre").transpose(1, 2), b3.to("spyre")).cpu(), ref3, dtype, scale=8)
    s3 = make((3, 10, 20), dtype, seed=6)
    close(torch.baddbmm(s3.to("spyre"), a3.to("spyre").transpose(1, 2), b3.to("spyre")).cpu(),
          (s3.float() + ref3.float()).to(dtype), dtype, scale=16)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_linear_backward_products_on_card(fallback_reset, dtype):
    """The products of nn.Linear's backward (grad @ W and grad^T @ x) run on the card."""
    torch.manual_seed(0)
    cpu = torch.nn.Linear(48, 24, bias=False).to(dtype)
    dev = torch.nn.Linear(48, 24, bias=False).to(dtype)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("spyre")
    x = make((2, 9, 48), dtype)
    xs = x.to("spyre").requires_grad_()
    xc = x.float().requires_grad_()
    gy = make((2, 9, 24), dtype, seed=7)
    dev(xs).backward(gy.to("spyre"))
    cpu.float()(xc).backward(gy.float())
    close(xs.grad.cpu(), xc.grad.to(dtype), dtype, scale=8)
    close(dev.weight.grad.cpu(), cpu.weight.grad.to(dtype), dtype, scale=8)
    assert not any(k.startswith(("aten::mm", "aten::bmm")) for k in torch_spyre.fallback_counts())


@pytest.mark.parametrize("dtype", FLOATS)
def test_linear_module(fallback_reset, dtype):
    torch.manual_seed(0)
    cpu = torch.nn.Linear(100, 72).to(dtype)
    dev = torch.nn.Linear(100, 72).to(dtype)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("spyre")
    x = make((9, 100), dtype)
    with torch.no_grad():
        y = dev(x.to("spyre"))
        ref = cpu.float()(x.float()).to(dtype)
    assert y.device.type == "spyre"
    close(y.cpu(), ref, dtype, scale=4)
    assert torch_spyre.fallback_counts() == {}


def test_linear_of_no_rows_is_empty_on_the_card(fallback_reset):
    # an expert of a mixture-of-experts layer that got no token: [0, in] -> [0, out] with a
    # bias (addmm), without the CPU fallback it took before
    lin = torch.nn.Linear(16, 8).to("spyre")
    for rows in ((0, 16), (2, 0, 16)):
        y = lin(torch.zeros(rows, device="spyre"))
        assert y.device.type == "spyre" and y.shape == (*rows[:-1], 8)
    y = torch.addmm(torch.zeros(0, device="spyre"), torch.zeros(3, 16, device="spyre"),
                    torch.zeros(16, 0, device="spyre"))
    assert y.shape == (3, 0)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "fn",
    [torch.relu, torch.nn.functional.silu, torch.sigmoid, torch.tanh, torch.exp,
     torch.nn.functional.gelu, lambda x: torch.nn.functional.gelu(x, approximate="tanh")],
)
def test_activations(fallback_reset, dtype, fn):
    x = make((7, 11, 13), dtype)
    r = fn(x.to("spyre"))
    close(r.cpu(), fn(x.float()).to(dtype), dtype)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(5, 100), (2, 3, 1000), (1, 1)])
def test_softmax_and_log_softmax(fallback_reset, dtype, shape):
    x = make(shape, dtype)
    close(torch.softmax(x.to("spyre"), -1).cpu(), torch.softmax(x.float(), -1).to(dtype), dtype)
    close(torch.log_softmax(x.to("spyre"), -1).cpu(),
          torch.log_softmax(x.float(), -1).to(dtype), dtype, scale=4)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,dim", [((6, 40), 0), ((3, 5, 64), 1), ((3, 5, 64), -3), ((), 0),
                                       ((0, 4), 0)])
def test_softmax_along_other_dims(fallback_reset, dtype, shape, dim):
    x = make(shape, dtype)
    r = torch.softmax(x.to("spyre"), dim)
    assert r.shape == x.shape and r.is_contiguous()
    close(r.cpu(), torch.softmax(x.float(), dim).to(dtype), dtype)
    close(torch.log_softmax(x.to("spyre"), dim).cpu(),
          torch.log_softmax(x.float(), dim).to(dtype), dtype, scale=4)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_mm_and_addmm_out(fallback_reset, dtype):
    """The out= forms (torch.compile's extern kernels): straight into a dense out, through a
    copy into a strided or resized one, and right when out is an input."""
    a, w, bias = make((9, 70), dtype), make((33, 70), dtype, seed=1), make((33,), dtype, seed=2)
    da, dw, dbias = a.to("spyre"), w.to("spyre"), bias.to("spyre")
    ref, lin = a.float() @ w.float().t(), a.float() @ w.float().t() + bias.float()
    for out in [torch.empty(9, 33, dtype=dtype, device="spyre"),  # dense: written directly
                torch.empty(33, 9, dtype=dtype, device="spyre").t(),  # strided: a copy
                torch.empty(0, dtype=dtype, device="spyre")]:  # resized
        r = torch.mm(da, dw.t(), out=out)
        assert r.data_ptr() == out.data_ptr() and r.shape == (9, 33)
        close(out.cpu(), ref.to(dtype), dtype, scale=8)
        torch.addmm(dbias, da, dw.t(), out=out)
        close(out.cpu(), lin.to(dtype), dtype, scale=8)
    sq = make((40, 40), dtype, seed=3)
    dsq = sq.to("spyre")
    torch.mm(dsq, dsq, out=dsq)  # out is an input: the product first, then the copy
    close(dsq.cpu(), (sq.float() @ sq.float()).to(dtype), dtype, scale=8)
    dsq = sq.to("spyre")
    torch.addmm(dsq[0], dsq, dsq, out=dsq)
    close(dsq.cpu(), (sq[0].float() + sq.float() @ sq.float()).to(dtype), dtype, scale=8)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_addmm_scaled_and_broadcast_self(fallback_reset, dtype):
    a, b = make((9, 70), dtype), make((70, 33), dtype, seed=1)
    da, db = a.to("spyre"), b.to("spyre")
    ref = a.float() @ b.float()
    for self_shape in [(9, 33), (33,), (9, 1), ()]:
        c = make(self_shape, dtype, seed=2)
        r = torch.addmm(c.to("spyre"), da, db, beta=0.5, alpha=-2.0)
        close(r.cpu(), (0.5 * c.float() - 2.0 * ref).to(dtype), dtype, scale=8)
    nan = torch.full((9, 33), float("nan"), dtype=dtype)
    r = torch.addmm(nan.to("spyre"), da, db, beta=0)  # beta = 0: self is not read
    close(r.cpu(), ref.to(dtype), dtype, scale=8)
    assert torch_spyre.fallback_counts() == {}


def test_products_of_empty_operands(fallback_reset):
    e, b = torch.empty(0, 5), make((5, 10), torch.float32)
    assert (e.to("spyre") @ b.to("spyre")).cpu().shape == (0, 10)
    k0 = torch.empty(5, 0).to("spyre") @ torch.empty(0, 10).to("spyre")  # an empty sum: zeros
    assert torch.equal(k0.cpu(), torch.zeros(5, 10))
    kb = torch.bmm(torch.empty(2, 3, 0).to("spyre"), torch.empty(2, 0, 4).to("spyre"))
    assert torch.equal(kb.cpu(), torch.zeros(2, 3, 4))
    assert torch_spyre.fallback_counts() == {}


def test_what_the_library_does_not_take_falls_back(fallback_reset):
    a, b = make((4, 6), torch.float64), make((6, 3), torch.float64, seed=1)
    r = a.to("spyre") @ b.to("spyre")  # float64: no device kernel
    assert torch.equal(r.cpu(), a @ b)
    assert "aten::mm" in torch_spyre.fallback_counts()


def test_a_linear_relu_softmax_model_runs_without_fallback_in_strict_mode():
    r = run_python(
        "import torch, torch_spyre\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32),\n"
        "                        torch.nn.SiLU(), torch.nn.Linear(32, 10), torch.nn.Softmax(-1)).half()\n"
        "x = torch.randn(8, 64).half()\n"
        "with torch.no_grad():\n"
        "    ref = m.float()(x.float())\n"
        "    m = m.half().to('spyre')\n"
        "    y = m(x.to('spyre')).cpu().float()\n"
        "print('max err', float((y - ref).abs().max()))\n"
        "print('fallbacks', torch_spyre.fallback_counts())\n"
        "assert (y - ref).abs().max() < 2e-2\n",
        TORCH_SPYRE_STRICT="1",
    )
    assert r.returncode == 0, r.stderr + r.stdout
    assert "fallbacks {}" in r.stdout, r.stdout

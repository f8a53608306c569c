"""The CPU fallback: CPU's answers for ops without a spyre kernel, in-place and out= args and
views handled, one warning per op, TORCH_SPYRE_STRICT=1 makes it an error; a torch.nn.Linear
moved to spyre."""

import warnings

import pytest
import torch

import torch_spyre
from conftest import assert_same, make, run_python


def fallback_warnings(fn):
    """Runs fn, returns (result, list of torch_spyre fallback warning messages)."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = fn()
    return r, [str(x.message) for x in w if "no spyre kernel" in str(x.message)]


def test_fallback_matches_cpu_and_warns_once(fallback_reset):
    # (arithmetic, norms, reductions, ... have kernels on the op library: tests/test_*.py)
    a, b = make((7, 9), torch.float32), make((7, 9), torch.float32, seed=1)
    da, db = a.to("spyre"), b.to("spyre")
    r, msgs = fallback_warnings(lambda: torch.nextafter(da, db))
    assert r.device == da.device
    assert_same(r.cpu(), torch.nextafter(a, b))
    assert len(msgs) == 1 and "aten::nextafter" in msgs[0] and "TORCH_SPYRE_STRICT" in msgs[0]
    r2, msgs2 = fallback_warnings(lambda: torch.nextafter(db, da))
    assert_same(r2.cpu(), torch.nextafter(b, a))
    assert msgs2 == []  # once per op
    assert torch_spyre.fallback_counts() == {"aten::nextafter.out": 2}


def test_ops_without_a_spyre_kernel(fallback_reset):
    # (mm, softmax and gelu have kernels on the op library: tests/test_ops.py)
    a = make((16, 32), torch.float32)
    da = a.to("spyre")
    r, msgs = fallback_warnings(lambda: torch.special.bessel_j0(da))
    assert_same(r.cpu(), torch.special.bessel_j0(a))
    assert any("aten::special_bessel_j0" in m for m in msgs)
    s, msgs = fallback_warnings(lambda: torch.special.erfcx(da))
    assert_same(s.cpu(), torch.special.erfcx(a))
    assert any("aten::special_erfcx" in m for m in msgs)
    v, i = da.max(dim=1)
    assert_same(v.cpu(), a.max(dim=1).values)
    assert_same(i.cpu(), a.max(dim=1).indices)
    assert da.sum().item() == pytest.approx(a.sum().item(), rel=1e-5, abs=1e-4)
    assert torch.equal(da, da.clone()) and not torch.equal(da, da + 1)
    assert_same(torch.cat([da, da * 0]).cpu(), torch.cat([a, a * 0]))
    assert_same(da[da > 0].cpu(), a[a > 0])  # masked indexing


def test_in_place_and_views(fallback_reset):
    a = make((6, 8), torch.float32)
    d = a.to("spyre")
    ptr = d.data_ptr()
    e = make((6, 8), torch.float32, seed=1)
    r, msgs = fallback_warnings(lambda: d.nextafter_(e.to("spyre")))
    assert r is d and d.data_ptr() == ptr  # in place: the same spyre tensor
    # nextafter_ is structured: its in-place kernel is nextafter.out with out=self
    assert len(msgs) == 1 and "aten::nextafter.out" in msgs[0]
    assert torch_spyre.fallback_counts() == {"aten::nextafter.out": 1}
    ref = torch.nextafter(a, e)
    assert_same(d.cpu(), ref)
    d[1:4, ::3].nextafter_(d[1:4, 1::3])  # in place on a strided view: the base changes there only
    ref[1:4, ::3].nextafter_(ref[1:4, 1::3])
    assert_same(d.cpu(), ref)
    f = make((6,), torch.float32, seed=2)
    d.t()[2].sub_(f.to("spyre"))
    ref.t()[2].sub_(f)
    assert_same(d.cpu(), ref)


def test_out_variant(fallback_reset):
    a, b = make((4, 5), torch.float32), make((4, 5), torch.float32, seed=1)
    da, db = a.to("spyre"), b.to("spyre")
    out = torch.empty(4, 5, device="spyre")
    ptr = out.data_ptr()
    r = torch.mul(da, db, out=out)
    assert r is out and out.data_ptr() == ptr
    assert_same(out.cpu(), a * b)
    # out= into a view of a larger tensor
    big = torch.zeros(4, 10, device="spyre")
    torch.mul(da, db, out=big[:, 5:])
    ref = torch.zeros(4, 10)
    ref[:, 5:] = a * b
    assert_same(big.cpu(), ref)
    # out= of the wrong size is resized, as on the CPU
    small = torch.empty(0, device="spyre")
    torch.matmul(da, db.t(), out=small)
    assert small.shape == (4, 4)
    assert_same(small.cpu(), a @ b.t())


def test_mixed_cpu_scalar_and_devices(fallback_reset):
    d = make((3, 3), torch.float32).to("spyre")
    r = d * torch.tensor(2.0)  # a CPU 0-dim tensor is a scalar
    assert r.device.type == "spyre"
    assert_same(r.cpu(), make((3, 3), torch.float32) * 2)
    with pytest.raises(RuntimeError, match="same device"):
        d + torch.ones(3, 3, device="spyre:1")


def test_factories_and_random_ops(fallback_reset):
    assert_same(torch.arange(5, device="spyre").cpu(), torch.arange(5))
    assert_same(torch.linspace(0, 1, 5, device="spyre").cpu(), torch.linspace(0, 1, 5))
    # random ops the cores do not generate (float64) fall back and draw from the CPU generator
    torch.manual_seed(7)
    r = torch.randn(3, 4, device="spyre", dtype=torch.float64)
    torch.manual_seed(7)
    assert_same(r.cpu(), torch.randn(3, 4, dtype=torch.float64))
    assert "aten::normal_" in torch_spyre.fallback_counts()


def test_strict_mode_in_process(fallback_reset, monkeypatch):
    d = make((3, 3), torch.float32).to("spyre")
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")
    assert torch.spyre.strict()
    with pytest.raises(NotImplementedError, match=r"aten::nextafter\.out .*TORCH_SPYRE_STRICT=1"):
        torch.nextafter(d, d)
    d.fill_(2.0)  # native ops still work
    assert_same(d.cpu(), torch.full((3, 3), 2.0))
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "0")
    assert_same((d + d).cpu(), torch.full((3, 3), 4.0))


def test_strict_mode_from_the_environment():
    r = run_python(
        "import torch, torch_spyre\n"
        "x = torch.ones(4).to('spyre')\n"
        "assert torch.spyre.strict()\n"
        "y = x.t().contiguous(); x.zero_(); print(x.cpu().tolist())\n"
        "try:\n"
        "    torch.special.bessel_j0(x)\n"
        "except NotImplementedError as e:\n"
        "    print('raised', 'aten::special_bessel_j0' in str(e))\n",
        TORCH_SPYRE_STRICT="1",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[0.0, 0.0, 0.0, 0.0]", "raised True"], r.stdout


def test_linear_module(fallback_reset):
    torch.manual_seed(0)
    cpu = torch.nn.Linear(20, 7)
    dev = torch.nn.Linear(20, 7)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("spyre")
    assert dev.weight.device.type == "spyre" and isinstance(dev.weight, torch.nn.Parameter)
    x = make((5, 20), torch.float32)
    y = dev(x.to("spyre"))
    assert y.device.type == "spyre"
    assert_same(y.detach().cpu(), cpu(x).detach())
    # backward through the fallback gives CPU's gradients too
    y.sum().backward()
    cpu(x).sum().backward()
    assert dev.weight.grad.device.type == "spyre"
    assert_same(dev.weight.grad.cpu(), cpu.weight.grad)
    assert_same(dev.bias.grad.cpu(), cpu.bias.grad)


def test_small_mlp_in_half_precision(fallback_reset):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = make((3, 8), torch.float32)
    ref = model.half()(x.half())
    out = model.to("spyre")(x.half().to("spyre"))
    assert_same(out.detach().cpu(), ref.detach())


def test_tensor_list_arguments(fallback_reset):
    a = [make((3, 4), torch.float32, seed=i) for i in range(3)]
    d = [t.to("spyre") for t in a]
    d[1] = d[1].to("spyre:0")[:, 1:]  # a view among them
    a[1] = a[1][:, 1:]
    torch._foreach_add_(d, 1.5)  # Tensor(a!)[]: every element written back
    for x, y in zip(d, a):
        assert_same(x.cpu(), y + 1.5)
    r = torch._foreach_mul(d, 2.0)  # a new list on spyre
    assert all(t.device.type == "spyre" for t in r)
    for x, y in zip(r, a):
        assert_same(x.cpu(), (y + 1.5) * 2.0)
    s = torch.cat([d[0], d[2].double()])  # cat.out of two dtypes: a Tensor[] input
    assert_same(s.cpu(), torch.cat([a[0] + 1.5, (a[2] + 1.5).double()]))
    assert "aten::cat.out" in torch_spyre.fallback_counts()
    # A mutable Tensor(a!)[] argument through the fallback itself (float64 gradients: the
    # card's unscale takes 16- and 32-bit floats)
    found, inv = torch.zeros(1).to("spyre"), torch.tensor([0.5]).to("spyre")
    d = [t.double() for t in d]
    torch._amp_foreach_non_finite_check_and_unscale_(d, found, inv)
    for x, y in zip(d, a):
        assert_same(x.cpu(), (y + 1.5).double() * 0.5)
    assert found.item() == 0.0
    assert "aten::_amp_foreach_non_finite_check_and_unscale_" in torch_spyre.fallback_counts()
    # Tensor?[] indices (index_put_ on dims that are not adjacent: the CPU fallback), integer
    # indices on spyre
    t = torch.zeros(4, 3, 5).to("spyre")
    t[torch.tensor([0, 2]).to("spyre"), :, torch.tensor([1, 4]).to("spyre")] = 7.0
    ref = torch.zeros(4, 3, 5)
    ref[torch.tensor([0, 2]), :, torch.tensor([1, 4])] = 7.0
    assert_same(t.cpu(), ref)
    assert "aten::_index_put_impl_" in torch_spyre.fallback_counts()


@pytest.mark.parametrize("foreach", [False, True])
def test_optimizer_steps_match_cpu(fallback_reset, foreach):
    torch.manual_seed(3)
    cpu = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    dev = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    dev.load_state_dict(cpu.state_dict())
    dev.to("spyre")
    for opt_cls, kw in [(torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
                        (torch.optim.Adam, dict(lr=0.01))]:
        oc = opt_cls(cpu.parameters(), foreach=foreach, **kw)
        od = opt_cls(dev.parameters(), foreach=foreach, **kw)
        for step in range(3):
            x = make((5, 4), torch.float32, seed=10 + step)
            for model, opt, device in ((cpu, oc, "cpu"), (dev, od, "spyre")):
                opt.zero_grad()
                model(x.to(device)).pow(2).mean().backward()
                opt.step()
        for p, q in zip(dev.parameters(), cpu.parameters()):
            assert p.device.type == "spyre"
            # the arithmetic and reductions of the steps run on the card (their own rounding
            # order), the rest on the fallback
            torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)

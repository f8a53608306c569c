"""torch.autocast(device_type="spyre"): PyTorch's op lists on the AutocastPrivateUse1 key.
Matmul-like ops compute in the autocast type, softmax/norms/losses in fp32, multi-input ops
promote; results and types are those of CPU autocast with the same dtype, and the products run on
the card (no fallback)."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import make

LOW = [torch.bfloat16, torch.float16]


def test_device_module_reports_amp_types():
    assert torch.spyre.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.spyre.is_bf16_supported()
    assert torch.amp.is_autocast_available("spyre")


@pytest.mark.parametrize("dtype", LOW)
def test_products_run_in_the_autocast_type(fallback_reset, dtype):
    a, b = make((9, 40), torch.float32), make((40, 17), torch.float32, seed=1)
    bias = make((17,), torch.float32, seed=2)
    a3, b3 = make((2, 9, 40), torch.float32, seed=3), make((2, 40, 17), torch.float32, seed=4)
    ops = {
        "mm": lambda a, b, bias, a3, b3: a @ b,
        "linear": lambda a, b, bias, a3, b3: F.linear(a, b.t(), bias),
        "addmm": lambda a, b, bias, a3, b3: torch.addmm(bias, a, b),
        "bmm": lambda a, b, bias, a3, b3: torch.bmm(a3, b3),
        "matmul": lambda a, b, bias, a3, b3: torch.matmul(a3, b),
    }
    args = (a, b, bias, a3, b3)
    for name, fn in ops.items():
        with torch.autocast("cpu", dtype=dtype):
            want = fn(*args)
        with torch.autocast("spyre", dtype=dtype):
            got = fn(*(t.to("spyre") for t in args))
        assert got.dtype == want.dtype == dtype, name
        # both round the fp32 inputs to the autocast type first; fp32 accumulation either way
        torch.testing.assert_close(got.cpu().float(), want.float(), rtol=2e-2, atol=2e-2,
                                   msg=name)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", LOW)
def test_softmax_norms_and_losses_run_in_fp32(fallback_reset, dtype):
    x = make((6, 32), dtype)
    w = torch.ones(32)
    target = torch.randint(0, 32, (6,))
    cases = {
        "softmax": lambda x, w, t: torch.softmax(x, -1),
        "log_softmax": lambda x, w, t: torch.log_softmax(x, -1),
        "layer_norm": lambda x, w, t: F.layer_norm(x, (32,), w),
        # (cross_entropy passes log_softmax the input's own dtype, so autocast keeps it in 16
        # bits, on CUDA too; its nll_loss is the listed fp32 op)
        "nll_loss": lambda x, w, t: F.nll_loss(x, t),
        "sum": lambda x, w, t: torch.sum(x, -1),
        "exp": lambda x, w, t: torch.exp(x),
    }
    for name, fn in cases.items():
        # CUDA's policy (CPU autocast keeps softmax in 16 bits): the op on the input made fp32
        want = fn(x.float(), w, target)
        with torch.autocast("spyre", dtype=dtype):
            got = fn(x.to("spyre"), w.to("spyre"), target.to("spyre"))
        assert got.dtype == torch.float32, (name, got.dtype)
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, name=name: f"{name}: {m}")


def test_unlisted_ops_keep_their_types_and_nesting_disables(fallback_reset):
    a, b = make((8, 8), torch.float32).to("spyre"), make((8, 8), torch.float32, 1).to("spyre")
    with torch.autocast("spyre", dtype=torch.bfloat16):
        assert (a + b).dtype == torch.float32  # not listed: falls through
        assert torch.relu(a).dtype == torch.float32
        with torch.autocast("spyre", enabled=False):
            assert (a @ b).dtype == torch.float32
        assert (a @ b).dtype == torch.bfloat16
    assert (a @ b).dtype == torch.float32  # outside: no casts


def test_autocast_of_a_type_the_card_lacks_warns_and_disables():
    a = make((4, 4), torch.float32).to("spyre")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with torch.autocast("spyre", dtype=torch.float64):
            r = a @ a
    assert r.dtype == torch.float32
    assert any("not supported" in str(x.message) for x in w)


def test_binary_cross_entropy_is_refused_under_autocast():
    p = torch.rand(5).to("spyre")
    t = torch.rand(5).to("spyre")
    with torch.autocast("spyre", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            F.binary_cross_entropy(p, t)
        F.binary_cross_entropy_with_logits(p, t)  # the safe form runs


def test_a_decoder_block_under_autocast_matches_cpu_autocast(fallback_reset):
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.LayerNorm(64), torch.nn.Linear(64, 128),
                                torch.nn.GELU(), torch.nn.Linear(128, 64))
    dev = torch.nn.Sequential(torch.nn.LayerNorm(64), torch.nn.Linear(64, 128),
                              torch.nn.GELU(), torch.nn.Linear(128, 64))
    dev.load_state_dict(block.state_dict())
    dev = dev.to("spyre")
    x = make((3, 7, 64), torch.float32)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want = torch.softmax(block(x), -1)
        with torch.autocast("spyre", dtype=torch.bfloat16):
            got = torch.softmax(dev(x.to("spyre")), -1)
    assert got.dtype == torch.float32  # softmax in fp32 (CPU autocast keeps it in bf16)
    torch.testing.assert_close(got.cpu(), want.float(), rtol=3e-2, atol=3e-3)
    assert torch_spyre.fallback_counts() == {}


def test_grad_scaler_unscale_checks_every_gradient_on_the_card(fallback_reset):
    # GradScaler.unscale_'s kernel: each gradient multiplied by inv_scale, found_inf set when any
    # value of any gradient is inf or NaN (it copied every gradient to the host and back)
    grads = [make((5, 7), torch.float32), make((300,), torch.float16, seed=1),
             make((4, 130), torch.bfloat16, seed=2), torch.zeros(0)]
    for bad in (None, (1, 17, float("inf")), (2, 3, float("nan")), (0, 0, float("-inf"))):
        cpu = [g.clone() for g in grads]
        if bad is not None:
            cpu[bad[0]].view(-1)[bad[1]] = bad[2]
        dev = [g.to("spyre") for g in cpu]
        inv = torch.tensor(0.125)
        found_c, found_d = torch.zeros(1), torch.zeros(1, device="spyre")
        torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_c, inv)
        torch._amp_foreach_non_finite_check_and_unscale_(dev, found_d, inv.to("spyre"))
        assert torch.equal(found_d.cpu(), found_c), bad
        for d, c in zip(dev, cpu):
            assert torch.equal(d.cpu().nan_to_num(9.0), c.nan_to_num(9.0)), bad
    assert torch_spyre.fallback_counts() == {}


def test_grad_scaler_update_follows_the_cpu_on_the_card(fallback_reset):
    # backoff on inf, growth after growth_interval clean steps, no growth past fp32's range
    for start in (1024.0, 2.0 ** 127):
        sc, tr = torch.tensor([start]), torch.zeros(1, dtype=torch.int32)
        sd, td = sc.to("spyre"), tr.to("spyre")
        for found in (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0):
            f = torch.tensor([found])
            torch._amp_update_scale_(sc, tr, f, 2.0, 0.5, 2)
            torch._amp_update_scale_(sd, td, f.to("spyre"), 2.0, 0.5, 2)
            assert torch.equal(sd.cpu(), sc) and torch.equal(td.cpu(), tr), (start, found)
    assert torch_spyre.fallback_counts() == {}


def test_grad_scaler_training_skips_the_step_of_an_overflow_as_the_cpu(fallback_reset):
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    dev = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("spyre")
    runs = [(cpu, torch.optim.SGD(cpu.parameters(), lr=0.1),
             torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2), "cpu"),
            (dev, torch.optim.SGD(dev.parameters(), lr=0.1),
             torch.amp.GradScaler("spyre", init_scale=256.0, growth_interval=2), "spyre")]
    x = make((8, 16), torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the scale's fp64 reciprocal stays a CPU fallback
        for step in range(5):
            for model, opt, scaler, d in runs:
                opt.zero_grad()
                loss = model(x.to(d)).square().mean() * (float("inf") if step == 2 else 1.0)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
    assert runs[1][2].get_scale() == runs[0][2].get_scale()
    for a, b in zip(dev.parameters(), cpu.parameters()):
        assert torch.allclose(a.detach().cpu(), b.detach(), atol=1e-6)
    counts = torch_spyre.fallback_counts()
    assert not any("_amp_" in k for k in counts), counts

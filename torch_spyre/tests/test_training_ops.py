"""Training-step kernels on the card against the CPU: the optimizers' pointwise steps (addcmul,
addcdiv, lerp), x ** 3, and the backward kernels of ReLU, SiLU, softmax, log_softmax, layer
and group norm and dropout; then
whole SGD-with-momentum and AdamW steps (foreach and single-tensor) that match the CPU's
parameters without reaching the CPU fallback in those ops; torch.func's jacrev, jacfwd and
hessian (zero tensors, ReLU's gradient of batched tangents) with no fallback; torch.func.grad
through the composites Vulkan also implements (layer_norm, expand_as, var, conv1d, tile,
max_pool2d, batch_norm, LSTM, GRU), which raised an internal assert of the dispatcher;
weight_norm (old and parametrization forms, over dim 0 and the last) with its gradients."""

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import FLOATS, close, make

ON_CARD = ("aten::addcmul", "aten::addcdiv", "aten::lerp", "aten::pow", "aten::threshold_backward",
           "aten::silu_backward", "aten::gelu_backward", "aten::native_layer_norm_backward",
           "aten::_softmax_backward_data", "aten::_log_softmax_backward_data",
           "aten::mse_loss", "aten::native_group_norm_backward", "aten::native_dropout_backward",
           "aten::sigmoid_backward", "aten::tanh_backward")


def assert_on_card():
    left = [k for k in torch_spyre.fallback_counts() if k.startswith(ON_CARD)]
    assert left == [], left


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", [torch.addcmul, torch.addcdiv])
def test_addcmul_addcdiv(fallback_reset, dtype, op):
    s, a = make((5, 33), dtype), make((5, 33), dtype, seed=1)
    b = make((5, 33), dtype, seed=2).abs() + 0.5  # away from 0 for addcdiv
    for value in (1, -0.25, 3.5):
        want = op(s.float(), a.float(), b.float(), value=value).to(dtype)
        close(op(s.to("spyre"), a.to("spyre"), b.to("spyre"), value=value).cpu(), want, dtype)
    # broadcast operands, strided views, in place and out=
    row = make((33,), dtype, seed=3).abs() + 0.5
    close(op(s.to("spyre").t().contiguous().t(), a.to("spyre"), row.to("spyre"), value=2).cpu(),
          op(s.float(), a.float(), row.float(), value=2).to(dtype), dtype)
    x = s.to("spyre")
    getattr(x, op.__name__ + "_")(a.to("spyre"), b.to("spyre"), value=0.5)
    close(x.cpu(), op(s.float(), a.float(), b.float(), value=0.5).to(dtype), dtype)
    out = torch.empty(0, dtype=dtype, device="spyre")
    op(s.to("spyre"), a.to("spyre"), b.to("spyre"), out=out)
    close(out.cpu(), op(s.float(), a.float(), b.float()).to(dtype), dtype)
    assert op(*(torch.empty(0, 3, dtype=dtype, device="spyre") for _ in range(3))).shape == (0, 3)
    assert_on_card()


@pytest.mark.parametrize("dtype", FLOATS)
def test_lerp_with_a_number_weight(fallback_reset, dtype):
    s, e = make((7, 40), dtype), make((7, 40), dtype, seed=1)
    for w in (0.0, 0.1, 0.5, 0.9, 1.0, -0.5, 1.5):
        want = torch.lerp(s.float(), e.float(), w).to(dtype)
        got = torch.lerp(s.to("spyre"), e.to("spyre"), w).cpu()
        close(got, want, dtype)
        if w in (0.0, 1.0):  # exact at both ends, as torch's two-sided formula
            assert torch.equal(got, (s if w == 0.0 else e))
    x = s.to("spyre")
    x.lerp_(e.to("spyre"), 0.3)
    close(x.cpu(), torch.lerp(s.float(), e.float(), 0.3).to(dtype), dtype)
    assert_on_card()


@pytest.mark.parametrize("dtype", FLOATS)
def test_cube(fallback_reset, dtype):
    x = make((6, 50), dtype)
    close((x.to("spyre") ** 3).cpu(), (x.float() ** 3).to(dtype), dtype)
    if dtype == torch.float32:  # x * x * x as the CPU computes it: bit-identical
        assert torch.equal((x.to("spyre") ** 3).cpu(), x ** 3)
    assert_on_card()


def grads(fn, x, g, device):
    xd = x.to(device).requires_grad_()
    fn(xd).backward(g.to(device))
    return xd.grad.cpu()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name,fn", [
    ("relu", torch.relu), ("silu", F.silu), ("gelu", F.gelu), ("sigmoid", torch.sigmoid),
    ("tanh", torch.tanh),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    ("softmax_last", lambda x: torch.softmax(x, -1)),
    ("softmax_dim0", lambda x: torch.softmax(x, 0)),
    ("log_softmax_last", lambda x: torch.log_softmax(x, -1)),
    ("log_softmax_dim1", lambda x: torch.log_softmax(x, 1)),
])
def test_backward_kernels(fallback_reset, dtype, name, fn):
    x, g = make((4, 9, 21), dtype), make((4, 9, 21), dtype, seed=5)
    if name == "relu":
        x[0, 0, :3] = 0.0  # at the threshold: no gradient
        x[0, 1, 0] = float("nan")  # NaN passes the gradient, as on the CPU
    got = grads(fn, x, g, "spyre")
    want = grads(lambda t: fn(t.float()).to(dtype), x, g, "cpu")
    if name == "relu":
        assert torch.equal(got, want)
    else:
        close(got, want, dtype, scale=4)
    assert_on_card()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward(fallback_reset, dtype, affine):
    torch.manual_seed(0)
    cpu = torch.nn.LayerNorm((6, 20), elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            cpu.weight.uniform_(0.5, 1.5)
            cpu.bias.uniform_(-0.5, 0.5)
    dev = torch.nn.LayerNorm((6, 20), elementwise_affine=affine)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to(device="spyre", dtype=dtype)
    x, g = make((3, 6, 20), dtype) * 3 + 1, make((3, 6, 20), dtype, seed=4)
    xs = x.to("spyre").requires_grad_()
    dev(xs).backward(g.to("spyre"))
    xc = x.float().requires_grad_()
    cpu(xc).backward(g.float())
    close(xs.grad.cpu(), xc.grad.to(dtype), dtype, scale=8)
    if affine:
        close(dev.weight.grad.cpu(), cpu.weight.grad.to(dtype), dtype, scale=8)
        close(dev.bias.grad.cpu(), cpu.bias.grad.to(dtype), dtype, scale=8)
    assert_on_card()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_backward(strict, dtype, affine):
    """nn.GroupNorm's input, weight and bias gradients on the card (4-D and 3-D inputs)."""
    torch.manual_seed(0)
    for shape, groups in (((3, 12, 5, 7), 4), ((2, 6, 9), 3), ((2, 6, 1, 1), 6)):
        cpu = torch.nn.GroupNorm(groups, shape[1], affine=affine)
        if affine:
            with torch.no_grad():
                cpu.weight.uniform_(0.5, 1.5)
                cpu.bias.uniform_(-0.5, 0.5)
        dev = torch.nn.GroupNorm(groups, shape[1], affine=affine)
        dev.load_state_dict(cpu.state_dict())
        dev = dev.to(device="spyre", dtype=dtype)
        x, g = make(shape, dtype) * 3 + 1, make(shape, dtype, seed=4)
        xs = x.to("spyre").requires_grad_()
        dev(xs).backward(g.to("spyre"))
        xc = x.float().requires_grad_()
        cpu(xc).backward(g.float())
        close(xs.grad.cpu(), xc.grad.to(dtype), dtype, scale=8)
        if affine:
            close(dev.weight.grad.cpu(), cpu.weight.grad.to(dtype), dtype, scale=16)
            close(dev.bias.grad.cpu(), cpu.bias.grad.to(dtype), dtype, scale=16)


@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout_backward(strict, dtype):
    """The gradient of a training-mode dropout is grad * mask / (1 - p), the forward's own mask
    (checked against the kept elements), on the card."""
    x = make((7, 65), dtype).abs() + 0.5  # nonzero: the output shows the mask
    xs = x.to("spyre").requires_grad_()
    y = torch.nn.functional.dropout(xs, p=0.3, training=True)
    g = make((7, 65), dtype, seed=2)
    y.backward(g.to("spyre"))
    kept = (y.detach().cpu() != 0).to(dtype)
    assert 0 < kept.float().mean() < 1
    close(xs.grad.cpu(), (g.float() * kept.float() / 0.7).to(dtype), dtype)
    out, mask = torch.native_dropout(xs.detach(), 0.5, True)
    got = torch.ops.aten.native_dropout_backward(g.to("spyre"), mask, 2.0)
    close(got.cpu(), (g.float() * mask.cpu().float() * 2).to(dtype), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_and_backward(fallback_reset, dtype, reduction):
    x, y = make((5, 17), dtype), make((5, 17), dtype, seed=1)
    xs = x.to("spyre").requires_grad_()
    loss = F.mse_loss(xs, y.to("spyre"), reduction=reduction)
    xc = x.float().requires_grad_()
    ref = F.mse_loss(xc, y.float(), reduction=reduction)
    assert loss.dtype == dtype and loss.shape == ref.shape
    close(loss.detach().cpu(), ref.detach().to(dtype), dtype, scale=8)
    g = make(ref.shape, dtype, seed=2)
    loss.backward(g.to("spyre"))
    ref.backward(g.float())
    close(xs.grad.cpu(), xc.grad.to(dtype), dtype, scale=4)
    assert_on_card()


def steps(opt_cls, device, **kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.ReLU(), torch.nn.Linear(40, 8))
    model = model.to(device)
    opt = opt_cls(model.parameters(), **kw)
    x = make((16, 24), torch.float32).to(device)
    y = make((16, 8), torch.float32, seed=9).to(device)
    for _ in range(3):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("opt_cls,kw", [
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, foreach=True)),
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, foreach=False)),
    (torch.optim.Adam, dict(lr=1e-2, amsgrad=True, foreach=False)),
])
def test_optimizer_steps_match_cpu(fallback_reset, opt_cls, kw):
    got, want = steps(opt_cls, "spyre", **kw), steps(opt_cls, "cpu", **kw)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert_on_card()


@pytest.mark.parametrize("opt,kw", [
    ("AdamW", {"weight_decay": 0.05}), ("AdamW", {"amsgrad": True, "maximize": True}),
    ("Adam", {"weight_decay": 0.01}), ("AdamW", {"lr": torch.tensor(0.01)}),
    ("SGD", {"momentum": 0.9, "weight_decay": 0.01}),
    ("SGD", {"momentum": 0.9, "nesterov": True, "maximize": True}),
    ("SGD", {"momentum": 0.5, "dampening": 0.3}), ("SGD", {}),
    ("Adagrad", {"lr_decay": 0.1, "weight_decay": 0.01}), ("Adagrad", {"maximize": True})])
def test_fused_optimizers_step_on_the_card_as_the_cpu(fallback_reset, opt, kw):
    # fused=True (the fused kernels torch offers on every device that has them): the step took
    # the CPU fallback, every parameter, gradient and moment to the host and back
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32),
                              torch.nn.Linear(32, 4))
    dev = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32),
                              torch.nn.Linear(32, 4))
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("spyre")
    kw = {"lr": 0.01, **kw}
    o_cpu = getattr(torch.optim, opt)(cpu.parameters(), **kw)
    o_dev = getattr(torch.optim, opt)(dev.parameters(), fused=True, **kw)
    x = make((8, 16), torch.float32)
    for _ in range(4):
        for model, o, d in ((cpu, o_cpu, "cpu"), (dev, o_dev, "spyre")):
            o.zero_grad()
            model(x.to(d)).square().mean().backward()
            o.step()
    for a, b in zip(dev.parameters(), cpu.parameters()):
        close(a.detach().cpu(), b.detach(), torch.float32)
    assert torch_spyre.fallback_counts() == {}


def test_fused_adamw_with_a_grad_scaler_skips_an_overflow(fallback_reset):
    torch.manual_seed(1)
    cpu = torch.nn.Linear(16, 8)
    dev = torch.nn.Linear(16, 8)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("spyre")
    runs = [(cpu, torch.optim.AdamW(cpu.parameters(), lr=0.01),
             torch.amp.GradScaler("cpu", init_scale=64.0), "cpu"),
            (dev, torch.optim.AdamW(dev.parameters(), lr=0.01, fused=True),
             torch.amp.GradScaler("spyre", init_scale=64.0), "spyre")]
    x = make((8, 16), torch.float32)
    for step in range(4):
        for model, o, scaler, d in runs:
            o.zero_grad()
            loss = model(x.to(d)).square().mean() * (float("inf") if step == 1 else 1.0)
            scaler.scale(loss).backward()
            scaler.step(o)
            scaler.update()
    for a, b in zip(dev.parameters(), cpu.parameters()):
        close(a.detach().cpu(), b.detach(), torch.float32)
    assert runs[1][1].state[dev.weight]["step"].item() == 3  # the overflowed step not counted
    assert not any("fused" in k for k in torch_spyre.fallback_counts())


def test_torch_func_jacobians_stay_on_the_card(strict):
    # jacrev/hessian make zero tensors (_efficientzerotensor); jacfwd's ReLU gradient gets
    # tangents with a batch dim that the input does not have (a broadcast threshold_backward)
    from torch.func import hessian, jacfwd, jacrev, vmap

    x, w = make((5,), torch.float32, 1), make((3, 5), torch.float32, 2)

    def run(dev):
        xd, wd = x.to(dev), w.to(dev)
        return [jacrev(lambda v: v.softmax(0) * v)(xd), hessian(lambda v: (v.sin() * v).sum())(xd),
                vmap(jacrev(torch.tanh))(xd.view(5, 1)), jacrev(lambda v: wd @ v)(xd),
                jacfwd(lambda v: (wd @ v).relu())(xd), jacfwd(lambda v: F.relu(v) * v)(xd),
                torch._efficientzerotensor((2, 3), device=dev) + 1]

    for got, want in zip(run("spyre"), run("cpu")):
        close(got.cpu(), want, torch.float32)


AUTOGRAD_OTHER = {
    "layer_norm": lambda v: F.layer_norm(v, (6,)) * v,
    "expand_as": lambda v: v[:1].expand_as(v) * v,
    "var": lambda v: v.view(2, 3).var(1),
    "conv1d": lambda v: F.conv1d(v.view(1, 1, 6), v[:3].view(1, 1, 3)),
    "tile": lambda v: v.tile((2,)) * 3,
    "max_pool2d": lambda v: F.max_pool2d(v.view(1, 1, 2, 3), (1, 2)),
    "batch_norm": lambda v: F.batch_norm(v.view(2, 3), None, None, training=True) * v.view(2, 3),
}


@pytest.mark.parametrize("name", sorted(AUTOGRAD_OTHER) + ["lstm", "gru"])
def test_torch_func_grad_of_composites_vulkan_implements(strict, name):
    # a spyre tensor's GradTrackingTensor dispatches autograd through AutogradOther, whose slot
    # of these composites was ambiguous ("INTERNAL ASSERT FAILED ... a backend mapped to
    # AutogradOther"): the gradient now as torch.autograd computes it, and as the CPU's
    from torch.func import grad

    x = make((6,), torch.float32, 7)
    if name in AUTOGRAD_OTHER:
        f = AUTOGRAD_OTHER[name]
        want = grad(lambda v: f(v).pow(2).sum())(x)
        close(grad(lambda v: f(v).pow(2).sum())(x.to("spyre")).cpu(), want, torch.float32)
        return
    # torch.func refuses the CPU's RNN modules (they set .data); on spyre they run: compared
    # with torch.autograd on the card
    torch.manual_seed(0)
    rnn = (torch.nn.LSTM if name == "lstm" else torch.nn.GRU)(3, 2).to("spyre")
    xd = x.to("spyre")
    f = lambda v: rnn(v.view(2, 1, 3))[0].pow(2).sum()
    xr = xd.clone().requires_grad_()
    (want,) = torch.autograd.grad(f(xr), [xr])
    close(grad(f)(xd).cpu(), want.cpu(), torch.float32)


@pytest.mark.parametrize("old", [False, True])
@pytest.mark.parametrize("dim", [0, -1])
def test_weight_norm_on_the_card(strict, old, dim):
    # _weight_norm_interface and its backward (the fused form aten takes over dim 0 or the last)
    wrap = torch.nn.utils.weight_norm if old else torch.nn.utils.parametrizations.weight_norm
    x = make((2, 3, 7), torch.float32, 3)

    def run(dev):
        torch.manual_seed(0)
        conv = torch.nn.Conv1d(3, 4, 3)
        m = wrap(conv, dim=dim if dim == 0 else 2).to(dev)
        y = m(x.to(dev))
        (y * y).sum().backward()
        params = [p for n, p in m.named_parameters() if "bias" not in n]
        return [y.detach()] + [p.grad for p in params]

    for got, want in zip(run("spyre"), run("cpu")):
        close(got.cpu(), want, torch.float32, scale=4)

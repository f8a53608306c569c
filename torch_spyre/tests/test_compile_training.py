"""torch.compile of whole training steps on spyre (Documentation/torch_compile.md "Training").

A step (forward, loss, backward and the optimizer's update) compiled as one function gives
the losses and parameters eager mode gives on the CPU, step after step, with no CPU fallback:
the optimizers' foreach updates fuse into kernels that read a buffer after storing its
in-place update (exp_avg.lerp_() then param.addcdiv_(exp_avg, ...)), and read the step count,
a CPU scalar tensor, in device kernels (beta ** step).
"""

import pytest
import torch

import torch_spyre

OPTIMIZERS = {
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.05),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
}


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                               torch.nn.LayerNorm(128), torch.nn.Linear(128, 10))


def step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.detach()


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_compiled_training_step_trains_as_the_cpu_does(name, fallback_reset):
    torch.manual_seed(0)
    cpu_model = mlp()
    model = mlp()
    model.load_state_dict(cpu_model.state_dict())
    model = model.to("spyre")
    cpu_opt, opt = OPTIMIZERS[name](cpu_model.parameters()), OPTIMIZERS[name](model.parameters())
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
    dx, dy = x.to("spyre"), y.to("spyre")
    compiled = torch.compile(step)
    for i in range(4):
        want = step(cpu_model, cpu_opt, x, y)
        got = compiled(model, opt, dx, dy).cpu()
        # each step's loss shows the update before it (a lost update repeats the loss)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"step {i}")
    for (n, p), (_, q) in zip(model.named_parameters(), cpu_model.named_parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5,
                                   msg=n)
    assert torch_spyre.fallback_counts() == {}, torch_spyre.fallback_counts()


def test_a_compiled_backward_is_one_submission(fallback_reset):
    """The weight gradients read transposed views (grad^T @ x): their operands are made dense
    by the cores, not through the host (a download, an upload and a synchronize, each ending
    the compiled backward's submission: 15 submissions per step before)."""
    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64),
                                   torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
                                   torch.nn.Linear(64, 10))

    cpu_model, model = build(), build().to("spyre")
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
    dx, dy = x.to("spyre"), y.to("spyre")
    loss_of = torch.compile(lambda m, a, b: torch.nn.functional.cross_entropy(m(a), b))
    torch.nn.functional.cross_entropy(cpu_model(x), y).backward()
    per_step = []
    for i in range(3):
        model.zero_grad(set_to_none=True)
        torch.spyre.synchronize()
        torch_spyre._C._reset_copy_stats()
        before = torch.spyre.submissions(0)
        loss_of(model, dx, dy).backward()
        torch.spyre.synchronize()
        per_step.append(torch.spyre.submissions(0) - before)
        assert torch_spyre._C._copy_stats()["through_host"] == 0, f"step {i}"
    # the forward, the loss gradient's ones_like (eager, a fill), the backward
    assert per_step[1:] == [3, 3], per_step
    for (n, p), (_, q) in zip(model.named_parameters(), cpu_model.named_parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=n)
    assert torch_spyre.fallback_counts() == {}, torch_spyre.fallback_counts()


def test_a_kernel_reads_an_input_after_storing_its_in_place_update(fallback_reset):
    # the foreach forms keep both updates in one kernel: the second reads m after its lerp_
    def update(p, g, m):
        torch._foreach_lerp_([m], [g], 0.25)
        torch._foreach_add_([p], [m], alpha=-0.5)

    args = [torch.arange(16.0), torch.ones(16), torch.full((16,), 2.0)]
    dev = [a.to("spyre") for a in args]
    update(*args)
    torch.compile(update)(*dev)
    for got, want in zip(dev, args):
        torch.testing.assert_close(got.cpu(), want)


def test_a_compiled_encoder_layer_trains_with_no_fallback(fallback_reset):
    # its backward has Inductor's fma (the eager form's ops) and index views whose positions
    # are not affine (reshapes of permutes): both on the card
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    card = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    card.load_state_dict(layer.state_dict())
    card = card.to("spyre")
    compiled = torch.compile(card)
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(1))
    for _ in range(2):
        want, got = layer(x), compiled(x.to("spyre"))
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
        want.pow(2).mean().backward()
        got.pow(2).mean().backward()
    for (n, p), (_, q) in zip(layer.named_parameters(), card.named_parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-3, atol=1e-4, msg=n)
    assert torch_spyre.fallback_counts() == {}, torch_spyre.fallback_counts()


def test_dropout_and_random_numbers_in_a_compiled_graph(fallback_reset):
    # Inductor's own random prims (a seed buffer, Philox in Triton's kernels) are the card's
    # eager generators on spyre
    def f(x):
        return torch.nn.functional.dropout(x, 0.3, training=True), x + torch.randn_like(x)

    g = torch.compile(f)
    x = torch.ones(1000, 100).to("spyre")
    torch.manual_seed(7)
    kept, noisy = (t.cpu() for t in g(x))
    zeros = (kept == 0).float().mean().item()
    assert abs(zeros - 0.3) < 0.01, zeros
    assert torch.allclose(kept[kept != 0], torch.tensor(1 / 0.7)), kept.unique()
    assert abs(noisy.mean().item() - 1) < 0.01 and abs(noisy.std().item() - 1) < 0.01
    again = g(x)[0].cpu()
    assert not torch.equal(again, kept)  # the generator moved on
    torch.manual_seed(7)
    assert torch.equal(g(x)[0].cpu(), kept)  # and a seed repeats it
    assert torch_spyre.fallback_counts() == {}, torch_spyre.fallback_counts()


def test_a_compiled_optimizer_step_reads_its_step_count_without_splitting(fallback_reset):
    """AdamW's step counts are CPU scalar tensors its kernels read: each becomes a fill of
    its value held in the call's batch (it was a copy from host memory, which split the call:
    12 submissions for this step), and the parameters follow the CPU's step after step. Under
    backend="spyre_graphs" the capture must not keep a step count (a replay would reuse it):
    the call is not replayed and the parameters still follow the CPU."""
    for backend in ("inductor", "spyre_graphs"):
        torch.manual_seed(0)
        cpu_model, model = mlp(), mlp()
        model.load_state_dict(cpu_model.state_dict())
        model = model.to("spyre")
        cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2, weight_decay=0.05)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
        compiled_step = torch.compile(opt.step, backend=backend)
        per_step, launches = [], []
        for i in range(5):
            for m, xx, yy in ((cpu_model, x, y), (model, x.to("spyre"), y.to("spyre"))):
                torch.nn.functional.cross_entropy(m(xx), yy).backward()
            cpu_opt.step()
            torch.spyre.synchronize()
            before = torch.spyre.submissions(0)
            with torch_spyre.profiler.profile() as prof:
                compiled_step()
            per_step.append(torch.spyre.submissions(0) - before)
            launches.append(sum(e.launches for e in prof.events))
            cpu_opt.zero_grad(), opt.zero_grad()
            for (n, p), (_, q) in zip(model.named_parameters(), cpu_model.named_parameters()):
                torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5,
                                           msg=f"{backend} step {i} {n}")
        if backend == "inductor":
            # the first call compiles (Dynamo reads the state); later ones are one submission
            assert per_step[2:] == [1, 1, 1], per_step
            # `beta ** step` is the generator's pow: the bias corrections fuse with the update
            # (108 launches per step when they ran their eager forms)
            assert launches[2:] == [6] * 3, launches
    assert torch_spyre.fallback_counts() == {}, torch_spyre.fallback_counts()


def test_a_compiled_batchnorm_block_trains_fused(fallback_reset):
    # Conv2d + BatchNorm2d + ReLU, forward and backward, compiled: BatchNorm's per-channel sums
    # over N and HW (rows of N runs of HW) and its per-channel scales along HW (row operands
    # of row kernels without reductions) run fused; outputs and gradients as on the CPU
    from torch_spyre._inductor import runtime

    torch._dynamo.reset()  # static shapes: another test's Sequential would make them dynamic
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                              torch.nn.ReLU())
    dev = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                              torch.nn.ReLU())
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("spyre")
    fn = torch.compile(dev)
    g = torch.Generator().manual_seed(1)
    x, grad = torch.randn(4, 3, 16, 16, generator=g), torch.randn(4, 8, 16, 16, generator=g)
    for i in range(2):
        before = dict(runtime.STATS)
        out = fn(x.to("spyre"))
        out.backward(grad.to("spyre"))
        stats = {k: runtime.STATS[k] - before[k] for k in before}
        want = cpu(x)
        want.backward(grad)
        torch.testing.assert_close(out.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
        for (n, p), (_, q) in zip(dev.named_parameters(), cpu.named_parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-3, msg=n)
            p.grad, q.grad = None, None
        # left to the eager form: the int64 num_batches_tracked += 1 and ReLU's bool mask for
        # its backward (on main 7 of 11 kernels)
        assert stats["eager"] <= 2 and stats["refused"] == 0, stats
    assert torch_spyre.fallback_counts() == {}, torch_spyre.fallback_counts()


def test_a_compiled_decoder_backward_runs_its_layout_kernels_fused(fallback_reset):
    # TinyGranite forward and backward: RMSNorm's backward reads its per-row scale along the
    # row (a row operand), and the heads' gradient back into rows is a copy through
    # i1 // 64 and ModularIndexing(i1, 1, 64) (a fused view; the eager form gathers)
    from models import TinyGranite
    from torch_spyre._inductor import runtime

    torch._dynamo.reset()
    cpu = TinyGranite()
    dev = TinyGranite().to("spyre")
    fn = torch.compile(dev)
    t = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(1))
    before = dict(runtime.STATS)
    got = fn(t.to("spyre"), 0)
    got.float().pow(2).mean().backward()
    stats = {k: runtime.STATS[k] - before[k] for k in before}
    want = cpu(t, 0)
    want.pow(2).mean().backward()
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
    for (n, p), (_, q) in zip(dev.named_parameters(), cpu.named_parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-3, atol=1e-4, msg=n)
    # left to the eager form: 4 strided copies (the DMA's, no launch) and the int64 token ids'
    # kernel (on main 9 of 40: the three RMSNorm backward kernels and the heads' gather too)
    assert stats["eager"] <= 5 and stats["refused"] == 0, stats
    assert torch_spyre.fallback_counts() == {}, torch_spyre.fallback_counts()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_compiled_softmax_backward_is_one_fused_row_kernel(fallback_reset, dtype):
    # Inductor writes softmax's backward with its fused multiply-add (grad * y - y * sum(grad
    # * y) as fma(-y, sum, grad * y)): the description's fma (one VFMA, one rounding), so the
    # backward is one row kernel, not the eager form; the gradient as the CPU's
    from torch_spyre._inductor import runtime

    torch._dynamo.reset()

    def f(x, w):
        return (torch.softmax(x, -1) * w).float().sum()

    fn = torch.compile(f)
    g = torch.Generator().manual_seed(3)
    x, w = (torch.randn(64, 256, generator=g).to(dtype) for _ in range(2))
    fn(x.to("spyre").requires_grad_(), w.to("spyre")).backward()  # compiles both graphs
    d = x.to("spyre").requires_grad_()
    loss = fn(d, w.to("spyre"))
    before = dict(runtime.STATS)
    loss.backward()
    stats = {k: runtime.STATS[k] - before[k] for k in before}
    assert stats == {"fused": 1, "eager": 0, "refused": 0, "copies": 0}, stats
    c = x.float().requires_grad_()
    f(c, w.float()).backward()
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(d.grad.cpu().float(), c.grad, rtol=tol, atol=tol)
    assert torch_spyre.fallback_counts() == {}, torch_spyre.fallback_counts()

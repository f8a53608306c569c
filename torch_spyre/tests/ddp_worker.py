"""One rank of test_ddp.py: ``ddp_worker.py INIT_FILE`` with RANK and WORLD_SIZE in the
environment. Trains each model twice side by side, with DistributedDataParallel on the "spyre"
backend (model on the card) and on gloo (the same model on the CPU), on rank-dependent data, and
checks that the parameters agree after every step (and that DDP's runtime statistics were
taken). Prints "CASE ok SECONDS" per case and the
CPU fallbacks seen ("fallbacks {...}"); exits non-zero on a mismatch."""

import contextlib
import copy
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_spyre
from dist_checks import finish

init_file = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("spyre", init_method=f"file://{init_file}", rank=rank, world_size=world,
                        timeout=timedelta(seconds=60))
gloo = dist.new_group(backend="gloo")
# the tests give each process its own simulated card (SPYRE_SIM_DEVICES=1); under the launcher on
# the kernel backend rank r uses card LOCAL_RANK
dev = torch.device("spyre", int(os.environ.get("LOCAL_RANK", "0")))
torch.spyre.set_device(dev.index)
STEPS = 4


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(12, 32), nn.Linear(32, 32), nn.Linear(32, 5)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class NormNet(nn.Module):
    """Linear, LayerNorm, GELU; and a branch used only when asked (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(12, 24), nn.LayerNorm(24), nn.Linear(24, 5)
        self.side = nn.Linear(24, 5)

    def forward(self, x, use_side=False):
        h = F.gelu(self.norm(self.fc1(x)))
        return self.fc2(h) + (self.side(h) if use_side else 0)


class ConvBn(nn.Module):
    """Conv2d + BatchNorm2d (its buffers, one of them int64, are broadcast every forward)."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6)
        self.fc = nn.Linear(6 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(F.relu(self.bn(self.conv(x))).flatten(1))


def batch(step, shape, micro=0):
    g = torch.Generator().manual_seed(1000 * rank + 10 * step + micro)
    return torch.randn(shape, generator=g), torch.randn(shape[0], 5, generator=g)


def same(spyre_model, cpu_model, what, tol=2e-4):
    for (name, p), q in zip(spyre_model.named_parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=tol, atol=tol,
                                   msg=lambda m: f"{what}: parameter {name}: {m}")
    for (name, b), c in zip(spyre_model.named_buffers(), cpu_model.buffers()):
        torch.testing.assert_close(b.cpu(), c, rtol=tol, atol=tol,
                                   msg=lambda m: f"{what}: buffer {name}: {m}")


def train(name, make_model, shape, micro_batches=1, forward_kw=None, hook=None, tol=2e-4,
          compiled=False, **ddp_kw):
    """STEPS optimizer steps of DDP on spyre and DDP on gloo/CPU; micro_batches > 1 accumulates
    gradients under no_sync() for all but the last micro-batch; hook: a comm hook for both;
    compiled: the spyre DDP module called through torch.compile (Dynamo's DDPOptimizer). Returns the spyre DDP module."""
    t0 = time.monotonic()
    torch.manual_seed(rank)  # different initial weights per rank: DDP broadcasts rank 0's
    base = make_model()
    ref_model, dev_model = copy.deepcopy(base), copy.deepcopy(base).to(dev)
    ref = DDP(ref_model, process_group=gloo, **ddp_kw)
    ddp = DDP(dev_model, **ddp_kw)
    same(dev_model, ref_model, f"{name} after construction")
    if hook is not None:
        ref.register_comm_hook(gloo, hook)
        ddp.register_comm_hook(None, hook)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (ref, ddp)]
    run = torch.compile(ddp) if compiled else ddp
    for step in range(STEPS):
        kw = (forward_kw or (lambda s: {}))(step)
        for m in range(micro_batches):
            x, y = batch(step, shape, m)
            for model, xs, ys in ((ref, x, y), (run, x.to(dev), y.to(dev))):
                ctx = model.no_sync() if m < micro_batches - 1 else contextlib.nullcontext()
                with ctx:
                    F.mse_loss(model(xs, **kw), ys).backward()
            if m < micro_batches - 1:  # not reduced yet: each rank's own accumulated gradients
                for (pname, p), q in zip(dev_model.named_parameters(), ref_model.parameters()):
                    torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=tol, atol=tol,
                                               msg=lambda e: f"{name} no_sync {pname}: {e}")
        for o in opts:
            o.step()
            o.zero_grad()
        same(dev_model, ref_model, f"{name} step {step}", tol)
    print(f"{name} ok {time.monotonic() - t0:.1f}", flush=True)
    return ddp


torch_spyre.reset_fallback_counts()
CASES = ["mlp", "no_sync", "unused", "conv_bn", "bucket_view", "hooks", "overlap"]
for case in sys.argv[2].split(",") if len(sys.argv) > 2 else CASES:
    if case == "mlp":  # small buckets: several all_reduces a step
        ddp = train("mlp", Mlp, (6, 12), bucket_cap_mb=0.002)
        stats = ddp._get_ddp_logging_data()  # the spyre timer (ReducerTimer.cpp) took them
        for key in ("avg_forward_compute_time", "avg_backward_compute_time",
                    "avg_backward_comm_time"):
            assert stats.get(key, 0) > 0, f"DDP runtime stats: {key}: {stats.get(key)}"
    elif case == "no_sync":
        train("no_sync", Mlp, (6, 12), micro_batches=3)
    elif case == "unused":  # the side branch runs on odd steps only
        train("unused", NormNet, (6, 12), forward_kw=lambda s: {"use_side": s % 2 == 1},
              find_unused_parameters=True)
    elif case == "conv_bn":
        train("conv_bn", ConvBn, (4, 3, 6, 6))
    elif case == "bucket_view":  # gradients are views of the buckets; the graph is static
        train("bucket_view", Mlp, (6, 12), gradient_as_bucket_view=True, static_graph=True)
    elif case == "compiled":  # not in CASES: the guest rows leave compiling out (TCG)
        # DDPOptimizer wants buckets no smaller than its first (1 MB): this model is one bucket
        train("compiled", Mlp, (6, 12), compiled=True)
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1
    elif case == "overlap":  # the bucket all_reduces run while backward goes on
        issued = []

        def overlap_hook(group, bucket):
            t = bucket.buffer().div_(world)
            if group is None and rank == 1 and bucket.index() == 0:
                time.sleep(0.3)  # rank 0's first bucket cannot complete before this
            work = dist.all_reduce(t, group=group, async_op=True)
            if group is None:
                issued.append((bucket.index(), work.is_completed()))
            return work.get_future().then(lambda f: f.value()[0])

        train("overlap", Mlp, (6, 12), hook=overlap_hook, bucket_cap_mb=0.002)
        first = [done for index, done in issued if index == 0]
        assert len(first) == STEPS, issued
        assert rank != 0 or not any(first), f"bucket 0 complete when issued: {issued}"
    elif case == "hooks":  # Python comm hooks: Work.get_future().then(...)
        train("hook_allreduce", Mlp, (6, 12), hook=default_hooks.allreduce_hook)
        train("hook_fp16", Mlp, (6, 12), hook=default_hooks.fp16_compress_hook, tol=2e-3)
# the communicator's transport: p2p between spyre.ko's cards (the guest rows ask for it), with
# the waits between the ranks on the cards (hw 1.8 semaphores) unless SPYRE_COMM_DEVICE_WAITS=0
backend = dist.distributed_c10d._get_default_group()._get_backend(dev)
transport, device_waits = backend.transport(), backend.device_waits()
print("transport", transport, "device waits", device_waits, flush=True)
expected = os.environ.get("SPYRE_COMM_EXPECT_TRANSPORT")
assert not expected or transport == expected, f"transport {transport}, expected {expected}"
if expected == "p2p" and os.environ.get("SPYRE_COMM_DEVICE_WAITS", "1") != "0":
    assert device_waits, "p2p between spyre.ko's cards without device-side waits"
print("fallbacks", dict(torch_spyre.fallback_counts()), flush=True)
dist.destroy_process_group()
finish()  # dist_checks.finish: no interpreter finalization

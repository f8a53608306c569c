"""One rank of test_tensor_parallel.py's DTensor case: ``dtensor_worker.py INIT_FILE`` with RANK
and WORLD_SIZE in the environment. torch's DTensor tensor parallelism
(torch.distributed.tensor.parallel) on spyre: a DeviceMesh of the ranks' cards, an MLP whose
first linear is column-parallel and second row-parallel (parallelize_module), forward, backward
and two SGD steps, every output, gradient and parameter (as full_tensor()) against one process
on the CPU. Prints "CASE ok SECONDS" per case and the fallback counts."""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

import torch_spyre

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("spyre", init_method=f"file://{sys.argv[1]}", rank=rank,
                        world_size=world)
mesh = init_device_mesh("spyre", (world,))


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))


def close(got, want, what):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{what}: {m}")


torch_spyre.reset_fallback_counts()
t0 = time.perf_counter()
torch.manual_seed(0)
ref = mlp()
model = mlp()
model.load_state_dict(ref.state_dict())
tp = parallelize_module(model.to("spyre"), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
assert tp[0].weight.to_local().shape == (32 // world, 16), tp[0].weight.to_local().shape
opt = torch.optim.SGD(tp.parameters(), lr=0.1)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
for step in range(2):
    x = torch.randn(4, 16, generator=g)
    y, want = tp(x.to("spyre")), ref(x)
    close(y.cpu(), want, f"step {step} output")
    opt.zero_grad()
    ref_opt.zero_grad()
    y.square().sum().backward()
    want.square().sum().backward()
    for (name, p), q in zip(tp.named_parameters(), ref.parameters()):
        close(p.grad.full_tensor().cpu(), q.grad, f"step {step} grad {name}")
    opt.step()
    ref_opt.step()
    for (name, p), q in zip(tp.named_parameters(), ref.parameters()):
        close(p.full_tensor().detach().cpu(), q.detach(), f"step {step} {name}")
print(f"colwise_rowwise_mlp ok {time.perf_counter() - t0:.1f}", flush=True)
print("fallbacks", dict(torch_spyre.fallback_counts()), flush=True)
dist.destroy_process_group()

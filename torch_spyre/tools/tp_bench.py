"""Tensor-parallel decode step on 1, 2 or 4 cards (issue 25): modeled device time per step.

One process per card, on spyre.ko's cards (the card model prices peer pushes and the waits
between the cards, hw 1.7-1.8):

    python3 -m torch_spyre.launch --nproc N torch_spyre/tools/tp_bench.py [--steps S]

A Granite-shaped model (2 layers, hidden 1024, 16 query / 8 KV heads, MLP 2816, vocab 4096,
fp16) sharded with models.tensor_parallel (q/k/v and gate/up column-parallel, o and down
row-parallel: two all-reduces per layer); N = 1 runs it whole, without a process group. Per
step, the modeled device time between two events on the rank's stream around the step (the
card's job clock: with device-side waits a wait for a peer's signal ends at the peer's cycle,
so the figure is the step's critical path, the collectives included) and the host time. Rank 0
prints one line: cards, median modeled us per step, the modeled us of the step's all-reduces
timed alone, host ms per step, and the tokens (each rank checks its tokens against rank 0's).
"""

import argparse
import os
import statistics
import sys
import time

import torch

import torch_spyre  # noqa: F401  (registers the device)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from models import Granite, tensor_parallel  # noqa: E402

CONFIG = dict(vocab=4096, hidden=1024, heads=16, kv_heads=8, intermediate=2816, layers=2,
              max_len=64)
PROMPT = [3, 141, 59, 26, 5, 35, 89, 79]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    a = p.parse_args()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    dev = torch.device("spyre", int(os.environ.get("LOCAL_RANK", "0")))
    torch.spyre.set_device(dev.index)
    dist = None
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("spyre", init_method="env://")
    torch.manual_seed(0)  # the same weights on every rank (tensor_parallel shards them)
    model = Granite(**CONFIG)
    with torch.no_grad():
        for prm in model.parameters():
            prm.normal_(0, 0.02)
    model = model.half()
    if world > 1:
        model = tensor_parallel(model)
    model = model.to(dev)

    def all_reduce_us():
        """Modeled us of the step's all-reduces alone: 2 per layer of one [1, 1, hidden] fp16."""
        if world == 1:
            return 0.0
        x = torch.ones(1, 1, CONFIG["hidden"], dtype=torch.float16, device=dev)
        dist.all_reduce(x)
        e0, e1 = torch.spyre.Event(), torch.spyre.Event()
        e0.record()
        for _ in range(2 * CONFIG["layers"]):
            dist.all_reduce(x)
        e1.record()
        e1.synchronize()
        return e0.modeled_time(e1) * 1000

    with torch.no_grad():
        tokens = torch.tensor([PROMPT], device=dev)
        logits = model(tokens, 0)[:, -1]
        pos = len(PROMPT)
        out, modeled, host = [], [], []
        for _ in range(a.steps):
            nxt = logits.argmax(-1, keepdim=True)
            out.append(int(nxt.item()))
            torch.spyre.synchronize()
            e0, e1 = torch.spyre.Event(), torch.spyre.Event()
            t0 = time.perf_counter()
            e0.record()
            logits = model(nxt, pos)[:, -1]
            e1.record()
            e1.synchronize()
            host.append((time.perf_counter() - t0) * 1000)
            modeled.append(e0.modeled_time(e1) * 1000)
            pos += 1
        comm = all_reduce_us()
    if world > 1:
        ref = torch.tensor(out, device=dev)
        dist.broadcast(ref, 0)
        assert ref.cpu().tolist() == out, f"rank {rank}: tokens {out}, rank 0 {ref.cpu().tolist()}"
    if rank == 0:
        print(f"tp {world} cards: modeled {statistics.median(modeled):8.1f} us/step "
              f"(all-reduces alone {comm:6.1f} us), host {statistics.median(host):7.1f} ms/step, "
              f"tokens {out}", flush=True)
    if dist:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

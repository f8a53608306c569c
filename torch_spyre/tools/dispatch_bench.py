#!/usr/bin/env python3
"""Benchmark (figures, not pass/fail): the host cost of dispatching one op to a spyre card
against running the same op on the CPU, for tiny tensors, and a split of a decode step of the
Granite-style decoder (torch_spyre/tests/models.py) into host time, transfers and modeled device
time.

Per op: `queue` is the wall time per call of N calls without waiting (what the calling thread
pays: dispatch, checks, plan-cache lookup, launch), `done` with a synchronize after the N calls
(on the simulator this includes running the programs on the host), `cpu` the same op on CPU
tensors (one thread); ratio = queue / cpu (target <= 5).

    PYTHONPATH=build/cmake/torch_spyre/python SPYRE_BACKEND=sim python3 torch_spyre/tools/dispatch_bench.py
"""

import copy
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_spyre  # noqa: E402
from models import TinyGranite  # noqa: E402

N = int(os.environ.get("BENCH_CALLS", "200"))


def per_call(fn, sync):
    fn()  # plans cached, allocator warm
    sync()
    t0 = time.perf_counter()
    for _ in range(N):
        fn()
    t1 = time.perf_counter()
    sync()
    t2 = time.perf_counter()
    return (t1 - t0) / N, (t2 - t0) / N


def ops(x, w, v):
    return {
        "add": lambda: x + x,
        "mul (number)": lambda: x * 0.5,
        "relu": lambda: torch.relu(x),
        "softmax": lambda: torch.softmax(x, -1),
        "sum(-1)": lambda: x.sum(-1),
        "mm 8x64x64": lambda: x @ w,
        "layer_norm": lambda: F.layer_norm(x, (64,)),
        # with the mean and 1/std autograd keeps (what layer_norm ran before it had a kernel)
        "native_ln": lambda: torch.native_layer_norm(x, (64,), None, None, 1e-5),
        "rms_norm": lambda: F.rms_norm(x, (64,)),
        "where": lambda: torch.where(v, x, 0.0),
        "gt (number)": lambda: x > 0.5,
        "clamp": lambda: x.clamp(-1.0, 1.0),
    }


def dispatch_table():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(8, 64, generator=g), torch.randn(64, 64, generator=g)
    v = torch.rand(8, 64, generator=g) > 0.5
    cpu_ops = ops(x, w, v)
    dev_ops = ops(x.to("spyre"), w.to("spyre"), v.to("spyre"))
    print(f"=== per-op dispatch, [8, 64] fp32, {N} calls "
          f"({torch.spyre.get_device_name(0)}) ===")
    print(f"{'op':<14} {'queue us':>9} {'done us':>9} {'cpu us':>8} {'queue/cpu':>9}")
    for name in cpu_ops:
        q, d = per_call(dev_ops[name], torch.spyre.synchronize)
        c, _ = per_call(cpu_ops[name], lambda: None)
        print(f"{name:<14} {q * 1e6:>9.1f} {d * 1e6:>9.1f} {c * 1e6:>8.1f} {q / c:>9.1f}")


def decoder_split():
    cpu = TinyGranite()
    dev = copy.deepcopy(cpu).to("spyre")
    prompt = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        dev(prompt.to("spyre"), 0)
        tok = torch.tensor([[7]])
        steps, pos = 8, 12
        t_up = t_queue = t_done = t_down = 0.0
        with torch_spyre.profiler.profile() as prof:
            for _ in range(steps):
                t0 = time.perf_counter()
                d_tok = tok.to("spyre")
                torch.spyre.synchronize()
                t1 = time.perf_counter()
                logits = dev(d_tok, pos)[:, -1]
                nxt = logits.argmax(-1, keepdim=True)
                t2 = time.perf_counter()
                torch.spyre.synchronize()
                t3 = time.perf_counter()
                tok = nxt.cpu()
                t4 = time.perf_counter()
                t_up, t_queue, t_done, t_down = (t_up + t1 - t0, t_queue + t2 - t1,
                                                 t_done + t3 - t2, t_down + t4 - t3)
                pos += 1
    ms = 1e3 / steps
    print(f"=== decoder decode step (hidden 512, 8/2 heads, vocab 512), mean of {steps} ===")
    print(f"host: dispatch and launch of {len(prof.events) // steps} op-library calls: "
          f"{t_queue * ms:.2f} ms")
    print(f"wait for the card after the last launch: {t_done * ms:.2f} ms")
    print(f"transfers: token upload {t_up * ms:.3f} ms, token download {t_down * ms:.3f} ms")
    print(f"modeled device time: {prof.total_modeled_ns() / steps / 1000:.1f} us")


if __name__ == "__main__":
    torch.set_num_threads(1)  # the CPU side on one thread, like the one submitting thread
    dispatch_table()
    decoder_split()

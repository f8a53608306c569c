#!/usr/bin/env python3
"""Benchmark (figures, not pass/fail): the host cost of elementwise ops whose scalar changes
every call, and of optimizer steps whose scalars (Adam's bias-corrected step size, an LR
schedule) change every step, on a spyre card.

Per case: `queue` is the wall time per call of N calls while the stream is held
(torch.spyre._hold_stream, as dispatch_bench.py: no device work competes with the calling
thread), `done` is N calls and a synchronize (on the simulator it includes running the
programs), `plans` the op library's plans made per call and `programs` the programs loaded on
the card per call over the timed calls (torch.spyre.runtime_stats, when torch_spyre has it).
For the optimizers: wall time per training step (forward, backward, step; synchronized) of a
small MLP, and plans / programs per step. Medians of ROUNDS rounds.

    PYTHONPATH=build/cmake/torch_spyre/python SPYRE_BACKEND=sim \\
        python3 torch_spyre/tools/scalar_bench.py
"""

import contextlib
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import torch_spyre  # noqa: F401

N = int(os.environ.get("BENCH_CALLS", "200"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
STEPS = int(os.environ.get("BENCH_STEPS", "20"))


def median(v):
    return sorted(v)[len(v) // 2]


def counters():
    stats = getattr(torch.spyre, "runtime_stats", None)
    if stats is None:
        return None
    s = stats()
    return s["op_plan_cache_misses"], s["program_cache_misses"]


def per_call(fn, held):
    """Median per-call wall time of ROUNDS rounds of N calls; plans and program loads per call.
    Held rounds queue on a side stream (loading a new program uses the card's default stream,
    which must not be the held one)."""
    fn(-1)
    torch.spyre.synchronize()
    global _next
    side = torch.spyre.Stream()
    times, i = [], _next
    c0 = counters()
    for _ in range(ROUNDS):
        with torch.spyre.stream(side):
            with torch.spyre._hold_stream(side) if held else contextlib.nullcontext():
                t0 = time.perf_counter()
                for _ in range(N):
                    fn(i)
                    i += 1
                times.append((time.perf_counter() - t0) / N)
        torch.spyre.synchronize()
    _next = i  # every call of every round and mode gets a number not seen before
    c1 = counters()
    per = None if c0 is None else tuple((b - a) / (N * ROUNDS) for a, b in zip(c0, c1))
    return median(times), per


_next = 0


def ops():
    x = torch.randn(8, 64).to("spyre")
    y = torch.randn(8, 64).to("spyre")
    m = (torch.randn(8, 64) > 0).to("spyre")
    return [
        ("mul(number)", lambda i: x.mul(1.0 + i * 1e-6)),
        ("add(number)", lambda i: x.add(0.5 + i * 1e-6)),
        ("add(y, alpha)", lambda i: x.add(y, alpha=-(1e-3 + i * 1e-9))),
        ("div(number)", lambda i: x.div(3.0 + i * 1e-6)),
        ("masked_fill", lambda i: x.masked_fill(m, -i * 1e-3)),
        ("clamp(lo, hi)", lambda i: x.clamp(-1 - i * 1e-6, 1 + i * 1e-6)),
        ("mul(1.5) (same number)", lambda i: x.mul(1.5)),
    ]


def train(opt_cls, sched, **kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.ReLU(), torch.nn.Linear(40, 8))
    model = model.to("spyre")
    opt = opt_cls(model.parameters(), **kw)
    s = sched(opt) if sched else None
    x = torch.randn(16, 24).to("spyre")
    y = torch.randn(16, 8).to("spyre")

    def step():
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        if s:
            s.step()

    for _ in range(3):
        step()
    torch.spyre.synchronize()
    times = []
    c0 = counters()
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(STEPS):
            step()
        torch.spyre.synchronize()
        times.append((time.perf_counter() - t0) / STEPS)
    c1 = counters()
    per = None if c0 is None else tuple((b - a) / (STEPS * ROUNDS) for a, b in zip(c0, c1))
    return median(times), per


def fmt(per):
    return "n/a | n/a" if per is None else f"{per[0]:.2f} | {per[1]:.2f}"


def main():
    print(f"| op | queue us | done us | plans/call | programs/call |\n|---|---|---|---|---|")
    for name, fn in ops():
        q, per = per_call(fn, True)
        d, _ = per_call(fn, False)
        print(f"| {name} | {q * 1e6:.1f} | {d * 1e6:.1f} | {fmt(per)} |", flush=True)
    print(f"\n| optimizer | ms per step | plans/step | programs/step |\n|---|---|---|---|", flush=True)
    main_optimizers()


def main_optimizers():
    cases = [
        ("Adam", torch.optim.Adam, None, dict(lr=1e-2, foreach=False)),
        ("AdamW", torch.optim.AdamW, None, dict(lr=1e-2, weight_decay=0.1, foreach=False)),
        ("SGD momentum + LambdaLR", torch.optim.SGD,
         lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0 / (1 + e)),
         dict(lr=0.1, momentum=0.9)),
    ]
    for k, (name, cls, sched, kw) in enumerate(cases):
        # each optimizer in a process of its own: the same step numbers give the same scalars
        if len(sys.argv) > 1:
            if sys.argv[1] != str(k):
                continue
            t, per = train(cls, sched, **kw)
            print(f"| {name} | {t * 1e3:.2f} | {fmt(per)} |", flush=True)
        else:
            subprocess.run([sys.executable, __file__, str(k)], check=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main_optimizers()
    else:
        main()

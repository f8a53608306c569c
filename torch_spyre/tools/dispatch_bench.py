#!/usr/bin/env python3
"""Benchmark (figures, not pass/fail): the host cost of dispatching one op to a spyre card
against running the same op on the CPU, for tiny tensors, and a split of a decode step of the
Granite-style decoder (torch_spyre/tests/models.py) into host time, transfers and modeled device
time.

Per op: `queue` is the wall time per call of N calls while the stream is held (a host function
blocks it until the calls are timed; torch.spyre._hold_stream), so no device work runs alongside:
on the simulator the programs run on the host's own cores and would otherwise compete with the
calling thread. That is what the calling thread pays (Python, the dispatcher, the adapter,
libspyre's checks, plan-cache lookup and queueing). `done` is N calls and a synchronize without a
hold (on the simulator it includes running the programs on the host). `cpu` is the same op on
CPU tensors (one thread); ratio = queue / cpu (target <= 5). Every figure is the median of
ROUNDS rounds of N calls.

    PYTHONPATH=build/cmake/torch_spyre/python SPYRE_BACKEND=sim python3 torch_spyre/tools/dispatch_bench.py

`dispatch_bench.py decode-cpu` prints only the decode step's process CPU time (all threads:
the calling thread and the simulator's) against the CPU step's, the minimum of BENCH_ROUNDS
rounds of 8 steps each, the two alternating round by round (decoder_cpu_time), with the mean and
the process's context switches per step; BENCH_ALTERNATE=0 runs all spyre rounds first (one
after another, as in a decode loop), then the CPU rounds.
"""

import contextlib
import copy
import glob
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_spyre  # noqa: E402
from models import TinyGranite  # noqa: E402

N = int(os.environ.get("BENCH_CALLS", "100"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "9"))


def median(v):
    return sorted(v)[len(v) // 2]


def per_call(fn, hold):
    """Median per-call wall time of ROUNDS rounds of N calls, each round inside hold()."""
    fn()  # plans cached, allocator warm
    torch.spyre.synchronize()
    times = []
    for _ in range(ROUNDS):
        with hold():
            t0 = time.perf_counter()
            for _ in range(N):
                fn()
            times.append((time.perf_counter() - t0) / N)
        torch.spyre.synchronize()
    return median(times)


def per_call_done(fn):
    """Median per-call wall time of N calls and a synchronize, nothing held."""
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(N):
            fn()
        torch.spyre.synchronize()
        times.append((time.perf_counter() - t0) / N)
    return median(times)


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
    print(f"=== per-op dispatch, [8, 64] fp32, median of {ROUNDS} rounds of {N} calls "
          f"({torch.spyre.get_device_name(0)}) ===")
    print(f"{'op':<14} {'queue us':>9} {'done us':>9} {'cpu us':>8} {'queue/cpu':>9}")
    for name in cpu_ops:
        q = per_call(dev_ops[name], torch.spyre._hold_stream)
        d = per_call_done(dev_ops[name])
        c = per_call(cpu_ops[name], contextlib.nullcontext)
        print(f"{name:<14} {q * 1e6:>9.1f} {d * 1e6:>9.1f} {c * 1e6:>8.1f} {q / c:>9.1f}")


def add_layers():
    """Where the host time of `x + x` goes: each row adds one layer to the one above, on spyre
    (held stream) and on the CPU. libspyre's own share is in spyre-bench's "queueing cost"."""
    x = torch.randn(8, 64)
    rows = [
        ("torch.empty (Python, dispatcher, allocator)", lambda t, o: torch.empty(8, 64, device=t.device)),
        ("torch.add(x, x, out=y) (+ the op, no output)", lambda t, o: torch.add(t, t, out=o)),
        ("x + x (+ TensorIterator meta, output)", lambda t, o: t + t),
    ]
    dx, dy, cy = x.to("spyre"), torch.empty(8, 64, device="spyre"), torch.empty(8, 64)
    print(f"=== host time of an add on [8, 64] fp32, layer by layer (median of {ROUNDS} x {N}) ===")
    print(f"{'':<46} {'spyre us':>9} {'cpu us':>8}")
    for name, fn in rows:
        q = per_call(lambda: fn(dx, dy), torch.spyre._hold_stream)
        c = per_call(lambda: fn(x, cy), contextlib.nullcontext)
        print(f"{name:<46} {q * 1e6:>9.2f} {c * 1e6:>8.2f}")


def decoder_split():
    """A decode step of the decoder: host time to dispatch it (the stream held, so the simulator
    does not compete for the host's cores), the wait for the card after that, the token
    transfers and the modeled device time; and the same step on the CPU for reference. Plans
    are warm: the steps' positions were run once before (a new sequence length plans anew)."""
    cpu = TinyGranite()
    dev = copy.deepcopy(cpu).to("spyre")
    prompt = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(3))
    steps = 8
    with torch.no_grad():
        def run(m, first, sync, hold, prof=None):
            tok = torch.tensor([[7]])
            t_up = t_queue = t_done = t_down = 0.0
            for pos in range(12, 12 + steps):
                t0 = time.perf_counter()
                d_tok = first(tok)
                sync()
                t1 = time.perf_counter()
                with hold():
                    nxt = m(d_tok, pos)[:, -1].argmax(-1, keepdim=True)
                    t2 = time.perf_counter()
                sync()
                t3 = time.perf_counter()
                tok = nxt.cpu()
                t4 = time.perf_counter()
                t_up, t_queue, t_done, t_down = (t_up + t1 - t0, t_queue + t2 - t1,
                                                 t_done + t3 - t2, t_down + t4 - t3)
            return t_up / steps, t_queue / steps, t_done / steps, t_down / steps

        to_dev = lambda t: t.to("spyre")  # noqa: E731
        dev(prompt.to("spyre"), 0)
        run(dev, to_dev, torch.spyre.synchronize, torch.spyre._hold_stream)  # plans warm
        with torch_spyre.profiler.profile() as prof:
            up, queue, done, down = run(dev, to_dev, torch.spyre.synchronize,
                                        torch.spyre._hold_stream)
        cpu(prompt, 0)
        run(cpu, lambda t: t, lambda: None, contextlib.nullcontext)
        _, cpu_step, _, _ = run(cpu, lambda t: t, lambda: None, contextlib.nullcontext)
    print(f"=== decoder decode step (hidden 512, 8/2 heads, vocab 512), mean of {steps} ===")
    print(f"host: dispatch and launch of {len(prof.events) // steps} op-library calls: "
          f"{queue * 1e3:.2f} ms (stream held)")
    print(f"wait for the card after the hold: {done * 1e3:.2f} ms")
    print(f"transfers: token upload {up * 1e3:.3f} ms, token download {down * 1e3:.3f} ms")
    print(f"modeled device time: {prof.total_modeled_ns() / steps / 1000:.1f} us")
    print(f"the same step on the CPU (one thread): {cpu_step * 1e3:.2f} ms")


def decoder_cpu_time():
    """Process CPU time (time.process_time: every thread, so the simulator's work counts, and
    time the host gives other processes does not) per decode step of the decoder, spyre and the
    CPU alternating round by round; the minimum of ROUNDS rounds of 8 steps each (positions
    12..19, plans warm). On a shared host the minimum is the least disturbed figure."""
    cpu = TinyGranite()
    dev = copy.deepcopy(cpu).to("spyre")
    prompt = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(3))
    steps = 8

    def run(m, tok, sync):
        t0 = time.process_time()
        for pos in range(12, 12 + steps):
            tok = m(tok, pos)[:, -1].argmax(-1, keepdim=True)
        sync()
        return (time.process_time() - t0) / steps

    with torch.no_grad():
        dev(prompt.to("spyre"), 0)
        cpu(prompt, 0)
        d_tok, c_tok = torch.tensor([[7]]).to("spyre"), torch.tensor([[7]])
        run(dev, d_tok, torch.spyre.synchronize)  # plans warm
        run(cpu, c_tok, lambda: None)
        d, c, sw = [], [], 0
        alternate = os.environ.get("BENCH_ALTERNATE", "1") != "0"
        for _ in range(ROUNDS):
            s0 = context_switches()
            d.append(run(dev, d_tok, torch.spyre.synchronize))
            sw += context_switches() - s0
            if alternate:
                c.append(run(cpu, c_tok, lambda: None))
        for _ in range(0 if alternate else ROUNDS):
            c.append(run(cpu, c_tok, lambda: None))
    print(f"=== decoder decode step, process CPU time, min of {ROUNDS} rounds of {steps} ===")
    print(f"spyre: {min(d) * 1e3:.3f} ms (median {median(d) * 1e3:.3f}, "
          f"mean {sum(d) / len(d) * 1e3:.3f}, {sw / (ROUNDS * steps):.1f} context switches), "
          f"cpu: {min(c) * 1e3:.3f} ms (median {median(c) * 1e3:.3f}), "
          f"ratio {min(d) / min(c):.2f}")


def context_switches():
    """The process's context switches so far (every thread's, voluntary and not; Linux)."""
    n = 0
    for f in glob.glob("/proc/self/task/*/status"):
        with contextlib.suppress(OSError), open(f) as st:
            n += sum(int(ln.split()[1]) for ln in st if "ctxt_switches" in ln)
    return n


if __name__ == "__main__":
    torch.set_num_threads(1)  # the CPU side on one thread, like the one submitting thread
    if sys.argv[1:] == ["decode-cpu"]:
        decoder_cpu_time()
        sys.exit(0)
    dispatch_table()
    add_layers()
    decoder_split()

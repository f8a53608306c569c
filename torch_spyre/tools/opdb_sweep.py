"""PyTorch's whole OpInfo database on spyre, against the CPU.

For every OpInfo entry of torch's op_db and every dtype the CPU supports for it (the fallback
claims all of them; a spyre kernel claims a subset), the first SAMPLES sample inputs run on the
CPU and on spyre, and the outcome of the op x dtype is one of:

  card      every sample matched the CPU and none ran on the CPU fallback
  unchecked every sample ran; values not comparable (see below)
  fallback  every sample matched the CPU; at least one ran (partly) on the CPU fallback
  error     spyre raised an exception where the CPU gave a result (a clear error, allowed)
  wrong     a result differs from the CPU's (a failure)
  crash     the process died (signal or exit) while running the op (a failure)
  timeout   the op took longer than --timeout seconds (a failure)

Samples the CPU itself rejects are not counted. Results are compared as PyTorch's own
TestCommon.test_compare_cpu compares a device with the CPU: after the sample's
output_process_fn_grad, within 1e-3 (wider for fp16/bf16), integers and booleans exactly; an
op x dtype that PyTorch marks as not comparable there (non-deterministic or undefined output)
is `unchecked`: it must still run without an error or a crash. Random operators are compared
after seeding the CPU generator (the fallback draws from it) alike for both runs, except the
float samples of those that draw from the spyre generator on the card (DEVICE_RANDOM): their
values are not the CPU's, so they are `unchecked` (tests/test_random.py checks them), as are
every sample of randint (DEVICE_RANDOM_EVERY_DTYPE: its integer samples draw on the card too). Sorts that
leave the order of ties open (TIES_OPEN: `sort` and `argsort` without stable=True, `topk`) may
order tied elements differently from the CPU: there the values must match and the indices must
be distinct positions that pick those values from the input. kthvalue, median, nanmedian and
mode along a dim (INDEX_AMONG_TIES) take the CPU's index among equal values from nth_element or
an unstable sort: there the values must match and the indices must pick equal values from the
input.

Each op family runs in a worker process; when a worker dies, the op it was running is
recorded as a crash and a new worker takes the rest, so one crash fails one op, not the sweep.

  python3 opdb_sweep.py [--samples N] [--dtypes float32,int64,...] [--ops name,...]
                        [--jobs J] [--json FILE] [--markdown FILE]
Exit status 1 if any op x dtype is wrong, crashed or timed out.
"""

import argparse
import collections
import json
import os
import select
import subprocess
import sys
import time

RESULT = "@@opdb "
OUTCOMES = ("card", "fallback", "unchecked", "error", "wrong", "crash", "timeout")
FAILURES = ("wrong", "crash", "timeout")
# Tolerance of a floating result (rtol = atol): test_compare_cpu's 1e-3, and what one rounding
# of a card kernel's fp32 result to the dtype can add.
TOL = {"float16": 2e-2, "complex32": 2e-2, "bfloat16": 1.5e-1}
DEFAULT_TOL = 1e-3


# Random operators whose float samples draw from the spyre generator on the card (Philox,
# Documentation/torch_spyre.md "Random numbers"), not from the CPU generator.
DEVICE_RANDOM = {
    "bernoulli", "exponential", "multinomial", "normal", "rand_like", "randn", "randn_like",
    "uniform",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
}

# Random operators that draw from the spyre generator on the card for integer types too
# (random_ / randint up to 2^24 values): unchecked for every dtype, since the samples that
# still draw from the CPU generator (float64, int16) see its state moved by fewer draws.
DEVICE_RANDOM_EVERY_DTYPE = {"randint", "randint_like"}

# Ops whose order of equal elements is unspecified (unless stable=True): compared by values and
# by indices that pick them (tests/test_sort.py).
TIES_OPEN = {"sort", "argsort", "topk"}
# Reductions along a dim returning (values, indices) whose index among equal values the CPU
# takes from nth_element or an unstable sort: compared by values and by indices that pick
# equal values (tests/test_order_statistics.py).
INDEX_AMONG_TIES = {"kthvalue", "median", "nanmedian", "mode"}


def uncomparable(op, dtype):
    """Why PyTorch does not compare this op x dtype with the CPU (None if it does)."""
    import unittest

    import torch
    if op.name in DEVICE_RANDOM and dtype in (torch.float32, torch.float16, torch.bfloat16):
        return "draws from the spyre generator on the card, not the CPU's"
    if op.name in DEVICE_RANDOM_EVERY_DTYPE:
        return "draws from the spyre generator on the card (integers too), not the CPU's"
    for d in op.decorators:
        if not hasattr(d, "is_active"):
            continue
        if not d.is_active("TestCommon", "test_compare_cpu", "privateuse1", dtype, {}):
            continue
        for dec in d.decorators:
            if dec is unittest.expectedFailure:
                return "expected to differ from the CPU in PyTorch's test_compare_cpu"
            cells = [c.cell_contents for c in (getattr(dec, "__closure__", None) or ())]
            reasons = [c for c in cells if isinstance(c, str)]
            if reasons:
                return "test_compare_cpu skips it: " + reasons[0]
    return None


def op_key(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


# ---------------------------------------------------------------- worker (one per process)

def worker(samples):
    import itertools
    import warnings

    import torch
    import torch_spyre  # noqa: F401
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.utils import _pytree as pytree

    warnings.simplefilter("ignore")
    by_key = {op_key(o): o for o in op_db}

    def is_cpu_device(v):
        return (isinstance(v, torch.device) and v.type == "cpu") or v == "cpu"

    def to_spyre(sample):
        """The sample on spyre: its tensors, and every CPU device argument (factories, .to)."""
        moved = [False]

        def move(t):
            if isinstance(t, torch.Tensor):
                moved[0] = True
                return t.to("spyre")
            return t

        dev = sample.transform(move)
        for k, v in list(dev.kwargs.items()):
            if is_cpu_device(v):
                dev.kwargs[k] = torch.device("spyre")
                moved[0] = True
        if any(is_cpu_device(a) for a in dev.args):
            dev.args = tuple(torch.device("spyre") if is_cpu_device(a) else a for a in dev.args)
            moved[0] = True
        return dev, moved[0]

    def call(op, sample):
        torch.manual_seed(0)
        return op(sample.input, *sample.args, **sample.kwargs)

    def compare(actual, expected, on_spyre):
        """None if actual (spyre) matches expected (CPU), else why not."""
        flat_a, spec_a = pytree.tree_flatten(actual)
        flat_e, spec_e = pytree.tree_flatten(expected)
        if spec_a != spec_e:
            return f"result structure {spec_a} != {spec_e}"
        for a, e in zip(flat_a, flat_e):
            if not isinstance(e, torch.Tensor):
                if isinstance(a, torch.Tensor) or not (a == e or (a != a and e != e)):
                    return f"{a!r} != {e!r}"
                continue
            if not isinstance(a, torch.Tensor):
                return f"a {type(a).__name__} where the CPU returns a tensor"
            if on_spyre and a.device.type != "spyre":
                return f"result on {a.device}, not spyre"
            a = a.cpu()
            if a.shape != e.shape or a.dtype != e.dtype:
                return f"{tuple(a.shape)} {a.dtype} != {tuple(e.shape)} {e.dtype}"
            if a.layout != torch.strided or e.layout != torch.strided:
                a, e = a.to_dense(), e.to_dense()
            a, e = a.resolve_conj().resolve_neg(), e.resolve_conj().resolve_neg()
            if e.is_floating_point() or e.is_complex():
                tol = TOL.get(str(e.dtype).replace("torch.", ""), DEFAULT_TOL)
                try:
                    torch.testing.assert_close(a, e, rtol=tol, atol=tol, equal_nan=True)
                except AssertionError as err:
                    return str(err).splitlines()[0] + " " + " ".join(str(err).split("\n")[1:3])
            elif not torch.equal(a, e):
                return "values differ"
        return None

    def ties_open(op, sample, actual, expected, on_spyre):
        """None if a sort whose order of ties is open matches the CPU up to that order."""
        pos = 1 if op.name == "topk" else 0
        dim = sample.kwargs.get("dim", sample.args[pos] if len(sample.args) > pos else -1)
        x = sample.input
        if op.name == "argsort":
            idx, want_idx = actual, expected
        else:
            (values, idx), (want_values, want_idx) = actual, expected
            why = compare(values, want_values, on_spyre)
            if why is not None:
                return why
        idx = idx.cpu()
        if idx.shape != want_idx.shape or idx.dtype != want_idx.dtype:
            return f"indices {tuple(idx.shape)} {idx.dtype}"
        if x.dim() == 0:
            return None if torch.equal(idx, want_idx) else "indices differ"
        picked, ref = x.gather(dim, idx), x.gather(dim, want_idx)
        if not torch.equal(picked.isnan(), ref.isnan()) or not torch.equal(
                picked.nan_to_num(), ref.nan_to_num()):
            return "indices pick other values"
        s = idx.sort(dim=dim).values
        if s.shape[dim] > 1 and not (s.diff(dim=dim) > 0).all():
            return "indices repeat a position"
        return None

    def index_among_ties(op, sample, actual, expected, on_spyre):
        """None if a (values, indices) reduction along a dim matches the CPU up to which of
        equal values its indices point at."""
        if not isinstance(expected, tuple) or len(expected) != 2:
            return compare(actual, expected, on_spyre)
        (values, idx), (want_values, want_idx) = actual, expected
        why = compare(values, want_values, on_spyre)
        if why is not None:
            return why
        pos = 1 if op.name == "kthvalue" else 0
        args, kw = sample.args, sample.kwargs
        dim = kw.get("dim", args[pos] if len(args) > pos else -1)
        keepdim = kw.get("keepdim", args[pos + 1] if len(args) > pos + 1 else False)
        x, idx = sample.input, idx.cpu()
        if idx.shape != want_idx.shape or idx.dtype != want_idx.dtype:
            return f"indices {tuple(idx.shape)} {idx.dtype}"
        if x.dim() == 0:
            return None if torch.equal(idx, want_idx) else "indices differ"
        picked = x.gather(dim, idx if keepdim else idx.unsqueeze(dim))
        ref = want_values if keepdim else want_values.unsqueeze(dim)
        if not torch.equal(picked.isnan(), ref.isnan()) or not torch.equal(
                picked.nan_to_num(), ref.nan_to_num()):
            return "indices pick other values"
        return None

    def run(key, dtype_name):
        op = by_key[key]
        dtype = getattr(torch, dtype_name)
        counted, card_runs, fallback_ops, errors = 0, 0, collections.Counter(), []
        unchecked = uncomparable(op, dtype)
        try:
            gen = op.sample_inputs("cpu", dtype, requires_grad=False)
            chosen = list(itertools.islice(gen, samples))
        except Exception as e:  # noqa: BLE001  (OpInfo's own generator failed: not ours)
            return {"outcome": "skip", "why": f"sample_inputs: {type(e).__name__}: {e}"}
        for sample in chosen:
            try:
                expected = sample.output_process_fn_grad(call(op, sample))
            except Exception:  # noqa: BLE001  (the CPU rejects it too: not a spyre case)
                continue
            counted += 1
            try:
                dev, on_spyre = to_spyre(sample)
                torch_spyre.reset_fallback_counts()
                actual = dev.output_process_fn_grad(call(op, dev))
                torch.spyre.synchronize()
                used = torch_spyre.fallback_counts()
            except Exception as e:  # noqa: BLE001
                errors.append(f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            fallback_ops.update(used)
            why = compare(actual, expected, on_spyre)
            if why is not None and op.name in TIES_OPEN and not dev.kwargs.get("stable"):
                try:
                    why = ties_open(op, sample, actual, expected, on_spyre)
                except Exception as e:  # noqa: BLE001
                    why = f"{why} (ties check: {type(e).__name__}: {e})"
            elif why is not None and op.name in INDEX_AMONG_TIES:
                try:
                    why = index_among_ties(op, sample, actual, expected, on_spyre)
                except Exception as e:  # noqa: BLE001
                    why = f"{why} (ties check: {type(e).__name__}: {e})"
            if why is not None and unchecked is None:
                return {"outcome": "wrong", "why": why[:400], "samples": counted}
            card_runs += not used
        if counted == 0:
            return {"outcome": "skip", "why": "the CPU rejects every sample"}
        if errors:
            return {"outcome": "error", "why": errors[0], "samples": counted}
        if unchecked is not None:
            return {"outcome": "unchecked", "why": unchecked, "samples": counted}
        outcome = "card" if card_runs == counted else "fallback"
        return {"outcome": outcome, "samples": counted,
                "fallback_ops": sorted(fallback_ops)}

    for line in sys.stdin:
        job = json.loads(line)
        for dtype_name in job["dtypes"]:
            print(RESULT + json.dumps({"op": job["op"], "dtype": dtype_name, "start": True}),
                  flush=True)
            start = time.monotonic()
            res = run(job["op"], dtype_name)
            res.update(op=job["op"], dtype=dtype_name,
                       seconds=round(time.monotonic() - start, 3))
            print(RESULT + json.dumps(res), flush=True)
        print(RESULT + json.dumps({"op": job["op"], "done": True}), flush=True)


# ---------------------------------------------------------------- parent

def worker_command(samples):
    return [sys.executable, os.path.abspath(__file__), "--worker", "--samples", str(samples)]


class Worker:
    def __init__(self, argv):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env)
        self.job = None
        self.current = None  # the dtype being run
        self.deadline = None
        self.buf = ""

    def give(self, job, timeout):
        self.job, self.current = job, None
        self.deadline = time.monotonic() + timeout
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        self.proc.stdin.flush()

    def kill(self):
        self.proc.kill()
        self.proc.wait()


def sweep(jobs, argv, parallel, timeout, progress=lambda r: None):
    """Runs jobs ({"op", "dtypes"}) on `parallel` worker processes started with argv; returns
    one result per op x dtype (a crashed or hung worker's op x dtype included)."""
    results = []
    pending = collections.deque(jobs)
    workers = []

    def finish_crashed(w, outcome, why):
        # The dtype being run failed; the op's remaining dtypes go back in the queue.
        done = {r["dtype"] for r in results if r["op"] == w.job["op"]}
        if w.current is not None:
            results.append({"op": w.job["op"], "dtype": w.current, "outcome": outcome,
                            "why": why})
            done.add(w.current)
        rest = [d for d in w.job["dtypes"] if d not in done]
        if rest:
            pending.appendleft({"op": w.job["op"], "dtypes": rest})

    while pending or any(w.job for w in workers):
        while len(workers) < parallel and pending:
            workers.append(Worker(argv))
        for w in workers:
            if w.job is None and pending:
                w.give(pending.popleft(), timeout)
        busy = [w for w in workers if w.job]
        ready, _, _ = select.select([w.proc.stdout for w in busy], [], [], 1.0)
        for w in busy:
            if w.proc.stdout in ready:
                # Raw reads: a buffered readline() could hold lines select() no longer sees.
                chunk = os.read(w.proc.stdout.fileno(), 1 << 16)
                if not chunk:  # the worker died
                    rc = w.proc.wait()
                    finish_crashed(w, "crash", f"worker exit status {rc}")
                    workers.remove(w)
                    continue
                w.buf += chunk.decode(errors="replace")
                *lines, w.buf = w.buf.split("\n")
                for line in lines:
                    if not line.startswith(RESULT):
                        continue
                    msg = json.loads(line[len(RESULT):])
                    if msg.get("start"):
                        w.current = msg["dtype"]
                    elif msg.get("done"):
                        w.job = w.current = None
                    else:
                        results.append(msg)
                        w.current = None
                        progress(msg)
            elif time.monotonic() > w.deadline:
                w.kill()
                finish_crashed(w, "timeout", f"over {timeout} s")
                workers.remove(w)
    for w in workers:
        w.proc.stdin.close()
        w.proc.wait()
    return results


def markdown(results, dtypes):
    """One row per dtype: how many op x dtype pairs had each outcome; then every failure."""
    table = collections.defaultdict(collections.Counter)
    for r in results:
        table[r["dtype"]][r["outcome"]] += 1
    cols = OUTCOMES
    lines = ["| dtype | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    total = collections.Counter()
    for d in dtypes:
        total.update(table[d])
        lines.append(f"| {d} | " + " | ".join(str(table[d][c]) for c in cols) + " |")
    lines.append("| all | " + " | ".join(str(total[c]) for c in cols) + " |")
    bad = [r for r in results if r["outcome"] in FAILURES + ("error",)]
    if bad:
        lines.append("")
        for r in sorted(bad, key=lambda r: (r["outcome"], r["op"], r["dtype"])):
            lines.append(f"- {r['outcome']}: `{r['op']}` {r['dtype']}: {r.get('why', '')}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--samples", type=int, default=4, help="sample inputs per op x dtype")
    ap.add_argument("--dtypes", default="", help="comma-separated (default: every dtype)")
    ap.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per op")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--markdown", help="write the table here")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    if args.worker:
        worker(args.samples)
        return 0

    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    wanted_ops = set(filter(None, args.ops.split(",")))
    wanted_dtypes = [d for d in args.dtypes.split(",") if d]
    jobs, all_dtypes = [], set()
    for op in op_db:
        key = op_key(op)
        if wanted_ops and op.name not in wanted_ops and key not in wanted_ops:
            continue
        dtypes = sorted(str(d).replace("torch.", "") for d in op.supported_dtypes("cpu"))
        if wanted_dtypes:
            dtypes = [d for d in dtypes if d in wanted_dtypes]
        if dtypes:
            jobs.append({"op": key, "dtypes": dtypes})
            all_dtypes.update(dtypes)
    if not jobs:
        print("no op matches", file=sys.stderr)
        return 2

    start = time.monotonic()

    def progress(r):
        if not args.quiet and r["outcome"] in FAILURES:
            print(f"{r['outcome'].upper()} {r['op']} {r['dtype']}: {r.get('why', '')}",
                  flush=True)

    results = sweep(jobs, worker_command(args.samples), max(1, args.jobs), args.timeout, progress)
    results = [r for r in results if r["outcome"] != "skip"]
    order = [str(d).replace("torch.", "") for d in (
        torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.complex32,
        torch.complex64, torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8,
        torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.bool)]
    dtypes = [d for d in order if d in all_dtypes] + sorted(all_dtypes - set(order))
    text = markdown(results, dtypes)
    print(text)
    counts = collections.Counter(r["outcome"] for r in results)
    failed = sum(counts[c] for c in FAILURES)
    print(f"{len(jobs)} ops, {len(results)} op x dtype pairs in "
          f"{time.monotonic() - start:.0f} s: " +
          ", ".join(f"{counts[c]} {c}" for c in OUTCOMES))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=0)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

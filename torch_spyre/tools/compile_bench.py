"""torch.compile against eager on spyre (Documentation/torch_compile.md "Measured"): launches,
modeled device time and host time per call of a pointwise chain and of a TinyGranite decode step;
the decode step also compiled with backend="spyre_graphs" (each call replayed as one captured
graph) and the submissions and card jobs of each (torch.spyre.submissions(), card_jobs():
a replay's consecutive launches are one linked job on the simulator); a decode whose KV cache grows
by one each step (models.DecodeStep: the position on the card, the attention over a bucket of
the cache) eager, compiled and replayed; row kernels (softmax and layer_norm written out,
[4096, 4096] fp16) against their eager ops and the library's one-launch kernels, with the
DDR-roofline fraction of the generated kernel. `rows` as the argument runs only the row kernels;
`longrows` only the long rows of an LM head's logits (softmax and argmax over [8, 32000] and
[1, 128256] fp16: launches, modeled time and plan eager, library and compiled, against the DDR
roofline);
`train` only a training step (an MLP with LayerNorm and GELU, cross-entropy: the forward and
`backward()`, the optimizer's step eager) eager, compiled and compiled with every call replayed
(the forward and backward graphs apart): submissions, card jobs and host time per step;
`startup` only the compile time cold and warm: the time to the first token of a compiled
TinyGranite in a new process with empty caches (cold), again with Inductor's cache on disk but
no program cache (warm, programs regenerated) and with both (warm), each split into import,
model set-up, Dynamo and Inductor, the op library's planning and generating, program cache
reads and the rest of the first call (Documentation/torch_spyre.md "Program cache").
`granite` (Documentation/torch_compile.md "Granite sizes"): on a timing-only simulated card
(SPYRE_SIM_TIMING_ONLY=1, set here if unset; results are not computed, modeled times are exact)
a Granite-shaped decoder layer, prefill 512 and 2048 tokens, eager against compiled with every
generated kernel against its DDR roofline (`granite-layer` runs only that), then a
Granite-8B-shaped model compiled whole: prefill tokens/s at 512 and 2048 and decode tokens/s at
batch 1, 8 and 32 with the KV cache at 512 and 2048, each beside its roofline; its records are added
to the --json file if it exists.
--json FILE also writes every figure printed as JSON records (case, mode, launches, submissions,
modeled_us, host_us) for tools/bench/report.py.

    tools/in-sysroot 'SPYRE_BACKEND=sim PYTHONPATH=build/cmake/torch_spyre/python \\
        python3 torch_spyre/tools/compile_bench.py [rows | longrows | train | startup | granite | granite-layer] [--json build/bench/torch_compile.json]'
"""

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time

T_START = time.perf_counter()

import torch

import torch_spyre

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from models import DecodeStep, TinyGranite, kv_bucket  # noqa: E402


RECORDS = []  # what --json writes: one record per case and mode, in the order printed


def record(case, mode, launches, modeled_us, host_us=None, submissions=None, **extra):
    RECORDS.append(dict(case=case, mode=mode, launches=launches, submissions=submissions,
                        modeled_us=modeled_us, host_us=host_us, **extra))


def chain(x, y):
    return torch.relu(x * y + 1.5) - x.exp()


def profile(fn, *args):
    with torch_spyre.profiler.profile() as p:
        fn(*args)
    return sum(e.launches for e in p.events), p.total_modeled_ns() / 1000


def count_step(fn, *args):
    """One call: its submissions, the jobs the card ran for it (a replay's consecutive launches
    are one linked job on the simulator, libspyre.md "Linked launches") and its modeled us
    between two events."""
    torch.spyre.synchronize()
    s0, j0 = torch.spyre.submissions(), torch.spyre.card_jobs()
    e0, e1 = torch.spyre.Event(), torch.spyre.Event()
    e0.record()
    fn(*args)
    e1.record()
    torch.spyre.synchronize()
    return (torch.spyre.submissions() - s0, torch.spyre.card_jobs() - j0,
            e0.modeled_time(e1) * 1000)


def host_us(fn, *args, n=200):
    """Mean host time of n calls queued behind a held stream (queueing only)."""
    fn(*args)
    with torch.spyre._hold_stream():
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        t = (time.perf_counter() - t0) / n
    torch.spyre.synchronize()
    return t * 1e6


def softmax_d(x):
    m = x.amax(-1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(-1, keepdim=True)


def layer_norm_d(x, w, b):
    mean = x.mean(-1, keepdim=True)
    d = x - mean
    var = (d * d).mean(-1, keepdim=True)
    return d * torch.rsqrt(var + 1e-5) * w + b


# The card's DDR bandwidth (spyre_engine_config's ddr_bytes_per_s, hardware.md): a kernel that
# reads and writes B bytes takes at least B / DDR_BYTES_PER_S.
DDR_BYTES_PER_S = 204.8e9


def argmax_d(x):
    return x.argmax(-1)


def long_rows():
    """Long rows (an LM head's logits): softmax and argmax over [8, 32000] and [1, 128256] fp16,
    eager (op by op), the library's one-launch kernel and compiled; the compiled kernel's plan
    and its DDR roofline (softmax: one read of x and one write of the result; argmax: one read
    of x)."""
    for shape in [(8, 32000), (1, 128256)]:
        dt = torch.float16
        x = (torch.randn(shape) * 3).to(dt).to("spyre")
        cases = [("softmax", softmax_d, lambda: torch.softmax(x, -1), 2),
                 ("argmax", argmax_d, lambda: torch.argmax(x, -1), 1)]
        for name, fn, library, passes in cases:
            torch.compiler.reset()
            f = torch.compile(fn)
            f(x)
            torch.spyre.synchronize()
            (le, me), (ll, ml), (lc, mc) = profile(fn, x), profile(library), profile(f, x)
            with torch_spyre.profiler.profile() as p:
                f(x)
            plans = "; ".join(f"{e.aten_op}: {e.plan}" for e in p.events)
            roof = passes * x.numel() * x.element_size() / DDR_BYTES_PER_S * 1e6
            case = f"{name} {tuple(shape)} fp16"
            for mode, launches, modeled in [("eager", le, me), ("library", ll, ml),
                                            ("compiled", lc, mc)]:
                record(case, mode, launches, modeled, ddr_roofline_us=roof)
            print(f"{case}: launches eager {le}, library {ll}, compiled {lc}; modeled eager "
                  f"{me:.2f} us, library {ml:.2f} us, compiled {mc:.2f} us; DDR roofline "
                  f"{roof:.2f} us ({mc / roof:.2f}x); compiled plan: {plans}")


def rows(shape=(4096, 4096), dt=torch.float16):
    """Row kernels: launches and modeled time eager (op by op), the library's one-launch
    kernel, compiled (one generated program); the compiled kernel's DDR-roofline fraction
    (one read of x and one write of the result at 204.8 GB/s)."""
    x = torch.randn(shape).to(dt).to("spyre")
    w, b = (torch.randn(shape[-1:]).to(dt).to("spyre") for _ in range(2))
    cases = [("softmax", softmax_d, (x,), lambda: torch.softmax(x, -1)),
             ("layer_norm", layer_norm_d, (x, w, b),
              lambda: torch.nn.functional.layer_norm(x, shape[-1:], w, b))]
    for name, fn, args, library in cases:
        torch.compiler.reset()
        f = torch.compile(fn)
        f(*args)
        torch.spyre.synchronize()
        (le, me), (ll, ml), (lc, mc) = profile(fn, *args), profile(library), profile(f, *args)
        roof = 2 * x.numel() * x.element_size() / DDR_BYTES_PER_S * 1e6
        case = f"{name} {tuple(shape)} {str(dt)[6:]}"
        for mode, launches, modeled in [("eager", le, me), ("library", ll, ml),
                                        ("compiled", lc, mc)]:
            record(case, mode, launches, modeled, ddr_roofline_us=roof)
        print(f"{name} {tuple(shape)} {str(dt)[6:]}: launches eager {le}, library {ll}, "
              f"compiled {lc}; modeled eager {me:.1f} us, library {ml:.1f} us, compiled "
              f"{mc:.1f} us; DDR roofline {roof:.1f} us = {100 * roof / mc:.0f}% of the compiled "
              f"kernel ({mc / roof:.2f}x)")


def first_token_child():
    """One new process: times to the first token of a compiled TinyGranite, as JSON."""
    t_import = time.perf_counter() - T_START
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = TinyGranite().to("spyre")
    prompt = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(3))
    prompt = prompt.to("spyre")
    torch.spyre.synchronize()
    t_model = time.perf_counter() - t0
    before = torch.spyre.program_cache_stats()
    # what the fused kernels' preparation takes when Inductor loads the graph (inside Dynamo's
    # time), apart from what the call plans and generates as it runs (the extern kernels)
    from torch_spyre._inductor import runtime
    at_load = {"generated": 0, "generate_ns": 0, "disk_hits": 0}
    init = runtime.SpyreKernel.__init__

    def counted_init(self, spec):
        b = torch.spyre.program_cache_stats()
        init(self, spec)
        a = torch.spyre.program_cache_stats()
        for k in at_load:
            at_load[k] += a[k] - b[k]

    runtime.SpyreKernel.__init__ = counted_init
    compiled = torch.compile(model)
    t0 = time.perf_counter()
    with torch.no_grad():
        token = compiled(prompt, 0)[0, -1].argmax().item()
    t_first = time.perf_counter() - t0
    after = torch.spyre.program_cache_stats()
    from torch._dynamo.utils import counters
    # Dynamo's time on the call (tracing, guards, the backend) and the backend's part of it
    # (AOTAutograd and Inductor, a cache hit or a compile)
    m = torch._dynamo.utils.compilation_time_metrics
    dyn = sum(m.get("_compile.compile_inner", []))
    backend = sum(m.get("OutputGraph.call_user_compiler", []))
    d = {k: after[k] - before[k] for k in ("generated", "disk_hits", "generate_ns",
                                           "disk_read_ns", "disk_write_ns")}
    for k in at_load:  # the running part: what the load did not do
        d[k] -= at_load[k]
    print(json.dumps({"token": token, "import": t_import, "model": t_model, "first": t_first,
                      "dynamo": dyn, "backend": backend,
                      "fxgraph_hits": counters["inductor"]["fxgraph_cache_hit"],
                      "fxgraph_misses": counters["inductor"]["fxgraph_cache_miss"],
                      "aot_hits": counters["aot_autograd"]["autograd_cache_hit"],
                      "total": time.perf_counter() - T_START, "cache": after, "first_call": d,
                      "at_load": at_load}))


def startup():
    """Time to the first token in new processes: cold, warm without and with the program
    cache on disk (each run reads what the earlier ones left in the same directories)."""
    with tempfile.TemporaryDirectory(prefix="spyre-startup-") as tmp:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                   SPYRE_PROGRAM_CACHE_DIR=os.path.join(tmp, "programs"))
        runs = [("cold (empty caches)", {}),
                ("warm, no program cache (SPYRE_PROGRAM_CACHE=0)", {"SPYRE_PROGRAM_CACHE": "0"}),
                ("warm (Inductor and program caches)", {})]
        tokens = set()
        for name, extra in runs:
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, __file__, "first-token-child"],
                                 env=dict(env, **extra), check=True, capture_output=True,
                                 text=True).stdout
            wall = time.perf_counter() - t0
            r = json.loads(out.strip().splitlines()[-1])
            tokens.add(r["token"])
            f = r["first_call"]
            gen, rd = f["generate_ns"] / 1e9, f["disk_read_ns"] / 1e9
            run = r["first"] - r["dynamo"]
            to_first = r["import"] + r["model"] + r["first"]
            print(f"startup {name}: first token {to_first:.2f} s after start (the process ended "
                  f"after {wall:.2f} s): import {r['import']:.2f} s, model set-up "
                  f"{r['model']:.2f} s, first compiled call {r['first']:.2f} s = Dynamo "
                  f"{r['dynamo']:.2f} s (of which AOTAutograd+Inductor {r['backend']:.2f} s, "
                  f"with {r['at_load']['generated']} fused programs generated "
                  f"{r['at_load']['generate_ns'] / 1e9:.2f} s and {r['at_load']['disk_hits']} "
                  f"read when the graph loaded; "
                  f"AOTAutograd cache hits {r['aot_hits']}, FX graph cache hits "
                  f"{r['fxgraph_hits']}, misses {r['fxgraph_misses']}) + running {run:.2f} s (of which {f['generated']} "
                  f"programs planned and generated {gen:.2f} s, {f['disk_hits']} read from disk "
                  f"{rd:.3f} s, written {f['disk_write_ns'] / 1e9:.3f} s); whole process "
                  f"{r['cache']['generated']} generated, {r['cache']['disk_hits']} read")
        print(f"startup: first tokens {'agree' if len(tokens) == 1 else 'DIFFER'} ({tokens})")


# ---- Granite sizes on the timing-only simulator (SPYRE_SIM_TIMING_ONLY=1) ----

GRANITE = dict(hidden=4096, heads=32, kv_heads=8, intermediate=12800)
GRANITE_VOCAB = 49152  # Granite 3's 49155 rounded to whole 64-element sticks
PEAK_FLOPS = 2 * 1024 * 32 * 1.5e9  # fp16: 1024 MACs per cycle and core, 32 cores, 1.5 GHz


def timing_only_card():
    """Sets SPYRE_SIM_TIMING_ONLY=1 before the card is created and checks that it took."""
    os.environ.setdefault("SPYRE_SIM_TIMING_ONLY", "1")
    props = torch.spyre.get_device_properties()
    if props["driver_name"] != "spyre-sim (timing-only)":
        sys.exit(f"granite: needs SPYRE_BACKEND=sim with SPYRE_SIM_TIMING_ONLY=1 (a {props['driver_name']!r} "
                 "card would compute 8B parameters)")


def on_card(make):
    """A module built on the meta device (no host data) and moved to an empty fp16 spyre copy."""
    with torch.device("meta"):
        m = make()
    return m.to(torch.float16).to_empty(device="spyre").eval()


class KernelBytes:
    """Records the bytes each generated kernel (SpyreKernel that ran as one fused program) reads
    and writes: every buffer it is given once, whole (its DDR roofline's traffic)."""

    def __init__(self):
        from torch_spyre._inductor import runtime
        self.runtime, self.calls = runtime, []

    def __enter__(self):
        rt, calls = self.runtime, self.calls
        self.orig = orig = rt.SpyreKernel.__call__

        def call(kernel, *bufs, **syms):
            before = rt.STATS["fused"]
            orig(kernel, *bufs, **syms)
            if rt.STATS["fused"] > before:
                nbytes = sum(b.numel() * b.element_size() for b in bufs)
                shape = "x".join(str(d) for d in bufs[-1].shape)
                calls.append((kernel.names if hasattr(kernel, "names") else "?", shape, nbytes))
        rt.SpyreKernel.__call__ = call
        return self

    def __exit__(self, *exc):
        self.runtime.SpyreKernel.__call__ = self.orig
        return False


def profile_events(fn, *args):
    with torch.no_grad(), torch_spyre.profiler.profile() as p:
        fn(*args)
    torch.spyre.synchronize()
    return p.events


def granite_layer(lengths=(512, 2048)):
    """One Granite-shaped decoder layer (hidden 4096, 32/8 heads of 128, SwiGLU MLP 12800,
    RMSNorm, rotary; fp16), prefill of L tokens: modeled device time eager vs compiled, and every
    generated kernel against its DDR roofline (its buffers read or written once at 204.8 GB/s)."""
    from models import GraniteDecoderLayer
    for L in lengths:
        torch.compiler.reset()
        layer = on_card(lambda: GraniteDecoderLayer(**GRANITE, max_len=L))
        x = torch.empty(1, L, GRANITE["hidden"], dtype=torch.float16, device="spyre")
        compiled = torch.compile(layer, dynamic=False)
        t0 = time.perf_counter()
        with torch.no_grad():
            compiled(x, 0)
            layer(x, 0)
        torch.spyre.synchronize()
        first = time.perf_counter() - t0
        eager_ev = profile_events(layer, x, 0)
        with KernelBytes() as kb:
            comp_ev = profile_events(compiled, x, 0)
        me = sum(e.modeled_ns for e in eager_ev) / 1e3
        mc = sum(e.modeled_ns for e in comp_ev) / 1e3
        le, lc = sum(e.launches for e in eager_ev), sum(e.launches for e in comp_ev)
        case = f"Granite layer prefill {L}"
        record(case, "eager", le, me)
        record(case, "compiled", lc, mc, first_call_s=first)
        print(f"{case} fp16: launches eager {le}, compiled {lc}; modeled eager {me:.1f} us, "
              f"compiled {mc:.1f} us: compiled {me / mc:.3f}x better (target 1.15x); first "
              f"calls (compile + both) {first:.1f} s")
        for name, evs in (("eager", eager_ev), ("compiled", comp_ev)):
            print(f"  {name} by op: " + "; ".join(
                f"{op} {s['calls']} calls {s['launches']} launches {s['modeled_ns'] / 1e3:.1f} us"
                for op, s in by_op(evs).items()))
        fused = [e for e in comp_ev if "fused" in e.aten_op]
        if len(fused) != len(kb.calls):
            print(f"  (generated kernels: {len(fused)} profiled, {len(kb.calls)} recorded: "
                  "per-kernel rooflines not paired)")
            continue
        for k, (e, (names, shape, nbytes)) in enumerate(zip(fused, kb.calls)):
            roof = nbytes / DDR_BYTES_PER_S * 1e6
            us = e.modeled_ns / 1e3
            record(f"{case}: generated kernel {k} [{shape}]", "compiled", e.launches, us,
                   ddr_roofline_us=roof, buffers=list(names), plan=e.plan)
            print(f"  generated kernel {names} -> [{shape}]: {e.launches} launch(es), "
                  f"{us:.1f} us modeled, DDR roofline {roof:.1f} us ({nbytes / 2**20:.1f} MiB): "
                  f"{us / roof:.2f}x; plan {e.plan}")


def by_op(events):
    out = {}
    for e in events:
        s = out.setdefault(e.aten_op, {"calls": 0, "launches": 0, "modeled_ns": 0})
        s["calls"] += 1
        s["launches"] += e.launches
        s["modeled_ns"] += e.modeled_ns
    return out


def granite_model(lengths=(512, 2048), batches=(1, 8, 32), layers=32):
    """A Granite-8B-shaped model (32 layers as above, vocab GRANITE_VOCAB, untied LM head) compiled
    whole: modeled prefill tokens/s at each length and decode tokens/s at each batch with the KV
    cache at each length, each beside its roofline: max(bytes / 204.8 GB/s, FLOPs / fp16
    peak), the bytes the weights once (and in decode the KV cache read), the FLOPs the matmuls
    and the causal attention."""
    from models import Granite
    h, kvh, inter = GRANITE["hidden"], GRANITE["kv_heads"], GRANITE["intermediate"]
    d = h // GRANITE["heads"]
    layer_params = h * h * 2 + 2 * h * kvh * d + 3 * h * inter  # q, o, k, v, gate/up/down
    matmul_params = layers * layer_params + GRANITE_VOCAB * h  # the LM head too
    weight_bytes = 2 * (matmul_params + layers * 2 * h + h)
    kv_max = max(lengths)

    def attention_flops(q_len, kv_len):  # QK^T and PV over the keys each query sees
        seen = q_len * kv_len - q_len * (q_len - 1) / 2
        return layers * 2 * 2 * GRANITE["heads"] * d * seen

    def run(case, mode, model, tokens, pos, n_tokens, bytes_, flops):
        torch.compiler.reset()
        compiled = torch.compile(model, dynamic=False)
        t0 = time.perf_counter()
        with torch.no_grad():
            compiled(tokens, pos)
        torch.spyre.synchronize()
        first = time.perf_counter() - t0
        evs = profile_events(compiled, tokens, pos)
        us = sum(e.modeled_ns for e in evs) / 1e3
        launches = sum(e.launches for e in evs)
        roof_us = max(bytes_ / DDR_BYTES_PER_S, flops / PEAK_FLOPS) * 1e6
        bound = "DDR" if bytes_ / DDR_BYTES_PER_S >= flops / PEAK_FLOPS else "compute"
        tps, roof_tps = n_tokens / us * 1e6, n_tokens / roof_us * 1e6
        record(case, mode, launches, us, roofline_us=roof_us, tokens_per_s=tps,
               roofline_tokens_per_s=roof_tps, first_call_s=first)
        print(f"{case}: {launches} launches, modeled {us / 1e3:.2f} ms = {tps:.1f} tokens/s; "
              f"roofline ({bound}) {roof_us / 1e3:.2f} ms = {roof_tps:.1f} tokens/s: "
              f"{100 * roof_us / us:.1f}% of it; compile + first call {first:.0f} s")
        top = sorted(by_op(evs).items(), key=lambda kv: -kv[1]["modeled_ns"])[:6]
        print("  by op: " + "; ".join(f"{op} {s['calls']} calls {s['modeled_ns'] / 1e3:.0f} us"
                                      for op, s in top))
        return compiled

    model = on_card(lambda: Granite(GRANITE_VOCAB, **GRANITE, layers=layers,
                                    max_len=kv_max + 1, batch=1))
    for L in lengths:
        tokens = torch.zeros(1, L, dtype=torch.int64, device="spyre")
        flops = 2 * L * matmul_params + attention_flops(L, L)
        run(f"Granite-8B prefill {L}", "compiled", model, tokens, 0, L, weight_bytes, flops)
    del model
    weights_only = weight_bytes / DDR_BYTES_PER_S * 1e6
    print(f"Granite-8B weights streamed once: {weight_bytes / 1e9:.2f} GB = "
          f"{weights_only / 1e3:.2f} ms at 204.8 GB/s")
    for B in batches:
        model = on_card(lambda: Granite(GRANITE_VOCAB, **GRANITE, layers=layers,
                                        max_len=kv_max + 1, batch=B))
        tokens = torch.zeros(B, 1, dtype=torch.int64, device="spyre")
        for kv in lengths:  # the token at position kv attends over kv + 1 cache entries
            kv_bytes = layers * 2 * B * (kv + 1) * kvh * d * 2
            flops = B * (2 * matmul_params + attention_flops(1, kv + 1))
            run(f"Granite-8B decode batch {B}, KV {kv}", "compiled", model, tokens, kv, B,
                weight_bytes + kv_bytes, flops)
            print(f"  weight-streaming roofline alone: {B / weights_only * 1e6:.1f} tokens/s")
        del model


def granite():
    timing_only_card()
    granite_layer()
    granite_model()


def main():
    if sys.argv[1:] == ["first-token-child"]:
        first_token_child()
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("only", nargs="?", choices=["rows", "longrows", "train", "startup",
                                                "granite", "granite-layer", "decode"],
                    help="run only the row kernels, only the long rows, only the training "
                    "step, only the cold and warm start, the Granite sizes or the TinyGranite "
                    "decode steps")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON records")
    args = ap.parse_args()
    if args.only == "rows":
        rows()
    elif args.only == "longrows":
        long_rows()
    elif args.only == "train":
        train()
    elif args.only == "startup":
        startup()
    elif args.only == "granite-layer":
        timing_only_card()
        granite_layer()
    elif args.only == "granite":
        granite()
    elif args.only == "decode":
        decode()
    else:
        startup()
        everything()
    if args.json:
        if args.only in ("granite", "granite-layer") and os.path.exists(args.json):
            with open(args.json) as f:  # a run of its own (timing-only): add to the others
                RECORDS[:0] = json.load(f)["records"]
        with open(args.json, "w") as f:
            json.dump({"records": RECORDS}, f, indent=1)
            f.write("\n")
        print(f"wrote {args.json} ({len(RECORDS)} records)")


def everything():
    rows()
    long_rows()
    for shape, dt in [((64, 64), torch.float16), ((1024, 1024), torch.float16),
                      ((1024, 1024), torch.float32)]:
        torch.compiler.reset()
        x, y = (torch.randn(shape).to(dt).to("spyre") for _ in range(2))
        f = torch.compile(chain)
        t0 = time.perf_counter()
        f(x, y)
        torch.spyre.synchronize()
        first = time.perf_counter() - t0
        (le, me), (lc, mc) = profile(chain, x, y), profile(f, x, y)
        roof = 3 * x.numel() * x.element_size() / DDR_BYTES_PER_S * 1e6
        he, hc = host_us(chain, x, y), host_us(f, x, y)
        case = f"chain {shape} {str(dt)[6:]}"
        record(case, "eager", le, me, he, ddr_roofline_us=roof)
        record(case, "compiled", lc, mc, hc, ddr_roofline_us=roof, first_call_s=first)
        print(f"chain {shape} {str(dt)[6:]}: launches {le} -> {lc}, modeled {me:.2f} -> {mc:.2f} us "
              f"(DDR roofline {100 * roof / mc:.0f}%), host {he:.1f} -> "
              f"{hc:.1f} us/call, first call {first:.2f} s")
    train()
    decode()


def train(steps=64):
    """A training step's forward, loss and backward (a 6-layer MLP with LayerNorm and GELU,
    cross-entropy, batch 16; SGD's step eager, outside the measured part) eager, compiled, and
    compiled with the forward and backward graphs replayed (backend="spyre_graphs"): per step
    the submissions, card jobs and modeled device time, and the host time (median over the
    steps after the warm-up and capture, each step synchronized)."""
    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64),
                                   torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
                                   torch.nn.Linear(64, 10)).to("spyre")

    def loss_of(m, a, b):
        return torch.nn.functional.cross_entropy(m(a), b)

    torch.compiler.reset()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(16, 32, generator=g).to("spyre"),
                torch.randint(0, 10, (16,), generator=g).to("spyre")) for _ in range(steps)]
    modes = [("eager", loss_of), ("compiled", torch.compile(loss_of)),
             ("compiled+replay", torch.compile(loss_of, backend="spyre_graphs"))]
    losses = {}
    for name, fn in modes:
        model = build()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        ts, subs, jobs, got = [], [], [], []
        for x, y in batches:
            opt.zero_grad()
            torch.spyre.synchronize()
            s0, j0 = torch.spyre.submissions(), torch.spyre.card_jobs()
            t0 = time.perf_counter()
            loss = fn(model, x, y)
            loss.backward()
            ts.append(time.perf_counter() - t0)
            torch.spyre.synchronize()
            subs.append(torch.spyre.submissions() - s0)
            jobs.append(torch.spyre.card_jobs() - j0)
            opt.step()
            got.append(loss.item())
        losses[name] = got
        # modeled device time of one more step between two events (a replay queues no op for
        # the profiler to see); launches queued by ops (0 for a replay)
        opt.zero_grad()
        with torch_spyre.profiler.profile() as p:
            torch.spyre.synchronize()
            e0, e1 = torch.spyre.Event(), torch.spyre.Event()
            e0.record()
            fn(model, *batches[0]).backward()
            e1.record()
            torch.spyre.synchronize()
        modeled = e0.modeled_time(e1) * 1000
        launches = sum(e.launches for e in p.events)
        print(f"  {name} host ms per step: " + " ".join(f"{t * 1e3:.2f}" for t in ts))
        host = sorted(ts[2:])[len(ts[2:]) // 2]
        record("MLP training step (fwd+bwd)", name, launches, modeled, host * 1e6,
               subs[-1], jobs=jobs[-1])
        print(f"training step {name}: {subs[-1]} submissions, {jobs[-1]} card jobs, "
              f"{modeled:.1f} us modeled, host {host * 1e3:.3f} ms (median of {len(ts) - 2}, "
              f"min {min(ts[2:]) * 1e3:.3f}, max {max(ts[2:]) * 1e3:.3f})")
    worst = max(abs(a - b) for name in losses for a, b in zip(losses[name], losses["eager"]))
    print(f"training losses vs eager over {steps} steps: max abs difference {worst:.3g}")


def decode():
    """TinyGranite decode steps: eager, compiled and replayed at one position, then with the
    KV length growing (growing_kv); first eager decode at new key lengths (new_lengths: before
    the others have planned any)."""
    new_lengths()
    torch.compiler.reset()
    eager = TinyGranite().to("spyre")
    model = copy.deepcopy(eager)
    compiled = torch.compile(model)
    replayed = torch.compile(copy.deepcopy(eager), backend="spyre_graphs")
    prompt = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(3))
    token = torch.full((1, 1), 7, device="spyre")
    with torch.no_grad():
        t0 = time.perf_counter()
        compiled(prompt.to("spyre"), 0), compiled(token, 12), compiled(token, 13)
        torch.spyre.synchronize()
        print(f"decoder: compile prefill + decode {time.perf_counter() - t0:.2f} s")
        eager(prompt.to("spyre"), 0)
        # plans warm for every position measured, for both: the library caches plans by shape
        # for the process (attention's by bucket of key lengths), so whichever ran a position
        # first would pay its plans
        for fn in (eager, compiled):
            for pos in range(14, 29):
                fn(token, pos)
        # A graph is captured per signature (the position is one: the KV length), so the
        # replayed step is measured at one position, called again and again (it rewrites the
        # same KV cache entry): warm-up, capture, then replays.
        replayed(prompt.to("spyre"), 0)  # the same KV cache as eager's up to position 20
        for pos in range(14, 20):  # as eager (12 and 13 it never wrote)
            replayed(token, pos)
        for _ in range(3):
            replayed(token, 20)
        torch.spyre.synchronize()
        steps = [("eager", eager, list(range(21, 29))), ("compiled", compiled, list(range(21, 29))),
                 ("compiled+replay", replayed, [20] * 8)]
        for name, fn, positions in steps:
            launches, modeled = profile(fn, token, positions[0])
            subs, jobs, modeled_ev = count_step(fn, token, positions[0])
            modeled = modeled or modeled_ev  # a replay queues no op: its events' modeled time
            ts = []
            for pos in positions:  # one step per hold: the KV length grows (not for replay)
                with torch.spyre._hold_stream():
                    t0 = time.perf_counter()
                    fn(token, pos)
                    ts.append(time.perf_counter() - t0)
                torch.spyre.synchronize()
            record("TinyGranite decode step", name, launches, modeled, sorted(ts)[4] * 1e6,
                   subs, jobs=jobs)
            print(f"decode step {name}: {launches} launches queued by ops, {subs} submissions, "
                  f"{jobs} card jobs, {modeled:.1f} us modeled, host {sorted(ts)[4] * 1e3:.3f} "
                  f"ms (median of 8, "
                  f"min {min(ts) * 1e3:.3f}, max {max(ts) * 1e3:.3f})")
        want = eager(token, 20).cpu()
        got = replayed(token, 20).cpu()
        print(f"replayed step vs eager: max abs difference {(want - got).abs().max().item():.3g} "
              f"(logits up to {want.abs().max().item():.3g})")
        growing_kv(prompt)


def new_lengths():
    """Eager greedy decode as HF-style generate runs it (the KV length a host int, one more each
    step): 40 steps at key lengths the process has not seen (5-44), then the same 40 again;
    medians of wall and process CPU time per step (synchronized). What a new length costs beyond
    a seen one (ops.md "Attention plans across key lengths")."""
    m = TinyGranite().to("spyre").eval()
    prompt = torch.randint(0, 512, (1, 4), generator=torch.Generator().manual_seed(5))
    res = []
    with torch.no_grad():
        for _ in range(2):
            logits, wall, cpu = m(prompt.to("spyre"), 0)[:, -1], [], []
            torch.spyre.synchronize()
            for pos in range(4, 44):
                t0, c0 = time.perf_counter(), time.process_time()
                logits = m(logits.argmax(-1, keepdim=True), pos)[:, -1]
                torch.spyre.synchronize()
                wall.append(time.perf_counter() - t0), cpu.append(time.process_time() - c0)
            res.append((sorted(wall)[20] * 1e3, sorted(cpu)[20] * 1e3))
    for (w, c), name in zip(res, ("new key lengths", "the same lengths again")):
        record("TinyGranite eager decode, " + name, "eager", None, None, w * 1e3, cpu_us=c * 1e3)
    print(f"eager decode at new key lengths: {res[0][0]:.3f} ms/step wall, {res[0][1]:.3f} ms "
          f"CPU; the same lengths again: {res[1][0]:.3f} ms wall, {res[1][1]:.3f} ms CPU "
          f"(medians of 40 steps)")


def growing_kv(prompt):
    """Greedy decode steps with the KV length growing by one each step (DecodeStep: logits,
    next token and position on the card), over the bucket of 32 cache entries (positions
    16-31): the first two steps of it warm (the replayer's warm-up and capture), then one
    profiled, one counted, 12 timed, each on the next position."""
    base = TinyGranite().to("spyre")
    runs = [("eager", {}), ("compiled", {}), ("compiled+replay", {"backend": "spyre_graphs"}),
            ("reduce-overhead", {"mode": "reduce-overhead"})]
    for name, kw in runs:
        torch.compiler.reset()
        step = DecodeStep(base) if name == "eager" else torch.compile(DecodeStep(base), **kw)
        base(prompt.to("spyre"), 0)
        tok = torch.full((1, 1), 7, device="spyre")
        pos = torch.full((1,), 12, dtype=torch.int64, device="spyre")
        for p in range(12, 18):
            step(tok, pos, kv_bucket(p))
        launches, modeled = profile(step, tok, pos, kv_bucket(18))
        subs, jobs, modeled_ev = count_step(step, tok, pos, kv_bucket(19))
        modeled = modeled or modeled_ev
        ts = []
        for p in range(20, 32):
            with torch.spyre._hold_stream():
                t0 = time.perf_counter()
                step(tok, pos, kv_bucket(p))
                ts.append(time.perf_counter() - t0)
            torch.spyre.synchronize()
        ts.sort()
        record("TinyGranite growing-KV decode step", name, launches, modeled,
               ts[len(ts) // 2] * 1e6, subs, jobs=jobs)
        print(f"growing-KV decode step {name}: {launches} launches queued by ops, {subs} "
              f"submissions, {jobs} card jobs, {modeled:.1f} us modeled, host "
              f"{ts[len(ts) // 2] * 1e3:.3f} "
              f"ms (median of {len(ts)} positions, min {ts[0] * 1e3:.3f}, max {ts[-1] * 1e3:.3f})")


if __name__ == "__main__":
    main()

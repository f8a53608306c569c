#!/usr/bin/env python3
"""Runs a small Granite-style decoder (torch_spyre/tests/models.py: embedding, one decoder layer
with RMSNorm, GQA attention with rotary embedding and a KV cache, SwiGLU, LM head) on a spyre
card and on the CPU: a prefill of a 12-token prompt and 8 greedy decode steps. Prints the
largest logit difference, whether the generated tokens are identical, the CPU fallbacks (none
expected) and the modeled device time of the spyre run from libspyre's op information (per
operator with --table). Exits 1 on a token mismatch, an error above tolerance or a fallback.

    PYTHONPATH=build/cmake/torch_spyre/python python3 torch_spyre/tools/decoder_demo.py
    (SPYRE_BACKEND=sim for the simulator; in the VM after `modprobe spyre`, the card)
"""

import argparse
import copy
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import torch  # noqa: E402

import torch_spyre  # noqa: E402
from models import TinyGranite  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=12)
    ap.add_argument("--table", action="store_true", help="modeled device time per operator")
    args = ap.parse_args()

    torch_spyre.reset_fallback_counts()
    cpu = TinyGranite()
    dev = copy.deepcopy(cpu).to("spyre")
    prompt = torch.randint(0, 512, (1, args.prompt_len), generator=torch.Generator().manual_seed(3))

    ref_tokens, ref_logits = cpu.generate(prompt, args.steps)
    t0 = time.perf_counter()
    with torch_spyre.profiler.profile() as prof:
        tokens, logits = dev.generate(prompt.to("spyre"), args.steps)
        tokens = tokens.cpu()
    host_s = time.perf_counter() - t0

    err = max(float((g.cpu() - w).abs().max()) for g, w in zip(logits, ref_logits))
    scale = max(float(w.abs().max()) for w in ref_logits)
    same = torch.equal(tokens, ref_tokens)
    fallbacks = torch_spyre.fallback_counts()
    print(f"device: {torch.spyre.get_device_name(0)}")
    print(f"prompt {args.prompt_len} tokens, {args.steps} greedy decode steps")
    print(f"spyre tokens: {tokens.tolist()[0]}")
    print(f"cpu tokens:   {ref_tokens.tolist()[0]}")
    print(f"identical tokens: {same}")
    print(f"max logit error: {err:.3e} (largest logit {scale:.2f})")
    print(f"cpu fallbacks: {fallbacks or 'none'}")
    print(f"op-library launches: {len(prof.events)}, modeled device time "
          f"{prof.total_modeled_ns() / 1000:.1f} us, host wall time {host_s * 1000:.1f} ms")
    if args.table:
        print(prof.table())
    ok = same and err <= 1e-3 * max(scale, 1.0) and not fallbacks
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Runs several rank workers one after another in this one process: ``chain_worker.py
INIT_FILE WORKER[:ARG...] ...`` (each WORKER a script beside this one, run as ``WORKER
INIT_FILE.i [ARG...]``, its cases or mode: its own process group on a fresh store; an ARG
"{store}" puts INIT_FILE.i there instead). Every rank's `import
torch` and process-group set-up are paid once, not once per worker (under TCG an `import torch`
takes minutes: tests/guest/run-all.sh's torch-dist row; on the host most of a small case's time:
test_distributed.py). Prints "== WORKER[:ARG]" before each and "-- WORKER[:ARG] returned" after
it; a worker that fails ends the process non-zero (the later ones do not run)."""

import os
import runpy
import sys

import torch

import dist_checks

init_file, workers = sys.argv[1], sys.argv[2:]
here = os.path.dirname(os.path.abspath(__file__))
dist_checks.CHAINED = True  # a worker's finish() returns instead of ending the process
for i, spec in enumerate(workers):
    script, *args = spec.split(":")
    store = f"{init_file}.{i}"
    if any("{store}" in a for a in args):  # the worker wants its store elsewhere in argv
        sys.argv = [script, *(a.replace("{store}", store) for a in args)]
    else:
        sys.argv = [script, store, *args]
    print(f"== {spec}", flush=True)
    if "torch._dynamo" in sys.modules:  # a worker before compiled: fresh caches and counters
        torch.compiler.reset()
        torch._dynamo.utils.counters.clear()
    dist_checks.FINISHED = False
    runpy.run_path(os.path.join(here, script), run_name="__main__")
    print(f"-- {spec} returned", flush=True)
dist_checks.CHAINED = False
if dist_checks.FINISHED:  # the last worker ends without the interpreter's finalization
    dist_checks.finish()
# the others' processes end as they would alone: through the interpreter's finalization

"""Starts one process per card: ``python3 -m torch_spyre.launch --nproc N script.py [args]``;
on several nodes ``--nnodes M --node-rank K --master-addr ADDR --master-port PORT`` on each.

Debian's ``torchrun`` cannot start (its rendezvous store asks for libuv, which Debian's torch
is built without). This launcher sets what torchrun sets for ``init_method="env://"``: RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, plus USE_LIBUV=0; waits for
the ranks and, when one fails, stops the others and returns its exit code.
"""

import argparse
import os
import socket
import subprocess
import sys
import time


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m torch_spyre.launch")
    p.add_argument("--nproc", type=int, required=True, help="ranks on this node (one per card)")
    p.add_argument("--nnodes", type=int, default=1, help="nodes (machines or VMs) of the job")
    p.add_argument("--node-rank", type=int, default=0, help="this node's place, 0..nnodes-1")
    p.add_argument("--master-addr", default="127.0.0.1",
                   help="address of node 0 (its rank 0 serves the store)")
    p.add_argument("--master-port", type=int, default=0,
                   help="the store's port (required with --nnodes > 1)")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if not 0 <= a.node_rank < a.nnodes:
        p.error(f"--node-rank {a.node_rank} is not in 0..{a.nnodes - 1}")
    if a.nnodes > 1 and not a.master_port:
        p.error("--nnodes > 1 needs --master-port (every node must name the same port)")
    port = a.master_port or _free_port()
    world = a.nnodes * a.nproc
    procs = []
    for local in range(a.nproc):
        r = a.node_rank * a.nproc + local
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(local), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(a.nproc), MASTER_ADDR=a.master_addr,
                   MASTER_PORT=str(port), USE_LIBUV="0")
        procs.append(subprocess.Popen([sys.executable, a.script, *a.args], env=env))
    rc = 0
    while procs:
        for pr in list(procs):
            code = pr.poll()
            if code is None:
                continue
            procs.remove(pr)
            if code and not rc:
                rc = code
                for other in procs:  # like torchrun: one failed rank stops the job
                    other.terminate()
        time.sleep(0.05)
    return rc


if __name__ == "__main__":
    sys.exit(main())

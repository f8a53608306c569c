"""The spyre backend over several nodes (torch_spyre/hierarchical.py) on one host: each rank a
process with its own simulated card, TORCH_SPYRE_NODE_ID grouping them into nodes, so the
ranks of a node reduce through ProcessGroupSpyre and the node leaders through gloo; every
collective against gloo on the CPU and DDP against one process on the CPU
(multinode_worker.py). tests/multinode/run.sh runs the same worker in two VMs joined by an
emulated network. A layout's peer-failure and peer-death cases run in the launch of its cases,
after them, each on a new process group (chain_worker.py: one import torch per rank for all)."""

import functools
import os
import re
import tempfile

import pytest

from conftest import chain_part, run_ranks

CASES = ("all_reduce", "broadcast_all_gather_barrier", "the_rest", "ddp")
PEER_DEATH = [(4, 2), (3, 1)]  # (world, per_node) layouts with peer-failure and -death cases


@functools.lru_cache(maxsize=None)
def _launch(world, per_node, peer_dies):
    """One launch of `world` ranks, `per_node` to a node: the cases, then (peer_dies) the peer
    failure and the peer death, each on a new process group in the same processes
    (chain_worker.py)."""
    nodes = (world + per_node - 1) // per_node
    specs = _specs(nodes, peer_dies)
    with tempfile.TemporaryDirectory() as d:
        return run_ranks("chain_worker.py", world, os.path.join(d, "store"), *specs,
                         rank_env=lambda r: {"TORCH_SPYRE_NODE_ID": f"node{r // per_node}"},
                         TORCH_SPYRE_STRICT="1")


def _specs(nodes, peer_dies):
    cases = f"multinode_worker.py:{nodes}:{{store}}"
    return (cases, cases + ":peer_fails", cases + ":peer_dies") if peer_dies else (cases,)


@pytest.mark.parametrize("world,per_node", [(4, 2), (3, 1), (2, 2)])
def test_hierarchical_matches_gloo_and_one_process(world, per_node):
    """4 ranks on 2 nodes, 3 ranks on 3 nodes, and 2 ranks on one node (ProcessGroupSpyre)."""
    nodes = (world + per_node - 1) // per_node
    peer_dies = (world, per_node) in PEER_DEATH  # that launch goes on: peer failure, death
    specs = _specs(nodes, peer_dies)
    for r, (code, out, ok) in enumerate(chain_part(_launch(world, per_node, peer_dies), specs,
                                                   specs[0])):
        assert ok, f"rank {r} (exit {code}) failed:\n{out[-3000:]}"
        for case in CASES:
            assert f"{case} ok" in out, f"rank {r} did not run {case}:\n{out[-2000:]}"


@pytest.mark.parametrize("world,per_node", PEER_DEATH)
def test_peer_failure_across_nodes_reaches_every_rank(world, per_node):
    """The last rank's all_reduce fails (its card is lost), it catches the error and stays
    alive: every other rank's all_reduce raises within seconds (not after the 30 s timeout)
    with "rank LAST failed: ...", whether it was in that all_reduce or called it after the
    failure (on a new group), and a later call raises the same at once, on every rank (the
    group stays failed)."""
    nodes = (world + per_node - 1) // per_node
    specs = _specs(nodes, True)
    errors = {"together": set(), "after": set()}  # each group's message, on every rank
    for r, (code, out, ok) in enumerate(chain_part(_launch(world, per_node, True), specs,
                                                   specs[1])):
        assert ok, f"rank {r} (exit {code}):\n{out[-3000:]}"
        for name in ("together", "together again", "after", "after again"):
            m = re.search(rf"rank {r}: peer_fails {name}: error after ([0-9.]+) s: (.*)", out)
            assert m and float(m[1]) < 10, (m and m[0]) or out[-2000:]
            errors[name.split()[0]].add(m[2])
    for msgs in errors.values():
        assert len(msgs) == 1 and min(msgs).startswith(f"rank {world - 1} failed: "), errors


@pytest.mark.parametrize("world,per_node", PEER_DEATH)
def test_peer_death_across_nodes_is_an_error_not_a_hang(world, per_node):
    """The last rank exits mid-job: every other rank's next collective raises within seconds
    (inside its node ProcessGroupSpyre names the dead rank, between nodes gloo's connection to a
    rank that exited closes), not after the 300 s timeout."""
    nodes = (world + per_node - 1) // per_node
    specs = _specs(nodes, True)
    outs = chain_part(_launch(world, per_node, True), specs, specs[2])
    assert outs[-1][0] == 17, outs[-1][1][-2000:]
    for r, (code, out, ok) in enumerate(outs[:-1]):
        assert ok and f"rank {r}: error after" in out, f"rank {r} (exit {code}):\n{out[-2000:]}"
        # the node's ProcessGroupSpyre numbers its ranks within the node: a message of it says
        # which global ranks those are
        line = re.search(rf"rank {r}: error after .*", out)[0]
        if " died" in line and world > nodes:
            assert f"= rank {world - 1}" in line, line

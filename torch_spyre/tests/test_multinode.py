"""The spyre backend over several nodes (torch_spyre/hierarchical.py) on one host: each rank a
process with its own simulated card, TORCH_SPYRE_NODE_ID grouping them into nodes, so the
ranks of a node reduce through ProcessGroupSpyre and the node leaders through gloo; every
collective against gloo on the CPU and DDP against one process on the CPU
(multinode_worker.py). tests/multinode/run.sh runs the same worker in two VMs joined by an
emulated network."""

import os
import tempfile

import pytest

from conftest import run_ranks

CASES = ("all_reduce", "broadcast_all_gather_barrier", "the_rest", "ddp")


@pytest.mark.parametrize("world,per_node", [(4, 2), (3, 1), (2, 2)])
def test_hierarchical_matches_gloo_and_one_process(world, per_node):
    """4 ranks on 2 nodes, 3 ranks on 3 nodes, and 2 ranks on one node (ProcessGroupSpyre)."""
    nodes = (world + per_node - 1) // per_node
    with tempfile.TemporaryDirectory() as d:
        outs = run_ranks("multinode_worker.py", world, str(nodes), os.path.join(d, "store"),
                         rank_env=lambda r: {"TORCH_SPYRE_NODE_ID": f"node{r // per_node}"},
                         TORCH_SPYRE_STRICT="1")
    for r, (code, out) in enumerate(outs):
        assert code == 0, f"rank {r} failed:\n{out[-3000:]}"
        for case in CASES:
            assert f"{case} ok" in out, f"rank {r} did not run {case}:\n{out[-2000:]}"


@pytest.mark.parametrize("world,per_node", [(4, 2), (3, 1)])
def test_peer_death_across_nodes_is_an_error_not_a_hang(world, per_node):
    """The last rank exits mid-job: every other rank's next collective raises within seconds
    (inside its node ProcessGroupSpyre names the dead rank, between nodes gloo's connection to a
    rank that exited closes), not after the 300 s timeout."""
    nodes = (world + per_node - 1) // per_node
    with tempfile.TemporaryDirectory() as d:
        outs = run_ranks("multinode_worker.py", world, str(nodes), os.path.join(d, "store"),
                         rank_env=lambda r: {"TORCH_SPYRE_NODE_ID": f"node{r // per_node}"},
                         MULTINODE_PEER_DIES="1", timeout=200)
    assert outs[-1][0] == 17, outs[-1][1][-2000:]
    for r, (code, out) in enumerate(outs[:-1]):
        assert code == 0 and f"rank {r}: error after" in out, f"rank {r}:\n{out[-2000:]}"

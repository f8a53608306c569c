"""torch's DTensor tensor parallelism on spyre (dtensor_worker.py): a column-parallel and a
row-parallel linear through parallelize_module on a DeviceMesh of spyre cards, forward,
backward and SGD steps equal to one process on the CPU, strict (no CPU fallback)."""

import pytest

from conftest import run_worker_cases


@pytest.mark.parametrize("world", [2, 4])
def test_colwise_rowwise_mlp_matches_cpu(world):
    run_worker_cases("dtensor_worker.py", world, ["colwise_rowwise_mlp"])

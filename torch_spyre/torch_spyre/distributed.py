"""The ``spyre`` torch.distributed backend.

``import torch_spyre`` registers it, so ``dist.init_process_group("spyre", ...)`` works with one
process per card. The backend is C++ (``ProcessGroupSpyre``, a ``c10d::Backend`` in
``csrc/distributed``) over libspyre's collectives (``spyre/comm.h``); rank 0 puts the
communicator's unique id in the process group's store. Documentation/torch_spyre.md
"torch.distributed".
"""

import torch.distributed as dist

from . import _C, hierarchical

BACKEND = "spyre"


def _create_backend(store, rank, size, timeout):
    # One node: ProcessGroupSpyre; several (machines or VMs): on-card collectives inside each
    # node and gloo between them (hierarchical.py).
    return hierarchical.create(store, rank, size, timeout)


def register():
    """Registers the backend with torch.distributed (idempotent)."""
    if not dist.is_available():
        return False
    if BACKEND in dist.Backend.backend_list:
        return True
    _C._init_distributed(_C)
    dist.Backend.register_backend(BACKEND, _create_backend, devices=["spyre"])
    return True

"""Test hooks of the simulator backend (Documentation/torch_compile.md "Errors").

``inject_sim_fault(device, "program" | "lost" | "none", after_launches=0)`` arms a fault on a
simulated card (SPYRE_BACKEND=sim only; libspyre's ``spyre_sim_inject_fault``): the launch
after the next ``after_launches`` launches on the card fails as a program that faulted
(``"program"``, once) or finds the card removed (``"lost"``: every later allocation, copy and
launch on it fails with "spyre-simN was removed ... (device lost)"), as a real card reports
them. ``"none"`` disarms and brings a lost card back. For tests of what users see when a card
fails; nothing else calls it.
"""

import torch_spyre

_FAULTS = {"none": 0, "program": 1, "lost": 2}


def inject_sim_fault(device, fault, after_launches=0):
    if fault not in _FAULTS:
        raise ValueError(f"fault {fault!r} is not one of {sorted(_FAULTS)}")
    torch_spyre._C._sim_inject_fault(int(device), _FAULTS[fault], int(after_launches))

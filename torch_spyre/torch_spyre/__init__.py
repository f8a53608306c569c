"""torch_spyre: the PyTorch adapter of the Spyre open stack.

``import torch_spyre`` registers the ``spyre`` device with PyTorch (the PrivateUse1 backend,
renamed), the ``torch.spyre`` module and the ``Tensor.spyre()`` / ``Module.spyre()`` helpers::

    import torch, torch_spyre
    x = torch.ones(4).to("spyre")

No card is touched at import: devices are counted on demand and opened on first use.
See Documentation/torch_spyre.md.
"""

import torch

from . import _C  # loads libtorch_spyre: kernels, CPU fallback, device guard, hooks, allocator
from . import _printing

_BACKEND = "spyre"

if torch._C._get_privateuse1_backend_name() != _BACKEND:
    torch.utils.rename_privateuse1_backend(_BACKEND)

from . import spyre  # noqa: E402  (needs the backend name)

torch._register_device_module(_BACKEND, spyre)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)
_printing.install()

fallback_counts = spyre.fallback_counts
reset_fallback_counts = spyre.reset_fallback_counts

__all__ = ["spyre", "fallback_counts", "reset_fallback_counts"]

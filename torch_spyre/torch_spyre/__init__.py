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

from . import profiler  # noqa: E402
from . import _dynamo  # noqa: E402

_dynamo.install()  # torch.compile: the device interface, fake kernels of spyre:: ops

from . import _fused_optim  # noqa: E402

_fused_optim.install()  # Adam / AdamW with fused=True: foreach ops on the card

from . import distributed  # noqa: E402
from . import quantization  # noqa: E402

distributed.register()  # dist.init_process_group("spyre")


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding, rotate-half convention (GPT-NeoX, Llama, Granite).

    ``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = [-x2, x1]`` over the halves of
    the last dim, computed in fp32 and rounded once to x's dtype. x is ``[B, H, L, D]``; cos
    and sin ``[L, D]``, ``[B or 1, L, D]`` or ``[B or 1, 1, L, D]``. One op-library call on
    spyre tensors (``torch.ops.spyre.rotary``); CPU tensors use the reference kernel.
    """
    return torch.ops.spyre.rotary(x, cos, sin)


def _autoload() -> None:
    """The ``torch.backends`` entry point of the installed package: ``import torch`` imports
    torch_spyre (which registers the backend on import), so ``torch.ones(2, device="spyre")``
    works without ``import torch_spyre``. TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns it off."""


__all__ = ["spyre", "fallback_counts", "reset_fallback_counts", "profiler", "rotary"]

"""torch.spyre: the device module of the spyre backend (registered by ``import torch_spyre``).

Mirrors torch.cuda where it applies: device count and selection, lazy initialization,
synchronize, the caching allocator's statistics (memory.py), streams and events (streams.py),
plus the CPU fallback's statistics.
"""

import threading
from typing import Any, Dict, Optional, Union

import torch

from torch_spyre import _C

from .memory import (
    empty_cache,
    host_memory_stats,
    empty_host_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from .graphs import SpyreGraph, graph, submissions
from .streams import (
    Event,
    Stream,
    StreamContext,
    _hold_stream,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

__all__ = [
    "Event",
    "SpyreGraph",
    "graph",
    "submissions",
    "Stream",
    "StreamContext",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "empty_host_cache",
    "fallback_counts",
    "get_device_name",
    "get_device_properties",
    "host_memory_stats",
    "init",
    "initial_seed",
    "is_available",
    "is_initialized",
    "max_memory_allocated",
    "max_memory_reserved",
    "manual_seed",
    "manual_seed_all",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_fallback_counts",
    "reset_peak_memory_stats",
    "set_device",
    "set_stream",
    "stream",
    "strict",
    "synchronize",
]

_init_lock = threading.Lock()

DeviceLike = Union[int, str, torch.device, None]


def _get_device_index(device: DeviceLike = None, optional: bool = True) -> int:
    """The spyre device index of ``device`` (None, an int, "spyre", "spyre:1", a torch.device);
    None or an index-less "spyre" is the current device."""
    if device is None:
        return _C._current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "spyre":
            raise ValueError(f"expected a spyre device, got {device}")
        return _C._current_device() if device.index is None else device.index
    if isinstance(device, int):
        return device
    raise TypeError(f"expected a spyre device, got {device!r}")


def is_available() -> bool:
    """Whether libspyre finds at least one card (SPYRE_BACKEND=sim: simulated cards)."""
    return device_count() > 0


def device_count() -> int:
    return _C._device_count()


def is_initialized() -> bool:
    return _C._is_initialized()


def _lazy_init() -> None:
    """Called by PyTorch before the first spyre tensor is made: fails if there is no card."""
    if _C._is_initialized():
        return
    with _init_lock:
        _C._init()


def init() -> None:
    """Initializes the backend now (it otherwise initializes on first use)."""
    _lazy_init()


def current_device() -> int:
    return _C._current_device()


def set_device(device: DeviceLike) -> None:
    idx = _get_device_index(device)
    if idx >= 0:
        _C._set_device(idx)


class device:
    """Context manager that makes ``device`` the current spyre device."""

    def __init__(self, device: DeviceLike):
        self.idx = _get_device_index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *args: Any):
        _C._exchange_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of tensor ``obj`` current (no-op for CPU)."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "spyre" else None)


def synchronize(device: DeviceLike = None) -> None:
    """Waits for all work on every stream of the card (spyre_device_synchronize)."""
    _C._synchronize(_get_device_index(device))


def get_device_properties(device: DeviceLike = None) -> Dict[str, Any]:
    """spyre_device_info of the card: name, backend, cores, memory, ..."""
    _lazy_init()
    return _C._device_properties(_get_device_index(device))


def get_device_name(device: DeviceLike = None) -> str:
    return get_device_properties(device)["name"]


# Random numbers: spyre has no device generator yet; random operators run on the CPU fallback
# and draw from the CPU's default generator, which these seed (torch.manual_seed calls
# manual_seed_all of the device module).
def manual_seed(seed: int) -> None:
    torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    torch.default_generator.manual_seed(int(seed))


def initial_seed() -> int:
    return torch.default_generator.initial_seed()


def _is_in_bad_fork() -> bool:
    return False


def __getattr__(name: str):
    # Inductor's registration hook for the PrivateUse1 backend asks for these when it first
    # compiles: the backend loads then, not at import
    if name in ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen"):
        from torch_spyre import _inductor

        return getattr(_inductor, name)
    raise AttributeError(f"module 'torch.spyre' has no attribute {name!r}")


def fallback_counts() -> Dict[str, int]:
    """How often each operator ran on the CPU fallback, by operator name."""
    return _C._fallback_counts()


def reset_fallback_counts() -> None:
    """Clears the fallback counts; every operator warns again on its next fallback."""
    _C._reset_fallback_counts()


def strict() -> bool:
    """Whether TORCH_SPYRE_STRICT is set (CPU fallbacks raise NotImplementedError)."""
    return _C._strict()

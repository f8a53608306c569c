"""torch.spyre: the device module of the spyre backend (registered by ``import torch_spyre``).

Mirrors torch.cuda where it applies: device count and selection, lazy initialization,
synchronize, the caching allocator's statistics (memory.py), streams and events (streams.py),
the random number generators (manual_seed, get_rng_state, ...), plus the CPU fallback's
statistics.
"""

import threading
from typing import Any, Dict, List, Optional, Union

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
from .graphs import SpyreGraph, card_jobs, graph, submissions
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
    "card_jobs",
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
    "get_amp_supported_dtype",
    "program_cache_stats",
    "get_device_name",
    "get_rng_state",
    "get_rng_state_all",
    "get_device_properties",
    "host_memory_stats",
    "is_bf16_supported",
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
    "runtime_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
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


# Random numbers: every card has a default Philox generator (seed and offset, held by
# libtorch_spyre) that the random operators on the card draw from; torch.manual_seed seeds it
# through manual_seed_all. Its state is a 16-byte torch.uint8 tensor (seed, offset).
_RNG_STATE_BYTES = 16


def _rng_device(device: DeviceLike) -> int:
    _lazy_init()
    idx = _get_device_index(device)
    if not 0 <= idx < device_count():
        raise IndexError(f"spyre device {idx} does not exist ({device_count()} devices)")
    return idx


def _seed_value(seed: int) -> int:
    seed = int(seed)
    if not -0x8000_0000_0000_0000 <= seed <= 0xFFFF_FFFF_FFFF_FFFF:
        raise RuntimeError(f"Overflow when unpacking long: seed {seed} is out of range")
    return seed & 0xFFFF_FFFF_FFFF_FFFF


def manual_seed(seed: int) -> None:
    """Seeds the current card's generator (and restarts its offset)."""
    _C._rng_manual_seed(_rng_device(None), _seed_value(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds the generator of every card (torch.manual_seed calls this)."""
    value = _seed_value(seed)
    if device_count() == 0:
        return
    _lazy_init()
    for idx in range(device_count()):
        _C._rng_manual_seed(idx, value)


def seed() -> None:
    """Seeds the current card's generator with a non-deterministic random number."""
    _C._rng_seed(_rng_device(None))


def seed_all() -> None:
    """Seeds every card's generator with one non-deterministic random number."""
    if device_count() == 0:
        return
    value = _C._rng_seed(_rng_device(0))
    for idx in range(1, device_count()):
        _C._rng_manual_seed(idx, value)


def initial_seed() -> int:
    """The current card's seed."""
    return _C._rng_initial_seed(_rng_device(None))


def get_rng_state(device: DeviceLike = "spyre") -> torch.Tensor:
    """The generator state of ``device`` as a 16-byte torch.uint8 tensor (seed, offset)."""
    raw = _C._rng_get_state(_rng_device(device))
    return torch.tensor(list(raw), dtype=torch.uint8)


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = "spyre") -> None:
    """Restores a state from get_rng_state (a 16-byte torch.uint8 CPU tensor)."""
    if not isinstance(new_state, torch.Tensor):
        raise TypeError(f"spyre RNG state must be a torch.ByteTensor, got {type(new_state)}")
    if new_state.dtype != torch.uint8:
        raise TypeError(
            f"spyre RNG state must be a torch.ByteTensor (uint8), got {new_state.dtype}"
        )
    if new_state.numel() != _RNG_STATE_BYTES:
        raise ValueError(
            f"spyre RNG state must have {_RNG_STATE_BYTES} bytes (seed, offset), "
            f"got {new_state.numel()}"
        )
    raw = bytes(new_state.detach().cpu().contiguous().tolist())
    _C._rng_set_state(_rng_device(device), raw)


def set_rng_state_all(new_states) -> None:
    for idx, state in enumerate(new_states):
        set_rng_state(state, idx)


# Autocast: torch.autocast(device_type="spyre") asks the device module which low-precision
# types it takes; the op lists are PyTorch's own (csrc/aten/Autocast.cpp).
def get_amp_supported_dtype() -> List[torch.dtype]:
    """The types torch.autocast("spyre", dtype=...) accepts: the matrix unit's 16-bit inputs."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bf16 runs on the matrix and vector units of every Spyre card."""
    return True


def _is_in_bad_fork() -> bool:
    """True in a child forked after the parent used spyre: spyre is unusable there (as CUDA)."""
    return _C._is_in_bad_fork()


def __getattr__(name: str):
    # torch.utils.checkpoint saves and restores the device RNG state only when the device module
    # says it is initialized (as torch.cuda._initialized does)
    if name == "_initialized":
        return _C._is_initialized()
    # Inductor's registration hook for the PrivateUse1 backend asks for these when it first
    # compiles: the backend loads then, not at import
    if name in ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen"):
        from torch_spyre import _inductor

        return getattr(_inductor, name)
    raise AttributeError(f"module 'torch.spyre' has no attribute {name!r}")


def runtime_stats(device: DeviceLike = None) -> Dict[str, int]:
    """libspyre's counters of the card (spyre_runtime_stats): "jobs_submitted", the programs
    the op library keeps loaded on it ("pinned_programs", at most 1024, and
    "pinned_program_evictions"), "program_cache_hits"/"_misses" (program loads), the
    sub-allocator's; plus the op library's plan cache of this process ("op_plan_cache_hits",
    "op_plan_cache_misses": a miss plans and builds a program)."""
    _lazy_init()
    return dict(sorted(_C._runtime_stats(_get_device_index(device)).items()))


def fallback_counts() -> Dict[str, int]:
    """How often each operator ran on the CPU fallback, by operator name."""
    return _C._fallback_counts()


def reset_fallback_counts() -> None:
    """Clears the fallback counts; every operator warns again on its next fallback."""
    _C._reset_fallback_counts()


def strict() -> bool:
    """Whether TORCH_SPYRE_STRICT is set (CPU fallbacks raise NotImplementedError)."""
    return _C._strict()


def program_cache_stats() -> Dict[str, Any]:
    """The op library's caches of this process (Documentation/torch_spyre.md "Program cache"):
    plans found in the process's plan cache (memory_hits / memory_misses), programs read from
    the disk cache (disk_hits / disk_misses), ``generated`` (planned and generated here),
    disk_writes, disk_rejected (files that failed their checks), disk_evictions; ``enabled``,
    ``dir``, ``version`` (the version part of every key) and ``status`` (why it is off)."""
    return _C._program_cache_stats()

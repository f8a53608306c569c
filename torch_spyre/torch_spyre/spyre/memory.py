"""Memory statistics of the spyre caching allocator (the torch.cuda.memory API)."""

from typing import Any, Dict, Tuple

from torch_spyre import _C


def _index(device) -> int:
    from . import _get_device_index

    return _get_device_index(device)


def memory_stats(device=None) -> Dict[str, Any]:
    """The allocator's counters, with torch.cuda.memory_stats()'s keys
    ("allocated_bytes.all.current", "reserved_bytes.all.peak", "num_alloc_retries", ...)."""
    return dict(sorted(_C._memory_stats(_index(device)).items()))


def memory_allocated(device=None) -> int:
    """Bytes of device memory held by tensors (block sizes, rounded up: 512 B up to 1 MiB,
    128 KiB above)."""
    return _C._memory_stats(_index(device))["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    return _C._memory_stats(_index(device))["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    """Bytes held by the caching allocator: in tensors plus cached for reuse."""
    return _C._memory_stats(_index(device))["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    return _C._memory_stats(_index(device))["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None) -> None:
    _C._reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    _C._reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Gives the cached, unused device blocks of every card back to libspyre (waits for the
    cards' work first, so that the memory is free when it returns)."""
    _C._empty_cache()


def mem_get_info(device=None) -> Tuple[int, int]:
    """(free, total) bytes of the card's memory, from spyre_mem_get_info (all processes)."""
    from . import _lazy_init

    _lazy_init()
    return _C._mem_get_info(_index(device))


def host_memory_stats() -> Dict[str, int]:
    """Pinned host memory of torch_spyre (pin_memory): allocated, reserved, peak, blocks."""
    return _C._host_memory_stats()


def empty_host_cache() -> None:
    _C._host_empty_cache()


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A table of the allocator's statistics for the card."""
    idx = _index(device)
    s = _C._memory_stats(idx)
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Active memory", "active_bytes", True),
        ("Requested memory", "requested_bytes", True),
        ("Reserved memory", "reserved_bytes", True),
        ("Allocations", "allocation", False),
        ("Active blocks", "active", False),
        ("Segments (libspyre buffers)", "segment", False),
    ]
    pools = ("all",) if abbreviated else ("all", "small_pool", "large_pool")
    width = 78
    lines = ["=" * width, f" torch_spyre memory summary, spyre:{idx}".ljust(width), "=" * width]
    lines.append(f" {'Metric':<32}{'Cur':>11}{'Peak':>11}{'Alloc':>12}{'Freed':>12}")
    lines.append("-" * width)
    for title, key, is_bytes in rows:
        for pool in pools:
            f = _fmt if is_bytes else str
            name = title if pool == "all" else f"  from {pool.replace('_', ' ')}"
            vals = [s[f"{key}.{pool}.{k}"] for k in ("current", "peak", "allocated", "freed")]
            lines.append(
                f" {name:<32}{f(vals[0]):>11}{f(vals[1]):>11}{f(vals[2]):>12}{f(vals[3]):>12}"
            )
        lines.append("-" * width)
    lines.append(
        f" device allocs: {s['num_device_alloc']}  device frees: {s['num_device_free']}  "
        f"alloc retries: {s['num_alloc_retries']}  OOMs: {s['num_ooms']}"
    )
    lines.append("=" * width)
    return "\n".join(lines) + "\n"

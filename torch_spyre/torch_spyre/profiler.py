"""Per-op device time of spyre work, from libspyre's op library.

Every op-library launch of a spyre kernel made inside the context is recorded with
``spyre_op_get_last_info``: the aten operator that launched it, libspyre's op, its plan, cores,
device programs and the cycle model's device time (modeled when the op is queued, so no
synchronization is needed)::

    import torch, torch_spyre
    with torch_spyre.profiler.profile() as prof:
        y = model(x)
    print(prof.table())                 # per operator: calls, modeled device time
    prof.total_modeled_ns()             # sum over all launches
    prof.events                         # one OpEvent per launch

Only op-library launches are timed; copies and fills (DMA) and CPU fallbacks are not
(``torch_spyre.fallback_counts()`` lists the fallbacks). One profile at a time per process.
"""

from dataclasses import dataclass
from typing import Dict, List

from torch_spyre import _C

__all__ = ["OpEvent", "profile"]


@dataclass(frozen=True)
class OpEvent:
    """One op-library launch."""

    aten_op: str  # the kernel that launched it, e.g. "aten::mm"
    op: str  # libspyre's op, e.g. "matmul"
    plan: str
    cores: int
    launches: int  # device programs queued
    modeled_ns: int
    plan_cached: bool


class profile:
    """Context manager recording the op-library launches made inside it (all threads)."""

    def __init__(self):
        self.events: List[OpEvent] = []
        self._active = False

    def __enter__(self):
        _C._profiler_start()
        self._active = True
        return self

    def __exit__(self, *exc):
        self.events = [OpEvent(**e) for e in _C._profiler_stop()]
        self._active = False
        return False

    def total_modeled_ns(self) -> int:
        """Modeled device time of all recorded launches, in nanoseconds."""
        return sum(e.modeled_ns for e in self.events)

    def by_op(self) -> Dict[str, Dict[str, int]]:
        """{aten operator: {"calls", "launches", "modeled_ns"}}, in first-seen order."""
        out: Dict[str, Dict[str, int]] = {}
        for e in self.events:
            s = out.setdefault(e.aten_op, {"calls": 0, "launches": 0, "modeled_ns": 0})
            s["calls"] += 1
            s["launches"] += e.launches
            s["modeled_ns"] += e.modeled_ns
        return out

    def table(self) -> str:
        """A text table per aten operator, most device time first."""
        rows = sorted(self.by_op().items(), key=lambda kv: -kv[1]["modeled_ns"])
        total = self.total_modeled_ns() or 1
        lines = [f"{'operator':<40} {'calls':>6} {'launches':>8} {'device us':>10} {'share':>6}"]
        for name, s in rows:
            lines.append(
                f"{name:<40} {s['calls']:>6} {s['launches']:>8} "
                f"{s['modeled_ns'] / 1000:>10.2f} {100 * s['modeled_ns'] / total:>5.1f}%"
            )
        lines.append(f"{'total':<40} {len(self.events):>6} "
                     f"{sum(e.launches for e in self.events):>8} "
                     f"{self.total_modeled_ns() / 1000:>10.2f}")
        return "\n".join(lines)

"""Streams and events of the spyre backend (torch.cuda.Stream/Event semantics).

A ``Stream`` is an ordered queue of work on one card, backed by a libspyre stream; work on
different streams may overlap unless ordered with events. New streams come round robin from a
per-card pool of 8 normal and 8 high-priority (``priority < 0``) libspyre streams; stream 0 is
the card's default stream. An ``Event`` marks a point in a stream; ``elapsed_time`` gives the
host wall-clock milliseconds between the moments the two events completed (libspyre's
``wall_ns``), ``modeled_time`` the modeled device time of the work between them (the engine's
cycle model; on the simulator program launches and peer copies, on the card's timeline).
"""

import contextlib
from typing import Optional

import torch

from torch_spyre import _C



def _index(device) -> int:
    from . import _get_device_index

    return _get_device_index(device)


class Stream(torch.Stream):
    """A stream of a spyre card: ``Stream(device=None, priority=0)``."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:  # wrapping an existing stream
            return super().__new__(
                cls,
                stream_id=kwargs["stream_id"],
                device_index=kwargs["device_index"],
                device_type=kwargs["device_type"],
            )
        from . import _lazy_init

        _lazy_init()
        return super().__new__(cls, device=torch.device("spyre", _index(device)), priority=priority)

    @property
    def priority(self) -> int:
        return _C._stream_priority(self.stream_id, self.device_index)

    def __enter__(self):
        self._ctx = StreamContext(self)
        return self._ctx.__enter__()

    def __exit__(self, *args):
        return self._ctx.__exit__(*args)

    def __repr__(self) -> str:
        return f"<torch.spyre.Stream device=spyre:{self.device_index} stream_id={self.stream_id}>"


def _wrap(t) -> Stream:
    stream_id, device_index, device_type = t
    return Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


def current_stream(device=None) -> Stream:
    """The calling thread's current stream of the card."""
    return _wrap(_C._current_stream(_index(device)))


@contextlib.contextmanager
def _hold_stream(stream: Optional[Stream] = None):
    """Holds ``stream`` (default: the current stream) for the with-block: work queued on it
    waits until the block exits (or 60 s pass). For benchmarks that time the host cost of
    queueing ops with no device work running alongside, and for tests that need work to stay
    queued. Do not synchronize that stream inside the block: it waits out the 60 s."""
    s = stream if stream is not None else current_stream()
    hold = _C._hold_stream(s.stream_id, s.device_index)
    try:
        yield s
    finally:
        hold.release()


def default_stream(device=None) -> Stream:
    return _wrap(_C._default_stream(_index(device)))


def set_stream(stream: torch.Stream) -> None:
    """Makes ``stream`` current for its card (and its card the current device)."""
    if stream is None:
        return
    if stream.device.type != "spyre":
        raise ValueError(f"expected a spyre stream, got {stream}")
    _C._set_device(stream.device_index)
    _C._set_stream(stream.stream_id, stream.device_index)


class StreamContext:
    """Context manager: ``stream`` is the current stream (and its card the current device)
    inside the block; both are restored on exit. ``None`` is a no-op."""

    def __init__(self, stream: Optional[torch.Stream]):
        self.stream = stream
        self.prev_device = -1
        self.prev_stream = None
        self.prev_stream_on_device = None

    def __enter__(self):
        s = self.stream
        if s is None:
            return None
        self.prev_device = _C._current_device()
        self.prev_stream = current_stream(self.prev_device)
        self.prev_stream_on_device = current_stream(s.device_index)
        set_stream(s)
        return s

    def __exit__(self, *args):
        if self.stream is None:
            return False
        _C._set_stream(self.prev_stream_on_device.stream_id, self.prev_stream_on_device.device_index)
        _C._set_stream(self.prev_stream.stream_id, self.prev_stream.device_index)
        _C._set_device(self.prev_device)
        return False


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    """``with torch.spyre.stream(s): ...`` runs the block's spyre work on ``s``."""
    return StreamContext(stream)


class Event(torch.Event):
    """``Event(enable_timing=False, blocking=False, interprocess=False)`` on a spyre card."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise NotImplementedError("torch_spyre: interprocess events are not supported")
        return super().__new__(
            cls, device=torch.device("spyre"), enable_timing=enable_timing, blocking=blocking
        )

    def record(self, stream: Optional[torch.Stream] = None) -> None:
        super().record(current_stream() if stream is None else stream)

    def wait(self, stream: Optional[torch.Stream] = None) -> None:
        super().wait(current_stream() if stream is None else stream)

    def modeled_time(self, end_event: "Event") -> float:
        """Modeled device milliseconds between this event and ``end_event`` (both completed;
        recorded on one stream, or on the simulator on any streams of one card)."""
        return _C._event_modeled_ns(self.event_id, end_event.event_id) / 1e6

    def __repr__(self) -> str:
        return f"<torch.spyre.Event event_id={self.event_id}>"

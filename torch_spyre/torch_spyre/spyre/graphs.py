"""Graphs of the spyre backend (``torch.cuda.CUDAGraph`` semantics).

``SpyreGraph`` captures the work one stream queues (libspyre's stream capture) and replays it
as one submission: one SUBMIT on the kernel backend, one work item on the simulator. The
memory allocated on the capturing stream comes from the graph's private pool of the caching
allocator: the tensors made during the capture are the graph's static inputs, intermediates
and outputs, and their memory is handed to nobody else while the graph lives. Work that cannot
be replayed (copies between host and device, synchronizing, a CPU fallback op, which copies
to the host) fails the capture with an error that says what it was.

    g = torch.spyre.SpyreGraph()
    static_x = torch.zeros(n, device="spyre")
    with torch.spyre.graph(g):
        static_y = f(static_x)
    static_x.copy_(x)   # new input
    g.replay()          # static_y holds f(x)
"""

import gc
from typing import Optional

import torch

from torch_spyre import _C


class SpyreGraph:
    """A captured graph of spyre work (``capture_begin``/``capture_end``, ``replay``)."""

    def __init__(self):
        self._handle = None
        self._pool = None
        self._device = None
        self._capture_stream = None

    def capture_begin(self) -> None:
        """Starts capturing the current stream (not a card's default stream)."""
        from .streams import current_stream

        if self._handle is not None or self._pool is not None:
            raise RuntimeError("SpyreGraph: this graph was already captured (call reset())")
        s = current_stream()
        self._device = s.device_index
        self._capture_stream = s
        self._pool = _C._graph_capture_begin(s.stream_id, s.device_index)

    def capture_end(self) -> None:
        """Ends the capture; raises the error that invalidated it, if any."""
        s = self._capture_stream
        pool = self._pool
        try:
            self._handle = _C._graph_capture_end(s.stream_id, s.device_index, pool)
        except Exception:
            self._pool = None
            raise

    def replay(self) -> None:
        """Queues the captured work on the current stream of the graph's card."""
        from .streams import current_stream

        if self._handle is None:
            raise RuntimeError("SpyreGraph.replay: nothing captured")
        s = current_stream(self._device)
        _C._graph_replay(self._handle, s.stream_id, s.device_index)

    def replay_current(self) -> None:
        """``replay`` without the Python stream object (the compiled-call replayer's path)."""
        if self._handle is None:
            raise RuntimeError("SpyreGraph.replay: nothing captured")
        _C._graph_replay_current(self._handle, self._device)

    def reset(self) -> None:
        """Destroys the graph; its memory goes back to the caching allocator."""
        if self._handle is not None:
            _C._graph_destroy(self._handle, self._device, self._pool)
        self._handle = None
        self._pool = None

    def pool(self) -> Optional[int]:
        """The id of the graph's private memory pool."""
        return self._pool

    def __del__(self):
        try:
            self.reset()
        except Exception:
            pass


class graph:
    """``with torch.spyre.graph(g):`` captures the block's spyre work into ``g`` on a side
    stream (``stream``, or a new one of the current card), after synchronizing the card."""

    def __init__(self, spyre_graph: SpyreGraph, stream=None):
        from .streams import Stream

        self.spyre_graph = spyre_graph
        self.capture_stream = stream if stream is not None else Stream()

    def __enter__(self):
        from . import synchronize
        from .streams import stream

        synchronize()
        gc.collect()
        self._ctx = stream(self.capture_stream)
        self._ctx.__enter__()
        try:
            self.spyre_graph.capture_begin()
        except Exception:
            self._ctx.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.spyre_graph.capture_end()
            else:
                try:
                    self.spyre_graph.capture_end()
                except Exception:
                    pass  # the block's own error is the one to see
        finally:
            self._ctx.__exit__(exc_type, exc, tb)
        return False


def submissions(device=None) -> int:
    """Submissions libspyre has made to the card so far (its runtime statistics): SUBMIT
    ioctls on the kernel backend, work items on the simulator."""
    from . import _get_device_index

    return _C._submissions(_get_device_index(device))


def card_jobs(device=None) -> int:
    """Jobs the card has completed so far (its telemetry; every process's). On the simulator a
    launch or a copy is one, and so is each run of a replayed graph's consecutive launches,
    linked into one job (libspyre.md "Linked launches"); on the kernel backend a job is one
    SUBMIT to spyre.ko (a replayed graph is one, whatever it holds)."""
    from . import _get_device_index

    return _C._card_jobs(_get_device_index(device))

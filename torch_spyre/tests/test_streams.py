"""Streams and events: torch.spyre.Stream / Event over libspyre streams and events."""

import threading

import pytest
import torch

from conftest import assert_same, make

MiB = 1 << 20


def test_default_and_current_stream():
    s0 = torch.spyre.default_stream()
    assert isinstance(s0, torch.spyre.Stream) and isinstance(s0, torch.Stream)
    assert s0.stream_id == 0 and s0.device == torch.device("spyre:0")
    assert torch.spyre.current_stream() == s0
    assert torch.spyre.default_stream(1).device == torch.device("spyre:1")
    assert s0.query()
    s0.synchronize()


def test_new_streams_come_from_the_pools():
    normal = [torch.spyre.Stream() for _ in range(9)]
    ids = [s.stream_id for s in normal]
    assert all(1 <= i <= 8 for i in ids) and len(set(ids[:8])) == 8 and ids[8] == ids[0]
    assert all(s.priority == 0 for s in normal)
    high = torch.spyre.Stream(priority=-1)
    assert 9 <= high.stream_id <= 16 and high.priority == -1
    assert torch.spyre.Stream(device="spyre:1").device_index == 1


def test_stream_context_sets_and_restores():
    s = torch.spyre.Stream()
    s1 = torch.spyre.Stream(device=1)
    with torch.spyre.stream(s) as entered:
        assert entered == s
        assert torch.spyre.current_stream() == s
        with torch.spyre.stream(s1):
            assert torch.spyre.current_device() == 1
            assert torch.spyre.current_stream() == s1
            assert torch.spyre.current_stream(0) == s
        assert torch.spyre.current_device() == 0
        assert torch.spyre.current_stream() == s
    assert torch.spyre.current_stream() == torch.spyre.default_stream()
    assert torch.spyre.current_stream(1) == torch.spyre.default_stream(1)
    with s:  # a Stream is its own context manager too
        assert torch.spyre.current_stream() == s
    with torch.spyre.stream(None):
        assert torch.spyre.current_stream() == torch.spyre.default_stream()


def test_current_stream_is_per_thread():
    s = torch.spyre.Stream()
    seen = []
    with torch.spyre.stream(s):
        t = threading.Thread(target=lambda: seen.append(torch.spyre.current_stream().stream_id))
        t.start()
        t.join()
    assert seen == [0]


def test_work_on_a_side_stream():
    a = make((512, 512), torch.float32)
    s = torch.spyre.Stream()
    with torch.spyre.stream(s):
        d = a.to("spyre", non_blocking=True)
        d.mul_(2)  # CPU fallback, ordered on s
        d[:, ::2].zero_()  # device fill on s
        out = d.to("cpu")
    s.synchronize()
    ref = a * 2
    ref[:, ::2] = 0
    assert_same(out, ref)


def test_ops_queue_without_waiting_for_the_card():
    # Under a hold the stream's work cannot run: ops must return at once (queued), and run,
    # in order, once the hold ends.
    x = torch.arange(8 * 64, dtype=torch.float32).reshape(8, 64)
    d = x.to("spyre")
    torch.spyre.synchronize()
    s = torch.spyre.Stream()
    d.record_stream(s)
    with torch.spyre.stream(s):
        with torch.spyre._hold_stream() as held:
            assert held == s
            y = d + 1
            z = torch.relu(y * -2.0)
            w = torch.softmax(y, -1)
            assert not s.query()  # still queued behind the hold
        s.synchronize()
    assert s.query()
    assert_same(y.cpu(), x + 1)
    assert_same(z.cpu(), torch.relu((x + 1) * -2.0))
    torch.testing.assert_close(w.cpu(), torch.softmax(x + 1, -1))


def test_event_record_synchronize_query():
    s = torch.spyre.Stream()
    e = torch.spyre.Event()
    assert e.query()  # never recorded
    with torch.spyre.stream(s):
        x = torch.ones(16 * MiB, dtype=torch.uint8, device="spyre")
        e.record()
    e.synchronize()
    assert e.query()
    e2 = s.record_event()
    e2.synchronize()
    assert e2.query()
    s.synchronize()
    assert s.query()
    assert_same(x[-4:].cpu(), torch.ones(4, dtype=torch.uint8))


def test_event_elapsed_time():
    a = make((8 * MiB,), torch.float32)  # 32 MiB
    start = torch.spyre.Event(enable_timing=True)
    end = torch.spyre.Event(enable_timing=True)
    start.record()
    d = a.to("spyre")
    back = d.cpu()
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert 0 < ms < 60_000
    assert end.elapsed_time(start) < 0
    assert start.modeled_time(end) >= 0.0  # the simulator models launches and peer copies
    assert_same(back, a)


def test_elapsed_time_needs_timing_events():
    a, b = torch.spyre.Event(), torch.spyre.Event()
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        a.elapsed_time(b)


def test_event_orders_two_streams():
    producer = torch.spyre.Stream()
    consumer = torch.spyre.Stream(priority=-1)
    a = make((16 * MiB,), torch.float32)  # 64 MiB
    src = a.pin_memory()
    x = torch.empty_like(a, device="spyre")
    for _ in range(3):
        x.zero_()
        torch.spyre.synchronize()
        ready = torch.spyre.Event()
        with torch.spyre.stream(producer):
            x.copy_(src, non_blocking=True)  # asynchronous DMA from pinned memory
            ready.record()
        with torch.spyre.stream(consumer):
            ready.wait()  # without it the clone below may read x before the upload
            y = x.clone()  # a device copy on the consumer stream
            x.record_stream(consumer)
        consumer.synchronize()
        assert_same(y[-1024:].cpu(), a[-1024:])
    consumer.wait_stream(producer)  # torch.Stream API
    torch.spyre.synchronize()


def test_synchronize_all_devices_and_streams():
    s = torch.spyre.Stream(device=1)
    with torch.spyre.stream(s):
        x = torch.full((MiB,), 3.0, device="spyre:1")
    torch.spyre.synchronize(1)
    assert s.query()
    assert_same(x[:3].cpu(), torch.full((3,), 3.0))


def test_threads_with_their_own_streams():
    errors = []

    def work(i):
        try:
            dev = i % 2
            s = torch.spyre.Stream(device=dev)
            with torch.spyre.stream(s):
                for k in range(20):
                    a = make((1000 + 37 * i, 3), torch.float32, seed=100 * i + k)
                    d = a.to(f"spyre:{dev}")
                    d[:, 1].fill_(float(i))
                    a[:, 1] = float(i)
                    back = d.t().contiguous().cpu()
                    assert torch.equal(back, a.t().contiguous())
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []

"""The caching allocator: statistics, reuse, stream-aware reuse, empty_cache against
spyre_mem_get_info, out of memory, resize_, pinned host memory."""

import gc

import pytest
import torch

import torch_spyre
from conftest import assert_same, make

MiB = 1 << 20


@pytest.fixture(autouse=True)
def clean_cache():
    gc.collect()
    torch.spyre.synchronize()
    torch.spyre.empty_cache()
    yield
    gc.collect()
    torch.spyre.empty_cache()


def test_memory_allocated_rises_and_falls():
    base = torch.spyre.memory_allocated()
    x = torch.empty(1000, dtype=torch.float32, device="spyre")  # 4000 B -> 4096 B block
    assert torch.spyre.memory_allocated() == base + 4096
    y = torch.empty(3 * MiB, dtype=torch.uint8, device="spyre")
    assert torch.spyre.memory_allocated() == base + 4096 + 3 * MiB
    del x
    assert torch.spyre.memory_allocated() == base + 3 * MiB
    del y
    assert torch.spyre.memory_allocated() == base
    s = torch.spyre.memory_stats()
    assert s["requested_bytes.all.current"] == 0
    assert s["allocation.all.allocated"] >= 2 and s["allocation.all.freed"] >= 2


def test_other_card_is_separate():
    base0, base1 = torch.spyre.memory_allocated(0), torch.spyre.memory_allocated(1)
    x = torch.empty(MiB, dtype=torch.uint8, device="spyre:1")
    assert torch.spyre.memory_allocated(1) == base1 + MiB
    assert torch.spyre.memory_allocated(0) == base0
    del x


def test_peak_and_reset():
    torch.spyre.reset_peak_memory_stats()
    base = torch.spyre.memory_allocated()
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="spyre")
    del x
    assert torch.spyre.max_memory_allocated() == base + 8 * MiB
    assert torch.spyre.memory_allocated() == base
    torch.spyre.reset_peak_memory_stats()
    assert torch.spyre.max_memory_allocated() == base


def test_caching_reuses_blocks():
    assert torch_spyre._C._caching_enabled()
    x = torch.empty(2 * MiB, dtype=torch.uint8, device="spyre")
    ptr = x.data_ptr()
    reserved = torch.spyre.memory_reserved()
    allocs = torch.spyre.memory_stats()["num_device_alloc"]
    del x
    assert torch.spyre.memory_reserved() == reserved  # cached, not freed
    y = torch.empty(2 * MiB - 1000, dtype=torch.uint8, device="spyre")  # same rounded size
    assert y.data_ptr() == ptr
    assert torch.spyre.memory_stats()["num_device_alloc"] == allocs
    z = torch.empty(2 * MiB, dtype=torch.uint8, device="spyre")  # the cached block is taken
    assert z.data_ptr() != ptr
    assert torch.spyre.memory_stats()["num_device_alloc"] == allocs + 1


def test_reuse_is_per_stream():
    s = torch.spyre.Stream()
    x = torch.empty(MiB, dtype=torch.uint8, device="spyre")
    ptr = x.data_ptr()
    del x
    with torch.spyre.stream(s):
        y = torch.empty(MiB, dtype=torch.uint8, device="spyre")
    assert y.data_ptr() != ptr  # a block of the default stream is not handed to stream s
    z = torch.empty(MiB, dtype=torch.uint8, device="spyre")
    assert z.data_ptr() == ptr


def test_record_stream_delays_reuse():
    s = torch.spyre.Stream()
    x = torch.zeros(4 * MiB, dtype=torch.uint8, device="spyre")
    ptr = x.data_ptr()
    with torch.spyre.stream(s):
        y = x + 1  # on s (through the CPU fallback), reads x
    x.record_stream(s)
    active = torch.spyre.memory_stats()["active_bytes.all.current"]
    del x
    # The block now waits for an event recorded on s: still active, not reusable yet.
    assert torch.spyre.memory_stats()["active_bytes.all.current"] == active
    s.synchronize()
    z = torch.empty(4 * MiB, dtype=torch.uint8, device="spyre")
    assert z.data_ptr() == ptr
    assert_same(y.cpu(), torch.ones(4 * MiB, dtype=torch.uint8))


def test_empty_cache_returns_memory_to_the_card():
    free0, total = torch.spyre.mem_get_info()
    assert total == torch.spyre.get_device_properties()["total_memory"]
    x = torch.empty(64 * MiB, dtype=torch.uint8, device="spyre")
    free1, _ = torch.spyre.mem_get_info()
    assert free1 <= free0 - 64 * MiB
    del x
    free2, _ = torch.spyre.mem_get_info()
    assert free2 == free1  # still cached by torch_spyre
    assert torch.spyre.memory_reserved() >= 64 * MiB
    torch.spyre.empty_cache()
    free3, _ = torch.spyre.mem_get_info()
    assert free3 >= free1 + 64 * MiB
    assert torch.spyre.memory_reserved() == 0


def test_out_of_memory_is_torch_oom():
    total = torch.spyre.mem_get_info()[1]
    with pytest.raises(torch.OutOfMemoryError, match="out of memory on spyre:0") as e:
        torch.empty(total + MiB, dtype=torch.uint8, device="spyre")
    assert "spyre_malloc" in str(e.value)
    s = torch.spyre.memory_stats()
    assert s["num_ooms"] >= 1 and s["num_alloc_retries"] >= 1
    torch.ones(3, device="spyre")  # still usable


def test_oom_retry_frees_the_cache():
    total = torch.spyre.mem_get_info()[1]
    big = torch.empty(total // 2, dtype=torch.uint8, device="spyre")
    del big  # cached
    assert torch.spyre.memory_reserved() >= total // 2
    retries = torch.spyre.memory_stats()["num_alloc_retries"]
    x = torch.empty(total // 2 + 256 * MiB, dtype=torch.uint8, device="spyre")  # needs it back
    assert torch.spyre.memory_stats()["num_alloc_retries"] == retries + 1
    del x


def test_resize_keeps_contents():
    x = torch.arange(10, dtype=torch.int64).to("spyre")
    x.resize_(3 * MiB)  # grows: new block, old contents copied on the device
    assert x.shape == (3 * MiB,)
    assert_same(x[:10].cpu(), torch.arange(10, dtype=torch.int64))
    x.resize_(4)
    assert_same(x.cpu(), torch.arange(4, dtype=torch.int64))
    s = torch.UntypedStorage(100, device="spyre")
    s.resize_(200)
    assert s.nbytes() == 200 and s.device.type == "spyre"


def test_set_and_storage_sharing():
    a = torch.arange(8.0).to("spyre")
    b = torch.empty(0, device="spyre")
    b.set_(a.untyped_storage(), 2, (2, 3), (3, 1))
    assert b.data_ptr() == a.data_ptr() + 8 and not b.is_set_to(a)
    assert_same(b.cpu(), torch.arange(8.0).as_strided((2, 3), (3, 1), 2))
    c = torch.empty(0, device="spyre").set_(a)
    assert c.is_set_to(a)


def test_memory_summary():
    x = torch.empty(MiB, dtype=torch.uint8, device="spyre")
    s = torch.spyre.memory_summary()
    assert "spyre:0" in s and "Allocated memory" in s and "1.00 MiB" in s
    del x


def test_pinned_memory():
    base = torch.spyre.host_memory_stats()["allocated_bytes"]
    p = torch.empty(10000, dtype=torch.float32, pin_memory=True)
    assert p.is_pinned()
    assert not torch.empty(10).is_pinned()
    assert torch.spyre.host_memory_stats()["allocated_bytes"] == base + 65536  # power of two
    q = make((100,), torch.float32).pin_memory()
    assert q.is_pinned()
    assert_same(q.to("spyre").cpu(), make((100,), torch.float32))
    del p, q
    assert torch.spyre.host_memory_stats()["allocated_bytes"] == base
    torch.spyre.empty_host_cache()
    s = torch.spyre.host_memory_stats()
    assert s["reserved_bytes"] == s["allocated_bytes"]

#include "SpyreGraph.h"

#include <c10/util/Exception.h>
#include <spyre/spyre.h>

#include "SpyreAllocator.h"
#include "SpyreException.h"
#include "SpyreFunctions.h"
#include "SpyreStream.h"

namespace torch_spyre {

int64_t graph_capture_begin(const c10::Stream& stream) {
    TORCH_CHECK(stream.id() != 0,
                "torch_spyre: the default stream cannot be captured; capture on a side stream "
                "(torch.spyre.graph does)");
    const c10::StreamId pool = new_graph_pool();
    begin_pool_capture(stream, pool);
    const spyre_status st = spyre_stream_begin_capture(native_stream(stream));
    if (st != SPYRE_SUCCESS) {
        end_pool_capture(stream);
        release_graph_pool(stream.device_index(), pool);
        throw_spyre_error(st, "spyre_stream_begin_capture");
    }
    return pool;
}

uintptr_t graph_capture_end(const c10::Stream& stream, int64_t pool) {
    spyre_graph_t g = nullptr;
    const spyre_status st = spyre_stream_end_capture(native_stream(stream), &g);
    end_pool_capture(stream);
    if (st != SPYRE_SUCCESS) {
        release_graph_pool(stream.device_index(), pool);
        throw_spyre_error(st, "spyre_stream_end_capture");
    }
    return reinterpret_cast<uintptr_t>(g);
}

void graph_replay(uintptr_t graph, const c10::Stream& stream) {
    SPYRE_CHECK(spyre_graph_launch(reinterpret_cast<spyre_graph_t>(graph), native_stream(stream)));
}

void graph_destroy(uintptr_t graph, c10::DeviceIndex device, int64_t pool) {
    synchronize_device(device);  // replays still queued write the pool's memory
    SPYRE_CHECK(spyre_graph_destroy(reinterpret_cast<spyre_graph_t>(graph)));
    release_graph_pool(device, pool);
}

uint64_t submissions(c10::DeviceIndex device) {
    spyre_runtime_stats rs{};
    SPYRE_CHECK(spyre_device_get_runtime_stats(device_handle(device), &rs));
    return rs.jobs_submitted;
}

}  // namespace torch_spyre

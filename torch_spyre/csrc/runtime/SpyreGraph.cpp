#include "SpyreGraph.h"

#include <c10/util/Exception.h>
#include <spyre/spyre.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "SpyreAllocator.h"
#include "SpyreException.h"
#include "SpyreFunctions.h"
#include "SpyreGenerator.h"
#include "SpyreStream.h"

namespace torch_spyre {

namespace {

// Random numbers in graphs (torch_spyre.md "Graphs"): the random kernels a capture queued
// drew (seed, offset) from the card's default generator, a stream each (aten/Random.cpp).
// A replay draws from the generator as those kernels queued one by one would: from the
// generator's next offsets in the order the capture took them (two launches that shared a
// stream, as native_dropout's mask and its bool copy, still share one), and the generator
// moves on by as many (spyre_graph_launch_random). A capture runs nothing, so the offsets it
// took are given back: its first replay draws what the captured call would have drawn
// eagerly.
std::mutex g_mu;
std::unordered_map<uintptr_t, uint64_t> g_random_offsets;  // graph -> the offsets it takes
std::map<std::pair<c10::DeviceIndex, c10::StreamId>, uint64_t> g_capture_offset;

SpyreGeneratorImpl* default_gen(c10::DeviceIndex device) {
    return at::check_generator<SpyreGeneratorImpl>(default_generator(device));
}

}  // namespace

int64_t graph_capture_begin(const c10::Stream& stream) {
    TORCH_CHECK(stream.id() != 0,
                "torch_spyre: the default stream cannot be captured; capture on a side stream "
                "(torch.spyre.graph does)");
    const c10::StreamId pool = new_graph_pool();
    {
        SpyreGeneratorImpl* gen = default_gen(stream.device_index());
        std::lock_guard<std::mutex> gl(gen->mutex_);
        std::lock_guard<std::mutex> l(g_mu);
        g_capture_offset[{stream.device_index(), stream.id()}] = gen->get_offset();
    }
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
    spyre_graph_info info{};
    SPYRE_CHECK(spyre_graph_get_info(g, &info));
    uint64_t start = 0;
    {
        std::lock_guard<std::mutex> l(g_mu);
        auto it = g_capture_offset.find({stream.device_index(), stream.id()});
        if (it != g_capture_offset.end()) start = it->second, g_capture_offset.erase(it);
        if (info.random_offsets)
            g_random_offsets[reinterpret_cast<uintptr_t>(g)] = info.random_offsets;
    }
    if (info.random_offsets) {  // unless other draws came between (another thread's)
        SpyreGeneratorImpl* gen = default_gen(stream.device_index());
        std::lock_guard<std::mutex> gl(gen->mutex_);
        if (gen->get_offset() == start + info.random_offsets) gen->set_offset(start);
    }
    return reinterpret_cast<uintptr_t>(g);
}

void graph_replay(uintptr_t graph, const c10::Stream& stream) {
    uint64_t k = 0;
    {
        std::lock_guard<std::mutex> l(g_mu);
        if (auto it = g_random_offsets.find(graph); it != g_random_offsets.end()) k = it->second;
    }
    auto* g = reinterpret_cast<spyre_graph_t>(graph);
    if (!k) {
        SPYRE_CHECK(spyre_graph_launch(g, native_stream(stream)));
        return;
    }
    SpyreGeneratorImpl* gen = default_gen(stream.device_index());
    uint64_t seed = 0, offset = 0;
    {
        std::lock_guard<std::mutex> gl(gen->mutex_);
        seed = gen->current_seed(), offset = gen->get_offset();
        gen->set_offset(offset + k);
    }
    SPYRE_CHECK(spyre_graph_launch_random(g, native_stream(stream), seed, offset));
}

void graph_destroy(uintptr_t graph, c10::DeviceIndex device, int64_t pool) {
    synchronize_device(device);  // replays still queued write the pool's memory
    {
        std::lock_guard<std::mutex> l(g_mu);
        g_random_offsets.erase(graph);
    }
    SPYRE_CHECK(spyre_graph_destroy(reinterpret_cast<spyre_graph_t>(graph)));
    release_graph_pool(device, pool);
}

uint64_t submissions(c10::DeviceIndex device) {
    spyre_runtime_stats rs{};
    SPYRE_CHECK(spyre_device_get_runtime_stats(device_handle(device), &rs));
    return rs.jobs_submitted;
}

}  // namespace torch_spyre

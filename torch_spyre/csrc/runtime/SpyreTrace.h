// Device work in torch.profiler: a kineto child profiler (libkineto's plugin interface, which
// Debian's torch 2.6 exports from libtorch_cpu) that, while a torch.profiler session records
// ProfilerActivity.PrivateUse1, collects the op-library launches and the DMA copies of the
// spyre backend and hands them to kineto as device activities:
//   - launches (kernels): the cycle model's time of the op's programs (spyre_op_get_last_info),
//   - copies: the modeled time libspyre's stream gives between two events around the copy
//     (DMA cycles of the card model; the simulator backend models none, so 0 there),
// each linked to the aten op that queued it (kineto's correlation ids), so key_averages()
// shows a device-time column and the exported trace a device track per card and stream.
// Device times are modeled, not measured: an op starts on the track when it has been queued
// and the previous work of its stream has ended on the model.
#pragma once

#include <spyre/ops.h>
#include <spyre/spyre.h>

#include <cstdint>

namespace torch_spyre::trace {

// Whether a torch.profiler session records spyre device activities.
bool active();

// An op-library launch the aten op `aten_op` just queued on the current stream.
void kernel(const char* aten_op, const spyre_op_info& info);

// Brackets one DMA copy on `stream` (kind: "HtoD", "DtoH", "DtoD"); a no-op when not active.
class CopyScope {
  public:
    CopyScope(spyre_stream_t stream, const char* kind, uint64_t bytes);
    ~CopyScope();
    CopyScope(const CopyScope&) = delete;
    CopyScope& operator=(const CopyScope&) = delete;

  private:
    spyre_stream_t stream_ = nullptr;
    spyre_event_t start_ = nullptr;
    const char* kind_ = nullptr;
    uint64_t bytes_ = 0;
    int64_t queued_ns_ = 0;
};

}  // namespace torch_spyre::trace

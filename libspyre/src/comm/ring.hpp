// Ring collectives over a Transport: reduce-scatter and all-gather of n segments (chunked to
// the transport's message size), and a pipelined chunked broadcast. Reductions run on the
// card (spyre_op_binary on the caller's stream); data moves only through the transport.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/transport.hpp"
#include "spyre/ops.h"

namespace spyre::comm {

struct Ring {
    Transport& transport;
    int rank;
    int nranks;
    spyre_stream_t stream;
    // A device buffer of transport.max_chunk_bytes() bytes for incoming chunks of a transport
    // that cannot reduce out of its inbox (Transport::recv_reduce).
    spyre_buffer_t rx;
};

// Segments of a buffer: segment j is count[j] elements at byte offset[j].
struct Segments {
    std::vector<uint64_t> offset;
    std::vector<uint64_t> count;
};

// Per chunk of a segment: the transport's mark of the caller's stream once that chunk was
// complete (Transport::mark).
using Marks = std::vector<uint64_t>;

// Reduce-scatter in place in `buf` (offsets 128-byte aligned, as the card's elementwise ops
// need): after it, rank r holds the reduction over all ranks of segment (r + 1 + shift) mod n.
// MEAN is reduced as SUM (the caller scales). Returns the marks of that segment's chunks.
Marks ring_reduce_scatter(const Ring& ring, spyre_buffer_t buf, const Segments& seg,
                          spyre_dtype dtype, spyre_reduce_op op, int shift);

// All-gather in place in `buf`: rank r starts with segment (r + shift) mod n and ends with all.
// `first`: the marks of the chunks of the segment it starts with (empty: all of the stream's
// work so far).
void ring_all_gather(const Ring& ring, spyre_buffer_t buf, const Segments& seg, size_t esize,
                     int shift, Marks first = {});

// Root's `bytes` bytes of src (root) reach dst on every other rank, chunk by chunk along the
// ring.
void ring_broadcast(const Ring& ring, spyre_buffer_t src, uint64_t src_offset, spyre_buffer_t dst,
                    uint64_t dst_offset, uint64_t bytes, int root);

// acc[acc_off, +count) = op(acc, in[in_off, +count)) on the card (MEAN as SUM).
void reduce_on_card(spyre_stream_t stream, spyre_buffer_t acc, uint64_t acc_off, spyre_buffer_t in,
                    uint64_t in_off, uint64_t count, spyre_dtype dtype, spyre_reduce_op op);

// buf[offset, +count) *= scale on the card.
void scale_on_card(spyre_stream_t stream, spyre_buffer_t buf, uint64_t offset, uint64_t count,
                   spyre_dtype dtype, double scale);

// dst[dst_off, +bytes) = src[src_off, +bytes) on `stream`, bytes unchanged: by the card's cores
// (spyre_op_copy) where dst starts on a stick and the move is large enough to pay for a launch,
// so that it runs beside the DMA engine's pushes (the card model prices the engine and the DMA
// engine as separate units); else by the DMA engine.
void move_on_card(spyre_stream_t stream, spyre_buffer_t dst, uint64_t dst_off, spyre_buffer_t src,
                  uint64_t src_off, uint64_t bytes);

size_t dtype_bytes(spyre_dtype dtype);

}  // namespace spyre::comm

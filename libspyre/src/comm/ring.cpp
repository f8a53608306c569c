// Ring collectives (ring.hpp).
#include "comm/ring.hpp"

#include <algorithm>

#include "error.hpp"

namespace spyre::comm {
namespace {

void check_call(spyre_status s) {
    if (s != SPYRE_SUCCESS) spyre::fail(s, spyre_last_error());
}

int mod(int a, int n) { return ((a % n) + n) % n; }

spyre_tensor vec(spyre_buffer_t buf, uint64_t offset, uint64_t count, spyre_dtype dtype) {
    spyre_tensor t{};
    const int64_t shape[1] = {static_cast<int64_t>(count)};
    check_call(spyre_tensor_init(&t, buf, offset, dtype, 1, shape));
    return t;
}

spyre_binary_op binary_of(spyre_reduce_op op) {
    switch (op) {
        case SPYRE_REDUCE_MAX:
            return SPYRE_BINARY_MAX;
        case SPYRE_REDUCE_MIN:
            return SPYRE_BINARY_MIN;
        default:
            return SPYRE_BINARY_ADD;  // SUM, and MEAN before its scaling
    }
}

}  // namespace

size_t dtype_bytes(spyre_dtype dtype) { return dtype == SPYRE_DTYPE_FLOAT32 ? 4 : 2; }

void reduce_on_card(spyre_stream_t stream, spyre_buffer_t acc, uint64_t acc_off, spyre_buffer_t in,
                    uint64_t in_off, uint64_t count, spyre_dtype dtype, spyre_reduce_op op) {
    // the reduction runs on the card's cores, queued on the stream
    const spyre_tensor a = vec(acc, acc_off, count, dtype);
    const spyre_tensor b = vec(in, in_off, count, dtype);
    check_call(spyre_op_binary(stream, binary_of(op), &a, &b, 0.0, 1.0, &a));
}

void scale_on_card(spyre_stream_t stream, spyre_buffer_t buf, uint64_t offset, uint64_t count,
                   spyre_dtype dtype, double scale) {
    if (count == 0) return;
    const spyre_tensor t = vec(buf, offset, count, dtype);
    check_call(spyre_op_binary(stream, SPYRE_BINARY_MUL, &t, nullptr, scale, 1.0, &t));
}

void move_on_card(spyre_stream_t stream, spyre_buffer_t dst, uint64_t dst_off, spyre_buffer_t src,
                  uint64_t src_off, uint64_t bytes) {
    // below this a launch's setup costs more than the DMA engine's copy
    constexpr uint64_t kCoresMin = 64 << 10;
    // the cores' copy writes whole sticks from a destination on a stick (a sub-allocated
    // buffer may start off one: asked first, not through a refused launch per move)
    uint64_t dst_addr = 0;
    if (bytes >= kCoresMin && src_off % 2 == 0 && bytes % 2 == 0 &&
        spyre_buffer_device_address(dst, &dst_addr) == SPYRE_SUCCESS &&
        (dst_addr + dst_off) % 128 == 0) {
        // 2-byte elements: every collective's data is a whole number of them
        const spyre_tensor from = vec(src, src_off, bytes / 2, SPYRE_DTYPE_FLOAT16);
        const spyre_tensor to = vec(dst, dst_off, bytes / 2, SPYRE_DTYPE_FLOAT16);
        const spyre_status st = spyre_op_copy(stream, &from, &to);
        if (st != SPYRE_ERROR_NOT_SUPPORTED) return check_call(st);
    }
    check_call(spyre_memcpy_dtod_async(dst, dst_off, src, src_off, bytes, stream));
}

namespace {

// The n - 1 steps of a ring pass: at step s this rank sends segment sj to the next rank
// (`give(sj, c, m, after)`: m elements at element c of it) while `take(rj, c, m)` receives m
// elements at element c of segment rj from the previous one, both chunked to one transport
// message. What step s sends is what step s - 1 received: `after` is the transport's mark of
// the caller's stream once chunk c of it was in (Transport::mark), so a push waits for that
// chunk's reduction, not for the reductions queued after it. `marks` (per chunk of the first
// segment sent; empty: all of the stream's work so far) come in and the last step's go out.
template <typename Give, typename Take>
Marks ring_pass(const Ring& ring, const Segments& seg, size_t es, int shift, Marks marks,
                Give&& give, Take&& take) {
    const int n = ring.nranks, r = ring.rank;
    Transport& t = ring.transport;
    const uint64_t chunk = t.max_chunk_bytes() / es;  // elements per message
    const uint64_t most = *std::max_element(seg.count.begin(), seg.count.end());
    const size_t chunks = (most + chunk - 1) / chunk;
    if (marks.size() < chunks) marks.assign(chunks, t.mark(ring.stream));
    for (int s = 0; s < n - 1; ++s) {
        const int sj = mod(r - s + shift, n), rj = mod(r - s - 1 + shift, n);
        const uint64_t sc = seg.count[sj], rc = seg.count[rj];
        for (uint64_t c = 0, k = 0; c < std::max(sc, rc); c += chunk, ++k) {
            if (c < sc) give(sj, c, std::min(chunk, sc - c), marks[k]);
            if (c < rc) {
                take(rj, c, std::min(chunk, rc - c));
                marks[k] = t.mark(ring.stream);
            }
        }
    }
    return marks;
}

}  // namespace

Marks ring_reduce_scatter(const Ring& ring, spyre_buffer_t buf, const Segments& seg,
                          spyre_dtype dtype, spyre_reduce_op op, int shift) {
    const size_t es = dtype_bytes(dtype);
    const int prev = mod(ring.rank - 1, ring.nranks), next = mod(ring.rank + 1, ring.nranks);
    return ring_pass(
        ring, seg, es, shift, {},
        [&](int sj, uint64_t c, uint64_t m, uint64_t after) {
            ring.transport.send(next, buf, seg.offset[sj] + c * es, m * es, ring.stream, after);
        },
        [&](int rj, uint64_t c, uint64_t m) {
            ring.transport.recv_reduce(prev, buf, seg.offset[rj] + c * es, m, dtype, op, ring.rx,
                                       ring.stream);
        });
}

void ring_all_gather(const Ring& ring, spyre_buffer_t buf, const Segments& seg, size_t es,
                     int shift, Marks first) {
    Transport& t = ring.transport;
    const int prev = mod(ring.rank - 1, ring.nranks), next = mod(ring.rank + 1, ring.nranks);
    if (t.direct()) {
        // each rank's predecessor pushes straight into its buffer: no inbox -> place copy. The
        // segments it overwrites are the ones this rank pushed out in the same step of a
        // reduce-scatter before, which the predecessor has taken by now.
        const uint64_t base = seg.offset[0];
        t.open_window(buf, base, ring.stream);
        ring_pass(
            ring, seg, es, shift, std::move(first),
            [&](int sj, uint64_t c, uint64_t m, uint64_t after) {
                const uint64_t off = seg.offset[sj] + c * es;
                t.send_into(next, buf, off, m * es, off - base, ring.stream, after);
            },
            [&](int, uint64_t, uint64_t m) { t.recv_in_place(prev, m * es, ring.stream); });
        return;
    }
    ring_pass(
        ring, seg, es, shift, std::move(first),
        [&](int sj, uint64_t c, uint64_t m, uint64_t after) {
            t.send(next, buf, seg.offset[sj] + c * es, m * es, ring.stream, after);
        },
        [&](int rj, uint64_t c, uint64_t m) {
            t.recv(prev, buf, seg.offset[rj] + c * es, m * es, ring.stream);
        });
}

void ring_broadcast(const Ring& ring, spyre_buffer_t src, uint64_t src_offset, spyre_buffer_t dst,
                    uint64_t dst_offset, uint64_t bytes, int root) {
    const int n = ring.nranks, r = ring.rank;
    const int next = mod(r + 1, n), prev = mod(r - 1, n);
    const uint64_t chunk = ring.transport.max_chunk_bytes();
    for (uint64_t c = 0; c < bytes; c += chunk) {
        const uint64_t m = std::min(chunk, bytes - c);
        if (r != root) ring.transport.recv(prev, dst, dst_offset + c, m, ring.stream);
        if (next != root) {
            if (r == root)
                ring.transport.send(next, src, src_offset + c, m, ring.stream);
            else
                ring.transport.send(next, dst, dst_offset + c, m, ring.stream);
        }
    }
}

}  // namespace spyre::comm

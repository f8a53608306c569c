// Binomial-tree reduce, broadcast and all-reduce (tree.hpp).
#include "comm/tree.hpp"

#include <algorithm>
#include <bit>

#include "error.hpp"
#include "peer_link.hpp"

namespace spyre::comm {
namespace {

void check_call(spyre_status s) {
    if (s != SPYRE_SUCCESS) spyre::fail(s, spyre_last_error());
}

int lowbit(int v) { return v & -v; }

// A rank's place in the tree of `root`: v = (rank - root) mod n, and back.
int rel(const Ring& ring, int root) { return (ring.rank - root + ring.nranks) % ring.nranks; }
int abs_rank(const Ring& ring, int root, int v) { return (v + root) % ring.nranks; }

}  // namespace

int tree_steps(int nranks) { return std::bit_width(static_cast<unsigned>(nranks - 1)); }

void tree_reduce(const Ring& ring, spyre_buffer_t src, uint64_t src_off, spyre_buffer_t buf,
                 uint64_t base, uint64_t count, spyre_dtype dtype, spyre_reduce_op op, int root) {
    const int n = ring.nranks, v = rel(ring, root);
    const uint64_t es = dtype_bytes(dtype), bytes = count * es;
    const uint64_t chunk = ring.transport.max_chunk_bytes();
    // at step `mask` a rank with that bit sends its partial result to v - mask and is done; the
    // others reduce v + mask's into theirs (chunk by chunk, out of the transport's inbox)
    bool reduced = false;  // until its first child, a rank sends its input as it is
    for (int mask = 1; mask < n; mask <<= 1) {
        if (v & mask) {
            send_range(ring.transport, abs_rank(ring, root, v - mask), reduced ? buf : src,
                       reduced ? base : src_off, bytes, ring.stream);
            break;
        }
        if (v + mask >= n) continue;
        if (!reduced && (src != buf || src_off != base))
            check_call(spyre_memcpy_dtod_async(buf, base, src, src_off, bytes, ring.stream));
        reduced = true;
        for (uint64_t c = 0; c < bytes; c += chunk) {
            const uint64_t m = std::min(chunk, bytes - c);
            ring.transport.recv_reduce(abs_rank(ring, root, v + mask), buf, base + c, m / es, dtype,
                                       op, ring.rx, ring.stream);
        }
    }
    if (v == 0 && op == SPYRE_REDUCE_MEAN)
        scale_on_card(ring.stream, buf, base, count, dtype, 1.0 / n);
}

void tree_broadcast(const Ring& ring, spyre_buffer_t src, uint64_t src_off, spyre_buffer_t dst,
                    uint64_t dst_off, uint64_t bytes, int root) {
    const int n = ring.nranks, v = rel(ring, root);
    // a rank takes the data from v - lowbit(v), then hands it to v + m for every power of two
    // m below its low bit (the root: below 2^ceil(log2 n)), the largest subtree first
    if (v != 0) {
        recv_range(ring.transport, abs_rank(ring, root, v - lowbit(v)), dst, dst_off, bytes,
                   ring.stream);
        src = dst, src_off = dst_off;
    }
    for (int m = (v ? lowbit(v) : 1 << tree_steps(n)) >> 1; m >= 1; m >>= 1)
        if (v + m < n)
            send_range(ring.transport, abs_rank(ring, root, v + m), src, src_off, bytes,
                       ring.stream);
}

void tree_all_reduce(const Ring& ring, spyre_buffer_t buf, uint64_t base, uint64_t count,
                     spyre_dtype dtype, spyre_reduce_op op) {
    tree_reduce(ring, buf, base, buf, base, count, dtype, op, 0);
    tree_broadcast(ring, buf, base, buf, base, count * dtype_bytes(dtype), 0);
}

bool tree_is_faster(Collective c, int nranks, uint64_t bytes, uint64_t chunk) {
    if (nranks < 2) return false;
    spyre_engine_config cfg{};
    spyre_engine_config_default(&cfg);
    const double alpha = static_cast<double>(cfg.dma_setup_cycles + kP2pLatencyCycles) /
                         static_cast<double>(cfg.clock_hz);
    const double beta = static_cast<double>(kP2pLinkBytesPerS);
    const double s = static_cast<double>(bytes), n = nranks, l = tree_steps(nranks);
    auto messages = [&](uint64_t b) {
        return static_cast<double>(std::max<uint64_t>(1, (b + chunk - 1) / chunk));
    };
    const double k = messages(bytes);
    const double tree_one_way = l * (k * alpha + s / beta);
    switch (c) {
        case Collective::AllReduce:
            return 2 * l * (alpha + s / beta) < 2 * (n - 1) * (alpha + s / (n * beta));
        case Collective::Broadcast:
            // the ring pipeline: every chunk leaves the root, the last one then takes n - 2
            // more hops, each paced by the largest chunk
            return tree_one_way <
                   k * alpha + s / beta + (n - 2) * (alpha + std::min<double>(s, chunk) / beta);
        case Collective::Reduce: {
            // plus the reductions on the chain: reading two operands and writing one at the
            // card's DDR rate, 3 bytes / ddr per byte (the whole message per tree level, a
            // segment per ring step)
            const double g = 3.0 / static_cast<double>(cfg.ddr_bytes_per_s);
            const double kr = messages((bytes + nranks - 1) / nranks);
            return tree_one_way + l * s * g <
                   n * (kr * alpha + s / (n * beta)) + (n - 1) * s / n * g;
        }
    }
    return false;
}

}  // namespace spyre::comm

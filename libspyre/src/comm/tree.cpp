// Tree all-reduce (tree.hpp).
#include "comm/tree.hpp"

#include <algorithm>

#include "error.hpp"
#include "peer_link.hpp"

namespace spyre::comm {
namespace {

int lowbit(int r) { return r & -r; }

int log2_ceil(int n) {
    int l = 0;
    while ((1 << l) < n) ++l;
    return l;
}

}  // namespace

void tree_all_reduce(const Ring& ring, spyre_buffer_t buf, uint64_t base, uint64_t count,
                     spyre_dtype dtype, spyre_reduce_op op) {
    const int n = ring.nranks, r = ring.rank;
    const uint64_t es = dtype_bytes(dtype), bytes = count * es;
    const uint64_t chunk = ring.transport.max_chunk_bytes();
    // reduce: at step `mask` a rank with that bit sends its partial sum to rank - mask and is
    // done; the others add rank + mask's (chunk by chunk, out of the transport's inbox)
    for (int mask = 1; mask < n; mask <<= 1) {
        if (r & mask) {
            send_range(ring.transport, r - mask, buf, base, bytes, ring.stream);
            break;
        }
        if (r + mask >= n) continue;
        for (uint64_t c = 0; c < bytes; c += chunk) {
            const uint64_t m = std::min(chunk, bytes - c);
            ring.transport.recv_reduce(r + mask, buf, base + c, m / es, dtype, op, ring.rx,
                                       ring.stream);
        }
    }
    if (r == 0 && op == SPYRE_REDUCE_MEAN)
        scale_on_card(ring.stream, buf, base, count, dtype, 1.0 / n);
    // broadcast: a rank takes the result from rank - lowbit(rank), then hands it to
    // rank + m for every power of two m below its low bit (rank 0: below 2^ceil(log2 n))
    if (r != 0) recv_range(ring.transport, r - lowbit(r), buf, base, bytes, ring.stream);
    for (int m = (r ? lowbit(r) : 1 << log2_ceil(n)) >> 1; m >= 1; m >>= 1)
        if (r + m < n) send_range(ring.transport, r + m, buf, base, bytes, ring.stream);
}

bool tree_is_faster(int nranks, uint64_t bytes) {
    if (nranks < 4) return false;
    spyre_engine_config cfg{};
    spyre_engine_config_default(&cfg);
    const double alpha = static_cast<double>(cfg.dma_setup_cycles + kP2pLatencyCycles) /
                         static_cast<double>(cfg.clock_hz);
    const double beta = static_cast<double>(kP2pLinkBytesPerS);
    const double s = static_cast<double>(bytes), n = nranks;
    const double ring = 2 * (n - 1) * (alpha + s / (n * beta));
    const double tree = 2 * log2_ceil(nranks) * (alpha + s / beta);
    return tree < ring;
}

}  // namespace spyre::comm

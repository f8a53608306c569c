// One-shot all-reduce (one_shot.hpp).
#include "comm/one_shot.hpp"

#include <algorithm>

#include "comm/tree.hpp"
#include "peer_link.hpp"

namespace spyre::comm {

void one_shot_all_reduce(const Ring& ring, spyre_buffer_t buf, uint64_t base, uint64_t count,
                         spyre_dtype dtype, spyre_reduce_op op, spyre_buffer_t acc) {
    const int n = ring.nranks, r = ring.rank;
    Transport& t = ring.transport;
    const uint64_t bytes = count * dtype_bytes(dtype);
    // the nearest peers first: their reductions start soonest
    for (int d = 1; d < n; ++d) send_range(t, (r + d) % n, buf, base, bytes, ring.stream);
    // buf is written only once every push out of it has left
    t.join(ring.stream);
    // v_k = v_(k-1) op x_k. Rank 0 keeps v in buf from the start; rank 1 folds x_0 into buf;
    // ranks 2 and up start in acc (x_0 op x_1 out of two inboxes) and fold acc into buf at
    // their own turn, then keep v in buf
    spyre_buffer_t v = r == 0 ? buf : nullptr;
    for (int k = 1; k < n; ++k) {
        if (k == r) {
            if (!v) {  // rank 1: x_0 op x_1 into buf
                t.recv_reduce(0, buf, base, count, dtype, op, ring.rx, ring.stream);
            } else {  // ranks 2 and up: v_(r-1) op x_r into buf
                reduce_on_card(ring.stream, buf, base, acc, 0, count, dtype, op);
            }
            v = buf;
            continue;
        }
        if (!v) {  // k = 1 on ranks 2 and up: x_0 into acc first
            t.recv(0, acc, 0, bytes, ring.stream);
            v = acc;
        }
        t.recv_reduce(k, v, v == buf ? base : 0, count, dtype, op, ring.rx, ring.stream);
    }
    if (op == SPYRE_REDUCE_MEAN) scale_on_card(ring.stream, buf, base, count, dtype, 1.0 / n);
}

bool one_shot_is_faster(int nranks, uint64_t bytes, uint64_t chunk) {
    if (nranks < 2 || bytes > chunk) return false;
    spyre_engine_config cfg{};
    spyre_engine_config_default(&cfg);
    const double hz = static_cast<double>(cfg.clock_hz);
    // one message step: a push's set-up and latency, and its "posted" signal into the peer
    const double alpha =
        static_cast<double>(cfg.dma_setup_cycles + 2 * kP2pLatencyCycles + kSemSignalCycles) / hz;
    const double beta = static_cast<double>(kP2pLinkBytesPerS);
    const double rho = static_cast<double>(cfg.launch_overhead_cycles) / hz;
    const double g = 3.0 / static_cast<double>(cfg.ddr_bytes_per_s);
    const double s = static_cast<double>(bytes), n = nranks;
    const int l = tree_steps(nranks);
    const double one_shot = (n - 1) * (alpha + s / beta) + (n - 1) * (rho + s * g);
    const double ring = 2 * (n - 1) * (alpha + s / (n * beta)) + (n - 1) * (rho + s / n * g);
    const double tree = 2 * l * (alpha + s / beta) + l * (rho + s * g);
    return one_shot < std::min(ring, tree);
}

}  // namespace spyre::comm

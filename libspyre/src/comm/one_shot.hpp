// One-shot all-reduce for small messages (latency bound, one transport message per peer):
// every rank pushes its whole buffer to every other rank at once, then folds the n
// contributions in rank order, ((x_0 op x_1) op x_2) ..., as every other rank folds them (each
// op is commutative, so the same bits come out on every rank, wherever each partial result is
// kept). Critical path: n - 1 pushes leaving one card and n - 1 reductions, where the ring takes
// 2 (n - 1) message steps and the binomial tree 2 ceil(log2 n).
#pragma once

#include <cstdint>

#include "comm/ring.hpp"

namespace spyre::comm {

// buf[base, +count) = op over the ranks of it, in place (base 128-byte aligned, count * size
// at most the transport's message size); MEAN is the sum times 1/n. `acc`: a device buffer of
// the transport's message size, where ranks 2 and up keep the fold until their own turn.
void one_shot_all_reduce(const Ring& ring, spyre_buffer_t buf, uint64_t base, uint64_t count,
                         spyre_dtype dtype, spyre_reduce_op op, spyre_buffer_t acc);

// Whether the one-shot all-reduce of `bytes` (a single message of at most `chunk`) beats both
// the ring and the tree on n ranks, in tree.hpp's alpha-beta model with alpha a whole message
// step of the card model with device-side waits (the push's set-up and latency and its "posted"
// signal into the peer: 256 + 1500 + 32 + 1500 cycles = 2.19 us) plus the reductions on the
// critical path (rho + 3 bytes / ddr each: a launch's overhead, two operands read and one
// written): one-shot (n - 1) (alpha + bytes / beta) + (n - 1) (rho + 3 bytes / ddr); ring
// 2 (n - 1) (alpha + bytes / (n beta)) + (n - 1) (rho + 3 bytes / (n ddr)); tree 2 L (alpha +
// bytes / beta) + L (rho + 3 bytes / ddr).
bool one_shot_is_faster(int nranks, uint64_t bytes, uint64_t chunk);

}  // namespace spyre::comm

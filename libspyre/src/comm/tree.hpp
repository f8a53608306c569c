// Tree all-reduce for small messages (latency bound): a binomial-tree reduce to rank 0, then a
// binomial-tree broadcast from it. 2 ceil(log2 n) message steps on the critical path, each of
// the whole message, where the ring takes 2 (n - 1) steps of 1/n of it; which one is faster
// for a size is the alpha-beta model below. Reductions run on the cards (spyre_op_binary).
#pragma once

#include <cstdint>

#include "comm/ring.hpp"

namespace spyre::comm {

// buf[base, +count) = op over the ranks of it, in place (base 128-byte aligned); MEAN is the
// sum times 1/n, scaled on rank 0 before the broadcast.
void tree_all_reduce(const Ring& ring, spyre_buffer_t buf, uint64_t base, uint64_t count,
                     spyre_dtype dtype, spyre_reduce_op op);

// Whether the tree beats the ring for an all-reduce of `bytes` over n ranks in the model
// alpha + size / beta per message, alpha the set-up and latency of one peer copy and beta the
// peer link's bandwidth (peer_link.hpp, the engine's DMA set-up and clock): ring 2 (n - 1)
// (alpha + bytes / (n beta)), tree 2 ceil(log2 n) (alpha + bytes / beta). Never for 2 or 3
// ranks (as many steps as the ring, each larger).
bool tree_is_faster(int nranks, uint64_t bytes);

}  // namespace spyre::comm

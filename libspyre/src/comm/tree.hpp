// Binomial trees for small messages (latency bound): a reduce to any root, a broadcast from any
// root, and the all-reduce made of the two (reduce to rank 0, broadcast back). Ranks are taken
// relative to the root, (rank - root + n) mod n. ceil(log2 n) message steps on the critical path,
// each of the whole message, where the ring takes n - 1 or more of a smaller part; which one is
// faster for a size is the alpha-beta model below. Reductions run on the cards (spyre_op_binary).
#pragma once

#include <cstdint>

#include "comm/ring.hpp"

namespace spyre::comm {

// buf[base, +count) of the root = op over the ranks of src[src_off, +count) (base 128-byte
// aligned; src is only read, and may be buf itself); MEAN is the sum times 1/n, scaled on the
// root. A rank with children accumulates in buf (src copied there first); a leaf sends src as
// it is and leaves buf alone.
void tree_reduce(const Ring& ring, spyre_buffer_t src, uint64_t src_off, spyre_buffer_t buf,
                 uint64_t base, uint64_t count, spyre_dtype dtype, spyre_reduce_op op, int root);

// Root's src[src_off, +bytes) reaches dst[dst_off, +bytes) of every other rank (root's dst is
// not touched); each rank forwards what it got from its dst.
void tree_broadcast(const Ring& ring, spyre_buffer_t src, uint64_t src_off, spyre_buffer_t dst,
                    uint64_t dst_off, uint64_t bytes, int root);

// buf[base, +count) = op over the ranks of it, in place (base 128-byte aligned): tree_reduce to
// rank 0, then tree_broadcast from it.
void tree_all_reduce(const Ring& ring, spyre_buffer_t buf, uint64_t base, uint64_t count,
                     spyre_dtype dtype, spyre_reduce_op op);

// ceil(log2 n): the binomial tree's message steps on the critical path.
int tree_steps(int nranks);

// Whether the tree beats the ring for a collective of `bytes` over n ranks in the model
// alpha + size / beta per message, alpha the set-up and latency of one peer copy and beta the
// peer link's bandwidth (peer_link.hpp, the engine's DMA set-up and clock), L = ceil(log2 n),
// k = ceil(bytes / chunk) messages of at most `chunk` bytes (the transport's):
//   all-reduce: ring 2 (n - 1) (alpha + bytes / (n beta)), tree 2 L (alpha + bytes / beta);
//   broadcast: the pipelined ring k alpha + bytes / beta + (n - 2) (alpha + min(bytes, chunk) /
//     beta) (every chunk leaves the root, the last one takes n - 2 more hops), the tree
//     L (k alpha + bytes / beta);
//   reduce (its reductions on the critical path, gamma = the card's DDR rate / 3: two operands
//     read, one written): the ring's reduce-scatter (n - 1) (kr alpha + bytes / (n beta) +
//     bytes / (n gamma)), kr = ceil(bytes / (n chunk)), then every segment to root at once,
//     kr alpha + bytes / (n beta); the tree L (k alpha + bytes / beta + bytes / gamma).
// All-reduce and broadcast never pick the tree on 2 or 3 ranks (at least as many steps as the
// ring, each at least as large); reduce may (its ring also gathers to the root).
enum class Collective { AllReduce, Broadcast, Reduce };
bool tree_is_faster(Collective c, int nranks, uint64_t bytes, uint64_t chunk);

}  // namespace spyre::comm

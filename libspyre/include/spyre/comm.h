/* SPDX-License-Identifier: MIT */
/*
 * libspyre collectives: a communicator over N ranks (one card each, in one process or in N
 * processes of one machine) and ring collectives whose reductions run as programs on the cards'
 * cores (the op library's elementwise ops). Same library as spyre.h (libspyre.so);
 * Documentation/libspyre.md "Collectives" is the reference.
 *
 * Transport: "p2p" (hw 1.6: card to card) when every rank is a thread of one process and the
 * cards reach each other (spyre_memcpy_peer), or every rank is in its own process on its own
 * card of spyre.ko with peer-to-peer DMA (card buffers shared as dma-bufs); else "host-staged"
 * (card -> host -> POSIX shared memory -> host -> card), always so between processes on the
 * simulator. SPYRE_COMM_TRANSPORT=host-staged forces the latter.
 */
#ifndef SPYRE_COMM_H_
#define SPYRE_COMM_H_

#include <stdint.h>

#include "spyre/ops.h"
#include "spyre/spyre.h"

#if defined(__cplusplus)
extern "C" {
#endif

typedef struct spyre_comm* spyre_comm_t;

/* Names one communicator; made by one rank and handed to the others out of band (a file, a
 * socket, torch.distributed's store). Opaque bytes; copy it whole. */
#define SPYRE_COMM_UNIQUE_ID_BYTES 128
typedef struct spyre_comm_unique_id {
    char internal[SPYRE_COMM_UNIQUE_ID_BYTES];
} spyre_comm_unique_id;

/* A new id (a fresh shared-memory name; nothing is created until the ranks join). */
SPYRE_API spyre_status spyre_comm_get_unique_id(spyre_comm_unique_id* id);

/*
 * Joins communicator `id` as `rank` (0..nranks-1, nranks 1..64) on `device`. Collective: returns
 * once all nranks ranks have joined, or SPYRE_ERROR_TIMEOUT naming the ranks that did not join
 * within the communicator's timeout. The timeout of every wait is SPYRE_COMM_TIMEOUT_MS
 * (default 300000) unless changed with spyre_comm_set_timeout. The device handle must stay open
 * until spyre_comm_destroy.
 */
SPYRE_API spyre_status spyre_comm_init_rank(spyre_comm_t* comm, int nranks,
                                            const spyre_comm_unique_id* id, int rank,
                                            spyre_device_t device);

/* Leaves the communicator and frees it (not collective). NULL is ignored. */
SPYRE_API spyre_status spyre_comm_destroy(spyre_comm_t comm);

/* Marks the communicator failed for every rank: collectives in progress or started later on any
 * rank return SPYRE_ERROR_DEVICE_LOST ("aborted by rank r"). Safe from another thread. */
SPYRE_API spyre_status spyre_comm_abort(spyre_comm_t comm);

/* Longest a collective waits for a peer before SPYRE_ERROR_TIMEOUT (milliseconds, > 0). */
SPYRE_API spyre_status spyre_comm_set_timeout(spyre_comm_t comm, uint64_t timeout_ms);

typedef struct spyre_comm_info {
    int32_t rank;
    int32_t nranks;
    spyre_device_t device; /* no new reference */
    uint64_t chunk_bytes;  /* bytes one transfer step moves at most */
    char transport[16];    /* "p2p" or "host-staged" */
    uint64_t flags;        /* SPYRE_COMM_INFO_* (API 0.23; was reserved, 0) */
    uint64_t reserved[3];
} spyre_comm_info;

/* The collectives' waits between the ranks are queued on the cards (device-side semaphores:
 * every rank's card has SPYRE_DEVICE_CAP_SEMAPHORE and one rank only, the p2p transport, and
 * SPYRE_COMM_DEVICE_WAITS=1 on every rank: opt-in for now), so the host queues a whole
 * collective without waiting for a card (Documentation/libspyre.md "Device-side waits"). */
#define SPYRE_COMM_INFO_DEVICE_WAITS (1ull << 0)

SPYRE_API spyre_status spyre_comm_get_info(spyre_comm_t comm, spyre_comm_info* info);

/*
 * The collectives (API version 0.17 added reduce, send and recv). Each side is a device buffer of
 * the communicator's card plus a byte offset; `count` elements of `dtype` (SPYRE_DTYPE_FLOAT32,
 * FLOAT16 or BFLOAT16). Work is ordered after the earlier work of `stream` (NULL: the card's
 * default stream) and the reductions run on it; with either transport each call returns once the
 * collective has finished on this rank (the stream is then idle). Every rank calls the same
 * collectives in the same order with the same count, dtype and op. A peer that dies gives
 * SPYRE_ERROR_DEVICE_LOST, a peer that does not come within the timeout SPYRE_ERROR_TIMEOUT; the
 * communicator is then failed for all ranks. Send and receive ranges may be the same (in place) but
 * must not otherwise overlap.
 *
 * op: SPYRE_REDUCE_SUM, SPYRE_REDUCE_MEAN (the sum times 1/nranks), SPYRE_REDUCE_MAX, _MIN.
 */

/* recv = op over ranks of send; count elements each. A ring, or for small messages on 4+ ranks
 * a binomial tree (by a cost model; SPYRE_COMM_ALGO=ring|tree forces one). */
SPYRE_API spyre_status spyre_comm_all_reduce(spyre_buffer_t send, uint64_t send_offset,
                                             spyre_buffer_t recv, uint64_t recv_offset,
                                             uint64_t count, spyre_dtype dtype, spyre_reduce_op op,
                                             spyre_comm_t comm, spyre_stream_t stream);

/* Every rank's buffer gets root's `count` elements (in place: send is read on root only; on the
 * other ranks send may be NULL). A pipelined ring, or for small messages on 4+ ranks a binomial
 * tree (by a cost model; SPYRE_COMM_ALGO=ring|tree forces one). */
SPYRE_API spyre_status spyre_comm_broadcast(spyre_buffer_t send, uint64_t send_offset,
                                            spyre_buffer_t recv, uint64_t recv_offset,
                                            uint64_t count, spyre_dtype dtype, int root,
                                            spyre_comm_t comm, spyre_stream_t stream);

/* recv (nranks * count elements) = the ranks' send (count each) in rank order. */
SPYRE_API spyre_status spyre_comm_all_gather(spyre_buffer_t send, uint64_t send_offset,
                                             spyre_buffer_t recv, uint64_t recv_offset,
                                             uint64_t count, spyre_dtype dtype, spyre_comm_t comm,
                                             spyre_stream_t stream);

/* send holds nranks * count elements; rank r's recv (count) = op over ranks of block r of send. */
SPYRE_API spyre_status spyre_comm_reduce_scatter(spyre_buffer_t send, uint64_t send_offset,
                                                 spyre_buffer_t recv, uint64_t recv_offset,
                                                 uint64_t count, spyre_dtype dtype,
                                                 spyre_reduce_op op, spyre_comm_t comm,
                                                 spyre_stream_t stream);

/* root's recv (count elements) = op over ranks of send; recv is written on root only (on the
 * other ranks it may be NULL, and their send is left as it was). A ring reduce-scatter, then
 * every rank's reduced block to root; or for small messages a binomial tree (by a cost model;
 * SPYRE_COMM_ALGO=ring|tree forces one). */
SPYRE_API spyre_status spyre_comm_reduce(spyre_buffer_t send, uint64_t send_offset,
                                         spyre_buffer_t recv, uint64_t recv_offset, uint64_t count,
                                         spyre_dtype dtype, spyre_reduce_op op, int root,
                                         spyre_comm_t comm, spyre_stream_t stream);

/*
 * Point to point: `count` elements of `dtype` (any dtype; only bytes move) from this rank's
 * buffer to rank `peer`'s, which calls spyre_comm_recv with this rank as its peer and the same
 * count and dtype. The sends of one rank to one peer are received in the order they were sent.
 * A send returns once its last chunk (spyre_comm_info.chunk_bytes) has left the buffer, which may
 * be before the peer has received it. Each rank has SPYRE_COMM_SLOTS (default 4) chunks in
 * flight: a send waits for the peer only beyond them, so two ranks may both send up to that many
 * chunks to each other before receiving; two that both send more must not both send first (one
 * of them receives first). peer != this rank.
 */
SPYRE_API spyre_status spyre_comm_send(spyre_buffer_t buf, uint64_t offset, uint64_t count,
                                       spyre_dtype dtype, int peer, spyre_comm_t comm,
                                       spyre_stream_t stream);
SPYRE_API spyre_status spyre_comm_recv(spyre_buffer_t buf, uint64_t offset, uint64_t count,
                                       spyre_dtype dtype, int peer, spyre_comm_t comm,
                                       spyre_stream_t stream);

/* Returns once every rank has called it (after `stream`'s earlier work on this rank). */
SPYRE_API spyre_status spyre_comm_barrier(spyre_comm_t comm, spyre_stream_t stream);

#if defined(__cplusplus)
}
#endif

#endif /* SPYRE_COMM_H_ */

// C API of the collectives (spyre/comm.h): handle checks and the C boundary; the work is in
// communicator.cpp.
#include <cstring>

#include "comm/communicator.hpp"
#include "comm/shm_segment.hpp"
#include "error.hpp"

struct spyre_comm {
    spyre::comm::Communicator impl;
};

using namespace spyre;
using spyre::comm::Communicator;

namespace {

Communicator& of(spyre_comm_t comm) {
    require(comm != nullptr, "comm is NULL");
    return comm->impl;
}

}  // namespace

spyre_status spyre_comm_get_unique_id(spyre_comm_unique_id* id) {
    return guard(__func__, [&] {
        require(id != nullptr, "id is NULL");
        const comm::UniqueId u = comm::make_unique_id();
        std::memset(id, 0, sizeof *id);
        std::memcpy(id->internal, &u, sizeof u);
    });
}

spyre_status spyre_comm_init_rank(spyre_comm_t* comm, int nranks, const spyre_comm_unique_id* id,
                                  int rank, spyre_device_t device) {
    return guard(__func__, [&] {
        require(comm != nullptr && id != nullptr && device != nullptr,
                "comm, id and device must not be NULL");
        *comm = nullptr;
        require(nranks >= 1 && nranks <= comm::kMaxRanks, "nranks {} is not in 1..{}", nranks,
                comm::kMaxRanks);
        require(rank >= 0 && rank < nranks, "rank {} is not in 0..{}", rank, nranks - 1);
        comm::UniqueId u{};
        std::memcpy(&u, id->internal, sizeof u);
        *comm = new spyre_comm{Communicator(u, nranks, rank, device)};
    });
}

spyre_status spyre_comm_destroy(spyre_comm_t comm) {
    return guard(__func__, [&] { delete comm; });
}

spyre_status spyre_comm_abort(spyre_comm_t comm) {
    return guard(__func__, [&] { of(comm).abort(); });
}

spyre_status spyre_comm_set_timeout(spyre_comm_t comm, uint64_t timeout_ms) {
    return guard(__func__, [&] {
        require(timeout_ms > 0, "timeout_ms must be > 0");
        of(comm).set_timeout_ms(timeout_ms);
    });
}

spyre_status spyre_comm_get_info(spyre_comm_t comm, spyre_comm_info* info) {
    return guard(__func__, [&] {
        require(info != nullptr, "info is NULL");
        of(comm).info(info);
    });
}

spyre_status spyre_comm_all_reduce(spyre_buffer_t send, uint64_t send_offset, spyre_buffer_t recv,
                                   uint64_t recv_offset, uint64_t count, spyre_dtype dtype,
                                   spyre_reduce_op op, spyre_comm_t comm, spyre_stream_t stream) {
    return guard(__func__, [&] {
        of(comm).all_reduce(send, send_offset, recv, recv_offset, count, dtype, op, stream);
    });
}

spyre_status spyre_comm_broadcast(spyre_buffer_t send, uint64_t send_offset, spyre_buffer_t recv,
                                  uint64_t recv_offset, uint64_t count, spyre_dtype dtype, int root,
                                  spyre_comm_t comm, spyre_stream_t stream) {
    return guard(__func__, [&] {
        of(comm).broadcast(send, send_offset, recv, recv_offset, count, dtype, root, stream);
    });
}

spyre_status spyre_comm_all_gather(spyre_buffer_t send, uint64_t send_offset, spyre_buffer_t recv,
                                   uint64_t recv_offset, uint64_t count, spyre_dtype dtype,
                                   spyre_comm_t comm, spyre_stream_t stream) {
    return guard(__func__, [&] {
        of(comm).all_gather(send, send_offset, recv, recv_offset, count, dtype, stream);
    });
}

spyre_status spyre_comm_reduce_scatter(spyre_buffer_t send, uint64_t send_offset,
                                       spyre_buffer_t recv, uint64_t recv_offset, uint64_t count,
                                       spyre_dtype dtype, spyre_reduce_op op, spyre_comm_t comm,
                                       spyre_stream_t stream) {
    return guard(__func__, [&] {
        of(comm).reduce_scatter(send, send_offset, recv, recv_offset, count, dtype, op, stream);
    });
}

spyre_status spyre_comm_reduce(spyre_buffer_t send, uint64_t send_offset, spyre_buffer_t recv,
                               uint64_t recv_offset, uint64_t count, spyre_dtype dtype,
                               spyre_reduce_op op, int root, spyre_comm_t comm,
                               spyre_stream_t stream) {
    return guard(__func__, [&] {
        of(comm).reduce(send, send_offset, recv, recv_offset, count, dtype, op, root, stream);
    });
}

spyre_status spyre_comm_send(spyre_buffer_t buf, uint64_t offset, uint64_t count, spyre_dtype dtype,
                             int peer, spyre_comm_t comm, spyre_stream_t stream) {
    return guard(__func__, [&] { of(comm).send(buf, offset, count, dtype, peer, stream); });
}

spyre_status spyre_comm_recv(spyre_buffer_t buf, uint64_t offset, uint64_t count, spyre_dtype dtype,
                             int peer, spyre_comm_t comm, spyre_stream_t stream) {
    return guard(__func__, [&] { of(comm).recv(buf, offset, count, dtype, peer, stream); });
}

spyre_status spyre_comm_barrier(spyre_comm_t comm, spyre_stream_t stream) {
    return guard(__func__, [&] { of(comm).barrier(stream); });
}

// Collectives of one rank (communicator.hpp): argument checks, staging into 128-byte aligned
// segments where the card's elementwise ops need it, then the ring algorithms.
#include "comm/communicator.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <format>

#include "comm/host_staged_transport.hpp"
#include "comm/peer_transport.hpp"
#include "comm/ring.hpp"
#include "comm/tree.hpp"
#include "error.hpp"

namespace spyre::comm {
namespace {

constexpr uint64_t kStick = 128;
constexpr uint64_t kDefaultSlotBytes = 4ull << 20;
constexpr uint64_t kDefaultSlots = 4;
constexpr uint64_t kDefaultTimeoutMs = 300000;

void check_call(spyre_status s) {
    if (s != SPYRE_SUCCESS) spyre::fail(s, spyre_last_error());
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

uint64_t env_u64(const char* name, uint64_t dflt, uint64_t min) {
    const char* s = std::getenv(name);
    if (!s || !*s) return dflt;
    char* end = nullptr;
    unsigned long long v = std::strtoull(s, &end, 10);
    require(end && !*end && v >= min, "{}=\"{}\" is not a number >= {}", name, s, min);
    return v;
}

void check_dtype(spyre_dtype dtype) {
    require(dtype == SPYRE_DTYPE_FLOAT32 || dtype == SPYRE_DTYPE_FLOAT16 ||
                dtype == SPYRE_DTYPE_BFLOAT16,
            "dtype {} is not float32, float16 or bfloat16", static_cast<int>(dtype));
}

void check_op(spyre_reduce_op op) {
    require(op == SPYRE_REDUCE_SUM || op == SPYRE_REDUCE_MEAN || op == SPYRE_REDUCE_MAX ||
                op == SPYRE_REDUCE_MIN,
            "reduce op {} is not SUM, MEAN, MAX or MIN", static_cast<int>(op));
}

void check_range(spyre_buffer_t b, uint64_t off, uint64_t bytes, const char* which) {
    require(b != nullptr, "{} buffer is NULL", which);
    uint64_t size = 0;
    check_call(spyre_buffer_size(b, &size));
    check_buffer_range(size, off, bytes, which);
}

// Element size of any dtype: send and recv move bytes only.
uint64_t any_dtype_bytes(spyre_dtype dtype) {
    switch (dtype) {
        case SPYRE_DTYPE_FLOAT32:
        case SPYRE_DTYPE_INT32:
            return 4;
        case SPYRE_DTYPE_FLOAT16:
        case SPYRE_DTYPE_BFLOAT16:
            return 2;
        case SPYRE_DTYPE_INT8:
        case SPYRE_DTYPE_UINT8:
            return 1;
        case SPYRE_DTYPE_INT64:
            return 8;
    }
    spyre::fail(SPYRE_ERROR_INVALID_ARGUMENT,
                std::format("dtype {} is not a spyre_dtype", static_cast<int>(dtype)));
}

void copy(spyre_buffer_t dst, uint64_t doff, spyre_buffer_t src, uint64_t soff, uint64_t bytes,
          spyre_stream_t stream) {
    if (bytes == 0 || (dst == src && doff == soff)) return;
    check_call(spyre_memcpy_dtod_async(dst, doff, src, soff, bytes, stream));
}

}  // namespace

UniqueId make_unique_id() {
    UniqueId id{};
    std::snprintf(id.magic, sizeof id.magic, "spyre-comm-v1");
    uint64_t rnd[2] = {};
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
        spyre::fail(SPYRE_ERROR_IO, std::format("getrandom: {}", errno_text(errno)));
    std::snprintf(id.shm_name, sizeof id.shm_name, "/spyre-comm-%d-%016llx%016llx",
                  static_cast<int>(getpid()), static_cast<unsigned long long>(rnd[0]),
                  static_cast<unsigned long long>(rnd[1]));
    id.slot_bytes = align_up(env_u64("SPYRE_COMM_CHUNK_BYTES", kDefaultSlotBytes, 1), kStick);
    id.slots = env_u64("SPYRE_COMM_SLOTS", kDefaultSlots, 1);
    require(id.slots <= static_cast<uint64_t>(kMaxSlots), "SPYRE_COMM_SLOTS={} is more than {}",
            id.slots, kMaxSlots);
    return id;
}

Communicator::Communicator(const UniqueId& id, int nranks, int rank, spyre_device_t device)
    : rank_(rank), nranks_(nranks), device_(device) {
    require(std::strncmp(id.magic, "spyre-comm-v1", sizeof id.magic) == 0 &&
                id.shm_name[0] == '/' && std::memchr(id.shm_name, 0, sizeof id.shm_name) &&
                id.slot_bytes >= kStick && id.slot_bytes % kStick == 0 &&
                id.slot_bytes <= (1ull << 30) && id.slots >= 1 &&
                id.slots <= static_cast<uint64_t>(kMaxSlots),
            "not a unique id from spyre_comm_get_unique_id");
    const uint64_t timeout = env_u64("SPYRE_COMM_TIMEOUT_MS", kDefaultTimeoutMs, 1);
    // SPYRE_COMM_ALGO: all-reduce's, broadcast's and reduce's algorithm; unset or "" picks by
    // size (tree.hpp's and one_shot.hpp's models)
    const char* algo = std::getenv("SPYRE_COMM_ALGO");
    const std::string a = algo ? algo : "";
    require(a.empty() || a == "ring" || a == "tree" || a == "one-shot",
            "SPYRE_COMM_ALGO=\"{}\" is not ring, tree or one-shot", a);
    algo_ = a == "ring"       ? Algo::Ring
            : a == "tree"     ? Algo::Tree
            : a == "one-shot" ? Algo::OneShot
                              : Algo::Auto;
    check_call(spyre_malloc(device, id.slot_bytes, &rx_));
    try {
        // SPYRE_COMM_TRANSPORT: unset or "" picks p2p where every rank can use it, else
        // host-staged; "host-staged" forces host staging (comparisons), "p2p" requires p2p.
        const char* want = std::getenv("SPYRE_COMM_TRANSPORT");
        const std::string w = want ? want : "";
        require(w.empty() || w == "p2p" || w == "host-staged",
                "SPYRE_COMM_TRANSPORT=\"{}\" is not p2p or host-staged", w);
        auto seg = std::make_unique<Segment>(id.shm_name, nranks, rank, id.slot_bytes,
                                             static_cast<int>(id.slots), timeout);
        transport_ = PeerTransport::try_create(seg, device, w == "host-staged", w == "p2p");
        if (!transport_) transport_ = std::make_unique<HostStagedTransport>(std::move(seg));
    } catch (...) {
        spyre_free(rx_);
        throw;
    }
}

Communicator::~Communicator() {
    spyre_free(acc_);
    spyre_free(work_);
    spyre_free(rx_);
}

template <typename F>
void Communicator::run(spyre_stream_t stream, F&& body, bool collective) {
    std::lock_guard lock(mu_);
    try {
        transport_->check();
        transport_->begin(collective, stream);
        body();
        // within the call nothing waits for its own card (pushes, reductions and what hands
        // slots over are queued); the caller gets an idle stream, after the pushes of the
        // transport's own stream too
        transport_->join(stream);
        transport_->submit();
        {
            // the NULL stream's work is the card's default stream's: its last launch (one-shot's
            // fold) may still run, or have failed, when the transport is done with the peers
            const spyre_status st =
                stream ? spyre_stream_synchronize(stream) : spyre_device_synchronize(device_);
            if (st != SPYRE_SUCCESS) {
                // the others may have taken what this card sent after its failed work
                const std::string why = spyre_last_error();
                transport_->abort(std::format("rank {}'s card work failed: {}", rank_, why));
                spyre::fail(st, why);
            }
        }
        transport_->settle();
    } catch (const Error& e) {
        try {
            transport_->join(stream);  // later work of the stream after the queued pushes
        } catch (const Error&) {
        }
        try {
            transport_->submit();  // nothing stays held back on the streams
        } catch (const Error&) {
        }
        // the other ranks would otherwise wait for this one until their timeout
        transport_->abort(std::format("rank {} failed: {}", rank_, e.what()));
        throw;
    }
}

spyre_buffer_t Communicator::work(uint64_t bytes) {
    if (bytes > work_bytes_) {
        spyre_free(work_);
        work_ = nullptr;
        work_bytes_ = 0;
        check_call(spyre_malloc(device_, bytes, &work_));
        work_bytes_ = bytes;
    }
    return work_;
}

void Communicator::all_reduce(spyre_buffer_t send, uint64_t send_off, spyre_buffer_t recv,
                              uint64_t recv_off, uint64_t count, spyre_dtype dtype,
                              spyre_reduce_op op, spyre_stream_t stream) {
    run(stream, [&] {
        check_dtype(dtype);
        check_op(op);
        const uint64_t es = dtype_bytes(dtype), bytes = count * es;
        check_range(send, send_off, bytes, "send");
        check_range(recv, recv_off, bytes, "recv");
        if (count == 0) return;
        if (nranks_ == 1) return copy(recv, recv_off, send, send_off, bytes, stream);
        // reduce where the card's elementwise ops can: a 128-byte aligned recv, else scratch
        spyre_buffer_t buf = recv;
        uint64_t base = recv_off;
        if (recv_off % kStick) buf = work(align_up(bytes, kStick) + kStick), base = 0;
        copy(buf, base, send, send_off, bytes, stream);
        const Ring ring{*transport_, rank_, nranks_, stream, rx_};
        if (use_one_shot(bytes)) {
            one_shot_all_reduce(ring, buf, base, count, dtype, op, one_shot_acc());
        } else if (use_tree(Collective::AllReduce, bytes)) {
            tree_all_reduce(ring, buf, base, count, dtype, op);
        } else {
            const Segments seg = segments(base, count, es);
            Marks reduced = ring_reduce_scatter(ring, buf, seg, dtype, op, 0);
            const int own = (rank_ + 1) % nranks_;
            if (op == SPYRE_REDUCE_MEAN) {
                scale_on_card(stream, buf, seg.offset[own], seg.count[own], dtype, 1.0 / nranks_);
                reduced.clear();  // the pushes follow the scaling
            }
            // each chunk of this rank's segment leaves once its last reduction is done
            ring_all_gather(ring, buf, seg, es, 1, std::move(reduced));
        }
        if (buf != recv) copy(recv, recv_off, buf, base, bytes, stream);
    });
}

bool Communicator::use_one_shot(uint64_t bytes) const {
    const uint64_t chunk = transport_->max_chunk_bytes();
    if (algo_ == Algo::OneShot) return bytes <= chunk;  // larger ones take the ring
    return algo_ == Algo::Auto && one_shot_is_faster(nranks_, bytes, chunk);
}

spyre_buffer_t Communicator::one_shot_acc() {
    if (!acc_) check_call(spyre_malloc(device_, transport_->max_chunk_bytes(), &acc_));
    return acc_;
}

bool Communicator::use_tree(Collective c, uint64_t bytes) const {
    if (algo_ != Algo::Auto) return algo_ == Algo::Tree;
    return tree_is_faster(c, nranks_, bytes, transport_->max_chunk_bytes());
}

Segments Communicator::segments(uint64_t base, uint64_t count, uint64_t es) const {
    const uint64_t per = align_up((count + nranks_ - 1) / nranks_, kStick / es);
    Segments seg;
    for (int j = 0; j < nranks_; ++j) {
        const uint64_t first = std::min<uint64_t>(count, j * per);
        seg.offset.push_back(base + first * es);
        seg.count.push_back(std::min<uint64_t>(count - first, per));
    }
    return seg;
}

void Communicator::check_peer(int peer, const char* what) const {
    require(peer >= 0 && peer < nranks_, "{} {} is not a rank of 0..{}", what, peer, nranks_ - 1);
}

void Communicator::reduce(spyre_buffer_t send, uint64_t send_off, spyre_buffer_t recv,
                          uint64_t recv_off, uint64_t count, spyre_dtype dtype, spyre_reduce_op op,
                          int root, spyre_stream_t stream) {
    run(stream, [&] {
        check_dtype(dtype);
        check_op(op);
        check_peer(root, "root");
        const uint64_t es = dtype_bytes(dtype), bytes = count * es;
        check_range(send, send_off, bytes, "send");
        if (rank_ == root) check_range(recv, recv_off, bytes, "recv");
        if (count == 0) return;
        if (nranks_ == 1) return copy(recv, recv_off, send, send_off, bytes, stream);
        // reduce in root's recv if 128-byte aligned, else (and on the other ranks) in scratch
        spyre_buffer_t buf = recv;
        uint64_t base = recv_off;
        if (rank_ != root || recv_off % kStick)
            buf = work(align_up(bytes, kStick) + kStick), base = 0;
        const Ring ring{*transport_, rank_, nranks_, stream, rx_};
        if (use_tree(Collective::Reduce, bytes)) {
            tree_reduce(ring, send, send_off, buf, base, count, dtype, op, root);
            if (rank_ == root && buf != recv) copy(recv, recv_off, buf, base, bytes, stream);
            return;
        }
        copy(buf, base, send, send_off, bytes, stream);
        const Segments seg = segments(base, count, es);
        ring_reduce_scatter(ring, buf, seg, dtype, op, 0);  // rank r holds segment r + 1
        const int own = (rank_ + 1) % nranks_;
        if (op == SPYRE_REDUCE_MEAN)
            scale_on_card(stream, buf, seg.offset[own], seg.count[own], dtype, 1.0 / nranks_);
        if (rank_ != root) {
            send_range(*transport_, root, buf, seg.offset[own], seg.count[own] * es, stream);
            return;
        }
        for (int p = 0; p < nranks_; ++p) {
            const int j = (p + 1) % nranks_;
            if (p != root)
                recv_range(*transport_, p, buf, seg.offset[j], seg.count[j] * es, stream);
        }
        if (buf != recv) copy(recv, recv_off, buf, base, bytes, stream);
    });
}

void Communicator::send(spyre_buffer_t buf, uint64_t off, uint64_t count, spyre_dtype dtype,
                        int peer, spyre_stream_t stream) {
    run_one_rank(stream, [&] {
        check_peer(peer, "peer");
        require(peer != rank_, "rank {} sends to itself", rank_);
        const uint64_t bytes = count * any_dtype_bytes(dtype);
        check_range(buf, off, bytes, "send");
        send_range(*transport_, peer, buf, off, bytes, stream);
    });
}

void Communicator::recv(spyre_buffer_t buf, uint64_t off, uint64_t count, spyre_dtype dtype,
                        int peer, spyre_stream_t stream) {
    run_one_rank(stream, [&] {
        check_peer(peer, "peer");
        require(peer != rank_, "rank {} receives from itself", rank_);
        const uint64_t bytes = count * any_dtype_bytes(dtype);
        check_range(buf, off, bytes, "recv");
        recv_range(*transport_, peer, buf, off, bytes, stream);
    });
}

void Communicator::reduce_scatter(spyre_buffer_t send, uint64_t send_off, spyre_buffer_t recv,
                                  uint64_t recv_off, uint64_t count, spyre_dtype dtype,
                                  spyre_reduce_op op, spyre_stream_t stream) {
    run(stream, [&] {
        check_dtype(dtype);
        check_op(op);
        const uint64_t es = dtype_bytes(dtype), bytes = count * es;
        check_range(send, send_off, bytes * nranks_, "send");
        check_range(recv, recv_off, bytes, "recv");
        if (count == 0) return;
        if (nranks_ == 1) return copy(recv, recv_off, send, send_off, bytes, stream);
        // the blocks on sticks in scratch (the send buffer stays untouched)
        const uint64_t blk = align_up(bytes, kStick);
        spyre_buffer_t buf = work(blk * nranks_);
        Segments seg;
        for (int j = 0; j < nranks_; ++j) {
            copy(buf, j * blk, send, send_off + j * bytes, bytes, stream);
            seg.offset.push_back(j * blk);
            seg.count.push_back(count);
        }
        const Ring ring{*transport_, rank_, nranks_, stream, rx_};
        ring_reduce_scatter(ring, buf, seg, dtype, op, -1);  // rank r ends with block r
        if (op == SPYRE_REDUCE_MEAN)
            scale_on_card(stream, buf, rank_ * blk, count, dtype, 1.0 / nranks_);
        copy(recv, recv_off, buf, rank_ * blk, bytes, stream);
    });
}

void Communicator::all_gather(spyre_buffer_t send, uint64_t send_off, spyre_buffer_t recv,
                              uint64_t recv_off, uint64_t count, spyre_dtype dtype,
                              spyre_stream_t stream) {
    run(stream, [&] {
        check_dtype(dtype);
        const uint64_t es = dtype_bytes(dtype), bytes = count * es;
        check_range(send, send_off, bytes, "send");
        check_range(recv, recv_off, bytes * nranks_, "recv");
        if (count == 0) return;
        copy(recv, recv_off + rank_ * bytes, send, send_off, bytes, stream);
        Segments seg;
        for (int j = 0; j < nranks_; ++j) {
            seg.offset.push_back(recv_off + j * bytes);
            seg.count.push_back(count);
        }
        const Ring ring{*transport_, rank_, nranks_, stream, rx_};
        ring_all_gather(ring, recv, seg, es, 0);
    });
}

void Communicator::broadcast(spyre_buffer_t send, uint64_t send_off, spyre_buffer_t recv,
                             uint64_t recv_off, uint64_t count, spyre_dtype dtype, int root,
                             spyre_stream_t stream) {
    run(stream, [&] {
        check_dtype(dtype);
        check_peer(root, "root");
        const uint64_t bytes = count * dtype_bytes(dtype);
        if (rank_ == root) check_range(send, send_off, bytes, "send");
        check_range(recv, recv_off, bytes, "recv");
        if (count == 0) return;
        if (rank_ == root) copy(recv, recv_off, send, send_off, bytes, stream);
        const Ring ring{*transport_, rank_, nranks_, stream, rx_};
        if (use_tree(Collective::Broadcast, bytes))
            tree_broadcast(ring, send, send_off, recv, recv_off, bytes, root);
        else
            ring_broadcast(ring, send, send_off, recv, recv_off, bytes, root);
    });
}

void Communicator::barrier(spyre_stream_t stream) {
    run(stream, [&] {
        check_call(spyre_stream_synchronize(stream));
        transport_->barrier();
    });
}

void Communicator::abort() {
    transport_->abort(std::format("aborted by rank {} (spyre_comm_abort)", rank_));
}

void Communicator::info(spyre_comm_info* out) const {
    *out = spyre_comm_info{};
    out->rank = rank_;
    out->nranks = nranks_;
    out->device = device_;
    out->chunk_bytes = transport_->max_chunk_bytes();
    std::snprintf(out->transport, sizeof out->transport, "%s", transport_->name());
    if (transport_->device_waits()) out->flags |= SPYRE_COMM_INFO_DEVICE_WAITS;
}

}  // namespace spyre::comm

// The shared-memory segment of a host-staged communicator (shm_segment.hpp).
#include "comm/shm_segment.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <format>

#include "error.hpp"
#include "peer_fd.hpp"

namespace spyre::comm {
namespace {

constexpr uint32_t kMagic = 0x53434f4d;  // "SCOM"
constexpr size_t kHeaderBytes = (sizeof(SegmentHeader) + 4095) & ~size_t{4095};

// Exited (a zombie not yet reaped counts as dead).
bool alive(int32_t pid) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    char path[64], buf[256];
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno != ENOENT;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return true;
    buf[n] = 0;
    const char* paren = std::strrchr(buf, ')');  // the state follows "(comm) "
    return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

}  // namespace

Segment::Segment(const std::string& name, int nranks, int rank, uint64_t slot_bytes, int slots,
                 uint64_t timeout_ms)
    : name_(name),
      nranks_(nranks),
      rank_(rank),
      slot_bytes_(slot_bytes),
      slots_(slots),
      timeout_ms_(timeout_ms) {
    require(slots >= 1 && slots <= kMaxSlots, "{} outbox slots is not in 1..{}", slots, kMaxSlots);
    map_bytes_ = kHeaderBytes + static_cast<size_t>(nranks) * slots * slot_bytes;
    int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0)
        fail(status_from_errno(errno), std::format("shm_open({}): {}", name, errno_text(errno)));
    struct stat st{};
    if (fstat(fd, &st) == 0 && st.st_size != 0 && static_cast<size_t>(st.st_size) != map_bytes_) {
        close(fd);
        spyre::fail(SPYRE_ERROR_INVALID_ARGUMENT,
                    std::format("communicator {} was created for another number of ranks, "
                                "chunk size or slot count ({} bytes, this rank expects {})",
                                name, st.st_size, map_bytes_));
    }
    if (ftruncate(fd, static_cast<off_t>(map_bytes_)) != 0) {
        int e = errno;
        close(fd);
        spyre::fail(status_from_errno(e), std::format("ftruncate({}): {}", name, errno_text(e)));
    }
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        spyre::fail(status_from_errno(e), std::format("mmap({}): {}", name, errno_text(e)));
    hdr_ = static_cast<SegmentHeader*>(p);

    // The zero-filled header is valid; the first rank stamps nranks, later ranks must agree.
    uint32_t expect = 0;
    if (!hdr_->nranks.compare_exchange_strong(expect, static_cast<uint32_t>(nranks)) &&
        expect != static_cast<uint32_t>(nranks)) {
        munmap(hdr_, map_bytes_);
        spyre::fail(SPYRE_ERROR_INVALID_ARGUMENT,
                    std::format("rank {} joined with nranks {}, the communicator has {}", rank,
                                nranks, expect));
    }
    hdr_->magic = kMagic;
    hdr_->slot_bytes = slot_bytes;
    int32_t none = 0;
    if (!hdr_->ranks[rank].pid.compare_exchange_strong(none, static_cast<int32_t>(getpid()))) {
        munmap(hdr_, map_bytes_);
        spyre::fail(SPYRE_ERROR_INVALID_ARGUMENT,
                    std::format("rank {} joined twice (first by pid {})", rank, none));
    }
    hdr_->joined.fetch_add(1);
    wake(hdr_->joined);
    try {
        wait(
            hdr_->joined, [&] { return hdr_->joined.load() >= static_cast<uint32_t>(nranks); },
            "to join the communicator", -1);
    } catch (const Error& err) {
        std::string missing;
        for (int r = 0; r < nranks; ++r)
            if (!hdr_->ranks[r].pid.load())
                missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        if (rank == 0) shm_unlink(name_.c_str());
        munmap(hdr_, map_bytes_);
        hdr_ = nullptr;
        if (missing.empty()) throw;
        spyre::fail(err.status(),
                    std::format("{}; ranks that never joined: {}", err.what(), missing));
    }
    // everybody has it mapped: the name is no longer needed (nothing left in /dev/shm)
    if (rank == 0) shm_unlink(name_.c_str());
}

Segment::~Segment() {
    if (hdr_) munmap(hdr_, map_bytes_);
}

unsigned char* Segment::slot(int rank, int k) {
    return reinterpret_cast<unsigned char*>(hdr_) + kHeaderBytes +
           (static_cast<size_t>(rank) * slots_ + k) * slot_bytes_;
}

void Segment::wake(std::atomic<uint32_t>& word) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr,
            0);
}

void Segment::wait_slice(std::atomic<uint32_t>& word, uint32_t seen, uint64_t ns) {
    if (ns == 0) ns = 1000000;
    timespec ts{static_cast<time_t>(ns / 1000000000ull), static_cast<long>(ns % 1000000000ull)};
    // EINTR, EAGAIN (word changed) and ETIMEDOUT all return to the caller's checks
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

uint64_t Segment::now_ms() const {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

void Segment::fail(spyre_status status, const std::string& reason) {
    uint32_t expect = 0;
    if (!hdr_->failed.compare_exchange_strong(expect, 1)) return;
    hdr_->failed_status = status;
    std::snprintf(hdr_->reason, sizeof hdr_->reason, "%s", reason.c_str());
    hdr_->failed.store(2, std::memory_order_release);
    wake(hdr_->failed);
}

void Segment::check() {
    uint32_t f = hdr_->failed.load(std::memory_order_acquire);
    if (f == 0) return;
    while (f == 1) f = hdr_->failed.load(std::memory_order_acquire);  // a reason is being written
    spyre::fail(static_cast<spyre_status>(hdr_->failed_status),
                std::format("communicator failed: {}", hdr_->reason));
}

int Segment::dead_peer(int peer) const {
    for (int r = peer < 0 ? 0 : peer; r < (peer < 0 ? nranks_ : peer + 1); ++r) {
        const int32_t pid = hdr_->ranks[r].pid.load();
        if (r == rank_ || pid <= 0 || pid == getpid()) continue;
        if (!alive(pid)) return r;
    }
    return -1;
}

void Segment::peer_died(int r) {
    fail(SPYRE_ERROR_DEVICE_LOST, std::format("rank {} (pid {}) died; rank {} noticed", r,
                                              hdr_->ranks[r].pid.load(), rank_));
    check();
    std::abort();  // check() throws once a failure is recorded
}

Segment::Message Segment::begin_post(int peer, uint32_t seq, uint64_t bytes) {
    RankState& me = hdr_->ranks[rank_];
    const Message m{rank_, sent_ + 1, static_cast<int>(sent_ % slots_)};
    Mailbox& b = me.box[m.slot];
    // the slot's previous message (number - slots, to whichever rank) must have been taken
    if (m.number > static_cast<uint32_t>(slots_)) {
        const uint32_t prev = m.number - slots_;
        auto taken = [&] { return b.consumed.load(std::memory_order_acquire) == prev; };
        if (!taken()) wait(me.takes, taken, "to take an earlier message", b.to.load());
    }
    ++sent_;
    b.to.store(peer, std::memory_order_relaxed);
    b.seq.store(seq, std::memory_order_relaxed);
    b.bytes = bytes;
    return m;
}

void Segment::post(const Message& m) {
    RankState& me = hdr_->ranks[m.sender];
    me.box[m.slot].posted.store(m.number, std::memory_order_release);
    me.posts.fetch_add(1, std::memory_order_release);
    wake(me.posts);
}

bool Segment::post_unless_failed(const Message& m, spyre_stream_t stream, spyre_buffer_t src,
                                 int peer, spyre_stream_t also) {
    std::string what;
    spyre_status st = SPYRE_SUCCESS;
    try {
        st = stream_failure(stream, src, &what);
        if (st == SPYRE_SUCCESS && also) st = stream_failure(also, src, &what);
    } catch (const Error& e) {  // the stream or the buffer is gone: as good as failed
        st = e.status(), what = e.what();
    }
    if (st == SPYRE_SUCCESS) {
        post(m);
        return true;
    }
    fail(st, std::format("rank {}'s card work before its message to rank {} failed: {}", m.sender,
                         peer, what));
    return false;
}

Segment::Message Segment::await_post(int peer, uint32_t seq, uint64_t bytes) {
    RankState& from = hdr_->ranks[peer];
    Message found{peer, 0, 0};
    // A slot holds a message while posted != consumed. Its `to`, `seq` and `bytes` are
    // rewritten for the sender's next message in the slot only once this one was taken: they
    // are believed only if the slot was not taken while they were read.
    auto mine = [&] {
        for (int k = 0; k < slots_; ++k) {
            Mailbox& b = from.box[k];
            const uint32_t p = b.posted.load(std::memory_order_acquire);
            if (p == 0 || b.consumed.load(std::memory_order_acquire) == p) continue;
            const bool match = b.to.load(std::memory_order_relaxed) == rank_ &&
                               b.seq.load(std::memory_order_relaxed) == seq;
            std::atomic_thread_fence(std::memory_order_acquire);
            if (match && b.consumed.load(std::memory_order_relaxed) != p) {
                found = Message{peer, p, k};
                return true;
            }
        }
        return false;
    };
    wait(from.posts, mine, "to send its data", peer);
    const uint64_t sent = from.box[found.slot].bytes;
    if (sent != bytes) {
        fail(SPYRE_ERROR_INVALID_ARGUMENT,
             std::format("rank {} sent {} bytes, rank {} expected {}: the ranks called "
                         "different collectives or counts",
                         peer, sent, rank_, bytes));
        check();
    }
    return found;
}

void Segment::consumed(const Message& m) {
    RankState& from = hdr_->ranks[m.sender];
    from.box[m.slot].consumed.store(m.number, std::memory_order_release);
    from.takes.fetch_add(1, std::memory_order_release);
    wake(from.takes);
}

void Segment::barrier() {
    SegmentHeader& h = header();
    const uint32_t gen = h.barrier_generation.load(std::memory_order_acquire);
    if (h.barrier_arrived.fetch_add(1) + 1 == static_cast<uint32_t>(nranks_)) {
        h.barrier_arrived.store(0);
        h.barrier_generation.store(gen + 1, std::memory_order_release);
        wake(h.barrier_generation);
        return;
    }
    wait(
        h.barrier_generation,
        [&] { return h.barrier_generation.load(std::memory_order_acquire) != gen; },
        "at the barrier", -1);
}

}  // namespace spyre::comm

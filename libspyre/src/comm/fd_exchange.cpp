// fd exchange between the ranks' processes (fd_exchange.hpp).
#include "comm/fd_exchange.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <format>
#include <string>

#include "error.hpp"

namespace spyre::comm {
namespace {

constexpr char kMagic[8] = "spyrefd";

struct Message {
    char magic[8];
    int32_t rank;     // the sender
    uint32_t has_fd;  // an fd rides along (SCM_RIGHTS)
    uint64_t value;
};

sockaddr_un address(const Segment& seg, int rank, socklen_t* len) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string name = std::format("spyre-comm{}-r{}", seg.name(), rank);
    require(name.size() + 1 < sizeof a.sun_path, "communicator name too long for a socket");
    std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
    *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    return a;
}

[[noreturn]] void fail_errno(const char* what, int rank) {
    const int e = errno;
    spyre::fail(status_from_errno(e), std::format("rank {}: {}: {}", rank, what, errno_text(e)));
}

}  // namespace

FdExchange::FdExchange(Segment& seg) : seg_(seg) {
    listen_.reset(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!listen_) fail_errno("socket", seg.rank());
    socklen_t len = 0;
    const sockaddr_un a = address(seg, seg.rank(), &len);
    if (bind(listen_.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0)
        fail_errno("binding the fd exchange socket", seg.rank());
    if (listen(listen_.get(), seg.nranks()) != 0) fail_errno("listen", seg.rank());
}

std::vector<FdExchange::Item> FdExchange::exchange(const std::vector<int>& peers,
                                                   const std::vector<Item>& give) {
    const int me = seg_.rank();
    // 1: a message to every peer (a listening unix socket takes it at once). A peer this rank
    // cannot reach (another network namespace hides its abstract socket) gets none: it stops
    // waiting once every rank has sent what it could, and the transport is declined.
    for (int r : peers) {
        UniqueFd s(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
        socklen_t len = 0;
        const sockaddr_un a = address(seg_, r, &len);
        if (!s || connect(s.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0) continue;
        Message m{};
        std::memcpy(m.magic, kMagic, sizeof m.magic);
        m.rank = me;
        m.has_fd = give[r].fd ? 1 : 0;
        m.value = give[r].value;
        iovec iov{&m, sizeof m};
        alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
        msghdr h{};
        h.msg_iov = &iov;
        h.msg_iovlen = 1;
        if (m.has_fd) {
            h.msg_control = ctl;
            h.msg_controllen = sizeof ctl;
            cmsghdr* c = CMSG_FIRSTHDR(&h);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            const int fd = give[r].fd.get();
            std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
        }
        (void)sendmsg(s.get(), &h, MSG_NOSIGNAL);  // a failure: that peer gets nothing
    }
    SegmentHeader& hdr = seg_.header();
    hdr.fd_senders_done.fetch_add(1);
    Segment::wake(hdr.fd_senders_done);
    // 2: one message from every peer, each from the process that joined as that rank
    std::vector<Item> got(seg_.nranks());
    std::vector<bool> from(seg_.nranks(), false);
    size_t received = 0;
    auto take_pending = [&] {
        for (;;) {
            UniqueFd c(accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
            if (!c) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
                fail_errno("accept", me);
            }
            ucred cred{};
            socklen_t cl = sizeof cred;
            if (getsockopt(c.get(), SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) continue;
            timeval tv{5, 0};  // the sender wrote before we could accept
            setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            Message m{};
            iovec iov{&m, sizeof m};
            alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
            msghdr h{};
            h.msg_iov = &iov;
            h.msg_iovlen = 1;
            h.msg_control = ctl;
            h.msg_controllen = sizeof ctl;
            const ssize_t n = recvmsg(c.get(), &h, MSG_CMSG_CLOEXEC);
            UniqueFd fd;
            for (cmsghdr* cm = CMSG_FIRSTHDR(&h); n > 0 && cm; cm = CMSG_NXTHDR(&h, cm))
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                    int v = -1;
                    std::memcpy(&v, CMSG_DATA(cm), sizeof v);
                    fd.reset(v);
                }
            // strangers, duplicates and malformed messages are dropped (their fd closed)
            if (n != static_cast<ssize_t>(sizeof m) || std::memcmp(m.magic, kMagic, 8) != 0 ||
                m.rank < 0 || m.rank >= seg_.nranks() || from[m.rank] ||
                seg_.header().ranks[m.rank].pid.load() != cred.pid || (m.has_fd && !fd))
                continue;
            from[m.rank] = true;
            got[m.rank] = Item{std::move(fd), m.value};
            ++received;
        }
        return received == peers.size();
    };
    // every message sent is queued at the listening socket before its sender counts itself
    // done: once all are done, what has not come will not
    auto all_in = [&] {
        const bool senders_done =
            hdr.fd_senders_done.load() == static_cast<uint32_t>(seg_.nranks());
        return take_pending() || senders_done;
    };
    seg_.wait(hdr.fd_senders_done, all_in, "to hand over its inbox", -1);
    return got;
}

}  // namespace spyre::comm

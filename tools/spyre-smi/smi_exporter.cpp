#include "smi_exporter.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <format>

namespace spyre_smi {

namespace {

constexpr size_t kMaxRequestBytes = 8192;

void send_all(int fd, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
        ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            return;  // the client went away
        }
        off += static_cast<size_t>(n);
    }
}

std::string response(int code, const char* reason, const char* type, const std::string& body) {
    return std::format(
        "HTTP/1.0 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        code, reason, type, body.size(), body);
}

// Reads the request head (up to the blank line, bounded) and answers it.
void handle(int fd, const std::function<std::string()>& metrics) {
    timeval tv{5, 0};  // a client that sends nothing does not hold the exporter forever
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string req;
    char buf[1024];
    while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos &&
           req.size() < kMaxRequestBytes) {
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
    }
    const std::string line = req.substr(0, req.find_first_of("\r\n"));
    const size_t sp1 = line.find(' '), sp2 = line.find(' ', sp1 + 1);
    if (sp1 == std::string::npos) {
        send_all(fd, response(400, "Bad Request", "text/plain", "bad request\n"));
        return;
    }
    const std::string method = line.substr(0, sp1);
    const std::string path =
        line.substr(sp1 + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp1 - 1);
    if (method != "GET") {
        send_all(fd, response(405, "Method Not Allowed", "text/plain", "only GET\n"));
    } else if (path == "/metrics") {
        send_all(fd, response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", metrics()));
    } else if (path == "/") {
        send_all(fd, response(200, "OK", "text/plain",
                              "spyre-smi exporter: metrics of the Spyre cards at /metrics\n"));
    } else {
        send_all(fd, response(404, "Not Found", "text/plain", "not found: try /metrics\n"));
    }
}

}  // namespace

int serve_metrics(int port, long max_requests, const std::function<std::string()>& metrics) {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        std::fprintf(stderr, "spyre-smi exporter: socket: %s\n", std::strerror(errno));
        return 1;
    }
    int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // never reachable from other machines
    socklen_t len = sizeof addr;
    if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 || ::listen(s, 16) < 0 ||
        ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
        std::fprintf(stderr, "spyre-smi exporter: cannot listen on 127.0.0.1:%d: %s\n", port,
                     std::strerror(errno));
        ::close(s);
        return 1;
    }
    std::fprintf(stderr, "spyre-smi exporter: listening on http://127.0.0.1:%u/metrics\n",
                 ntohs(addr.sin_port));
    std::fflush(stderr);
    for (long served = 0; max_requests == 0 || served < max_requests;) {
        int c = ::accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            std::fprintf(stderr, "spyre-smi exporter: accept: %s\n", std::strerror(errno));
            ::close(s);
            return 1;
        }
        handle(c, metrics);
        ::close(c);
        ++served;
    }
    ::close(s);
    return 0;
}

}  // namespace spyre_smi

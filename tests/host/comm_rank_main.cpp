// One rank of a communicator in its own process, for comm_process_test.cpp: on its own
// simulated card, or through spyre.ko on card RANK mod the number of cards (several ranks may
// share a card): spyre-comm-rank ID_HEX NRANKS RANK MODE
//   ok:      all-reduce (sum) of 100003 fp32 values rank+1, checks n(n+1)/2; exit 0 if right
//   p2p:     reduce (sum) of them to rank n-1, then a relay: rank r sends its values to r+1
//            (rank 0 first, then receives from n-1); checks both
//   all:     every collective, reduce and send/recv, every dtype, odd sizes, against a host
//            reference (comm_rank_suite.cpp); SPYRE_COMM_EXPECT_TRANSPORT: the transport the
//            communicator must have chosen
//   mutual:  2 ranks each send 16 MiB (4 default chunks) to the other on a stream, then
//            receive; checks the data (sends must not wait for the receiver to take them)
//   die_mid: kills itself (SIGKILL) while all-reducing 16 MiB in a loop
//   die:     joins, then kills itself (SIGKILL) before the collective
//   survive: all-reduce that must fail with SPYRE_ERROR_DEVICE_LOST naming the dead rank
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm_test_util.hpp"
#include "spyre/comm.h"

int run_suite(spyre_device_t dev, spyre_comm_t comm, int n, int rank);

int main(int argc, char** argv) {
    if (argc != 5) return 2;
    spyre_comm_unique_id id{};
    const char* hex = argv[1];
    if (std::strlen(hex) != 2 * sizeof id.internal) return 2;
    for (size_t i = 0; i < sizeof id.internal; ++i)
        id.internal[i] = static_cast<char>(std::stoi(std::string(hex + 2 * i, 2), nullptr, 16));
    const int n = std::atoi(argv[2]), rank = std::atoi(argv[3]);
    const std::string mode = argv[4];
    spyre_device_t dev = nullptr;
    spyre_comm_t comm = nullptr;
    if (comm_test::join_rank(id, n, rank, &dev, &comm)) {
        std::fprintf(stderr, "rank %d: %s\n", rank, spyre_last_error());
        return 3;
    }
    if (mode == "die") raise(SIGKILL);
    spyre_comm_info info{};
    const char* expect = std::getenv("SPYRE_COMM_EXPECT_TRANSPORT");
    if (spyre_comm_get_info(comm, &info) || (expect && std::strcmp(expect, info.transport))) {
        std::fprintf(stderr, "rank %d: transport %s, expected %s\n", rank, info.transport,
                     expect ? expect : "-");
        return 20;
    }
    if (mode == "all") {
        const int failures = run_suite(dev, comm, n, rank);
        spyre_comm_destroy(comm);
        spyre_device_close(dev);
        return failures ? 21 : 0;
    }
    if (mode == "die_mid" || mode == "survive_mid") {
        // all-reduces of 16 MiB until one fails; the dying rank kills itself during one
        const uint64_t big = 4u << 20;
        spyre_buffer_t b;
        if (spyre_malloc(dev, big * 4, &b)) return 4;
        if (mode == "die_mid")
            std::thread([] {
                usleep(300000);
                raise(SIGKILL);
            }).detach();
        for (int i = 0; i < 100000; ++i) {
            const spyre_status s = spyre_comm_all_reduce(b, 0, b, 0, big, SPYRE_DTYPE_FLOAT32,
                                                         SPYRE_REDUCE_SUM, comm, nullptr);
            if (s == SPYRE_SUCCESS) continue;
            std::fprintf(stderr, "rank %d: after %d all-reduces: %s: %s\n", rank, i,
                         spyre_status_string(s), spyre_last_error());
            return s == SPYRE_ERROR_DEVICE_LOST && std::strstr(spyre_last_error(), "died") ? 0 : 5;
        }
        return 6;
    }
    if (mode == "mutual") {
        const uint64_t count = 4u << 20;  // 16 MiB of fp32
        const int other = 1 - rank;
        std::vector<float> mine(count), got(count);
        for (uint64_t i = 0; i < count; ++i) mine[i] = static_cast<float>(i % 1000 + rank * 1000);
        spyre_buffer_t s, d;
        spyre_stream_t st;
        auto fail = [&](int code) {
            std::fprintf(stderr, "rank %d: %s\n", rank, spyre_last_error());
            return code;
        };
        if (n != 2 || spyre_malloc(dev, count * 4, &s) || spyre_malloc(dev, count * 4, &d) ||
            spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &st) ||
            spyre_memcpy_htod(s, 0, mine.data(), count * 4))
            return fail(30);
        if (spyre_comm_send(s, 0, count, SPYRE_DTYPE_FLOAT32, other, comm, st)) return fail(31);
        if (spyre_comm_recv(d, 0, count, SPYRE_DTYPE_FLOAT32, other, comm, st)) return fail(32);
        if (spyre_stream_synchronize(st) || spyre_memcpy_dtoh(got.data(), d, 0, count * 4))
            return fail(33);
        for (uint64_t i = 0; i < count; ++i)
            if (got[i] != static_cast<float>(i % 1000 + other * 1000)) return 34;
        spyre_stream_destroy(st);
        spyre_free(s);
        spyre_free(d);
        spyre_comm_destroy(comm);
        spyre_device_close(dev);
        return 0;
    }
    const uint64_t count = 100003;
    std::vector<float> h(count, static_cast<float>(rank + 1));
    spyre_buffer_t b;
    if (spyre_malloc(dev, count * 4, &b) || spyre_memcpy_htod(b, 0, h.data(), count * 4)) return 4;
    if (mode == "p2p") {
        const int root = n - 1, next = (rank + 1) % n, prev = (rank + n - 1) % n;
        spyre_buffer_t r, x;
        auto fail = [&](int code) {
            std::fprintf(stderr, "rank %d: %s\n", rank, spyre_last_error());
            return code;
        };
        if (spyre_malloc(dev, count * 4, &r) || spyre_malloc(dev, count * 4, &x)) return fail(8);
        if (spyre_comm_reduce(b, 0, rank == root ? r : nullptr, 0, count, SPYRE_DTYPE_FLOAT32,
                              SPYRE_REDUCE_SUM, root, comm, nullptr))
            return fail(9);
        if (rank == 0 && spyre_comm_send(b, 0, count, SPYRE_DTYPE_FLOAT32, next, comm, nullptr))
            return fail(10);
        if (spyre_comm_recv(x, 0, count, SPYRE_DTYPE_FLOAT32, prev, comm, nullptr)) return fail(11);
        if (rank != 0 && spyre_comm_send(b, 0, count, SPYRE_DTYPE_FLOAT32, next, comm, nullptr))
            return fail(12);
        if (spyre_device_synchronize(dev) || spyre_memcpy_dtoh(h.data(), x, 0, count * 4))
            return fail(13);
        for (float v : h)
            if (v != prev + 1.0f) return 14;
        if (rank == root) {
            if (spyre_memcpy_dtoh(h.data(), r, 0, count * 4)) return fail(15);
            for (float v : h)
                if (v != n * (n + 1) / 2.0f) return 16;
        }
        spyre_free(r);
        spyre_free(x);
        spyre_free(b);
        spyre_comm_destroy(comm);
        spyre_device_close(dev);
        return 0;
    }
    if (mode == "survive") usleep(200000);  // the dying rank is gone by now
    const spyre_status s = spyre_comm_all_reduce(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32,
                                                 SPYRE_REDUCE_SUM, comm, nullptr);
    if (mode == "survive") {
        std::fprintf(stderr, "rank %d: %s: %s\n", rank, spyre_status_string(s), spyre_last_error());
        return s == SPYRE_ERROR_DEVICE_LOST && std::strstr(spyre_last_error(), "died") ? 0 : 5;
    }
    if (s || spyre_device_synchronize(dev) || spyre_memcpy_dtoh(h.data(), b, 0, count * 4)) {
        std::fprintf(stderr, "rank %d: %s\n", rank, spyre_last_error());
        return 6;
    }
    for (float v : h)
        if (v != n * (n + 1) / 2.0f) return 7;
    spyre_free(b);
    spyre_comm_destroy(comm);
    spyre_device_close(dev);
    return 0;
}

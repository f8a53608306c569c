// All-reduce (or broadcast / reduce to rank 0) bus bandwidth of libspyre's collectives
// (spyre/comm.h):
//   spyre-comm-bench [--threads] [--op all-reduce|broadcast|reduce] [NRANKS [SIZE_BYTES...]]
// One process per rank (it re-runs itself once per rank; SPYRE_BACKEND=sim gives every process
// its own simulated card: the host-staged transport; on the kernel backend rank r opens card
// r: the p2p transport between processes, SPYRE_COMM_TRANSPORT=host-staged to compare). --threads:
// one thread per rank in this process, rank r on card r (simulator: SPYRE_SIM_DEVICES defaults to
// NRANKS), where the communicator picks the p2p transport (SPYRE_COMM_TRANSPORT=host-staged for
// comparison). busbw follows nccl-tests: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n
// for all-reduce, = algbw for broadcast and reduce.
// Wall-clock time on this host, plus rank 0's modeled device time per all-reduce between events
// recorded on its stream before and after the call (spyre_event_elapsed: on the simulator the
// collective's critical path on the card's timeline, its push stream included; on the kernel
// backend the stream's DMA copies, peer copies and reduction programs summed) and the busbw that
// time gives; with --threads also the busiest card's modeled time (max_dev_us).
//   spyre-comm-bench --peer-copy [SIZE_BYTES...]
// Card 0's engine pushes into card 1 (spyre_memcpy_peer_async on a stream of card 0): wall time
// and the modeled time between events around the copy, its bandwidth against the modeled peer
// link (60 GB/s, libspyre.md "Peer-to-peer copies").
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "spyre/comm.h"

extern char** environ;

namespace {

enum class Op { AllReduce, Broadcast, Reduce };
Op g_op = Op::AllReduce;

const char* op_name() {
    return g_op == Op::Broadcast ? "broadcast from rank 0"
           : g_op == Op::Reduce  ? "reduce sum to rank 0"
                                 : "all-reduce sum";
}

spyre_status collective(spyre_buffer_t b, uint64_t count, spyre_comm_t comm,
                        spyre_stream_t stream) {
    switch (g_op) {
        case Op::Broadcast:
            return spyre_comm_broadcast(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32, 0, comm, stream);
        case Op::Reduce:
            return spyre_comm_reduce(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32, SPYRE_REDUCE_SUM, 0,
                                     comm, stream);
        case Op::AllReduce:
            break;
    }
    return spyre_comm_all_reduce(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32, SPYRE_REDUCE_SUM, comm,
                                 stream);
}

#define CHECK(x)                                                      \
    do {                                                              \
        if ((x) != SPYRE_SUCCESS) {                                   \
            std::fprintf(stderr, "%s: %s\n", #x, spyre_last_error()); \
            std::exit(1);                                             \
        }                                                             \
    } while (0)

// --threads: each rank's modeled ns of the current size, for the busiest card's figure (a wait
// for another card carries no modeled time, so each card's figure is its own work).
std::vector<std::atomic<uint64_t>>* g_rank_ns = nullptr;

int run_rank(const spyre_comm_unique_id& id, int n, int rank, int index,
             const std::vector<uint64_t>& sizes) {
    spyre_device_t dev;
    spyre_comm_t comm;
    spyre_stream_t stream;
    spyre_event_t e0, e1;
    CHECK(spyre_device_open(index, &dev));
    CHECK(spyre_comm_init_rank(&comm, n, &id, rank, dev));
    CHECK(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &stream));
    CHECK(spyre_event_create(dev, &e0));
    CHECK(spyre_event_create(dev, &e1));
    if (rank == 0) {
        spyre_comm_info info{};
        CHECK(spyre_comm_get_info(comm, &info));
        std::printf("%s fp32, %d ranks, transport %s\n", op_name(), n, info.transport);
        std::printf("%12s %8s %12s %12s %12s %14s %16s", "bytes", "iters", "time_us", "algbw_GB/s",
                    "busbw_GB/s", "modeled_dev_us", "modeled_busbw");
        if (g_rank_ns) std::printf("%12s", "max_dev_us");
        std::printf("\n");
    }
    for (uint64_t bytes : sizes) {
        const uint64_t count = bytes / 4;
        spyre_buffer_t b;
        CHECK(spyre_malloc(dev, bytes, &b));
        // zeroed from the host, 64 MiB at a time (spyre_memset over the last 64 MiB of a
        // 256 MiB buffer faults on the kernel backend's card: DDR access past its span)
        const std::vector<uint8_t> zeros(std::min<uint64_t>(bytes, 64u << 20));
        for (uint64_t at = 0; at < bytes; at += zeros.size())
            CHECK(spyre_memcpy_htod(b, at, zeros.data(),
                                    std::min<uint64_t>(zeros.size(), bytes - at)));
        const int iters = bytes >= (64u << 20) ? 3 : bytes >= (1u << 20) ? 10 : 50;
        CHECK(collective(b, count, comm, stream));  // warm-up: plans, scratch
        CHECK(spyre_comm_barrier(comm, stream));
        spyre_event_timing timing{};
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) {
            CHECK(spyre_event_record(e0, stream));
            CHECK(collective(b, count, comm, stream));
            CHECK(spyre_event_record(e1, stream));
            CHECK(spyre_event_synchronize(e1));
            spyre_event_timing t{};
            CHECK(spyre_event_elapsed(e0, e1, &t));
            timing.modeled_ns += t.modeled_ns;
        }
        if (g_rank_ns) (*g_rank_ns)[rank] = timing.modeled_ns;
        CHECK(spyre_comm_barrier(comm, stream));
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
        const double factor = g_op == Op::AllReduce ? 2.0 * (n - 1) / n : 1.0;
        const double algbw = bytes / s / 1e9, busbw = algbw * factor;
        const double modeled_s = timing.modeled_ns / 1e9 / iters;
        const double modeled_busbw = modeled_s > 0 ? bytes / modeled_s / 1e9 * factor : 0;
        if (rank == 0)
            std::printf("%12llu %8d %12.1f %12.3f %12.3f %14.1f %16.3f",
                        static_cast<unsigned long long>(bytes), iters, s * 1e6, algbw, busbw,
                        modeled_s * 1e6, modeled_busbw);
        if (rank == 0 && g_rank_ns) {
            uint64_t most = 0;
            for (const auto& v : *g_rank_ns) most = std::max<uint64_t>(most, v);
            std::printf("%12.1f", most / 1e3 / iters);
        }
        if (rank == 0) std::printf("\n");
        std::fflush(stdout);
        CHECK(spyre_free(b));
    }
    spyre_event_destroy(e0);
    spyre_event_destroy(e1);
    spyre_stream_destroy(stream);
    spyre_comm_destroy(comm);
    spyre_device_close(dev);
    return 0;
}

int peer_copy_bench(const std::vector<uint64_t>& sizes) {
    spyre_device_t src, dst;
    spyre_stream_t stream;
    spyre_event_t e0, e1;
    CHECK(spyre_device_open(0, &src));
    CHECK(spyre_device_open(1, &dst));
    CHECK(spyre_device_enable_peer_access(src, dst));
    CHECK(spyre_stream_create(src, SPYRE_STREAM_PRIORITY_NORMAL, &stream));
    CHECK(spyre_event_create(src, &e0));
    CHECK(spyre_event_create(src, &e1));
    std::printf("peer copy, card 0 pushes into card 1 (modeled link 60 GB/s)\n");
    std::printf("%12s %8s %12s %12s %14s %16s %8s\n", "bytes", "iters", "time_us", "GB/s",
                "modeled_dev_us", "modeled_GB/s", "of_link");
    for (uint64_t bytes : sizes) {
        spyre_buffer_t a, b;
        CHECK(spyre_malloc(src, bytes, &a));
        CHECK(spyre_malloc(dst, bytes, &b));
        const int iters = bytes >= (64u << 20) ? 3 : bytes >= (1u << 20) ? 10 : 50;
        CHECK(spyre_memcpy_peer_async(b, 0, a, 0, bytes, stream));  // warm-up: the import
        CHECK(spyre_stream_synchronize(stream));
        uint64_t modeled_ns = 0;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) {
            CHECK(spyre_event_record(e0, stream));
            CHECK(spyre_memcpy_peer_async(b, 0, a, 0, bytes, stream));
            CHECK(spyre_event_record(e1, stream));
            CHECK(spyre_event_synchronize(e1));
            spyre_event_timing t{};
            CHECK(spyre_event_elapsed(e0, e1, &t));
            modeled_ns += t.modeled_ns;
        }
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
        const double modeled_s = modeled_ns / 1e9 / iters;
        const double modeled_bw = modeled_s > 0 ? bytes / modeled_s / 1e9 : 0;
        std::printf("%12llu %8d %12.1f %12.3f %14.1f %16.3f %7.1f%%\n",
                    static_cast<unsigned long long>(bytes), iters, s * 1e6, bytes / s / 1e9,
                    modeled_s * 1e6, modeled_bw, modeled_bw / 60.0 * 100);
        std::fflush(stdout);
        CHECK(spyre_free(a));
        CHECK(spyre_free(b));
    }
    spyre_event_destroy(e0);
    spyre_event_destroy(e1);
    spyre_stream_destroy(stream);
    spyre_device_close(dst);
    spyre_device_close(src);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const char* be = std::getenv("SPYRE_BACKEND");
    const bool sim = be && std::strcmp(be, "sim") == 0;
    // SPYRE_COMM_BENCH_OP carries --op to the rank processes
    const char* op_env = std::getenv("SPYRE_COMM_BENCH_OP");
    std::string op = op_env ? op_env : "all-reduce";
    auto set_op = [&] {
        if (op != "all-reduce" && op != "broadcast" && op != "reduce") {
            std::fprintf(stderr, "--op %s is not all-reduce, broadcast or reduce\n", op.c_str());
            std::exit(2);
        }
        g_op = op == "broadcast" ? Op::Broadcast : op == "reduce" ? Op::Reduce : Op::AllReduce;
    };
    set_op();
    if (argc > 1 && std::strcmp(argv[1], "--rank") == 0) {  // --rank HEX N R SIZES...
        std::vector<uint64_t> sizes;
        for (int i = 5; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
        const std::string hex = argv[2];
        spyre_comm_unique_id id{};
        for (size_t i = 0; i < sizeof id.internal; ++i)
            id.internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
        const int rank = std::atoi(argv[4]);
        return run_rank(id, std::atoi(argv[3]), rank, sim ? 0 : rank, sizes);
    }
    if (argc > 1 && std::strcmp(argv[1], "--peer-copy") == 0) {
        std::vector<uint64_t> sizes;
        for (int i = 2; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
        if (sizes.empty()) sizes = {1ull << 10, 64ull << 10, 1ull << 20, 16ull << 20, 64ull << 20};
        if (sim) setenv("SPYRE_SIM_DEVICES", "2", 0);
        return peer_copy_bench(sizes);
    }
    const bool threads = argc > 1 && std::strcmp(argv[1], "--threads") == 0;
    if (threads) --argc, ++argv;
    if (argc > 2 && std::strcmp(argv[1], "--op") == 0) {
        op = argv[2];
        setenv("SPYRE_COMM_BENCH_OP", op.c_str(), 1);
        set_op();
        argc -= 2, argv += 2;
    }
    const int n = argc > 1 ? std::atoi(argv[1]) : 2;
    std::vector<std::string> sizes;
    for (int i = 2; i < argc; ++i) sizes.push_back(argv[i]);
    if (sizes.empty())
        for (uint64_t b : {1ull << 10, 64ull << 10, 1ull << 20, 16ull << 20, 64ull << 20})
            sizes.push_back(std::to_string(b));
    spyre_comm_unique_id id;
    CHECK(spyre_comm_get_unique_id(&id));
    std::string hex;
    char h[3];
    for (char c : id.internal)
        std::snprintf(h, sizeof h, "%02x", static_cast<unsigned char>(c)), hex += h;
    if (threads) {  // one process: every rank's card here, the p2p transport where it can
        if (sim) setenv("SPYRE_SIM_DEVICES", std::to_string(n).c_str(), 0);
        std::vector<uint64_t> bytes;
        for (auto& z : sizes) bytes.push_back(std::strtoull(z.c_str(), nullptr, 10));
        std::printf("one thread per rank, rank r on card r\n");
        std::vector<std::atomic<uint64_t>> rank_ns(n);
        g_rank_ns = &rank_ns;
        std::vector<std::thread> ts;
        for (int r = 0; r < n; ++r) ts.emplace_back([&, r] { run_rank(id, n, r, r, bytes); });
        for (auto& t : ts) t.join();
        return 0;
    }
    std::printf("one process per rank\n");
    std::fflush(stdout);
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
        std::vector<std::string> args = {argv[0], "--rank", hex, std::to_string(n),
                                         std::to_string(r)};
        args.insert(args.end(), sizes.begin(), sizes.end());
        std::vector<char*> cargs;
        for (auto& a : args) cargs.push_back(a.data());
        cargs.push_back(nullptr);
        pid_t pid;
        if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, cargs.data(), environ) != 0)
            return 1;
        pids.push_back(pid);
    }
    int rc = 0;
    for (pid_t p : pids) {
        int st = 0;
        waitpid(p, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) rc = 1;
    }
    return rc;
}

// Collectives (spyre/comm.h) on the simulator: each collective, reduce and send/recv against a
// host reference on 2, 3 and 4 ranks (one thread and one simulated card per rank), odd sizes,
// fp32/fp16/bf16, chunked transfers; a rank that never comes times out, an aborted communicator
// fails everywhere. Ranks in separate processes, one of which dies: comm_process_test.cpp.
#include "spyre/comm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <format>
#include <functional>
#include <latch>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm_test_util.hpp"
#include "spyre/ops.h"
#include "spyre/program_builder.hpp"
#include "spyre/spyre.h"

namespace {

// The simulator with 5 cards (up to 5 ranks); SPYRE_COMM_TEST_BACKEND=kernel: the machine's cards
// (the guest row comm-p2p), rank r on card r mod the card count.
bool on_kernel() {
    const char* b = std::getenv("SPYRE_COMM_TEST_BACKEND");
    return b && std::string(b) == "kernel";
}
class SimEnv : public ::testing::Environment {
  public:
    void SetUp() override {
        if (on_kernel()) {
            setenv("SPYRE_BACKEND", "kernel", 1);
            return;
        }
        setenv("SPYRE_BACKEND", "sim", 1);
        setenv("SPYRE_SIM_DEVICES", "5", 1);
        setenv("SPYRE_SIM_MEMORY", "268435456", 1);
    }
};
const auto* const env = ::testing::AddGlobalTestEnvironment(new SimEnv);

using comm_test::esize;
using comm_test::from_bytes;
using comm_test::to_bytes;

// Rank r's input: small integers for fp16/bf16 (their sums are exact in any order), random
// fractions for fp32.
std::vector<float> input(int rank, size_t n, spyre_dtype t, int salt = 0) {
    std::mt19937 g(1234 + rank * 77 + salt);
    std::vector<float> v(n);
    for (auto& x : v) {
        if (t == SPYRE_DTYPE_FLOAT32)
            x = std::uniform_real_distribution<float>(-4.0f, 4.0f)(g);
        else
            x = static_cast<float>(std::uniform_int_distribution<int>(-8, 8)(g));
    }
    return v;
}

float reduce(spyre_reduce_op op, const std::vector<float>& xs) {
    double acc = xs[0];
    for (size_t i = 1; i < xs.size(); ++i) {
        if (op == SPYRE_REDUCE_MAX)
            acc = std::max<double>(acc, xs[i]);
        else if (op == SPYRE_REDUCE_MIN)
            acc = std::min<double>(acc, xs[i]);
        else
            acc += xs[i];
    }
    if (op == SPYRE_REDUCE_MEAN) acc /= static_cast<double>(xs.size());
    return static_cast<float>(acc);
}

// got == want within the rounding of t (exact for MAX/MIN and integer sums).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, spyre_dtype t,
                  const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    const double tol = t == SPYRE_DTYPE_FLOAT32 ? 2e-5 : (t == SPYRE_DTYPE_FLOAT16 ? 2e-3 : 1e-2);
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (!(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])))) {
            if (bad++ < 3)
                ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want "
                              << want[i];
        }
    EXPECT_EQ(bad, 0u) << what;
}

struct Rank {
    int rank = 0, nranks = 0;
    spyre_device_t dev = nullptr;
    spyre_comm_t comm = nullptr;
    spyre_stream_t stream = nullptr;

    spyre_buffer_t upload(const std::vector<uint8_t>& b, uint64_t offset, uint64_t extra = 0) {
        spyre_buffer_t buf = comm_test::upload(dev, b, offset, extra);
        EXPECT_NE(buf, nullptr) << spyre_last_error();
        return buf;
    }
    std::vector<uint8_t> download(spyre_buffer_t buf, uint64_t offset, uint64_t bytes) {
        std::vector<uint8_t> b(bytes);
        EXPECT_EQ(comm_test::download(dev, stream, buf, offset, b), SPYRE_SUCCESS)
            << spyre_last_error();
        return b;
    }
};

// Runs body on n threads, rank r on simulated card r with its own communicator and stream.
void run_ranks(int n, const std::function<void(Rank&)>& body, uint64_t timeout_ms = 60000) {
    spyre_comm_unique_id id;
    ASSERT_EQ(spyre_comm_get_unique_id(&id), SPYRE_SUCCESS);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            Rank k;
            k.rank = r, k.nranks = n;
            ASSERT_EQ(comm_test::join_rank(id, n, r, &k.dev, &k.comm), SPYRE_SUCCESS)
                << spyre_last_error();
            ASSERT_EQ(spyre_comm_set_timeout(k.comm, timeout_ms), SPYRE_SUCCESS);
            ASSERT_EQ(spyre_stream_create(k.dev, SPYRE_STREAM_PRIORITY_NORMAL, &k.stream),
                      SPYRE_SUCCESS);
            body(k);
            EXPECT_EQ(spyre_stream_destroy(k.stream), SPYRE_SUCCESS);
            EXPECT_EQ(spyre_comm_destroy(k.comm), SPYRE_SUCCESS);
            EXPECT_EQ(spyre_device_close(k.dev), SPYRE_SUCCESS);
        });
    for (auto& t : threads) t.join();
}

const char* dname(spyre_dtype t) {
    return t == SPYRE_DTYPE_FLOAT32 ? "fp32" : t == SPYRE_DTYPE_FLOAT16 ? "fp16" : "bf16";
}

struct Case {
    int nranks;
    spyre_dtype dtype;
};

class CommCollectives : public ::testing::TestWithParam<Case> {
  protected:
    void SetUp() override { setenv("SPYRE_COMM_CHUNK_BYTES", "384", 1); }  // many chunks
    void TearDown() override { unsetenv("SPYRE_COMM_CHUNK_BYTES"); }
};

// Every op on each count against a host reduction, into each receive offset, on n
// ranks; `salt` picks the inputs.
void check_all_reduce(int n, spyre_dtype t, const std::vector<size_t>& counts,
                      const std::vector<uint64_t>& offsets, int salt, const std::string& what) {
    for (spyre_reduce_op op :
         {SPYRE_REDUCE_SUM, SPYRE_REDUCE_MEAN, SPYRE_REDUCE_MAX, SPYRE_REDUCE_MIN})
        for (size_t count : counts)
            for (uint64_t recv_off : offsets) {
                run_ranks(n, [&](Rank& k) {
                    const auto in = input(k.rank, count, t, salt);
                    spyre_buffer_t s = k.upload(to_bytes(in, t), 2);
                    spyre_buffer_t d = k.upload(std::vector<uint8_t>(count * esize(t)), recv_off);
                    ASSERT_EQ(
                        spyre_comm_all_reduce(s, 2, d, recv_off, count, t, op, k.comm, k.stream),
                        SPYRE_SUCCESS)
                        << spyre_last_error();
                    std::vector<float> want(count);
                    for (size_t i = 0; i < count; ++i) {
                        std::vector<float> xs;
                        for (int r = 0; r < n; ++r) xs.push_back(input(r, count, t, salt)[i]);
                        want[i] = reduce(op, xs);
                    }
                    expect_close(from_bytes(k.download(d, recv_off, count * esize(t)), t), want, t,
                                 std::format("{} op {} count {} rank {} off {}", what,
                                             static_cast<int>(op), count, k.rank, recv_off));
                    spyre_free(s);
                    spyre_free(d);
                });
            }
}

TEST_P(CommCollectives, AllReduceEveryOpOddSizes) {
    const auto [n, t] = GetParam();
    check_all_reduce(n, t, {1, 7, 333, 1001}, {0, 6}, 0, "all_reduce");  // aligned and not
}

// The binomial tree (SPYRE_COMM_ALGO=tree; by default it serves small messages on 4+ ranks).
TEST_P(CommCollectives, AllReduceTreeEveryOp) {
    const auto [n, t] = GetParam();
    setenv("SPYRE_COMM_ALGO", "tree", 1);
    check_all_reduce(n, t, {1, 333, 1001}, {6}, 13, "tree all_reduce");
    unsetenv("SPYRE_COMM_ALGO");
}

TEST_P(CommCollectives, AllReduceInPlace) {
    const auto [n, t] = GetParam();
    const size_t count = 515;
    run_ranks(n, [&](Rank& k) {
        spyre_buffer_t b = k.upload(to_bytes(input(k.rank, count, t), t), 0);
        ASSERT_EQ(spyre_comm_all_reduce(b, 0, b, 0, count, t, SPYRE_REDUCE_SUM, k.comm, k.stream),
                  SPYRE_SUCCESS)
            << spyre_last_error();
        std::vector<float> want(count, 0.0f);
        for (int r = 0; r < n; ++r) {
            const auto in = input(r, count, t);
            for (size_t i = 0; i < count; ++i) want[i] += in[i];
        }
        expect_close(from_bytes(k.download(b, 0, count * esize(t)), t), want, t, "in place");
        spyre_free(b);
    });
}

// Scoped SPYRE_COMM_ALGO (read at spyre_comm_init_rank).
struct ForceAlgo {
    explicit ForceAlgo(const char* algo) { setenv("SPYRE_COMM_ALGO", algo, 1); }
    ~ForceAlgo() { unsetenv("SPYRE_COMM_ALGO"); }
};

// Bytes rank k's card pushed to its peers during body (0 unless the transport is p2p).
uint64_t pushed_bytes(Rank& k, const std::function<void()>& body) {
    spyre_telemetry t0{}, t1{};
    EXPECT_EQ(spyre_device_get_telemetry(k.dev, &t0), SPYRE_SUCCESS);
    body();
    EXPECT_EQ(spyre_stream_synchronize(k.stream), SPYRE_SUCCESS);
    EXPECT_EQ(spyre_device_get_telemetry(k.dev, &t1), SPYRE_SUCCESS);
    return t1.p2p_write_bytes - t0.p2p_write_bytes;
}

// Whether rank k's card counts its pushes alone: p2p, one rank per card.
bool counts_own_pushes(const Rank& k) {
    spyre_comm_info info{};
    EXPECT_EQ(spyre_comm_get_info(k.comm, &info), SPYRE_SUCCESS);
    int cards = 0;
    EXPECT_EQ(spyre_get_device_count(&cards), SPYRE_SUCCESS);
    return std::string(info.transport) == "p2p" && k.nranks <= cards;
}

// Children of v in a binomial tree over 0..n-1 rooted at 0: the w whose parent, w with its
// lowest set bit cleared, is v.
int tree_children(int v, int n) {
    int c = 0;
    for (int w = 1; w < n; ++w) c += (w & (w - 1)) == v;
    return c;
}

// Broadcast from every root of each count against root's input. With `tree` (SPYRE_COMM_ALGO=tree
// set by the caller), p2p and a card per rank, each card pushed the message once per child of its
// rank relative to the root (the ring: once, except root - 1).
void check_broadcast(int n, spyre_dtype t, const std::vector<size_t>& counts, bool tree,
                     const std::string& what) {
    for (int root = 0; root < n; ++root)
        for (size_t count : counts) {
            run_ranks(n, [&](Rank& k) {
                const auto in = input(k.rank, count, t, 5);
                spyre_buffer_t s = k.upload(to_bytes(in, t), 4);
                spyre_buffer_t d = k.upload(std::vector<uint8_t>(count * esize(t)), 10);
                const uint64_t pushed = pushed_bytes(k, [&] {
                    ASSERT_EQ(spyre_comm_broadcast(k.rank == root ? s : nullptr, 4, d, 10, count, t,
                                                   root, k.comm, k.stream),
                              SPYRE_SUCCESS)
                        << spyre_last_error();
                });
                const std::string w =
                    std::format("{} root {} count {} rank {}", what, root, count, k.rank);
                expect_close(from_bytes(k.download(d, 10, count * esize(t)), t),
                             input(root, count, t, 5), t, w);
                const int v = (k.rank - root + n) % n;
                if (counts_own_pushes(k)) {
                    EXPECT_EQ(pushed, (tree ? tree_children(v, n) : v != n - 1) * count * esize(t))
                        << w;
                }
                spyre_free(s);
                spyre_free(d);
            });
        }
}

TEST_P(CommCollectives, Broadcast) {
    const auto [n, t] = GetParam();
    ForceAlgo ring("ring");
    check_broadcast(n, t, {1, 401}, false, "ring broadcast");
}

// The binomial tree from every root (SPYRE_COMM_ALGO=tree; by default small messages on 4+
// ranks).
TEST_P(CommCollectives, BroadcastTreeEveryRoot) {
    const auto [n, t] = GetParam();
    ForceAlgo tree("tree");
    check_broadcast(n, t, {1, 401}, true, "tree broadcast");
}

TEST_P(CommCollectives, AllGather) {
    const auto [n, t] = GetParam();
    for (size_t count : {size_t{1}, size_t{299}}) {
        run_ranks(n, [&](Rank& k) {
            spyre_buffer_t s = k.upload(to_bytes(input(k.rank, count, t, 9), t), 2);
            spyre_buffer_t d = k.upload(std::vector<uint8_t>(n * count * esize(t)), 2);
            ASSERT_EQ(spyre_comm_all_gather(s, 2, d, 2, count, t, k.comm, k.stream), SPYRE_SUCCESS)
                << spyre_last_error();
            std::vector<float> want;
            for (int r = 0; r < n; ++r) {
                const auto in = input(r, count, t, 9);
                want.insert(want.end(), in.begin(), in.end());
            }
            expect_close(from_bytes(k.download(d, 2, n * count * esize(t)), t), want, t,
                         std::format("all_gather count {} rank {}", count, k.rank));
            spyre_free(s);
            spyre_free(d);
        });
    }
}

TEST_P(CommCollectives, ReduceScatter) {
    const auto [n, t] = GetParam();
    for (spyre_reduce_op op : {SPYRE_REDUCE_SUM, SPYRE_REDUCE_MEAN, SPYRE_REDUCE_MAX})
        for (size_t count : {size_t{1}, size_t{211}}) {
            run_ranks(n, [&](Rank& k) {
                const auto in = input(k.rank, n * count, t, 3);
                spyre_buffer_t s = k.upload(to_bytes(in, t), 2);
                spyre_buffer_t d = k.upload(std::vector<uint8_t>(count * esize(t)), 6);
                ASSERT_EQ(spyre_comm_reduce_scatter(s, 2, d, 6, count, t, op, k.comm, k.stream),
                          SPYRE_SUCCESS)
                    << spyre_last_error();
                std::vector<float> want(count);
                for (size_t i = 0; i < count; ++i) {
                    std::vector<float> xs;
                    for (int r = 0; r < n; ++r)
                        xs.push_back(input(r, n * count, t, 3)[k.rank * count + i]);
                    want[i] = reduce(op, xs);
                }
                expect_close(from_bytes(k.download(d, 6, count * esize(t)), t), want, t,
                             std::format("reduce_scatter op {} count {} rank {}",
                                         static_cast<int>(op), count, k.rank));
                // the send buffer is left as it was
                expect_close(from_bytes(k.download(s, 2, n * count * esize(t)), t), in, t,
                             "reduce_scatter send buffer");
                spyre_free(s);
                spyre_free(d);
            });
        }
}

// Reduce with each op to every root of each count (root's recv aligned for even roots, not for
// odd), against a host reduction; send untouched on every rank, recv only on root. With `tree`
// (SPYRE_COMM_ALGO=tree set by the caller), p2p and a card per rank, every rank but the root
// pushed its whole message once, the root nothing (the ring's root pushes its reduce-scatter).
void check_reduce(int n, spyre_dtype t, const std::vector<spyre_reduce_op>& ops,
                  const std::vector<size_t>& counts, bool tree, const std::string& label) {
    for (spyre_reduce_op op : ops)
        for (int root = 0; root < n; ++root)
            for (size_t count : counts) {
                const uint64_t recv_off = root % 2 ? 6 : 0;  // aligned and not
                run_ranks(n, [&](Rank& k) {
                    const auto in = input(k.rank, count, t, 11);
                    spyre_buffer_t s = k.upload(to_bytes(in, t), 2);
                    spyre_buffer_t d =
                        k.rank == root ? k.upload(std::vector<uint8_t>(count * esize(t)), recv_off)
                                       : nullptr;
                    const uint64_t pushed = pushed_bytes(k, [&] {
                        ASSERT_EQ(spyre_comm_reduce(s, 2, d, recv_off, count, t, op, root, k.comm,
                                                    k.stream),
                                  SPYRE_SUCCESS)
                            << spyre_last_error();
                    });
                    const std::string what = std::format("{} op {} root {} count {} rank {}", label,
                                                         static_cast<int>(op), root, count, k.rank);
                    // the send buffer is left as it was on every rank
                    expect_close(from_bytes(k.download(s, 2, count * esize(t)), t), in, t,
                                 what + " send buffer");
                    if (k.rank == root) {
                        std::vector<float> want(count);
                        for (size_t i = 0; i < count; ++i) {
                            std::vector<float> xs;
                            for (int r = 0; r < n; ++r) xs.push_back(input(r, count, t, 11)[i]);
                            want[i] = reduce(op, xs);
                        }
                        expect_close(from_bytes(k.download(d, recv_off, count * esize(t)), t), want,
                                     t, what);
                    }
                    if (tree && counts_own_pushes(k)) {
                        EXPECT_EQ(pushed, k.rank == root ? 0 : count * esize(t)) << what;
                    }
                    spyre_free(s);
                    spyre_free(d);
                });
            }
}

constexpr spyre_reduce_op kAllOps[] = {SPYRE_REDUCE_SUM, SPYRE_REDUCE_MEAN, SPYRE_REDUCE_MAX,
                                       SPYRE_REDUCE_MIN};

TEST_P(CommCollectives, ReduceEveryOpEveryRoot) {
    const auto [n, t] = GetParam();
    ForceAlgo ring("ring");
    check_reduce(n, t, {std::begin(kAllOps), std::end(kAllOps)}, {1, 333, 1001}, false,
                 "ring reduce");
}

// The binomial tree to every root (SPYRE_COMM_ALGO=tree; by default small messages).
TEST_P(CommCollectives, ReduceTreeEveryOpEveryRoot) {
    const auto [n, t] = GetParam();
    ForceAlgo tree("tree");
    check_reduce(n, t, {std::begin(kAllOps), std::end(kAllOps)}, {1, 1001}, true, "tree reduce");
}

// Rank 0 sends two messages to every other rank (each several chunks), then receives one from
// each; the others receive theirs, then answer. Messages of a pair arrive in order.
TEST_P(CommCollectives, SendRecvInOrder) {
    const auto [n, t] = GetParam();
    for (size_t count : {size_t{1}, size_t{7}, size_t{1001}}) {
        run_ranks(n, [&](Rank& k) {
            const uint64_t bytes = count * esize(t);
            auto payload = [&](int from, int to, int which) {
                return input(from, count, t, 100 + 10 * to + which);
            };
            auto check_recv = [&](int from, int which) {
                spyre_buffer_t d = k.upload(std::vector<uint8_t>(bytes), 3);
                ASSERT_EQ(spyre_comm_recv(d, 3, count, t, from, k.comm, k.stream), SPYRE_SUCCESS)
                    << spyre_last_error();
                expect_close(
                    from_bytes(k.download(d, 3, bytes), t), payload(from, k.rank, which), t,
                    std::format("recv count {} rank {} from {} #{}", count, k.rank, from, which));
                spyre_free(d);
            };
            auto send = [&](int to, int which) {
                spyre_buffer_t s = k.upload(to_bytes(payload(k.rank, to, which), t), 5);
                ASSERT_EQ(spyre_comm_send(s, 5, count, t, to, k.comm, k.stream), SPYRE_SUCCESS)
                    << spyre_last_error();
                spyre_free(s);  // the send has left the buffer when it returns
            };
            if (k.rank == 0) {
                for (int p = 1; p < n; ++p) send(p, 0), send(p, 1);
                for (int p = 1; p < n; ++p) check_recv(p, 0);
            } else {
                check_recv(0, 0);
                check_recv(0, 1);
                send(0, 0);
            }
        });
    }
}

std::vector<Case> cases() {
    std::vector<Case> v;
    for (int n : {2, 3, 4})
        for (spyre_dtype t : {SPYRE_DTYPE_FLOAT32, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_BFLOAT16})
            v.push_back({n, t});
    return v;
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommCollectives, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                             return std::to_string(info.param.nranks) + "ranks_" +
                                    dname(info.param.dtype);
                         });

// Five ranks (a tree of depth 3 that is not full): the trees forced, from and to every root.
TEST(Comm, TreeBroadcastAndReduceOnFiveRanks) {
    if (on_kernel()) GTEST_SKIP() << "5 ranks on the VM's 2 cards: the 2-rank cases cover it there";
    setenv("SPYRE_COMM_CHUNK_BYTES", "384", 1);
    ForceAlgo tree("tree");
    check_broadcast(5, SPYRE_DTYPE_FLOAT32, {1001}, true, "5-rank tree broadcast");
    check_reduce(5, SPYRE_DTYPE_FLOAT32, {SPYRE_REDUCE_SUM, SPYRE_REDUCE_MEAN}, {1001}, true,
                 "5-rank tree reduce");
    unsetenv("SPYRE_COMM_CHUNK_BYTES");
}

// Bytes of any dtype pass along a relay (rank r receives from r - 1, then sends to r + 1; rank 0
// starts it and receives last), mixed with collectives, on one communicator.
TEST(Comm, SendRecvRelayAnyDtypeBetweenCollectives) {
    setenv("SPYRE_COMM_CHUNK_BYTES", "256", 1);
    const size_t bytes = 1001;  // odd: int8 elements, several chunks
    std::vector<uint8_t> msg(bytes);
    for (size_t i = 0; i < bytes; ++i) msg[i] = static_cast<uint8_t>(i * 7 + 3);
    run_ranks(3, [&](Rank& k) {
        spyre_buffer_t b = k.upload(std::vector<uint8_t>(bytes), 0);
        spyre_buffer_t f = k.upload(to_bytes({1.0f, 2.0f}, SPYRE_DTYPE_FLOAT32), 0);
        const int next = (k.rank + 1) % 3, prev = (k.rank + 2) % 3;
        for (int round = 0; round < 2; ++round) {
            if (k.rank == 0) {
                ASSERT_EQ(spyre_memcpy_htod(b, 0, msg.data(), bytes), SPYRE_SUCCESS);
                ASSERT_EQ(spyre_comm_send(b, 0, bytes, SPYRE_DTYPE_INT8, next, k.comm, k.stream),
                          SPYRE_SUCCESS)
                    << spyre_last_error();
                ASSERT_EQ(spyre_comm_recv(b, 0, bytes, SPYRE_DTYPE_INT8, prev, k.comm, k.stream),
                          SPYRE_SUCCESS)
                    << spyre_last_error();
            } else {
                ASSERT_EQ(spyre_comm_recv(b, 0, bytes, SPYRE_DTYPE_UINT8, prev, k.comm, k.stream),
                          SPYRE_SUCCESS)
                    << spyre_last_error();
                ASSERT_EQ(spyre_comm_send(b, 0, bytes, SPYRE_DTYPE_UINT8, next, k.comm, k.stream),
                          SPYRE_SUCCESS)
                    << spyre_last_error();
            }
            EXPECT_EQ(k.download(b, 0, bytes), msg) << "rank " << k.rank << " round " << round;
            ASSERT_EQ(spyre_comm_all_reduce(f, 0, f, 0, 2, SPYRE_DTYPE_FLOAT32, SPYRE_REDUCE_SUM,
                                            k.comm, k.stream),
                      SPYRE_SUCCESS)
                << spyre_last_error();
        }
        const float w = 9.0f;  // 1 * 3 * 3 after two all-reduces over 3 ranks
        expect_close(from_bytes(k.download(f, 0, 8), SPYRE_DTYPE_FLOAT32), {w, 2 * w},
                     SPYRE_DTYPE_FLOAT32, "all_reduce between sends");
        // a count that differs from the sender's fails the communicator, not a hang
        spyre_status st =
            k.rank == 0   ? spyre_comm_send(b, 0, 8, SPYRE_DTYPE_INT8, 1, k.comm, k.stream)
            : k.rank == 1 ? spyre_comm_recv(b, 0, 4, SPYRE_DTYPE_INT8, 0, k.comm, k.stream)
                          : SPYRE_SUCCESS;
        if (k.rank == 1) {
            EXPECT_EQ(st, SPYRE_ERROR_INVALID_ARGUMENT) << spyre_last_error();
            EXPECT_NE(std::string(spyre_last_error()).find("rank 0 sent 8 bytes"),
                      std::string::npos)
                << spyre_last_error();
        }
        spyre_free(b);
        spyre_free(f);
    });
    unsetenv("SPYRE_COMM_CHUNK_BYTES");
}

// Which algorithm ran shows in the bytes each card pushed to its peers (p2p transport): the
// ring sends 2 (n - 1) / n of the message from every rank; the tree of 4 ranks sends the whole
// message once from ranks 1 and 3 (reduce), twice from rank 0 (broadcast to 2 and 1) and
// twice from rank 2 (reduce to 0, broadcast to 3). By default a 4 KiB all-reduce on 4 ranks is
// a tree, a 4 MiB one a ring (tree_is_faster). So are a 4 KiB broadcast from rank 0 (tree: rank 0
// pushes to 2 and 1, rank 2 to 3; ring: every rank but 3 pushes once, the choice for 12 MiB in
// 4 MiB chunks) and a 4 KiB reduce to rank 0 (tree: every rank but 0 pushes once; ring, 4 MiB:
// 3/4 of it in the reduce-scatter, plus a quarter to rank 0 from the others). A bad
// SPYRE_COMM_ALGO is refused.
TEST(Comm, AlgorithmChoiceShowsInPeerBytes) {
    const char* forced = std::getenv("SPYRE_COMM_TRANSPORT");
    if (forced && std::string(forced) == "host-staged") GTEST_SKIP() << "no peer bytes to count";
    if (on_kernel()) GTEST_SKIP() << "4 ranks on 2 cards share cards";
    enum { AllReduce, Broadcast, Reduce };
    auto pushed = [&](const char* algo, size_t count, int what = AllReduce) {
        if (algo)
            setenv("SPYRE_COMM_ALGO", algo, 1);
        else
            unsetenv("SPYRE_COMM_ALGO");
        std::vector<uint64_t> bytes(4);
        run_ranks(4, [&](Rank& k) {
            spyre_buffer_t b = k.upload(
                to_bytes(input(k.rank, count, SPYRE_DTYPE_FLOAT32), SPYRE_DTYPE_FLOAT32), 0);
            bytes[k.rank] = pushed_bytes(k, [&] {
                const spyre_dtype f = SPYRE_DTYPE_FLOAT32;
                ASSERT_EQ(what == Broadcast
                              ? spyre_comm_broadcast(b, 0, b, 0, count, f, 0, k.comm, k.stream)
                          : what == Reduce
                              ? spyre_comm_reduce(b, 0, b, 0, count, f, SPYRE_REDUCE_SUM, 0, k.comm,
                                                  k.stream)
                              : spyre_comm_all_reduce(b, 0, b, 0, count, f, SPYRE_REDUCE_SUM,
                                                      k.comm, k.stream),
                          SPYRE_SUCCESS)
                    << spyre_last_error();
            });
            spyre_free(b);
        });
        unsetenv("SPYRE_COMM_ALGO");
        return bytes;
    };
    const uint64_t s = 4096;
    EXPECT_EQ(pushed("tree", s / 4), (std::vector<uint64_t>{2 * s, s, 2 * s, s}));
    EXPECT_EQ(pushed("ring", s / 4), (std::vector<uint64_t>(4, 3 * s / 2)));
    EXPECT_EQ(pushed("one-shot", s / 4), (std::vector<uint64_t>(4, 3 * s)));
    EXPECT_EQ(pushed(nullptr, s / 4), (std::vector<uint64_t>(4, 3 * s)));  // one-shot
    const uint64_t mid = 96 << 10;  // above the tree's crossover, below the one-shot's
    EXPECT_EQ(pushed(nullptr, mid / 4), (std::vector<uint64_t>(4, 3 * mid)));
    const uint64_t big = 4u << 20;
    EXPECT_EQ(pushed(nullptr, big / 4), (std::vector<uint64_t>(4, 3 * big / 2)));
    // more than one message: one-shot forced takes the ring
    EXPECT_EQ(pushed("one-shot", 2 * big / 4), (std::vector<uint64_t>(4, 3 * big)));
    EXPECT_EQ(pushed(nullptr, s / 4, Broadcast), (std::vector<uint64_t>{2 * s, 0, s, 0}));
    EXPECT_EQ(pushed(nullptr, 3 * big / 4, Broadcast),
              (std::vector<uint64_t>{3 * big, 3 * big, 3 * big, 0}));
    EXPECT_EQ(pushed(nullptr, s / 4, Reduce), (std::vector<uint64_t>{0, s, s, s}));
    EXPECT_EQ(pushed(nullptr, big / 4, Reduce),
              (std::vector<uint64_t>{3 * big / 4, big, big, big}));
    setenv("SPYRE_COMM_ALGO", "bush", 1);
    spyre_comm_unique_id id;
    ASSERT_EQ(spyre_comm_get_unique_id(&id), SPYRE_SUCCESS);
    spyre_device_t dev;
    ASSERT_EQ(spyre_device_open(0, &dev), SPYRE_SUCCESS);
    spyre_comm_t comm = nullptr;
    EXPECT_EQ(spyre_comm_init_rank(&comm, 1, &id, 0, dev), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("SPYRE_COMM_ALGO"), std::string::npos);
    unsetenv("SPYRE_COMM_ALGO");
    spyre_device_close(dev);
}

// The pushes run on the transport's own stream while the cores reduce on the caller's
// (Documentation/libspyre.md "Pipelined p2p"), each waiting on its card for what it needs
// ("Device-side waits"): rank 0's modeled time from before the call to after it is its pushes
// over the peer link alone, the reductions hidden behind them (on one stream it was pushes +
// reductions). The simulator charges the pushes only; the card model (kernel backend) also
// the semaphores' signals and waits, so there the bound is the 80% of the link.
TEST(Comm, PushesOverlapReductionsInTheModeledTime) {
    const char* forced = std::getenv("SPYRE_COMM_TRANSPORT");
    if (forced && std::string(forced) == "host-staged") GTEST_SKIP() << "no peer pushes";
    {
        spyre_device_t d = nullptr;
        spyre_device_info di{};
        ASSERT_EQ(spyre_device_open(0, &d), SPYRE_SUCCESS);
        ASSERT_EQ(spyre_device_get_info(d, &di), SPYRE_SUCCESS);
        spyre_device_close(d);
        int cards = 0;
        ASSERT_EQ(spyre_get_device_count(&cards), SPYRE_SUCCESS);
        if (cards < 2) GTEST_SKIP() << "two ranks on one card wait on the hosts";
        // On the card model the figure depends on when each host rang its batches (1 of 3
        // guest runs under load measured below 80%, not yet understood): measured by
        // spyre-comm-bench there (libspyre.md "Device-side waits"), not asserted
        if (on_kernel()) GTEST_SKIP() << "modeled overlap on the card model: see spyre-comm-bench";
        if (!(di.caps & SPYRE_DEVICE_CAP_SEMAPHORE))
            GTEST_SKIP() << "no device-side semaphores: with the waits between the ranks on the "
                            "hosts the card places a job after what it had completed when its "
                            "doorbell rang (libspyre.md \"Pipelined p2p\")";
    }
    setenv("SPYRE_COMM_CHUNK_BYTES", "1048576", 1);
    constexpr uint64_t bytes = 8u << 20, chunk = 1u << 20;
    run_ranks(2, [&](Rank& k) {
        spyre_buffer_t b = k.upload(
            to_bytes(input(k.rank, bytes / 4, SPYRE_DTYPE_FLOAT32), SPYRE_DTYPE_FLOAT32), 0);
        // A card's modeled clock moves with its own work only; the first exchange joins the two
        // cards' clocks (a wait for a peer's signal takes the peer's time), which would put the
        // cards' difference from the work before into the measured call
        spyre_buffer_t w = k.upload(std::vector<uint8_t>(4096), 0);
        ASSERT_EQ(spyre_comm_all_reduce(w, 0, w, 0, 1024, SPYRE_DTYPE_FLOAT32, SPYRE_REDUCE_SUM,
                                        k.comm, k.stream),
                  SPYRE_SUCCESS)
            << spyre_last_error();
        spyre_free(w);
        spyre_event_t e0 = nullptr, e1 = nullptr;
        ASSERT_EQ(spyre_event_create(k.dev, &e0), SPYRE_SUCCESS);
        ASSERT_EQ(spyre_event_create(k.dev, &e1), SPYRE_SUCCESS);
        ASSERT_EQ(spyre_event_record(e0, k.stream), SPYRE_SUCCESS);
        ASSERT_EQ(spyre_comm_all_reduce(b, 0, b, 0, bytes / 4, SPYRE_DTYPE_FLOAT32,
                                        SPYRE_REDUCE_SUM, k.comm, k.stream),
                  SPYRE_SUCCESS)
            << spyre_last_error();
        ASSERT_EQ(spyre_event_record(e1, k.stream), SPYRE_SUCCESS);
        ASSERT_EQ(spyre_event_synchronize(e1), SPYRE_SUCCESS);
        spyre_event_timing t{};
        ASSERT_EQ(spyre_event_elapsed(e0, e1, &t), SPYRE_SUCCESS) << spyre_last_error();
        spyre_comm_info info{};
        ASSERT_EQ(spyre_comm_get_info(k.comm, &info), SPYRE_SUCCESS);
        if (on_kernel()) {
            EXPECT_TRUE(info.flags & SPYRE_COMM_INFO_DEVICE_WAITS) << k.rank;
        }
        // half the data out in the reduce-scatter, half in the all-gather, 1 MiB per push:
        // 256 + 1500 + 26215 cycles each at the 60 GB/s link (hardware.md section 11)
        const uint64_t pushes = bytes / chunk;
        if (!on_kernel()) {
            EXPECT_EQ(t.modeled_cycles, pushes * (256 + 1500 + 26215)) << "rank " << k.rank;
        }
        const double busbw = bytes / (t.modeled_ns * 1e-9) / 1e9;  // x 2(n-1)/n = 1
        EXPECT_GE(busbw, 0.8 * 60) << "rank " << k.rank;
        spyre_event_destroy(e0);
        spyre_event_destroy(e1);
        spyre_free(b);
    });
    unsetenv("SPYRE_COMM_CHUNK_BYTES");
}

// torch's collectives run on a high-priority stream: on the kernel backend the ring the
// transport's pushes prefer. The caller's stream waits on its card for the pushes and they wait
// for its marks, which on one ring (one queue, in order) would hold each other back until the
// timeout (torch's DDP start-up hung so): the pushes take another ring. Every priority, the
// collectives that push from the caller's work (all-reduce, broadcast, all-gather).
TEST(Comm, CollectivesOnEveryStreamPriority) {
    setenv("SPYRE_COMM_CHUNK_BYTES", "4096", 1);  // several pushes and marks per call
    const size_t count = 5000;
    for (int prio :
         {SPYRE_STREAM_PRIORITY_HIGH, SPYRE_STREAM_PRIORITY_NORMAL, SPYRE_STREAM_PRIORITY_LOW}) {
        run_ranks(
            2,
            [&](Rank& k) {
                spyre_stream_t s = nullptr;
                ASSERT_EQ(spyre_stream_create(k.dev, prio, &s), SPYRE_SUCCESS);
                const auto in = input(k.rank, count, SPYRE_DTYPE_FLOAT32, 41);
                spyre_buffer_t b = k.upload(to_bytes(in, SPYRE_DTYPE_FLOAT32), 0);
                spyre_buffer_t c = k.upload(to_bytes(in, SPYRE_DTYPE_FLOAT32), 0);
                spyre_buffer_t g = k.upload(std::vector<uint8_t>(2 * count * 4), 0);
                const std::string what = std::format("priority {} rank {}", prio, k.rank);
                ASSERT_EQ(
                    spyre_comm_broadcast(c, 0, c, 0, count, SPYRE_DTYPE_FLOAT32, 0, k.comm, s),
                    SPYRE_SUCCESS)
                    << what << ": " << spyre_last_error();
                ASSERT_EQ(spyre_comm_all_reduce(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32,
                                                SPYRE_REDUCE_SUM, k.comm, s),
                          SPYRE_SUCCESS)
                    << what << ": " << spyre_last_error();
                ASSERT_EQ(spyre_comm_all_gather(b, 0, g, 0, count, SPYRE_DTYPE_FLOAT32, k.comm, s),
                          SPYRE_SUCCESS)
                    << what << ": " << spyre_last_error();
                ASSERT_EQ(spyre_stream_destroy(s), SPYRE_SUCCESS) << spyre_last_error();
                std::vector<float> sum(count);
                const auto in0 = input(0, count, SPYRE_DTYPE_FLOAT32, 41);
                const auto in1 = input(1, count, SPYRE_DTYPE_FLOAT32, 41);
                for (size_t i = 0; i < count; ++i)
                    sum[i] = reduce(SPYRE_REDUCE_SUM, {in0[i], in1[i]});
                expect_close(from_bytes(k.download(c, 0, count * 4), SPYRE_DTYPE_FLOAT32), in0,
                             SPYRE_DTYPE_FLOAT32, "broadcast " + what);
                expect_close(from_bytes(k.download(b, 0, count * 4), SPYRE_DTYPE_FLOAT32), sum,
                             SPYRE_DTYPE_FLOAT32, "all_reduce " + what);
                std::vector<float> all(sum);
                all.insert(all.end(), sum.begin(), sum.end());
                expect_close(from_bytes(k.download(g, 0, 2 * count * 4), SPYRE_DTYPE_FLOAT32), all,
                             SPYRE_DTYPE_FLOAT32, "all_gather " + what);
                spyre_free(b);
                spyre_free(c);
                spyre_free(g);
            },
            30000);
    }
    unsetenv("SPYRE_COMM_CHUNK_BYTES");
}

// Two ranks each send 16 MiB (four default chunks) to the other before receiving: the sends
// go into free outbox slots without waiting for the receiver (one message in flight per rank
// deadlocked here until the timeout).
TEST(Comm, MutualSendBeforeRecvCompletes) {
    const size_t count = 4u << 20;  // fp32
    run_ranks(
        2,
        [&](Rank& k) {
            const int other = 1 - k.rank;
            spyre_buffer_t s = k.upload(
                to_bytes(input(k.rank, count, SPYRE_DTYPE_FLOAT32, 21), SPYRE_DTYPE_FLOAT32), 0);
            spyre_buffer_t d = k.upload(std::vector<uint8_t>(count * 4), 0);
            ASSERT_EQ(spyre_comm_send(s, 0, count, SPYRE_DTYPE_FLOAT32, other, k.comm, k.stream),
                      SPYRE_SUCCESS)
                << spyre_last_error();
            ASSERT_EQ(spyre_comm_recv(d, 0, count, SPYRE_DTYPE_FLOAT32, other, k.comm, k.stream),
                      SPYRE_SUCCESS)
                << spyre_last_error();
            EXPECT_EQ(from_bytes(k.download(d, 0, count * 4), SPYRE_DTYPE_FLOAT32),
                      input(other, count, SPYRE_DTYPE_FLOAT32, 21));
            spyre_free(s);
            spyre_free(d);
        },
        20000);
}

// The NULL stream (no host functions there): the p2p transport waits for its copies instead,
// and the all-gather between threads publishes its destination after the card's earlier work.
// A received chunk is moved into place by the card's cores where it is large enough (beside
// the DMA engine's pushes): every bit pattern arrives unchanged, NaNs with payloads, signalling
// NaNs and negative zeros included (the p2p transport's broadcast receives into the inbox and
// moves; so does its all-gather between processes). Odd offsets take the DMA engine.
TEST(Comm, ReceivedChunksKeepEveryBitPattern) {
    setenv("SPYRE_COMM_CHUNK_BYTES", "131072", 1);  // moves by the cores (64 KiB and up)
    for (uint64_t off : {uint64_t{0}, uint64_t{2}}) {
        const size_t count = (3u << 16) + 5;  // fp16 elements: 3 chunks and a bit
        run_ranks(2, [&](Rank& k) {
            std::vector<uint8_t> bits(count * 2);
            std::mt19937 g(7);
            for (auto& b : bits) b = static_cast<uint8_t>(g());
            for (size_t i = 0; i + 1 < bits.size(); i += 64) {  // NaN payloads, sNaN, -0
                bits[i] = 0x01, bits[i + 1] = 0x7d;
                if (i + 3 < bits.size()) bits[i + 2] = 0x00, bits[i + 3] = 0x80;
            }
            spyre_buffer_t b =
                k.upload(k.rank == 0 ? bits : std::vector<uint8_t>(bits.size()), off);
            ASSERT_EQ(spyre_comm_broadcast(b, off, b, off, count, SPYRE_DTYPE_FLOAT16, 0, k.comm,
                                           k.stream),
                      SPYRE_SUCCESS)
                << spyre_last_error();
            EXPECT_TRUE(k.download(b, off, bits.size()) == bits)
                << "broadcast, offset " << off << ", rank " << k.rank;
            spyre_free(b);
        });
    }
    unsetenv("SPYRE_COMM_CHUNK_BYTES");
}

TEST(Comm, NullStreamCollectives) {
    setenv("SPYRE_COMM_CHUNK_BYTES", "384", 1);  // many chunks
    for (int n : {2, 3}) {
        const size_t count = 1001;
        run_ranks(n, [&](Rank& k) {
            spyre_stream_t own = std::exchange(k.stream, nullptr);  // downloads sync the device
            const auto in = input(k.rank, count, SPYRE_DTYPE_FLOAT32, 31);
            spyre_buffer_t b = k.upload(to_bytes(in, SPYRE_DTYPE_FLOAT32), 0);
            spyre_buffer_t g = k.upload(std::vector<uint8_t>(n * count * 4), 0);
            ASSERT_EQ(spyre_comm_all_reduce(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32,
                                            SPYRE_REDUCE_SUM, k.comm, nullptr),
                      SPYRE_SUCCESS)
                << spyre_last_error();
            ASSERT_EQ(
                spyre_comm_all_gather(b, 0, g, 0, count, SPYRE_DTYPE_FLOAT32, k.comm, nullptr),
                SPYRE_SUCCESS)
                << spyre_last_error();
            std::vector<float> sum(count);
            for (size_t i = 0; i < count; ++i) {
                std::vector<float> xs;
                for (int r = 0; r < n; ++r)
                    xs.push_back(input(r, count, SPYRE_DTYPE_FLOAT32, 31)[i]);
                sum[i] = reduce(SPYRE_REDUCE_SUM, xs);
            }
            const auto got = from_bytes(k.download(b, 0, count * 4), SPYRE_DTYPE_FLOAT32);
            expect_close(got, sum, SPYRE_DTYPE_FLOAT32,
                         std::format("null stream all_reduce {}", n));
            std::vector<float> all;
            for (int r = 0; r < n; ++r) all.insert(all.end(), got.begin(), got.end());
            expect_close(from_bytes(k.download(g, 0, n * count * 4), SPYRE_DTYPE_FLOAT32), all,
                         SPYRE_DTYPE_FLOAT32, std::format("null stream all_gather {}", n));
            spyre_free(b);
            spyre_free(g);
            k.stream = own;
        });
    }
    unsetenv("SPYRE_COMM_CHUNK_BYTES");
}

// The one-shot all-reduce (the smallest messages) folds the ranks' inputs in rank order on every
// rank, ((x_0 + x_1) + x_2) + x_3, wherever each rank keeps the partial sums: random fp32
// fractions (the order shows in the roundings) give the host's fold bit for bit on every rank,
// on the NULL stream too, in place and into another buffer; MAX likewise.
TEST(Comm, OneShotAllReduceFoldsInRankOrderOnEveryRank) {
    setenv("SPYRE_COMM_ALGO", "one-shot", 1);
    const size_t count = 1001;
    for (int n : {2, 3, 4})
        for (spyre_reduce_op op : {SPYRE_REDUCE_SUM, SPYRE_REDUCE_MAX})
            for (bool null_stream : {false, true})
                run_ranks(n, [&](Rank& k) {
                    const spyre_stream_t s = null_stream ? nullptr : k.stream;
                    const auto in = input(k.rank, count, SPYRE_DTYPE_FLOAT32, 53);
                    spyre_buffer_t b = k.upload(to_bytes(in, SPYRE_DTYPE_FLOAT32), 0);
                    spyre_buffer_t d = k.upload(std::vector<uint8_t>(count * 4 + 128), 0);
                    ASSERT_EQ(spyre_comm_all_reduce(b, 0, d, 128, count, SPYRE_DTYPE_FLOAT32, op,
                                                    k.comm, s),
                              SPYRE_SUCCESS)
                        << spyre_last_error();
                    ASSERT_EQ(spyre_comm_all_reduce(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32, op,
                                                    k.comm, s),
                              SPYRE_SUCCESS)
                        << spyre_last_error();
                    std::vector<float> want = input(0, count, SPYRE_DTYPE_FLOAT32, 53);
                    for (int r = 1; r < n; ++r) {
                        const auto x = input(r, count, SPYRE_DTYPE_FLOAT32, 53);
                        for (size_t i = 0; i < count; ++i)
                            want[i] =
                                op == SPYRE_REDUCE_MAX ? std::max(want[i], x[i]) : want[i] + x[i];
                    }
                    const auto bits = to_bytes(want, SPYRE_DTYPE_FLOAT32);
                    const std::string what =
                        std::format("{} ranks, op {}, rank {}{}", n, static_cast<int>(op), k.rank,
                                    null_stream ? ", NULL stream" : "");
                    EXPECT_TRUE(k.download(b, 0, count * 4) == bits) << "in place, " << what;
                    EXPECT_TRUE(k.download(d, 128, count * 4) == bits) << "out of place, " << what;
                    spyre_free(b);
                    spyre_free(d);
                });
    unsetenv("SPYRE_COMM_ALGO");
}

// The p2p transport reduces out of its inbox and lands the all-gather in place; host staging
// receives into scratch first. Both run the same reductions in the same order: the fp32
// results (random fractions, so the order shows) are equal bit for bit; so are those of the
// p2p transport with its waits between the ranks on the hosts (SPYRE_COMM_DEVICE_WAITS=0).
TEST(Comm, TransportsGiveBitIdenticalResults) {
    const char* saved = std::getenv("SPYRE_COMM_TRANSPORT");
    const std::string keep = saved ? saved : "";
    setenv("SPYRE_COMM_CHUNK_BYTES", "1024", 1);
    const size_t count = 3001;
    auto run = [&](const char* transport) {
        setenv("SPYRE_COMM_TRANSPORT", transport, 1);
        std::vector<std::vector<uint8_t>> out(3);
        run_ranks(3, [&](Rank& k) {
            spyre_buffer_t b = k.upload(
                to_bytes(input(k.rank, count, SPYRE_DTYPE_FLOAT32, 41), SPYRE_DTYPE_FLOAT32), 0);
            ASSERT_EQ(spyre_comm_all_reduce(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32,
                                            SPYRE_REDUCE_SUM, k.comm, k.stream),
                      SPYRE_SUCCESS)
                << spyre_last_error();
            out[k.rank] = k.download(b, 0, count * 4);
            spyre_free(b);
        });
        return out;
    };
    const auto p2p = run("p2p"), staged = run("host-staged");
    // the same pushes and reductions with the waits between the ranks on the hosts
    const char* was = std::getenv("SPYRE_COMM_DEVICE_WAITS");
    const std::string waits = was ? was : "";
    setenv("SPYRE_COMM_DEVICE_WAITS", waits == "0" ? "1" : "0", 1);
    const auto host_waits = run("p2p");
    if (was)
        setenv("SPYRE_COMM_DEVICE_WAITS", waits.c_str(), 1);
    else
        unsetenv("SPYRE_COMM_DEVICE_WAITS");
    for (int r = 0; r < 3; ++r) {
        EXPECT_TRUE(p2p[r] == staged[r]) << "rank " << r;
        EXPECT_TRUE(p2p[r] == host_waits[r]) << "rank " << r << ", host-driven waits";
    }
    EXPECT_TRUE(p2p[0] == p2p[1] && p2p[1] == p2p[2]) << "the ranks disagree";
    unsetenv("SPYRE_COMM_CHUNK_BYTES");
    if (saved)
        setenv("SPYRE_COMM_TRANSPORT", keep.c_str(), 1);
    else
        unsetenv("SPYRE_COMM_TRANSPORT");
}

TEST(Comm, SendRecvBadPeerRefused) {
    for (int peer : {-1, 1, 0}) {  // 0: itself
        spyre_comm_unique_id id;
        ASSERT_EQ(spyre_comm_get_unique_id(&id), SPYRE_SUCCESS);
        spyre_device_t dev;
        ASSERT_EQ(spyre_device_open(0, &dev), SPYRE_SUCCESS);
        spyre_comm_t comm = nullptr;
        ASSERT_EQ(spyre_comm_init_rank(&comm, 1, &id, 0, dev), SPYRE_SUCCESS) << spyre_last_error();
        spyre_buffer_t b;
        ASSERT_EQ(spyre_malloc(dev, 64, &b), SPYRE_SUCCESS);
        EXPECT_EQ(spyre_comm_send(b, 0, 4, SPYRE_DTYPE_INT32, peer, comm, nullptr),
                  SPYRE_ERROR_INVALID_ARGUMENT)
            << peer;
        EXPECT_NE(std::string(spyre_last_error()).find(peer ? "is not a rank" : "itself"),
                  std::string::npos)
            << spyre_last_error();
        spyre_free(b);
        EXPECT_EQ(spyre_comm_destroy(comm), SPYRE_SUCCESS);
        spyre_device_close(dev);
    }
}

TEST(Comm, BarrierWaitsForEveryRank) {
    std::atomic<int> arrived{0};
    run_ranks(3, [&](Rank& k) {
        if (k.rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        arrived.fetch_add(1);
        ASSERT_EQ(spyre_comm_barrier(k.comm, k.stream), SPYRE_SUCCESS) << spyre_last_error();
        EXPECT_EQ(arrived.load(), 3) << "rank " << k.rank << " left the barrier early";
    });
}

// Ranks of one process on cards with peer-to-peer DMA move their chunks card to card (the
// copying cards count the bytes in their TELE_P2P counters); SPYRE_COMM_TRANSPORT=host-staged
// or cards without the capability stage through host memory; SPYRE_COMM_TRANSPORT=p2p fails
// where p2p cannot serve.
TEST(Comm, TransportChoice) {
    const char* saved = std::getenv("SPYRE_COMM_TRANSPORT");
    const std::string keep = saved ? saved : "";
    auto p2p_bytes = [] {
        uint64_t sum = 0;
        for (int i = 0; i < 2; ++i) {
            spyre_device_t d = nullptr;
            EXPECT_EQ(spyre_device_open(i, &d), SPYRE_SUCCESS);
            spyre_telemetry t{};
            EXPECT_EQ(spyre_device_get_telemetry(d, &t), SPYRE_SUCCESS);
            sum += t.p2p_write_bytes + t.p2p_read_bytes;
            spyre_device_close(d);
        }
        return sum;
    };
    auto run = [&](const char* want, bool moves_p2p) {
        SCOPED_TRACE(want);
        const size_t count = 1000;
        run_ranks(2, [&](Rank& k) {
            spyre_comm_info info{};
            ASSERT_EQ(spyre_comm_get_info(k.comm, &info), SPYRE_SUCCESS);
            EXPECT_STREQ(info.transport, want);
            spyre_telemetry t0{}, t1{};
            ASSERT_EQ(spyre_device_get_telemetry(k.dev, &t0), SPYRE_SUCCESS);
            auto x = input(k.rank, count, SPYRE_DTYPE_FLOAT32);
            spyre_buffer_t b = k.upload(to_bytes(x, SPYRE_DTYPE_FLOAT32), 0);
            ASSERT_EQ(spyre_comm_all_reduce(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32,
                                            SPYRE_REDUCE_SUM, k.comm, k.stream),
                      SPYRE_SUCCESS)
                << spyre_last_error();
            auto got = from_bytes(k.download(b, 0, count * 4), SPYRE_DTYPE_FLOAT32);
            auto y = input(1 - k.rank, count, SPYRE_DTYPE_FLOAT32);
            std::vector<float> want(count);
            for (size_t i = 0; i < count; ++i) want[i] = reduce(SPYRE_REDUCE_SUM, {x[i], y[i]});
            expect_close(got, want, SPYRE_DTYPE_FLOAT32, "all_reduce");
            ASSERT_EQ(spyre_device_get_telemetry(k.dev, &t1), SPYRE_SUCCESS);
            // each rank's card pushed its chunks to the other: 2 ring steps
            if (moves_p2p)
                EXPECT_EQ(t1.p2p_write_bytes - t0.p2p_write_bytes, count * 4);
            else
                EXPECT_EQ(t1.p2p_write_bytes, t0.p2p_write_bytes);
            spyre_free(b);
        });
    };
    unsetenv("SPYRE_COMM_TRANSPORT");
    run("p2p", true);
    setenv("SPYRE_COMM_TRANSPORT", "host-staged", 1);
    const uint64_t before = p2p_bytes();
    run("host-staged", false);
    EXPECT_EQ(p2p_bytes(), before);
    unsetenv("SPYRE_COMM_TRANSPORT");
    if (on_kernel()) return;  // the rest needs simulated cards without the capability
    setenv("SPYRE_SIM_P2P", "0", 1);
    run("host-staged", false);
    setenv("SPYRE_COMM_TRANSPORT", "p2p", 1);
    spyre_comm_unique_id id;
    ASSERT_EQ(spyre_comm_get_unique_id(&id), SPYRE_SUCCESS);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
            spyre_device_t d = nullptr;
            ASSERT_EQ(spyre_device_open(r, &d), SPYRE_SUCCESS);
            spyre_comm_t c = nullptr;
            EXPECT_EQ(spyre_comm_init_rank(&c, 2, &id, r, d), SPYRE_ERROR_NOT_SUPPORTED);
            EXPECT_NE(std::string(spyre_last_error()).find("SPYRE_COMM_TRANSPORT=p2p"),
                      std::string::npos)
                << spyre_last_error();
            spyre_device_close(d);
        });
    for (auto& t : threads) t.join();
    unsetenv("SPYRE_SIM_P2P");
    if (saved)
        setenv("SPYRE_COMM_TRANSPORT", keep.c_str(), 1);
    else
        unsetenv("SPYRE_COMM_TRANSPORT");
}

TEST(Comm, DefaultChunkAndInfo) {
    run_ranks(2, [&](Rank& k) {
        spyre_comm_info info{};
        ASSERT_EQ(spyre_comm_get_info(k.comm, &info), SPYRE_SUCCESS);
        EXPECT_EQ(info.rank, k.rank);
        EXPECT_EQ(info.nranks, 2);
        EXPECT_EQ(info.chunk_bytes, 4u << 20);
        const char* forced = std::getenv("SPYRE_COMM_TRANSPORT");  // ctest runs both
        EXPECT_STREQ(info.transport, forced && *forced ? forced : "p2p");
        // waits queued on the cards: p2p between cards with semaphores, each rank on a card
        // of its own (rank r is on card r mod the card count), unless turned off
        spyre_device_info di{};
        ASSERT_EQ(spyre_device_get_info(k.dev, &di), SPYRE_SUCCESS);
        int cards = 0;
        ASSERT_EQ(spyre_get_device_count(&cards), SPYRE_SUCCESS);
        const char* waits = std::getenv("SPYRE_COMM_DEVICE_WAITS");
        const bool device_waits = std::string(info.transport) == "p2p" && cards >= 2 &&
                                  (di.caps & SPYRE_DEVICE_CAP_SEMAPHORE) &&
                                  !(waits && std::string(waits) == "0");
        EXPECT_EQ(info.flags, device_waits ? SPYRE_COMM_INFO_DEVICE_WAITS : 0u);
        // one large fp32 all-reduce over several default-size chunks
        const size_t count = (5u << 20) / 4 + 3;
        spyre_buffer_t b =
            k.upload(to_bytes(input(k.rank, count, SPYRE_DTYPE_FLOAT32), SPYRE_DTYPE_FLOAT32), 0);
        ASSERT_EQ(spyre_comm_all_reduce(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32, SPYRE_REDUCE_MAX,
                                        k.comm, k.stream),
                  SPYRE_SUCCESS)
            << spyre_last_error();
        const auto a = input(0, count, SPYRE_DTYPE_FLOAT32),
                   c = input(1, count, SPYRE_DTYPE_FLOAT32);
        std::vector<float> want(count);
        for (size_t i = 0; i < count; ++i) want[i] = std::max(a[i], c[i]);
        expect_close(from_bytes(k.download(b, 0, count * 4), SPYRE_DTYPE_FLOAT32), want,
                     SPYRE_DTYPE_FLOAT32, "large all_reduce");
        spyre_free(b);
    });
}

TEST(Comm, MissingRankTimesOutWithItsNumber) {
    spyre_comm_unique_id id;
    ASSERT_EQ(spyre_comm_get_unique_id(&id), SPYRE_SUCCESS);
    // Both present ranks start joining together, each with its card open: opening a card under
    // a debug guest kernel took longer than the join timeout, and a rank that came after the
    // other had given up rightly named rank 0 missing too.
    setenv("SPYRE_COMM_TIMEOUT_MS", "1500", 1);
    std::latch opened(2);
    std::vector<std::thread> th;
    for (int r = 0; r < 2; ++r)  // rank 2 of 3 never comes
        th.emplace_back([&, r] {
            spyre_device_t dev = nullptr;
            const spyre_status open_status = spyre_device_open(r, &dev);
            opened.arrive_and_wait();
            ASSERT_EQ(open_status, SPYRE_SUCCESS);
            spyre_comm_t comm = nullptr;
            const auto t0 = std::chrono::steady_clock::now();
            EXPECT_EQ(spyre_comm_init_rank(&comm, 3, &id, r, dev), SPYRE_ERROR_TIMEOUT);
            EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
            EXPECT_NE(std::string(spyre_last_error()).find("ranks that never joined: 2"),
                      std::string::npos)
                << spyre_last_error();
            EXPECT_EQ(comm, nullptr);
            spyre_device_close(dev);
        });
    for (auto& t : th) t.join();
    unsetenv("SPYRE_COMM_TIMEOUT_MS");
}

TEST(Comm, RankThatStopsCallingGivesTimeoutNotHang) {
    run_ranks(
        3,
        [&](Rank& k) {
            spyre_buffer_t b = k.upload(std::vector<uint8_t>(4096), 0);
            if (k.rank == 1) {  // stops taking part, but stays alive (a thread cannot die alone)
                std::this_thread::sleep_for(std::chrono::milliseconds(1500));
            } else {
                const auto t0 = std::chrono::steady_clock::now();
                const spyre_status s = spyre_comm_all_reduce(b, 0, b, 0, 1024, SPYRE_DTYPE_FLOAT32,
                                                             SPYRE_REDUCE_SUM, k.comm, k.stream);
                EXPECT_TRUE(s == SPYRE_ERROR_TIMEOUT) << spyre_status_string(s);
                EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
                EXPECT_NE(std::string(spyre_last_error()).find("timed out"), std::string::npos)
                    << spyre_last_error();
            }
            // the communicator is failed for everybody afterwards, the late rank included
            EXPECT_EQ(spyre_comm_barrier(k.comm, k.stream), SPYRE_ERROR_TIMEOUT)
                << spyre_last_error();
            spyre_free(b);
        },
        500);
}

TEST(Comm, AbortFailsEveryRank) {
    run_ranks(2, [&](Rank& k) {
        spyre_buffer_t b = k.upload(std::vector<uint8_t>(4096), 0);
        if (k.rank == 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            ASSERT_EQ(spyre_comm_abort(k.comm), SPYRE_SUCCESS);
        } else {
            EXPECT_EQ(spyre_comm_all_reduce(b, 0, b, 0, 1024, SPYRE_DTYPE_FLOAT32, SPYRE_REDUCE_SUM,
                                            k.comm, k.stream),
                      SPYRE_ERROR_DEVICE_LOST);
            EXPECT_NE(std::string(spyre_last_error()).find("aborted by rank 0"), std::string::npos)
                << spyre_last_error();
        }
        spyre_free(b);
    });
}

// A rank whose card fails a reduction mid-collective (a simulated program fault on card 0's
// next launch) sends on an accumulator that is not the sum: no rank may return a wrong result
// with SPYRE_SUCCESS (host functions that post messages run after failed work too). Both
// transports, stream and NULL stream; the ring (4 MiB: every rank fails, as rank 1 receives
// rank 0's reduced segment) and the one-shot all-reduce (64 KiB, forced). In the one-shot
// rank 0's fold is the faulting launch and rank 1 folds rank 0's input, not its reduction:
// rank 1 may then return the right sum (the host-driven protocol), but the communicator is
// failed, so its next call fails naming rank 0. On the NULL stream rank 0 returned
// SPYRE_SUCCESS with its buffer unreduced before (the call did not wait for its last launch).
TEST(Comm, FailedCardWorkFailsEveryRank) {
    if (spyre_sim_inject_fault(0, SPYRE_SIM_FAULT_NONE, 0) == SPYRE_ERROR_NOT_SUPPORTED)
        GTEST_SKIP() << "simulated faults: the simulator backend only";
    for (const char* algo : {"ring", "one-shot"})
        for (const char* transport : {"p2p", "host-staged"})
            for (bool null_stream : {false, true}) {
                const std::string config =
                    std::format("{} {}{}", algo, transport, null_stream ? " NULL stream" : "");
                setenv("SPYRE_COMM_TRANSPORT", transport, 1);
                setenv("SPYRE_COMM_ALGO", algo, 1);
                ASSERT_EQ(spyre_sim_inject_fault(0, SPYRE_SIM_FAULT_PROGRAM, 0), SPYRE_SUCCESS);
                const bool one_shot = std::string(algo) == "one-shot";
                const size_t count = one_shot ? 1u << 14 : 1u << 20;  // fp32
                std::vector<float> sum = input(0, count, SPYRE_DTYPE_FLOAT32, 5);
                const std::vector<float> x1 = input(1, count, SPYRE_DTYPE_FLOAT32, 5);
                for (size_t i = 0; i < count; ++i) sum[i] += x1[i];
                run_ranks(
                    2,
                    [&](Rank& k) {
                        spyre_stream_t stream = null_stream ? nullptr : k.stream;
                        spyre_buffer_t b =
                            k.upload(to_bytes(input(k.rank, count, SPYRE_DTYPE_FLOAT32, 5),
                                              SPYRE_DTYPE_FLOAT32),
                                     0);
                        const spyre_status s =
                            spyre_comm_all_reduce(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32,
                                                  SPYRE_REDUCE_SUM, k.comm, stream);
                        const std::string err = spyre_last_error();
                        if (s == SPYRE_SUCCESS && one_shot && k.rank == 1) {
                            EXPECT_EQ(from_bytes(k.download(b, 0, count * 4), SPYRE_DTYPE_FLOAT32),
                                      sum)
                                << config << ": rank 1 returned a wrong sum";
                            EXPECT_NE(spyre_comm_all_reduce(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32,
                                                            SPYRE_REDUCE_SUM, k.comm, stream),
                                      SPYRE_SUCCESS)
                                << config << ": the failed communicator ran a collective";
                            EXPECT_NE(std::string(spyre_last_error()).find("rank 0"),
                                      std::string::npos)
                                << config << ": " << spyre_last_error();
                        } else {
                            EXPECT_NE(s, SPYRE_SUCCESS)
                                << config << ": rank " << k.rank << " returned a sum";
                            if (k.rank == 1) {  // told by the communicator, naming rank 0
                                EXPECT_NE(err.find("rank 0"), std::string::npos)
                                    << config << ": " << err;
                            }
                        }
                        spyre_stream_synchronize(k.stream);
                        spyre_device_synchronize(k.dev);
                        spyre_free(b);
                    },
                    5000);
                unsetenv("SPYRE_COMM_TRANSPORT");
                unsetenv("SPYRE_COMM_ALGO");
            }
    ASSERT_EQ(spyre_sim_inject_fault(0, SPYRE_SIM_FAULT_NONE, 0), SPYRE_SUCCESS);
}

// Work that failed on a rank's stream before a collective (a program that divides by zero,
// not yet synchronized): that rank's messages are not to be trusted, so the communicator
// fails on every rank (its own call reports the program's fault). Any backend: through
// spyre.ko it is the kernel stream's failure() the collectives ask from their host functions.
TEST(Comm, EarlierFailedWorkOnTheStreamFailsEveryRank) {
    spyre::ProgramBuilder pb;
    pb.li(3, 1);
    pb.alu(spyre::isa::Alu::DIVU, 4, 3, 0);  // DIV_ZERO
    pb.halt();
    const std::vector<uint8_t> image = pb.finish();
    const size_t count = 1u << 18;
    run_ranks(
        2,
        [&](Rank& k) {
            spyre_buffer_t b = k.upload(
                to_bytes(input(k.rank, count, SPYRE_DTYPE_FLOAT32, 6), SPYRE_DTYPE_FLOAT32), 0);
            spyre_program_t prog = nullptr;
            if (k.rank == 0) {
                ASSERT_EQ(spyre_program_load(k.dev, image.data(), image.size(), &prog),
                          SPYRE_SUCCESS);
                spyre_launch_params lp{};
                lp.num_cores = 1;
                ASSERT_EQ(spyre_launch_async(prog, &lp, k.stream), SPYRE_SUCCESS);
            }
            const spyre_status s = spyre_comm_all_reduce(b, 0, b, 0, count, SPYRE_DTYPE_FLOAT32,
                                                         SPYRE_REDUCE_SUM, k.comm, k.stream);
            EXPECT_NE(s, SPYRE_SUCCESS) << "rank " << k.rank << " returned a sum";
            const std::string err = spyre_last_error();
            if (k.rank == 0)
                EXPECT_NE(err.find("division by zero"), std::string::npos) << err;
            else
                EXPECT_NE(err.find("rank 0's card work"), std::string::npos) << err;
            spyre_stream_synchronize(k.stream);
            spyre_program_free(prog);
            spyre_free(b);
        },
        10000);
}

TEST(Comm, BadArgumentsFailCleanly) {
    spyre_comm_unique_id id;
    ASSERT_EQ(spyre_comm_get_unique_id(&id), SPYRE_SUCCESS);
    spyre_device_t dev;
    ASSERT_EQ(spyre_device_open(0, &dev), SPYRE_SUCCESS);
    spyre_comm_t comm = nullptr;
    EXPECT_EQ(spyre_comm_init_rank(&comm, 2, &id, 2, dev), SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_comm_init_rank(&comm, 0, &id, 0, dev), SPYRE_ERROR_INVALID_ARGUMENT);
    spyre_comm_unique_id junk{};
    EXPECT_EQ(spyre_comm_init_rank(&comm, 1, &junk, 0, dev), SPYRE_ERROR_INVALID_ARGUMENT);
    ASSERT_EQ(spyre_comm_init_rank(&comm, 1, &id, 0, dev), SPYRE_SUCCESS) << spyre_last_error();
    spyre_buffer_t b;
    ASSERT_EQ(spyre_malloc(dev, 64, &b), SPYRE_SUCCESS);
    EXPECT_EQ(
        spyre_comm_all_reduce(b, 0, b, 0, 4, SPYRE_DTYPE_INT32, SPYRE_REDUCE_SUM, comm, nullptr),
        SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(spyre_last_error()).find("not float32"), std::string::npos);
    // a failed collective fails the communicator (the peers would wait for this rank)
    EXPECT_EQ(
        spyre_comm_all_reduce(b, 0, b, 0, 16, SPYRE_DTYPE_FLOAT32, SPYRE_REDUCE_SUM, comm, nullptr),
        SPYRE_ERROR_DEVICE_LOST);
    EXPECT_NE(std::string(spyre_last_error()).find("rank 0 failed"), std::string::npos);
    EXPECT_EQ(spyre_comm_destroy(comm), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_comm_get_unique_id(&id), SPYRE_SUCCESS);
    ASSERT_EQ(spyre_comm_init_rank(&comm, 1, &id, 0, dev), SPYRE_SUCCESS) << spyre_last_error();
    EXPECT_EQ(spyre_comm_all_reduce(b, 0, b, 0, 1000, SPYRE_DTYPE_FLOAT32, SPYRE_REDUCE_SUM, comm,
                                    nullptr),
              SPYRE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(spyre_comm_all_reduce(b, 0, b, 0, 4, SPYRE_DTYPE_FLOAT32, SPYRE_REDUCE_SUM, nullptr,
                                    nullptr),
              SPYRE_ERROR_INVALID_ARGUMENT);
    spyre_free(b);
    EXPECT_EQ(spyre_comm_destroy(comm), SPYRE_SUCCESS);
    spyre_device_close(dev);
}

}  // namespace

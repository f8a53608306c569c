// Ranks in separate processes (spyre-comm-rank, one simulated card each; with
// SPYRE_COMM_TEST_BACKEND=kernel, the cards of spyre.ko, rank r on card r mod the card count):
// an all-reduce, a reduce and send/recv across 2, 3 and 4 processes, two ranks sending to each
// other before receiving, and a rank that dies mid-run:
// the others get SPYRE_ERROR_DEVICE_LOST naming it, quickly, not a hang and not the (long) timeout.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "spyre/comm.h"

extern char** environ;

namespace {

// Runs n ranks with the given modes; returns their exit codes.
std::vector<int> run(const std::vector<std::string>& modes) {
    const char* backend = std::getenv("SPYRE_COMM_TEST_BACKEND");
    if (!backend || std::string(backend) != "kernel") {
        setenv("SPYRE_BACKEND", "sim", 1);
        setenv("SPYRE_SIM_DEVICES", "1", 1);
        setenv("SPYRE_SIM_MEMORY", "134217728", 1);
    }
    setenv("SPYRE_COMM_TIMEOUT_MS", "60000", 1);  // a death must be noticed long before this
    spyre_comm_unique_id id;
    EXPECT_EQ(spyre_comm_get_unique_id(&id), SPYRE_SUCCESS);
    std::string hex;
    char b[3];
    for (char c : id.internal)
        std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c)), hex += b;
    const std::string n = std::to_string(modes.size());
    std::vector<pid_t> pids;
    for (size_t r = 0; r < modes.size(); ++r) {
        const std::string rank = std::to_string(r);
        const char* argv[] = {SPYRE_COMM_RANK_PATH, hex.c_str(),      n.c_str(),
                              rank.c_str(),         modes[r].c_str(), nullptr};
        pid_t pid;
        EXPECT_EQ(posix_spawn(&pid, SPYRE_COMM_RANK_PATH, nullptr, nullptr,
                              const_cast<char**>(argv), environ),
                  0);
        pids.push_back(pid);
    }
    std::vector<int> codes;
    for (pid_t p : pids) {
        int st = 0;
        waitpid(p, &st, 0);
        codes.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
    return codes;
}

TEST(CommProcesses, AllReduceAcrossProcesses) {
    for (int n : {2, 3, 4}) {
        const auto codes = run(std::vector<std::string>(n, "ok"));
        for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << n << " ranks, rank " << r;
    }
}

TEST(CommProcesses, ReduceAndSendRecvAcrossProcesses) {
    setenv("SPYRE_COMM_CHUNK_BYTES", "65536", 1);  // several chunks per message
    for (int n : {2, 3, 4}) {
        const auto codes = run(std::vector<std::string>(n, "p2p"));
        for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << n << " ranks, rank " << r;
    }
    unsetenv("SPYRE_COMM_CHUNK_BYTES");
}

// Both ranks send 16 MiB (four default chunks) to each other before receiving: the sends
// queue into free outbox slots instead of waiting for the receiver (which would deadlock).
TEST(CommProcesses, MutualSendBeforeRecv) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto codes = run({"mutual", "mutual"});
    for (int r = 0; r < 2; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(50));
}

bool on_kernel() {
    const char* b = std::getenv("SPYRE_COMM_TEST_BACKEND");
    return b && std::string(b) == "kernel";
}

// One process per card: every collective, dtype and odd size against a host reference. Through
// spyre.ko the ranks' cards push to each other (the p2p transport between processes: inboxes
// shared as dma-bufs); simulated cards cannot share memory between processes (host-staged).
TEST(CommProcesses, EveryCollectiveOneProcessPerCard) {
    int cards = 0;
    if (on_kernel()) {
        ASSERT_EQ(spyre_get_device_count(&cards), SPYRE_SUCCESS);
        ASSERT_GE(cards, 2) << "the comm rows boot two cards";
        spyre_device_t d;
        spyre_device_info info{};
        ASSERT_EQ(spyre_device_open(0, &d), SPYRE_SUCCESS);
        ASSERT_EQ(spyre_device_get_info(d, &info), SPYRE_SUCCESS);
        spyre_device_close(d);
        setenv("SPYRE_COMM_EXPECT_TRANSPORT",
               info.caps & SPYRE_DEVICE_CAP_P2P ? "p2p" : "host-staged", 1);
    } else {
        setenv("SPYRE_COMM_EXPECT_TRANSPORT", "host-staged", 1);
    }
    for (int n : {2, std::max(cards, 3)}) {
        if (on_kernel() && n > cards) continue;  // one process per card
        const auto codes = run(std::vector<std::string>(n, "all"));
        for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << n << " ranks, rank " << r;
    }
    unsetenv("SPYRE_COMM_EXPECT_TRANSPORT");
}

// A rank killed in the middle of a 16 MiB all-reduce: the others get DEVICE_LOST naming it,
// not a hang (with either transport).
TEST(CommProcesses, RankKilledMidCollective) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto codes = run({"survive_mid", "die_mid"});
    EXPECT_EQ(codes[1], 128 + SIGKILL);
    EXPECT_EQ(codes[0], 0);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(40));
}

TEST(CommProcesses, DeadRankGivesErrorNotHang) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto codes = run({"survive", "survive", "die", "survive"});
    EXPECT_EQ(codes[2], 128 + SIGKILL);
    for (int r : {0, 1, 3}) EXPECT_EQ(codes[r], 0) << "rank " << r;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

}  // namespace

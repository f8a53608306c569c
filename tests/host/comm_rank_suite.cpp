// The full suite of one rank in its own process (spyre-comm-rank MODE "all", comm_rank_main.cpp):
// every collective, reduce and send/recv, fp32/fp16/bf16, odd sizes and a multi-chunk size,
// each against a host reference computed from every rank's (deterministic) input. Inputs are
// small integers, so every dtype and every summation order gives the exact result.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "comm_test_util.hpp"
#include "spyre/comm.h"

namespace {

using comm_test::esize;
using comm_test::from_bytes;
using comm_test::to_bytes;

// Rank r's input number `salt`: integers in -8..8.
std::vector<float> input(int rank, size_t n, int salt) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i)
        v[i] = static_cast<float>(static_cast<int>((i * 7 + rank * 13 + salt * 5) % 17) - 8);
    return v;
}

float combine(spyre_reduce_op op, float a, float b) {
    if (op == SPYRE_REDUCE_MAX) return a > b ? a : b;
    if (op == SPYRE_REDUCE_MIN) return a < b ? a : b;
    return a + b;
}

struct Suite {
    spyre_device_t dev;
    spyre_comm_t comm;
    int n, rank;
    int failures = 0;

    spyre_buffer_t upload(const std::vector<float>& v, spyre_dtype t, uint64_t off) {
        spyre_buffer_t b = comm_test::upload(dev, to_bytes(v, t), off);
        if (!b) fail("upload", spyre_last_error());
        return b;
    }
    std::vector<float> download(spyre_buffer_t b, uint64_t off, size_t count, spyre_dtype t) {
        std::vector<uint8_t> bytes(count * esize(t));
        if (comm_test::download(dev, nullptr, b, off, bytes)) fail("download", spyre_last_error());
        return from_bytes(bytes, t);
    }
    void fail(const std::string& what, const std::string& why) {
        if (failures++ < 10)
            std::fprintf(stderr, "rank %d: %s: %s\n", rank, what.c_str(), why.c_str());
    }
    void call(spyre_status s, const std::string& what) {
        if (s != SPYRE_SUCCESS) fail(what, spyre_last_error());
    }
    // Exact, or within `tol` relative (MEAN: the sum times 1/n, rounded).
    void expect(const std::vector<float>& got, const std::vector<float>& want,
                const std::string& what, float tol = 0.0f) {
        for (size_t i = 0; i < want.size(); ++i)
            if (!(std::fabs(got[i] - want[i]) <= tol * (1.0f + std::fabs(want[i]))))
                return fail(what, "element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                                      ", want " + std::to_string(want[i]));
    }

    void run(spyre_dtype t, size_t count) {
        const std::string tag = std::to_string(static_cast<int>(t)) + "/" + std::to_string(count);
        for (spyre_reduce_op op :
             {SPYRE_REDUCE_SUM, SPYRE_REDUCE_MEAN, SPYRE_REDUCE_MAX, SPYRE_REDUCE_MIN}) {
            std::vector<float> want = input(0, count, 1);
            for (int r = 1; r < n; ++r) {
                const auto x = input(r, count, 1);
                for (size_t i = 0; i < count; ++i) want[i] = combine(op, want[i], x[i]);
            }
            if (op == SPYRE_REDUCE_MEAN)
                for (float& w : want) w /= n;
            const float tol = op == SPYRE_REDUCE_MEAN ? 1e-2f : 0.0f;
            spyre_buffer_t s = upload(input(rank, count, 1), t, 2);
            spyre_buffer_t d = upload(std::vector<float>(count), t, 6);
            call(spyre_comm_all_reduce(s, 2, d, 6, count, t, op, comm, nullptr), "all_reduce");
            expect(download(d, 6, count, t), want, "all_reduce " + tag, tol);
            const int root = (count + op) % n;
            call(spyre_comm_reduce(s, 2, rank == root ? d : nullptr, 6, count, t, op, root, comm,
                                   nullptr),
                 "reduce");
            if (rank == root) expect(download(d, 6, count, t), want, "reduce " + tag, tol);
            spyre_free(s);
            spyre_free(d);
        }
        for (int root = 0; root < n; ++root) {
            spyre_buffer_t b = upload(input(rank, count, 2), t, 4);
            call(spyre_comm_broadcast(b, 4, b, 4, count, t, root, comm, nullptr), "broadcast");
            expect(download(b, 4, count, t), input(root, count, 2), "broadcast " + tag);
            spyre_free(b);
        }
        std::vector<float> all, sum(count, 0.0f);
        for (int r = 0; r < n; ++r) {
            const auto x = input(r, count, 3);
            all.insert(all.end(), x.begin(), x.end());
        }
        spyre_buffer_t s = upload(input(rank, count, 3), t, 2);
        spyre_buffer_t d = upload(std::vector<float>(n * count), t, 2);
        call(spyre_comm_all_gather(s, 2, d, 2, count, t, comm, nullptr), "all_gather");
        expect(download(d, 2, n * count, t), all, "all_gather " + tag);
        spyre_free(s);
        spyre_free(d);
        std::vector<float> full = input(rank, n * count, 4), want(count, 0.0f);
        for (int r = 0; r < n; ++r) {
            const auto x = input(r, n * count, 4);
            for (size_t i = 0; i < count; ++i) want[i] += x[rank * count + i];
        }
        s = upload(full, t, 0);
        d = upload(std::vector<float>(count), t, 2);
        call(spyre_comm_reduce_scatter(s, 0, d, 2, count, t, SPYRE_REDUCE_SUM, comm, nullptr),
             "reduce_scatter");
        expect(download(d, 2, count, t), want, "reduce_scatter " + tag);
        spyre_free(s);
        spyre_free(d);
        // a relay: rank 0 sends first and receives last
        const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
        s = upload(input(rank, count, 5), t, 0);
        d = upload(std::vector<float>(count), t, 0);
        if (rank == 0) call(spyre_comm_send(s, 0, count, t, next, comm, nullptr), "send");
        call(spyre_comm_recv(d, 0, count, t, prev, comm, nullptr), "recv");
        if (rank != 0) call(spyre_comm_send(s, 0, count, t, next, comm, nullptr), "send");
        expect(download(d, 0, count, t), input(prev, count, 5), "send/recv " + tag);
        spyre_free(s);
        spyre_free(d);
    }
};

}  // namespace

int run_suite(spyre_device_t dev, spyre_comm_t comm, int n, int rank) {
    Suite s{dev, comm, n, rank};
    for (spyre_dtype t : {SPYRE_DTYPE_FLOAT32, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_BFLOAT16})
        for (size_t count : {size_t{1}, size_t{333}, size_t{1001}}) s.run(t, count);
    s.run(SPYRE_DTYPE_FLOAT32, (5u << 20) / 4 + 3);  // over two default 4 MiB chunks
    return s.failures;
}

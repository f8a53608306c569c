// SPDX-License-Identifier: MIT
// The embedding (row gather) program on the engine: int64 and int32 indices, repeated and
// boundary indices, padded weight rows, 1 and many cores; an index out of range stops the job
// at the bounds check, also when it would land in another buffer of the launch.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ops/embedding_program.hpp"

namespace spyre::ops {
namespace {

struct GatherRun {
    std::vector<uint8_t> mem;
    uint64_t idx, w, o;
    spyre_engine_result res{};
    int rc = 0;
};

GatherRun run(const EmbeddingShape& s, const EmbeddingPlan& p, const std::vector<int64_t>& idx) {
    GatherRun r;
    auto up = [](uint64_t x) { return (x + 127) / 128 * 128; };
    r.idx = 0, r.w = up(s.n * s.index_bytes), r.o = r.w + up(s.V * s.w_stride);
    r.mem.assign(r.o + up(s.n * s.o_stride), 0xee);
    for (uint64_t i = 0; i < s.n; ++i) {
        if (s.index_bytes == 8) {
            std::memcpy(&r.mem[r.idx + 8 * i], &idx[i], 8);
        } else {
            const int32_t v = static_cast<int32_t>(idx[i]);
            std::memcpy(&r.mem[r.idx + 4 * i], &v, 4);
        }
    }
    for (uint64_t v = 0; v < s.V; ++v)
        for (uint64_t j = 0; j < s.row_bytes; ++j)
            r.mem[r.w + v * s.w_stride + j] = static_cast<uint8_t>(v * 31 + j * 7 + 1);
    spyre_engine_config cfg = default_engine_config();
    spyre_engine* eng = spyre_engine_create(&cfg);
    const auto prog = build_embedding(s, p);
    const uint64_t args[3] = {r.idx, r.w, r.o};
    // windows: the indices, the weight rows and the output, apart
    const spyre_engine_window w[3] = {
        {r.idx, r.w - r.idx}, {r.w, s.V * s.w_stride}, {r.o, r.mem.size() - r.o}};
    spyre_engine_job job{};
    job.program = prog.data(), job.program_size = prog.size();
    job.args = args, job.num_args = 3, job.num_cores = p.cores;
    job.mem = r.mem.data(), job.mem_size = r.mem.size(), job.windows = w, job.num_windows = 3;
    r.rc = spyre_engine_run(eng, &job, &r.res);
    spyre_engine_destroy(eng);
    return r;
}

TEST(OpsEmbedding, GathersEveryRow) {
    const Pricer pricer(default_engine_config());
    for (uint32_t ib : {8u, 4u})
        for (uint64_t n : {1, 7, 100, 1000}) {
            EmbeddingShape s;
            s.n = n, s.V = 50, s.row_bytes = 200, s.w_stride = 256, s.o_stride = 256;
            s.index_bytes = ib;
            std::mt19937 rng(n);
            std::vector<int64_t> idx(n);
            for (auto& x : idx) x = rng() % s.V;
            idx[0] = 0, idx[n - 1] = s.V - 1;
            for (uint32_t cores : {1u, 32u}) {
                SCOPED_TRACE(::testing::Message()
                             << "ib " << ib << " n " << n << " cores " << cores);
                const EmbeddingPlan p = plan_embedding(pricer, s, cores);
                GatherRun r = run(s, p, idx);
                ASSERT_EQ(r.rc, 0) << r.res.message;
                EXPECT_EQ(r.res.total_cycles, p.cycles);
                for (uint64_t i = 0; i < n; ++i) {
                    ASSERT_EQ(0, std::memcmp(&r.mem[r.o + i * s.o_stride],
                                             &r.mem[r.w + idx[i] * s.w_stride], s.row_bytes))
                        << i;
                    ASSERT_EQ(r.mem[r.o + i * s.o_stride + s.row_bytes], 0xee);  // only the row
                }
            }
        }
}

TEST(OpsEmbedding, IndexOutOfRangeFaults) {
    const Pricer pricer(default_engine_config());
    EmbeddingShape s;
    s.n = 4, s.V = 10, s.row_bytes = 128, s.w_stride = 128, s.o_stride = 128;
    const EmbeddingPlan p = plan_embedding(pricer, s, 32);
    for (int64_t bad : {int64_t{10}, int64_t{-1}, int64_t{1} << 40}) {
        GatherRun r = run(s, p, {1, 2, bad, 3});
        EXPECT_EQ(r.rc, SPYRE_ENGINE_ERR_DIV_ZERO) << bad << ": " << r.res.message;
    }
    s.index_bytes = 4;
    const EmbeddingPlan p4 = plan_embedding(pricer, s, 32);
    GatherRun r = run(s, p4, {1, -5, 2, 3});
    EXPECT_EQ(r.rc, SPYRE_ENGINE_ERR_DIV_ZERO) << r.res.message;
}

}  // namespace
}  // namespace spyre::ops

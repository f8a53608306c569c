// SPDX-License-Identifier: MIT
// The rotary-embedding program on the engine against a double-precision reference: dense and
// transposed ([B, L, H, D] viewed as [B, H, L, D]) layouts, cos/sin shared or per batch, fp16,
// bf16 and fp32, in place.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/rotary_program.hpp"
#include "ops_test_util.hpp"
#include "spyre/numerics.hpp"

namespace spyre::ops {
namespace {

using isa::DType;

struct Case {
    uint64_t B, H, L, D;
    DType t, ct;
    bool transposed, per_batch, in_place;
};

TEST(OpsRotary, MatchesReference) {
    const Case cases[] = {
        {1, 2, 5, 64, DType::F16, DType::F16, false, false, false},
        {2, 4, 8, 128, DType::F16, DType::F32, true, true, false},
        {1, 3, 7, 128, DType::BF16, DType::BF16, true, false, true},
        {2, 1, 4, 32, DType::F32, DType::F32, false, true, true},
    };
    const Pricer pricer(default_engine_config());
    for (const Case& c : cases) {
        SCOPED_TRACE(::testing::Message() << c.B << "x" << c.H << "x" << c.L << "x" << c.D << " t"
                                          << int(c.t) << " ct" << int(c.ct) << " tr" << c.transposed
                                          << " pb" << c.per_batch << " ip" << c.in_place);
        RotaryShape s;
        s.B = c.B, s.H = c.H, s.L = c.L, s.D = c.D, s.t = c.t, s.ct = c.ct;
        const uint64_t es = isa::dtype_size(c.t), ces = isa::dtype_size(c.ct);
        const uint64_t row = c.D * es, crow = c.D * ces;
        if (c.transposed) {
            s.x_st[0] = c.L * c.H * row, s.x_st[1] = row, s.x_st[2] = c.H * row;
        } else {
            s.x_st[0] = c.H * c.L * row, s.x_st[1] = c.L * row, s.x_st[2] = row;
        }
        for (int d = 0; d < 3; ++d) s.o_st[d] = s.x_st[d];
        s.c_st[0] = c.per_batch ? c.L * crow : 0, s.c_st[1] = crow;
        const uint64_t xbytes = c.B * c.H * c.L * row,
                       cbytes = (c.per_batch ? c.B : 1) * c.L * crow;
        const uint64_t X = 0, C = xbytes, S = C + cbytes, O = c.in_place ? X : S + cbytes;
        std::vector<uint8_t> mem(S + cbytes + xbytes, 0);
        std::mt19937 rng(3);
        std::normal_distribution<float> d(0, 1);
        std::uniform_real_distribution<float> ang(-3.2f, 3.2f);
        for (uint64_t i = 0; i < xbytes / es; ++i) test::store_elem(c.t, d(rng), &mem[X + i * es]);
        for (uint64_t i = 0; i < cbytes / ces; ++i) {
            const float a = ang(rng);
            test::store_elem(c.ct, std::cos(a), &mem[C + i * ces]);
            test::store_elem(c.ct, std::sin(a), &mem[S + i * ces]);
        }
        const std::vector<uint8_t> orig = mem;
        const RotaryPlan p = plan_rotary(pricer, s, 32);
        const auto prog = build_rotary(s, p);
        spyre_engine_config cfg = default_engine_config();
        spyre_engine* eng = spyre_engine_create(&cfg);
        const uint64_t args[4] = {X, C, S, O};
        const spyre_engine_window w{0, mem.size()};
        spyre_engine_job job{};
        job.program = prog.data(), job.program_size = prog.size();
        job.args = args, job.num_args = 4, job.num_cores = p.cores;
        job.mem = mem.data(), job.mem_size = mem.size(), job.windows = &w, job.num_windows = 1;
        spyre_engine_result r{};
        ASSERT_EQ(spyre_engine_run(eng, &job, &r), 0) << r.message;
        spyre_engine_destroy(eng);
        EXPECT_EQ(r.total_cycles, p.cycles);
        const double tol = c.t == DType::F32 ? 1e-6 : c.t == DType::F16 ? 1e-3 : 8e-3;
        const uint64_t h = c.D / 2;
        for (uint64_t bi = 0; bi < c.B; ++bi)
            for (uint64_t hi = 0; hi < c.H; ++hi)
                for (uint64_t l = 0; l < c.L; ++l)
                    for (uint64_t j = 0; j < c.D; ++j) {
                        const uint64_t xr = bi * s.x_st[0] + hi * s.x_st[1] + l * s.x_st[2];
                        const uint64_t cr = bi * s.c_st[0] + l * s.c_st[1];
                        auto x = [&](uint64_t k) {
                            return double(test::load_elem(c.t, &orig[X + xr + k * es]));
                        };
                        const double cs = test::load_elem(c.ct, &orig[C + cr + j * ces]);
                        const double sn = test::load_elem(c.ct, &orig[S + cr + j * ces]);
                        const double rot = j < h ? -x(j + h) : x(j - h);
                        const double want = x(j) * cs + rot * sn;
                        const double got = test::load_elem(c.t, &mem[O + xr + j * es]);
                        ASSERT_NEAR(got, want, tol * (1 + std::fabs(want)))
                            << bi << " " << hi << " " << l << " " << j;
                    }
    }
}

TEST(OpsRotary, RefusesOddHeadDimsAndMisalignedStrides) {
    const Pricer pricer(default_engine_config());
    RotaryShape s;
    s.D = 63;
    EXPECT_THROW(plan_rotary(pricer, s, 32), std::invalid_argument);
    s.D = 64, s.L = 2, s.x_st[0] = 256, s.x_st[1] = 256, s.x_st[2] = 192;
    EXPECT_THROW(plan_rotary(pricer, s, 32), std::invalid_argument);
}

}  // namespace
}  // namespace spyre::ops

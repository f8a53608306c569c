// SPDX-License-Identifier: MIT
// Shared by the benchmarks: an engine plus device memory holding a random M x N x K matmul job
// built with spyre::programs::build_matmul_program (32 cores): F16, BF16 and F32 inputs uniform in
// [-1, 1) rounded to the type, I8 inputs uniform in [-128, 127] (int32 result).
#pragma once

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "spyre/engine.h"
#include "spyre/numerics.hpp"
#include "spyre/programs/matmul.hpp"

namespace spyre::bench {

struct MatmulRig {
    uint64_t m, n, k;
    isa::DType in;
    unsigned threads;
    spyre_engine_config cfg{};
    spyre_engine* eng = nullptr;
    std::vector<uint8_t> mem, prog;
    uint64_t args[3] = {};
    spyre_engine_window win{};
    spyre_engine_job job{};
    spyre_engine_result res{};
    std::vector<float> a, b;  // the inputs as fp32 (exactly representable in `in`; int8: -128..127)

    // threads = 0: all host threads
    MatmulRig(uint64_t M, uint64_t N, uint64_t K, isa::DType t, unsigned nthreads)
        : m(M), n(N), k(K), in(t) {
        threads = nthreads ? nthreads : std::max(1u, std::thread::hardware_concurrency());
        spyre_engine_config_default(&cfg);
        cfg.num_threads = threads;
        eng = spyre_engine_create(&cfg);
        if (!eng) throw std::runtime_error("spyre_engine_create failed");
        const uint64_t es = isa::dtype_size(t), oes = isa::dtype_size(programs::matmul_out_type(t));
        auto up = [](uint64_t x) { return (x + 4095) & ~uint64_t{4095}; };
        args[0] = 0;
        args[1] = up(m * k * es);
        args[2] = args[1] + up(k * n * es);
        mem.assign(args[2] + up(m * n * oes), 0);
        std::mt19937 rng(1);
        std::uniform_real_distribution<float> d(-1, 1);
        std::uniform_int_distribution<int> i8(-128, 127);
        a.resize(m * k);
        b.resize(k * n);
        auto put = [&](std::vector<float>& v, uint64_t addr) {
            for (uint64_t i = 0; i < v.size(); ++i) {
                const float x = d(rng);
                if (t == isa::DType::I8) {
                    const int8_t q = static_cast<int8_t>(i8(rng));
                    std::memcpy(mem.data() + addr + i, &q, 1);
                    v[i] = q;
                } else if (t == isa::DType::F16) {
                    const uint16_t h = num::f32_to_f16(x);
                    std::memcpy(mem.data() + addr + 2 * i, &h, 2);
                    v[i] = num::f16_to_f32(h);
                } else if (t == isa::DType::BF16) {
                    const uint16_t h = num::f32_to_bf16(x);
                    std::memcpy(mem.data() + addr + 2 * i, &h, 2);
                    v[i] = num::bf16_to_f32(h);
                } else {
                    std::memcpy(mem.data() + addr + 4 * i, &x, 4);
                    v[i] = x;
                }
            }
        };
        put(a, args[0]);
        put(b, args[1]);
        prog = programs::build_matmul_program(m, n, k, cfg.num_cores, t, cfg.lx_bytes);
        win = {0, mem.size()};
        job.program = prog.data();
        job.program_size = prog.size();
        job.args = args;
        job.num_args = 3;
        job.mem = mem.data();
        job.mem_size = mem.size();
        job.windows = &win;
        job.num_windows = 1;
    }
    ~MatmulRig() { spyre_engine_destroy(eng); }
    MatmulRig(const MatmulRig&) = delete;
    MatmulRig& operator=(const MatmulRig&) = delete;

    // Runs the job once; throws with the engine's message on failure.
    void run() {
        if (spyre_engine_run(eng, &job, &res) != 0) throw std::runtime_error(res.message);
    }
    double flops() const { return 2.0 * double(m) * double(n) * double(k); }
    double modeled_seconds() const { return double(res.total_cycles) / double(cfg.clock_hz); }
    const uint8_t* c() const { return mem.data() + args[2]; }
};

}  // namespace spyre::bench

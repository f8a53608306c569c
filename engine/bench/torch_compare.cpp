// SPDX-License-Identifier: MIT
// Engine functional matmul vs libtorch CPU matmul on the same shapes, in the same process.
// Built only when CMake finds Torch (find_package(Torch QUIET)). For each shape and dtype it
// prints the median host time of the engine (32-core SPMD program, 1 host thread and all host
// threads) and of at::matmul (at::set_num_threads(1) and the default thread count), the ratio
// engine time / libtorch time (the target: <= 2), and the max difference of the results.
//   spyre_engine_torch_compare [repetitions=5]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench_matmul.hpp"

namespace {

using spyre::isa::DType;

// Median wall time (seconds) of fn over `reps` timed runs after one warm-up run.
double median_time(int reps, const std::function<void()>& fn) {
    fn();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

float half_to_float(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return spyre::num::f16_to_f32(h);
}

// libtorch's at::set_num_threads() does not reach the BLAS library it calls for fp32 matmul:
// OpenBLAS keeps its own thread pool. Set both, so "1 thread" really is one thread.
void set_threads(int n) {
    at::set_num_threads(n);
    using SetFn = void (*)(int);
    static const auto openblas_set =
        reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    if (openblas_set) openblas_set(n);
}

}  // namespace

int main(int argc, char** argv) {
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
    const int torch_default_threads = at::get_num_threads();
    std::printf("libtorch default threads: %d (BLAS: %s); repetitions: %d (median)\n",
                torch_default_threads,
                dlsym(RTLD_DEFAULT, "openblas_set_num_threads") ? "OpenBLAS, pinned with it"
                                                                 : "not OpenBLAS",
                reps);
    std::printf("%-6s %-5s | %10s %10s %7s | %10s %10s %7s | %9s %8s\n", "shape", "dtype",
                "eng1 GF/s", "torch1", "ratio1", "engN GF/s", "torchN", "ratioN", "model us",
                "max|d|");
    for (uint64_t n : {256, 512, 1024}) {
        for (DType t : {DType::F16, DType::F32}) {
            const char* tn = t == DType::F16 ? "fp16" : "fp32";
            const auto st = t == DType::F16 ? at::kHalf : at::kFloat;
            spyre::bench::MatmulRig one(n, n, n, t, 1), all(n, n, n, t, 0);
            const double e1 = median_time(reps, [&] { one.run(); });
            const double en = median_time(reps, [&] { all.run(); });
            const int64_t ni = static_cast<int64_t>(n);
            at::Tensor A = at::from_blob(one.a.data(), {ni, ni}, at::kFloat).clone().to(st);
            at::Tensor B = at::from_blob(one.b.data(), {ni, ni}, at::kFloat).clone().to(st);
            at::Tensor C;
            double t1 = NAN, tn_ = NAN, maxd = NAN;
            try {
                set_threads(1);
                t1 = median_time(reps, [&] { C = at::matmul(A, B); });
                set_threads(torch_default_threads);
                tn_ = median_time(reps, [&] { C = at::matmul(A, B); });
                at::Tensor Cf = C.to(at::kFloat).contiguous();
                const float* cp = Cf.data_ptr<float>();
                maxd = 0;
                for (uint64_t i = 0; i < n * n; ++i) {
                    const float ev = t == DType::F16 ? half_to_float(one.c() + 2 * i) : [&] {
                        float v;
                        std::memcpy(&v, one.c() + 4 * i, 4);
                        return v;
                    }();
                    maxd = std::max(maxd, double(std::fabs(ev - cp[i])));
                }
            } catch (const std::exception& ex) {
                set_threads(torch_default_threads);
                std::fprintf(stderr, "libtorch %s matmul failed: %s\n", tn, ex.what());
            }
            const double f = one.flops() * 1e-9;
            std::printf("%-6llu %-5s | %10.2f %10.2f %7.2f | %10.2f %10.2f %7.2f | %9.1f %8.2g\n",
                        static_cast<unsigned long long>(n), tn, f / e1, f / t1, e1 / t1, f / en,
                        f / tn_, en / tn_, one.modeled_seconds() * 1e6, maxd);
        }
    }
    return 0;
}

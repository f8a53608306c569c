// SPDX-License-Identifier: MIT
// Functional speed: engine matmul vs libtorch CPU matmul on the same shapes, in the same process.
// Built only when CMake finds Torch (find_package(Torch QUIET)). For each shape and dtype it
// prints the median host time of the engine (32-core SPMD program, 1 host thread and all host
// threads) and of at::matmul (1 thread and the default thread count), engine and libtorch runs
// alternating so that both see the same machine load; the ratio engine / libtorch with 1 thread
// each against the target (<= 1.5x, met / MISSED), judged on the CPU time of the calling thread
// (where both one-thread runs execute: it leaves out the time a busy machine gives to other
// processes), with the wall-clock times and ratios beside it; the time the same MM instructions
// take in the matmul kernels alone (cache-warm, no engine around them) and the rest of the engine
// time; the modeled device time and the max difference of the results.
//   spyre_engine_torch_compare [--json FILE] [repetitions=5] [dtypes=fp16,bf16,fp32,int8]
//                              [sizes=256,512,1024]
// --json also writes the table as JSON (times in ms, null where a run failed) for
// tools/bench/report.py.
// The kernel implementation is the engine's default (SPYRE_ENGINE_KERNELS=portable|avx2|avx512
// forces one, see Documentation/isa.md).
// int8: the engine accumulates in int32; libtorch's int8 matmul returns int8, so results are
// compared modulo 2^8.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <time.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../src/kernels.hpp"
#include "bench_matmul.hpp"

namespace {

using spyre::isa::DType;

constexpr double kTarget = 1.5;  // engine (1 host thread) <= 1.5 x libtorch (1 thread)

// Wall time and CPU time of the calling thread (seconds) of one run of fn. The one-thread runs of
// both sides execute on the calling thread (the engine with num_threads = 1 runs its cores
// there, libtorch with one thread too), so its CPU time leaves out the time the OS gave to other
// processes of a busy machine.
struct Time {
    double wall, cpu;
};

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

Time measure(const std::function<void()>& fn) {
    const double c0 = thread_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return {wall, thread_cpu_seconds() - c0};
}

// Medians of wall and CPU time over the runs.
Time median(const std::vector<Time>& t) {
    std::vector<double> w, c;
    for (const Time& x : t) w.push_back(x.wall), c.push_back(x.cpu);
    std::sort(w.begin(), w.end());
    std::sort(c.begin(), c.end());
    return {w[w.size() / 2], c[c.size() / 2]};
}

// Median times of fn over `reps` timed runs after one warm-up run.
Time median_time(int reps, const std::function<void()>& fn) {
    fn();
    std::vector<Time> t;
    for (int i = 0; i < reps; ++i) t.push_back(measure(fn));
    return median(t);
}

// Median times of fa and fb over `reps` runs each after one warm-up run of each, alternating
// a, b, a, b, ... so that both see the same load of the machine.
std::pair<Time, Time> paired_median_time(int reps, const std::function<void()>& fa,
                                         const std::function<void()>& fb) {
    fa();
    fb();
    std::vector<Time> ta, tb;
    for (int i = 0; i < reps; ++i) {
        ta.push_back(measure(fa));
        tb.push_back(measure(fb));
    }
    return {median(ta), median(tb)};
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

std::string load_average() {
    std::ifstream f("/proc/loadavg");
    std::string a, b, c;
    if (!(f >> a >> b >> c)) return "unknown";
    return a + " " + b + " " + c;
}

struct TypeInfo {
    DType t;
    const char* name;
    c10::ScalarType torch;
};
const TypeInfo kTypes[] = {{DType::F16, "fp16", at::kHalf},
                           {DType::BF16, "bf16", at::kBFloat16},
                           {DType::F32, "fp32", at::kFloat},
                           {DType::I8, "int8", at::kChar}};

// Element i of the engine's result as a double (int8: the int32 result wrapped to int8, as
// libtorch's int8 matmul returns it).
double engine_value(const spyre::bench::MatmulRig& r, uint64_t i) {
    const uint8_t* p = r.c();
    uint16_t h;
    switch (r.in) {
        case DType::F16:
            std::memcpy(&h, p + 2 * i, 2);
            return spyre::num::f16_to_f32(h);
        case DType::BF16:
            std::memcpy(&h, p + 2 * i, 2);
            return spyre::num::bf16_to_f32(h);
        case DType::I8: {
            int32_t v;
            std::memcpy(&v, p + 4 * i, 4);
            return static_cast<int8_t>(static_cast<uint32_t>(v) & 0xff);
        }
        default: {
            float v;
            std::memcpy(&v, p + 4 * i, 4);
            return v;
        }
    }
}

// Host time of the MM instructions of the job alone: the plan's sub-tile matmuls (the same count,
// shapes, strides and accumulate flags, on operands taken from the job's inputs) run back to back
// through spyre::kern::matmul on one thread, cache-warm.
Time kernel_time(const spyre::bench::MatmulRig& r, int reps) {
    const spyre::programs::MatmulGrid g =
        spyre::programs::plan_matmul(r.m, r.n, r.k, r.cfg.num_cores, r.in, r.cfg.lx_bytes);
    const uint64_t es = spyre::isa::dtype_size(r.in);
    const uint64_t chunks = r.k / g.kc;
    const uint64_t tiles = r.cfg.num_cores * (g.tm / g.sm) * (g.tn / g.sn);
    std::vector<uint8_t> a(g.sm * g.kc * es), b(g.kc * g.sn * es), c(g.sm * g.sn * 4);
    const uint8_t* ga = r.mem.data() + r.args[0];
    const uint8_t* gb = r.mem.data() + r.args[1];
    for (uint64_t i = 0; i < g.sm; ++i)
        std::memcpy(a.data() + i * g.kc * es, ga + i * r.k * es, g.kc * es);
    for (uint64_t i = 0; i < g.kc; ++i)
        std::memcpy(b.data() + i * g.sn * es, gb + i * r.n * es, g.sn * es);
    return median_time(reps, [&] {
        for (uint64_t t = 0; t < tiles; ++t)
            for (uint64_t ch = 0; ch < chunks; ++ch)
                spyre::kern::matmul({r.in, c.data(), a.data(), b.data(), g.sm, g.sn, g.kc,
                                     g.kc * es, g.sn * es, g.sn * 4, ch > 0});
    });
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    for (std::string x; std::getline(ss, x, ',');)
        if (!x.empty()) v.push_back(x);
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    std::string json_path;
    std::vector<std::string> args;  // the positional arguments
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--json") != 0) {
            args.emplace_back(argv[i]);
        } else if (i + 1 < argc) {
            json_path = argv[++i];
        } else {
            std::fprintf(stderr, "--json needs a file name\n");
            return 2;
        }
    }
    const int reps = args.size() > 0 ? std::max(1, std::atoi(args[0].c_str())) : 5;
    const std::vector<std::string> dtypes =
        split(args.size() > 1 ? args[1] : "fp16,bf16,fp32,int8");
    std::vector<uint64_t> sizes;
    for (const std::string& s : split(args.size() > 2 ? args[2] : "256,512,1024"))
        sizes.push_back(std::strtoull(s.c_str(), nullptr, 10));
    nlohmann::json json_rows = nlohmann::json::array();
    const int torch_default_threads = at::get_num_threads();
    std::string impls;
    for (const char* n : {"portable", "avx2", "avx512"})
        if (spyre::kern::kernels_supported(n)) impls += std::string(impls.empty() ? "" : " ") + n;
    std::printf("engine kernels: %s (this CPU runs: %s; SPYRE_ENGINE_KERNELS selects)\n",
                spyre::kern::kernels_name(), impls.c_str());
    std::printf("libtorch %s: default threads %d (BLAS: %s); repetitions: %d (median)\n",
                TORCH_VERSION, torch_default_threads,
                dlsym(RTLD_DEFAULT, "openblas_set_num_threads") ? "OpenBLAS, pinned with it"
                                                                : "not OpenBLAS",
                reps);
    const std::string load_start = load_average();
    std::printf("load average at start: %s\n", load_start.c_str());
    std::printf(
        "target: engine on 1 host thread <= %.1fx the time of libtorch on 1 thread, judged on the "
        "CPU time of the\n  calling thread (both run there; it leaves out time given to other "
        "processes); wall-clock beside it\n",
        kTarget);
    std::printf(
        "MM ms: CPU time of the job's MM instructions alone in the kernels; rest = eng1 - MM "
        "(interpreter, DMA copies,\n  output conversion, cycle model)\n\n");
    std::printf("%-5s %-5s | %8s %9s %6s %-12s | %8s %9s %6s | %8s %8s %6s | %7s %7s | %8s %7s\n",
                "", "", "eng1 cpu", "torch1 cpu", "ratio1", "target", "eng1", "torch1", "ratio1",
                "engN", "torchN", "ratioN", "MM", "rest", "model", "");
    std::printf("%-5s %-5s | %8s %9s %6s %-12s | %8s %9s %6s | %8s %8s %6s | %7s %7s | %8s %7s\n",
                "shape", "dtype", "ms", "ms", "", "", "wall ms", "wall ms", "", "wall ms",
                "wall ms", "", "cpu ms", "cpu ms", "us", "max|d|");
    int met = 0, total = 0;
    std::string missed;
    for (uint64_t n : sizes) {
        for (const std::string& dn : dtypes) {
            const TypeInfo* ti = nullptr;
            for (const TypeInfo& x : kTypes)
                if (dn == x.name) ti = &x;
            if (!ti) {
                std::fprintf(stderr, "unknown dtype %s (fp16, bf16, fp32, int8)\n", dn.c_str());
                return 2;
            }
            spyre::bench::MatmulRig one(n, n, n, ti->t, 1), all(n, n, n, ti->t, 0);
            const int64_t ni = static_cast<int64_t>(n);
            at::Tensor A = at::from_blob(one.a.data(), {ni, ni}, at::kFloat).clone().to(ti->torch);
            at::Tensor B = at::from_blob(one.b.data(), {ni, ni}, at::kFloat).clone().to(ti->torch);
            at::Tensor C;
            Time e1{NAN, NAN}, t1{NAN, NAN}, en{NAN, NAN}, tn{NAN, NAN};
            double maxd = NAN;
            try {
                set_threads(1);
                std::tie(e1, t1) =
                    paired_median_time(reps, [&] { one.run(); }, [&] { C = at::matmul(A, B); });
                set_threads(torch_default_threads);
                std::tie(en, tn) =
                    paired_median_time(reps, [&] { all.run(); }, [&] { C = at::matmul(A, B); });
                at::Tensor Cd = C.to(at::kDouble).contiguous();
                const double* cp = Cd.data_ptr<double>();
                maxd = 0;
                for (uint64_t i = 0; i < n * n; ++i)
                    maxd = std::max(maxd, std::fabs(engine_value(one, i) - cp[i]));
            } catch (const std::exception& ex) {
                set_threads(torch_default_threads);
                std::fprintf(stderr, "%llu %s failed: %s\n", static_cast<unsigned long long>(n),
                             ti->name, ex.what());
            }
            const Time mm = kernel_time(one, reps);
            const double r1 = e1.cpu / t1.cpu;
            const bool ok = r1 <= kTarget;
            ++total;
            if (ok) {
                ++met;
            } else {
                char buf[64];
                std::snprintf(buf, sizeof buf, "%s%llu %s (%.2fx)", missed.empty() ? "" : ", ",
                              static_cast<unsigned long long>(n), ti->name, r1);
                missed += buf;
            }
            char target[16];
            std::snprintf(target, sizeof target, "<=%.1f %s", kTarget, ok ? "met" : "MISSED");
            std::printf(
                "%-5llu %-5s | %8.3f %9.3f %6.2f %-12s | %8.3f %9.3f %6.2f | %8.3f %8.3f %6.2f | "
                "%7.3f %7.3f | %8.1f %7.2g\n",
                static_cast<unsigned long long>(n), ti->name, e1.cpu * 1e3, t1.cpu * 1e3, r1,
                target, e1.wall * 1e3, t1.wall * 1e3, e1.wall / t1.wall, en.wall * 1e3,
                tn.wall * 1e3, en.wall / tn.wall, mm.cpu * 1e3, (e1.cpu - mm.cpu) * 1e3,
                one.modeled_seconds() * 1e6, maxd);
            std::fflush(stdout);
            json_rows.push_back({{"size", n},
                                 {"dtype", ti->name},
                                 {"engine_1thread_cpu_ms", e1.cpu * 1e3},
                                 {"torch_1thread_cpu_ms", t1.cpu * 1e3},
                                 {"ratio_1thread_cpu", r1},
                                 {"target_met", ok},
                                 {"engine_1thread_wall_ms", e1.wall * 1e3},
                                 {"torch_1thread_wall_ms", t1.wall * 1e3},
                                 {"engine_all_threads_wall_ms", en.wall * 1e3},
                                 {"torch_all_threads_wall_ms", tn.wall * 1e3},
                                 {"mm_kernels_cpu_ms", mm.cpu * 1e3},
                                 {"modeled_us", one.modeled_seconds() * 1e6},
                                 {"max_abs_diff", maxd}});
        }
    }
    std::printf("\nfunctional speed (eng1 <= %.1f x torch1, CPU time): %d of %d met%s%s\n", kTarget,
                met, total, missed.empty() ? "" : "; missed: ", missed.c_str());
    const std::string load_end = load_average();
    std::printf("load average at end: %s\n", load_end.c_str());
    if (!json_path.empty()) {
        const nlohmann::json j = {{"target_ratio", kTarget},
                                  {"judged_on", "CPU time of the calling thread, 1 thread each"},
                                  {"engine_kernels", spyre::kern::kernels_name()},
                                  {"libtorch", TORCH_VERSION},
                                  {"torch_default_threads", torch_default_threads},
                                  {"repetitions", reps},
                                  {"load_average_start", load_start},
                                  {"load_average_end", load_end},
                                  {"met", met},
                                  {"total", total},
                                  {"rows", json_rows}};
        std::ofstream f(json_path);
        f << j.dump(2) << "\n";
        if (!f) {
            std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
            return 1;
        }
        std::printf("wrote %s\n", json_path.c_str());
    }
    return 0;
}

// spyre-matmul: runs C = A x B (fp16 inputs, fp32 accumulation, fp16 output) on every core of
// each card through libspyre: program load, buffers, copies, launch. Checks C against a CPU
// reference and prints the modeled device time from the card's cycle model.
//
//   spyre-matmul [M N K]      (default 256 256 256)
#include "spyre/programs/matmul.hpp"

#include <spyre/spyre.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "spyre/numerics.hpp"

namespace {

bool check(spyre_status s, const char* what) {
    if (s == SPYRE_SUCCESS) return true;
    std::fprintf(stderr, "%s: %s: %s\n", what, spyre_status_string(s), spyre_last_error());
    return false;
}

struct Buffers {
    spyre_buffer_t a = nullptr, b = nullptr, c = nullptr;
    ~Buffers() {
        spyre_free(a);
        spyre_free(b);
        spyre_free(c);
    }
};

// Runs the matmul on one card; returns the number of mismatching elements or -1 on error.
long run_on(int index, uint64_t M, uint64_t N, uint64_t K, const std::vector<uint16_t>& a,
            const std::vector<uint16_t>& b, const std::vector<double>& ref) {
    spyre_device_t dev = nullptr;
    if (!check(spyre_device_open(index, &dev), "spyre_device_open")) return -1;
    spyre_device_info info{};
    spyre_device_get_info(dev, &info);
    long bad = -1;
    Buffers buf;
    spyre_program_t prog = nullptr;
    std::vector<uint16_t> c(M * N);
    try {
        const auto image = spyre::programs::build_matmul_program(M, N, K, info.num_cores);
        spyre_launch_params p{};
        spyre_launch_stats st{};
        if (!check(spyre_program_load(dev, image.data(), image.size(), &prog), "program_load") ||
            !check(spyre_malloc(dev, a.size() * 2, &buf.a), "spyre_malloc") ||
            !check(spyre_malloc(dev, b.size() * 2, &buf.b), "spyre_malloc") ||
            !check(spyre_malloc(dev, c.size() * 2, &buf.c), "spyre_malloc") ||
            !check(spyre_memcpy_htod(buf.a, 0, a.data(), a.size() * 2), "memcpy_htod") ||
            !check(spyre_memcpy_htod(buf.b, 0, b.data(), b.size() * 2), "memcpy_htod"))
            throw 0;
        spyre_buffer_t list[] = {buf.a, buf.b, buf.c};
        p.num_args = 3;
        spyre_buffer_device_address(buf.a, &p.args[0]);
        spyre_buffer_device_address(buf.b, &p.args[1]);
        spyre_buffer_device_address(buf.c, &p.args[2]);
        p.buffers = list;
        p.num_buffers = 3;
        if (!check(spyre_launch(prog, &p, &st), "spyre_launch") ||
            !check(spyre_memcpy_dtoh(c.data(), buf.c, 0, c.size() * 2), "memcpy_dtoh"))
            throw 0;
        bad = 0;
        for (size_t i = 0; i < c.size(); i++) {
            const double got = spyre::num::f16_to_f32(c[i]);
            if (std::fabs(got - ref[i]) > 1e-2 + 2e-3 * std::fabs(ref[i])) bad++;
        }
        const double flops = 2.0 * M * N * K;
        std::printf(
            "%s: %llux%llux%llu fp16 matmul on %u cores %s: modeled %.2f us (%llu cycles at %u "
            "MHz), %.1f TFLOP/s, MAC utilization %.0f%%, DDR read %.1f MiB\n",
            info.name, (unsigned long long)M, (unsigned long long)N, (unsigned long long)K,
            st.num_cores, bad ? "MISMATCH" : "verified", st.time_ns / 1e3,
            (unsigned long long)st.total_cycles, st.clock_mhz, flops / st.time_ns / 1e3,
            st.utilization * 100, st.ddr_read_bytes / 1048576.0);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", info.name, e.what());
    } catch (int) {
    }
    spyre_program_free(prog);
    spyre_device_close(dev);
    return bad;
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t M = 256, N = 256, K = 256;
    if (argc == 4) {
        M = std::strtoull(argv[1], nullptr, 0);
        N = std::strtoull(argv[2], nullptr, 0);
        K = std::strtoull(argv[3], nullptr, 0);
    } else if (argc != 1) {
        std::fprintf(stderr, "usage: %s [M N K]\n", argv[0]);
        return 2;
    }
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<uint16_t> a(M * K), b(K * N);
    for (auto& x : a) x = spyre::num::f32_to_f16(dist(rng));
    for (auto& x : b) x = spyre::num::f32_to_f16(dist(rng));
    std::vector<double> ref(M * N, 0.0);
    for (uint64_t i = 0; i < M; i++)
        for (uint64_t k = 0; k < K; k++) {
            const double x = spyre::num::f16_to_f32(a[i * K + k]);
            for (uint64_t j = 0; j < N; j++)
                ref[i * N + j] += x * spyre::num::f16_to_f32(b[k * N + j]);
        }
    int count = 0;
    if (!check(spyre_get_device_count(&count), "spyre_get_device_count")) return 1;
    int failed = 0;
    for (int i = 0; i < count; i++)
        if (run_on(i, M, N, K, a, b, ref) != 0) failed++;
    return failed ? 1 : 0;
}

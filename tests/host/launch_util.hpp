// Programs and CPU references shared by libspyre's launch tests (host: simulator backend;
// guest: kernel backend). Header-only; needs engine/include.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "spyre/numerics.hpp"
#include "spyre/program_builder.hpp"
#include "spyre/programs/matmul.hpp"

namespace spyre_test {

// fp16 values of moderate magnitude (fp16 of uniform [-1, 1)).
inline std::vector<uint16_t> random_f16(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = spyre::num::f32_to_f16(dist(rng));
    return v;
}

// C = A x B as the engine defines it (isa.md "Matrix unit"): exact products, fp32 sum in
// ascending k, rounded once to fp16.
inline std::vector<uint16_t> matmul_ref(const std::vector<uint16_t>& a,
                                        const std::vector<uint16_t>& b, size_t M, size_t N,
                                        size_t K) {
    std::vector<float> af(a.size()), bf(b.size());
    for (size_t i = 0; i < a.size(); ++i) af[i] = spyre::num::f16_to_f32(a[i]);
    for (size_t i = 0; i < b.size(); ++i) bf[i] = spyre::num::f16_to_f32(b[i]);
    std::vector<uint16_t> c(M * N);
    for (size_t i = 0; i < M; ++i)
        for (size_t j = 0; j < N; ++j) {
            float acc = 0.0f;
            for (size_t k = 0; k < K; ++k) {
                volatile float p = af[i * K + k] * bf[k * N + j];  // exact in fp32
                acc = acc + p;
            }
            c[i * N + j] = spyre::num::f32_to_f16(acc);
        }
    return c;
}

// z = x + y (fp16), `per_core` elements per core (per_core * 2 a multiple of 128 bytes).
// Launch arguments: 0 = x, 1 = y, 2 = z.
inline std::vector<uint8_t> build_add_program(int64_t per_core) {
    using namespace spyre::isa;
    spyre::ProgramBuilder b;
    const int64_t bytes = per_core * 2;
    b.arg(3, 0), b.arg(4, 1), b.arg(5, 2);
    b.muli(6, 1, bytes);
    b.add(3, 3, 6), b.add(4, 4, 6), b.add(5, 5, 6);
    b.li(7, bytes);
    b.li(8, 0), b.li(9, bytes), b.li(10, 2 * bytes);
    b.load(8, 3, 7);
    b.load(9, 4, 7);
    b.set_regs(20, {1, per_core, bytes, bytes, bytes});
    b.vbin(VBin::ADD, Bcast::NONE, DType::F16, DType::F16, 10, 8, 9, 20);
    b.store(10, 5, 7);
    b.halt();
    return b.finish();
}

inline std::vector<uint16_t> add_ref(const std::vector<uint16_t>& x,
                                     const std::vector<uint16_t>& y) {
    std::vector<uint16_t> z(x.size());
    for (size_t i = 0; i < x.size(); ++i)
        z[i] = spyre::num::f32_to_f16(spyre::num::f16_to_f32(x[i]) + spyre::num::f16_to_f32(y[i]));
    return z;
}

// Busy for `iterations` trips of a one-instruction loop on each core: a job that occupies its
// ring for a while (wall time grows with iterations; no memory touched, no arguments).
inline std::vector<uint8_t> build_spin_program(int64_t iterations) {
    spyre::ProgramBuilder b;
    b.li(3, 0);
    b.loopi(iterations);
    b.addi(3, 3, 1);
    b.endloop();
    b.halt();
    return b.finish();
}

// Every core loads a stick from argument 0; core `bad_core` first loads one from argument 1
// (a buffer the launch does not list): DDR_WINDOW on that core at instruction *fault_pc.
inline std::vector<uint8_t> build_fault_program(int64_t bad_core, uint32_t* fault_pc) {
    using namespace spyre::isa;
    spyre::ProgramBuilder b;
    b.arg(3, 0), b.arg(4, 1);
    b.li(5, bad_core), b.li(7, 128), b.li(8, 0);
    auto ok = b.label();
    b.br(Cond::NE, 1, 5, ok);
    *fault_pc = b.size();
    b.load(8, 4, 7);
    b.bind(ok);
    b.load(8, 3, 7);
    b.halt();
    return b.finish();
}

}  // namespace spyre_test

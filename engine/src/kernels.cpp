// SPDX-License-Identifier: MIT
#include "kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "kernels_impl.hpp"
#include "spyre/numerics.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace spyre::kern {

using isa::DType;

namespace {

template <typename T>
inline T ld(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <typename T>
inline void st(uint8_t* p, T v) {
    std::memcpy(p, &v, sizeof v);
}

inline float fmax_nan(float a, float b) { return (a > b || a != a) ? a : b; }
inline float fmin_nan(float a, float b) { return (a < b || a != a) ? a : b; }

// Per-thread scratch buffers. Grown without zeroing (every kernel writes what it reads): the
// pages of a large buffer are then faulted in while the kernel fills it, between cancel checks.
template <typename T>
struct Scratch {
    std::unique_ptr<T[]> p;
    size_t n = 0;
};

thread_local Scratch<float> tl_f0, tl_f1, tl_f2, tl_f3;
thread_local Scratch<double> tl_d0;

template <typename T>
inline T* grow(Scratch<T>& v, size_t n) {
    if (v.n < n) {
        v.p.reset();
        v.p.reset(new T[n]);
        v.n = n;
    }
    return v.p.get();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Instruction-set specific code. Every kernel below exists as a portable version and, on x86-64,
// as an AVX2+FMA+F16C version (here) and an AVX-512 version (kernels_avx512.cpp), one of them
// chosen at run time (default_impl() below). All versions perform the same IEEE operations in the
// same order (the matmul uses fused multiply-adds in all), so results are bit-identical whichever
// is chosen (NaN payloads of MM results excepted, see isa.md).

namespace detail {

void h2f_portable(const uint8_t* p, size_t n, float* out) {
    for (size_t i = 0; i < n; ++i) out[i] = num::f16_to_f32(ld<uint16_t>(p + 2 * i));
}
void f2h_portable(uint8_t* p, size_t n, const float* in) {
    for (size_t i = 0; i < n; ++i) st<uint16_t>(p + 2 * i, num::f32_to_f16(in[i]));
}
void bf2f_portable(const uint8_t* p, size_t n, float* out) {
    for (size_t i = 0; i < n; ++i) out[i] = num::bf16_to_f32(ld<uint16_t>(p + 2 * i));
}
void f2bf_portable(uint8_t* p, size_t n, const float* in) {
    for (size_t i = 0; i < n; ++i) st<uint16_t>(p + 2 * i, num::f32_to_bf16(in[i]));
}
void i8f_portable(const uint8_t* p, size_t n, float* out) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<int8_t>(p[i]));
}
void fi8_portable(uint8_t* p, size_t n, const float* in) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(num::f32_to_i8(in[i]));
}
void i32f_portable(const uint8_t* p, size_t n, float* out) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(ld<int32_t>(p + 4 * i));
}
void fi32_portable(uint8_t* p, size_t n, const float* in) {
    for (size_t i = 0; i < n; ++i) st<int32_t>(p + 4 * i, num::f32_to_i32(in[i]));
}

}  // namespace detail

namespace {

using namespace detail;

// Matmul micro-kernels: per step, 6 words of A (row i of the 6-row panel at a + i * ars, moving
// by ass bytes per step: fp32 rows in place, or the packed int8 layout) and 16 words of packed B
// (a 16-column panel); C is a 6 x 16 tile of 4-byte elements with a row stride of ldc bytes,
// initialised from C or (zero) from 0.
//  fp32: a step is one k; C[i][j] = fma(A[i][k], B[k][j], C[i][j]) for k ascending.
//  int8: a step is a pair (k, k+1) of int16 values; C[i][j] += A[i][k] B[k][j] + A[i][k+1]
//        B[k+1][j] in wrapping int32 (the pair sum is exact).
constexpr size_t kMR = 6, kNR = 16;
constexpr size_t kKC = 256;  // steps per cache block (B panel slice: 16 KiB)
constexpr size_t kMCP = 16;  // A panels per cache block (96 rows x kKC steps: 96 KiB)

void ukr_f32_generic(size_t steps, const char* a, size_t ars, size_t ass, const void* bv,
                     uint8_t* c, size_t ldc, bool zero) {
    const float* b = static_cast<const float*>(bv);
    float acc[kMR][kNR];
    for (size_t i = 0; i < kMR; ++i) {
        if (zero)
            for (size_t j = 0; j < kNR; ++j) acc[i][j] = 0.0f;
        else
            std::memcpy(acc[i], c + i * ldc, sizeof acc[i]);
    }
    for (size_t k = 0; k < steps; ++k, a += ass, b += kNR)
        for (size_t i = 0; i < kMR; ++i) {
            const float ai = ld<float>(reinterpret_cast<const uint8_t*>(a + i * ars));
            for (size_t j = 0; j < kNR; ++j) acc[i][j] = std::fma(ai, b[j], acc[i][j]);
        }
    for (size_t i = 0; i < kMR; ++i) std::memcpy(c + i * ldc, acc[i], sizeof acc[i]);
}

void ukr_i8_generic(size_t steps, const char* a, size_t ars, size_t ass, const void* bv, uint8_t* c,
                    size_t ldc, bool zero) {
    const int16_t* b = static_cast<const int16_t*>(bv);
    uint32_t acc[kMR][kNR];
    for (size_t i = 0; i < kMR; ++i) {
        if (zero)
            for (size_t j = 0; j < kNR; ++j) acc[i][j] = 0;
        else
            std::memcpy(acc[i], c + i * ldc, sizeof acc[i]);
    }
    for (size_t k = 0; k < steps; ++k, a += ass, b += 2 * kNR)
        for (size_t i = 0; i < kMR; ++i) {
            const uint32_t ai = ld<uint32_t>(reinterpret_cast<const uint8_t*>(a + i * ars));
            const int32_t a0 = static_cast<int16_t>(ai & 0xffff);
            const int32_t a1 = static_cast<int16_t>(ai >> 16);
            for (size_t j = 0; j < kNR; ++j) {
                // same pairing as pmaddwd: columns 0-7 in the first 32 bytes, 8-15 in the next
                const int16_t* bp = b + (j < 8 ? 2 * j : 16 + 2 * (j - 8));
                acc[i][j] += static_cast<uint32_t>(a0 * bp[0] + a1 * bp[1]);
            }
        }
    for (size_t i = 0; i < kMR; ++i) std::memcpy(c + i * ldc, acc[i], sizeof acc[i]);
}

// Full-width tile of `rows` < 6 rows through a 6 x 16 temporary.
void ukr_f32_part_generic(size_t rows, size_t steps, const char* a, const void* b, uint8_t* c,
                          size_t ldc, bool zero) {
    alignas(32) uint8_t tmp[kMR * kNR * 4] = {};
    if (!zero)
        for (size_t i = 0; i < rows; ++i) std::memcpy(tmp + i * kNR * 4, c + i * ldc, kNR * 4);
    ukr_f32_generic(steps, a, 4, kMR * 4, b, tmp, kNR * 4, zero);
    for (size_t i = 0; i < rows; ++i) std::memcpy(c + i * ldc, tmp + i * kNR * 4, kNR * 4);
}

// Packs rows[0..nrows) (k fp32 values each, nrows <= 6) into one k-major 6-row A panel:
// dst[kk * 6 + i] = rows[i][kk], zero for i >= nrows.
void pack_a_generic(const float* const* rows, size_t nrows, size_t k, float* dst) {
    for (size_t kk = 0; kk < k; ++kk)
        for (size_t i = 0; i < kMR; ++i) dst[kk * kMR + i] = i < nrows ? rows[i][kk] : 0.0f;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define SPYRE_X86_SIMD 1
#define SPYRE_AVX2 __attribute__((target("avx2,fma,f16c")))

SPYRE_AVX2 void f16_to_f32_avx2(const uint8_t* p, size_t n, float* out) {
    size_t i = 0;
    const __m256i m7fff = _mm256_set1_epi32(0x7fff), m7c00 = _mm256_set1_epi32(0x7c00);
    const __m256i m8000 = _mm256_set1_epi32(0x8000), m3ff = _mm256_set1_epi32(0x3ff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i));
        __m256 f = _mm256_cvtph_ps(h);
        const __m256i x = _mm256_cvtepu16_epi32(h);
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, m7fff), m7c00);
        if (!_mm256_testz_si256(nan, nan)) {
            // keep signalling NaNs signalling, as num::f16_to_f32 does
            const __m256i bits = _mm256_or_si256(
                _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(x, m8000), 16), inf),
                _mm256_slli_epi32(_mm256_and_si256(x, m3ff), 13));
            f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan));
        }
        _mm256_storeu_ps(out + i, f);
    }
    h2f_portable(p + 2 * i, n - i, out + i);
}

SPYRE_AVX2 void f32_to_f16_avx2(uint8_t* p, size_t n, const float* in) {
    size_t i = 0;
    // round to nearest even; NaN -> quiet NaN with the top payload bits, like num::f32_to_f16
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 2 * i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    f2h_portable(p + 2 * i, n - i, in + i);
}

#define SPYRE_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

// fp32 A is always a packed panel here (the 6 values of a step adjacent, 24 bytes per step); R
// rows of C (R <= 6) are computed and stored.
template <int R>
SPYRE_AVX2 void ukr_f32_avx2_rows(size_t steps, const float* ap, const float* b, uint8_t* c,
                                  size_t ldc, bool zero) {
    __m256 acc[R][2];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
        const float* ci = reinterpret_cast<const float*>(c + i * ldc);
        acc[i][0] = zero ? _mm256_setzero_ps() : _mm256_loadu_ps(ci);
        acc[i][1] = zero ? _mm256_setzero_ps() : _mm256_loadu_ps(ci + 8);
    }
#pragma GCC unroll 4
    for (size_t k = 0; k < steps; ++k, ap += kMR, b += kNR) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
            const __m256 ai = _mm256_broadcast_ss(ap + i);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
        float* ci = reinterpret_cast<float*>(c + i * ldc);
        _mm256_storeu_ps(ci, acc[i][0]);
        _mm256_storeu_ps(ci + 8, acc[i][1]);
    }
}

SPYRE_AVX2 void ukr_f32_avx2(size_t steps, const char* a, size_t, size_t, const void* bv,
                             uint8_t* c, size_t ldc, bool zero) {
    ukr_f32_avx2_rows<6>(steps, reinterpret_cast<const float*>(a), static_cast<const float*>(bv), c,
                         ldc, zero);
}

// Full-width (16-column) tile of `rows` < 6 rows, stored directly.
SPYRE_AVX2 void ukr_f32_part_avx2(size_t rows, size_t steps, const char* a, const void* bv,
                                  uint8_t* c, size_t ldc, bool zero) {
    const float* ap = reinterpret_cast<const float*>(a);
    const float* b = static_cast<const float*>(bv);
    switch (rows) {
        case 1:
            return ukr_f32_avx2_rows<1>(steps, ap, b, c, ldc, zero);
        case 2:
            return ukr_f32_avx2_rows<2>(steps, ap, b, c, ldc, zero);
        case 3:
            return ukr_f32_avx2_rows<3>(steps, ap, b, c, ldc, zero);
        case 4:
            return ukr_f32_avx2_rows<4>(steps, ap, b, c, ldc, zero);
        case 5:
            return ukr_f32_avx2_rows<5>(steps, ap, b, c, ldc, zero);
        default:
            return ukr_f32_avx2_rows<6>(steps, ap, b, c, ldc, zero);
    }
}

SPYRE_AVX2 void ukr_i8_avx2(size_t steps, const char* a, size_t ars, size_t ass, const void* bv,
                            uint8_t* c, size_t ldc, bool zero) {
    const __m256i* b = static_cast<const __m256i*>(bv);
#define DECL(i) __m256i c##i##0, c##i##1;
    SPYRE_ROWS(DECL)
#undef DECL
    if (zero) {
#define ZERO(i) c##i##0 = _mm256_setzero_si256(), c##i##1 = _mm256_setzero_si256();
        SPYRE_ROWS(ZERO)
#undef ZERO
    } else {
#define LOAD(i)                                                                    \
    c##i##0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + (i) * ldc)); \
    c##i##1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + (i) * ldc + 32));
        SPYRE_ROWS(LOAD)
#undef LOAD
    }
    for (size_t k = 0; k < steps; ++k, a += ass, b += 2) {
        const __m256i b0 = _mm256_loadu_si256(b), b1 = _mm256_loadu_si256(b + 1);
#define STEP(i)                                                                              \
    {                                                                                        \
        const __m256i ai =                                                                   \
            _mm256_set1_epi32(ld<int32_t>(reinterpret_cast<const uint8_t*>(a + (i) * ars))); \
        c##i##0 = _mm256_add_epi32(c##i##0, _mm256_madd_epi16(ai, b0));                      \
        c##i##1 = _mm256_add_epi32(c##i##1, _mm256_madd_epi16(ai, b1));                      \
    }
        SPYRE_ROWS(STEP)
#undef STEP
    }
#define STORE(i)                                                             \
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + (i) * ldc), c##i##0); \
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + (i) * ldc + 32), c##i##1);
    SPYRE_ROWS(STORE)
#undef STORE
}
#undef SPYRE_ROWS

SPYRE_AVX2 void pack_a_avx2(const float* const* rows, size_t nrows, size_t k, float* dst) {
    if (nrows < kMR) return pack_a_generic(rows, nrows, k, dst);
    size_t kk = 0;
    const float *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3], *r4 = rows[4],
                *r5 = rows[5];
    for (; kk + 8 <= k; kk += 8, dst += 8 * kMR) {
        // 8x8 transpose of rows 0-5 (rows 6, 7 unused) -> 8 k-steps of 6 values
        const __m256 x0 = _mm256_loadu_ps(r0 + kk), x1 = _mm256_loadu_ps(r1 + kk),
                     x2 = _mm256_loadu_ps(r2 + kk), x3 = _mm256_loadu_ps(r3 + kk),
                     x4 = _mm256_loadu_ps(r4 + kk), x5 = _mm256_loadu_ps(r5 + kk);
        const __m256 z = _mm256_setzero_ps();
        const __m256 t0 = _mm256_unpacklo_ps(x0, x1), t1 = _mm256_unpackhi_ps(x0, x1),
                     t2 = _mm256_unpacklo_ps(x2, x3), t3 = _mm256_unpackhi_ps(x2, x3),
                     t4 = _mm256_unpacklo_ps(x4, x5), t5 = _mm256_unpackhi_ps(x4, x5);
        // u0: (r0..r3)[k0], (r0..r3)[k4] ; v0: (r4, r5, -, -)[k0], [k4]
        const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                     u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
        const __m256 v0 = _mm256_shuffle_ps(t4, z, 0x44), v1 = _mm256_shuffle_ps(t4, z, 0xEE),
                     v2 = _mm256_shuffle_ps(t5, z, 0x44), v3 = _mm256_shuffle_ps(t5, z, 0xEE);
        const __m256 us[4] = {u0, u1, u2, u3}, vs[4] = {v0, v1, v2, v3};
        for (int q = 0; q < 4; ++q) {
            // k step q (low lanes) and q + 4 (high lanes)
            float* d0 = dst + q * kMR;
            float* d1 = dst + (q + 4) * kMR;
            _mm_storeu_ps(d0, _mm256_castps256_ps128(us[q]));
            _mm_storel_pi(reinterpret_cast<__m64*>(d0 + 4), _mm256_castps256_ps128(vs[q]));
            _mm_storeu_ps(d1, _mm256_extractf128_ps(us[q], 1));
            _mm_storel_pi(reinterpret_cast<__m64*>(d1 + 4), _mm256_extractf128_ps(vs[q], 1));
        }
    }
    for (; kk < k; ++kk, dst += kMR)
        for (size_t i = 0; i < kMR; ++i) dst[i] = rows[i][kk];
}
#endif

constexpr Impl kPortable{"portable",           h2f_portable,    f2h_portable,   bf2f_portable,
                         f2bf_portable,        i8f_portable,    fi8_portable,   i32f_portable,
                         fi32_portable,        ukr_f32_generic, ukr_i8_generic, pack_a_generic,
                         ukr_f32_part_generic, nullptr,         nullptr};
#ifdef SPYRE_X86_SIMD
constexpr Impl kAvx2{"avx2",       f16_to_f32_avx2, f32_to_f16_avx2,   bf2f_portable, f2bf_portable,
                     i8f_portable, fi8_portable,    i32f_portable,     fi32_portable, ukr_f32_avx2,
                     ukr_i8_avx2,  pack_a_avx2,     ukr_f32_part_avx2, nullptr,       nullptr};

bool avx2_supported() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

// The AVX-512 implementation: the AVX2 one with the kernels kernels_avx512.cpp provides.
const Impl* avx512_impl() {
    static const Impl im = [] {
        Impl x = kAvx2;
        x.name = "avx512";
        avx512_fill(x);
        return x;
    }();
    return &im;
}
#endif

// The implementation called `name` if this CPU runs it, else nullptr.
const Impl* by_name(const char* name) {
    const std::string_view s = name ? name : "";
    if (s == "portable") return &kPortable;
#ifdef SPYRE_X86_SIMD
    if (s == "avx2" && avx2_supported()) return &kAvx2;
    if (s == "avx512" && avx2_supported() && avx512_supported()) return avx512_impl();
#endif
    return nullptr;
}

// The fastest implementation this CPU runs.
const Impl* best() {
    for (const char* n : {"avx512", "avx2"})
        if (const Impl* p = by_name(n)) return p;
    return &kPortable;
}

// SPYRE_ENGINE_KERNELS=portable|avx2|avx512 forces an implementation; unset, empty or "auto":
// the fastest one. A name this CPU does not run falls back to the fastest (with a warning).
const Impl* default_impl() {
    const char* env = std::getenv("SPYRE_ENGINE_KERNELS");
    if (!env || !*env || std::string_view(env) == "auto") return best();
    if (const Impl* p = by_name(env)) return p;
    const Impl* p = best();
    std::fprintf(stderr,
                 "spyre engine: SPYRE_ENGINE_KERNELS=%s is not an implementation this CPU runs "
                 "(portable, avx2, avx512); using %s\n",
                 env, p->name);
    return p;
}

std::atomic<const Impl*> g_impl{nullptr};

inline const Impl& impl() {
    const Impl* p = g_impl.load(std::memory_order_acquire);
    if (!p) {
        static const Impl* const first = default_impl();  // once, also with racing threads
        const Impl* none = nullptr;
        p = g_impl.compare_exchange_strong(none, first, std::memory_order_acq_rel) ? first : none;
    }
    return *p;
}

}  // namespace

const char* kernels_name() { return impl().name; }

bool kernels_supported(const char* name) { return by_name(name) != nullptr; }

bool set_kernels(const char* name) {
    const Impl* p = name ? by_name(name) : default_impl();
    if (!p) return false;
    g_impl.store(p, std::memory_order_release);
    return true;
}

void load_row(DType t, const uint8_t* p, size_t n, float* out) {
    if (n == 0) return;
    switch (t) {
        case DType::F32:
            std::memcpy(out, p, n * 4);
            break;
        case DType::F16:
            impl().h2f(p, n, out);
            break;
        case DType::BF16:
            impl().bf2f(p, n, out);
            break;
        case DType::I8:
            impl().i8f(p, n, out);
            break;
        case DType::I32:
            impl().i32f(p, n, out);
            break;
        default:
            break;
    }
}

void store_row(DType t, uint8_t* p, size_t n, const float* in) {
    if (n == 0) return;
    switch (t) {
        case DType::F32:
            std::memcpy(p, in, n * 4);
            break;
        case DType::F16:
            impl().f2h(p, n, in);
            break;
        case DType::BF16:
            impl().f2bf(p, n, in);
            break;
        case DType::I8:
            impl().fi8(p, n, in);
            break;
        case DType::I32:
            impl().fi32(p, n, in);
            break;
        default:
            break;
    }
}

namespace {

// A operand of the driver: panel ip (6 rows) starts at base + ip * ps (the last, partial panel of
// a row layout is a zero-padded copy at tail); row i of a panel at + i * rs; steps ss bytes apart.
struct APanels {
    const char* base;
    size_t ps, rs, ss;
    const char* tail;  // nullptr: the last panel is complete or zero padded in place
    size_t tail_rs;
};

// Runs the micro-kernel over A and packed B (np panels of `steps` x 16 words). Blocking only
// changes which tile is computed when; every C element still sees its steps in ascending order,
// so the result does not depend on the blocking.
void gemm_driver(Ukr ukr, const APanels& A, const void* bpv, size_t m, size_t n, size_t steps,
                 uint8_t* c, size_t ldc, bool accumulate, const Cancel* cancel) {
    const size_t mp = (m + kMR - 1) / kMR, np = (n + kNR - 1) / kNR;
    const char* bp = static_cast<const char*>(bpv);  // 4-byte words
    alignas(32) uint8_t tmp[kMR * kNR * 4];
    for (size_t pc = 0; pc < steps; pc += kKC) {
        const size_t kc = std::min(kKC, steps - pc);
        const bool zero = !accumulate && pc == 0;
        for (size_t ic = 0; ic < mp; ic += kMCP) {
            const size_t ie = std::min(mp, ic + kMCP);
            for (size_t jp = 0; jp < np; ++jp) {
                if (cancelled(cancel)) return;
                const char* b = bp + (jp * steps + pc) * kNR * 4;
                const size_t cols = std::min(kNR, n - jp * kNR);
                for (size_t ip = ic; ip < ie; ++ip) {
                    const size_t rows = std::min(kMR, m - ip * kMR);
                    const bool tail = A.tail && rows < kMR;
                    const char* a = (tail ? A.tail : A.base + ip * A.ps) + pc * A.ss;
                    const size_t ars = tail ? A.tail_rs : A.rs;
                    uint8_t* ct = c + ip * kMR * ldc + jp * kNR * 4;
                    if (rows == kMR && cols == kNR) {
                        ukr(kc, a, ars, A.ss, b, ct, ldc, zero);
                        continue;
                    }
                    std::memset(tmp, 0, sizeof tmp);
                    if (!zero)
                        for (size_t i = 0; i < rows; ++i)
                            std::memcpy(tmp + i * kNR * 4, ct + i * ldc, cols * 4);
                    ukr(kc, a, ars, A.ss, b, tmp, kNR * 4, zero);
                    for (size_t i = 0; i < rows; ++i)
                        std::memcpy(ct + i * ldc, tmp + i * kNR * 4, cols * 4);
                }
            }
        }
    }
}

thread_local Scratch<float> tl_pa, tl_pb;
thread_local Scratch<uint32_t> tl_pa8;
thread_local Scratch<int16_t> tl_pb8;

}  // namespace

void forget_packed(const uint8_t* lo, const uint8_t* hi) {
#ifdef SPYRE_KERN_X86
    detail::avx512_forget_packed(lo, hi);
#else
    (void)lo, (void)hi;
#endif
}

void matmul(const MatmulArgs& g) {
    const size_t m = g.m, n = g.n, k = g.k;
    if (m == 0 || n == 0) return;
    if (k == 0) {
        if (!g.accumulate)
            for (size_t i = 0; i < m; ++i) std::memset(g.c + i * g.ldc, 0, n * 4);
        return;
    }
    // If C overlaps A or B, A and B are first copied aside: they are read completely before C is
    // written (the kernels below read them while they write C).
    const size_t es = isa::dtype_size(g.in);
    {
        const uintptr_t c0 = reinterpret_cast<uintptr_t>(g.c), c1 = c0 + (m - 1) * g.ldc + n * 4;
        auto overlaps = [&](const uint8_t* p, size_t rows, size_t ld, size_t bytes) {
            const uintptr_t p0 = reinterpret_cast<uintptr_t>(p), p1 = p0 + (rows - 1) * ld + bytes;
            return p0 < c1 && c0 < p1;
        };
        if (g.b_trans) {
            // transposed while packed where the implementation can; else copied transposed
            // (the copy is read before C is written, so C may overlap the stored B)
            const Impl& im = impl();
            if (g.in == DType::F32 && im.mm_f32_b_trans && !overlaps(g.a, m, g.lda, k * es) &&
                !overlaps(g.b, n, g.ldb, k * es))
                return im.mm_float(g);
            MatmulArgs r = g;
            r.b = transposed_copy(1, static_cast<uint32_t>(es), g.b, n, k, g.ldb);
            r.ldb = n * es;
            r.b_trans = false;
            r.b_gen = 0;
            return matmul(r);
        }
        if (overlaps(g.a, m, g.lda, k * es) || overlaps(g.b, k, g.ldb, n * es)) {
            uint8_t* sa = reinterpret_cast<uint8_t*>(grow(tl_f2, (m * k * es + 3) / 4));
            uint8_t* sb = reinterpret_cast<uint8_t*>(grow(tl_f3, (k * n * es + 3) / 4));
            for (size_t i = 0; i < m; ++i) {
                if ((i & 255) == 0 && cancelled(g.cancel)) return;
                std::memcpy(sa + i * k * es, g.a + i * g.lda, k * es);
            }
            for (size_t i = 0; i < k; ++i) {
                if ((i & 255) == 0 && cancelled(g.cancel)) return;
                std::memcpy(sb + i * n * es, g.b + i * g.ldb, n * es);
            }
            return matmul(
                {g.in, g.c, sa, sb, m, n, k, k * es, n * es, g.ldc, g.accumulate, g.cancel});
        }
    }
    const Impl& im = impl();
    if (auto mm = g.in == DType::I8 ? im.mm_i8 : im.mm_float) return mm(g);
    const size_t mp = (m + kMR - 1) / kMR, np = (n + kNR - 1) / kNR;
    if (g.in == DType::I8) {
        // A: int16 pairs (k, k+1) per row; B: for each pair, 16 columns of (k, k+1) int16 pairs
        const size_t steps = (k + 1) / 2;
        uint32_t* pa = grow(tl_pa8, mp * steps * kMR);
        int16_t* b16 = grow(tl_pb8, np * steps * kNR * 2);
        for (size_t ip = 0; ip < mp; ++ip) {
            if (cancelled(g.cancel)) return;
            for (size_t ii = 0; ii < kMR; ++ii) {
                const size_t i = ip * kMR + ii;
                uint32_t* dst = pa + ip * steps * kMR + ii;
                const int8_t* row = reinterpret_cast<const int8_t*>(g.a + i * g.lda);
                for (size_t s = 0; s < steps; ++s) {
                    uint32_t lo = 0, hi = 0;
                    if (i < m) {
                        lo = static_cast<uint16_t>(int16_t{row[2 * s]});
                        if (2 * s + 1 < k) hi = static_cast<uint16_t>(int16_t{row[2 * s + 1]});
                    }
                    dst[s * kMR] = lo | hi << 16;
                }
            }
        }
        for (size_t s = 0; s < steps; ++s) {
            if ((s & 7) == 0 && cancelled(g.cancel)) return;
            for (size_t jp = 0; jp < np; ++jp) {
                int16_t* dst = b16 + ((jp * steps + s) * kNR) * 2;
                for (size_t jj = 0; jj < kNR; ++jj) {
                    const size_t j = jp * kNR + jj;
                    int16_t* d = dst + (jj < 8 ? 2 * jj : 16 + 2 * (jj - 8));
                    d[0] = j < n ? int8_t(g.b[2 * s * g.ldb + j]) : 0;
                    d[1] = j < n && 2 * s + 1 < k ? int8_t(g.b[(2 * s + 1) * g.ldb + j]) : 0;
                }
            }
        }
        const APanels A{reinterpret_cast<const char*>(pa), steps * kMR * 4, 4, kMR * 4, nullptr, 0};
        gemm_driver(im.ukr_i8, A, b16, m, n, steps, g.c, g.ldc, g.accumulate, g.cancel);
        return;
    }
    // fp16/bf16/fp32: A and B are converted to fp32 and packed per cache block (kKC k-steps):
    // B as 16-column panels, A as 6-row panels (k-major, rows past m zero), so the micro-kernel
    // streams contiguous memory.
    const uint8_t* ga = g.a;
    const uint8_t* gb = g.b;
    const size_t kcmax = std::min(kKC, k), icmax = std::min(kMCP, mp);
    float* pb = grow(tl_pb, np * kcmax * kNR);
    float* pa = grow(tl_pa, icmax * kcmax * kMR);
    float* conv = g.in == DType::F32 ? nullptr : grow(tl_f1, kMR * kcmax);
    float* row = grow(tl_f0, np * kNR);
    std::fill_n(row, np * kNR, 0.0f);
    alignas(32) uint8_t tmp[kMR * kNR * 4];
    for (size_t pc = 0; pc < k; pc += kKC) {
        if (cancelled(g.cancel)) return;
        const size_t kc = std::min(kKC, k - pc);
        const bool zero = !g.accumulate && pc == 0;
        // B rows pc .. pc + kc: panel jp at pb + jp * kc * 16
        for (size_t kk = 0; kk < kc; ++kk) {
            const float* r = row;
            if (g.in == DType::F32 && n % kNR == 0)
                r = reinterpret_cast<const float*>(gb + (pc + kk) * g.ldb);
            else
                load_row(g.in, gb + (pc + kk) * g.ldb, n, row);
            for (size_t jp = 0; jp < np; ++jp)
                std::memcpy(pb + (jp * kc + kk) * kNR, r + jp * kNR, kNR * 4);
        }
        for (size_t ic = 0; ic < mp; ic += kMCP) {
            const size_t ie = std::min(mp, ic + kMCP);
            // A panels ic .. ie, steps pc .. pc + kc: panel ip at pa + (ip - ic) * kc * 6
            for (size_t ip = ic; ip < ie; ++ip) {
                const size_t rows = std::min(kMR, m - ip * kMR);
                const float* src[kMR];
                for (size_t i = 0; i < rows; ++i) {
                    const uint8_t* ar = ga + (ip * kMR + i) * g.lda + pc * es;
                    if (conv) {
                        load_row(g.in, ar, kc, conv + i * kc);
                        src[i] = conv + i * kc;
                    } else {
                        src[i] = reinterpret_cast<const float*>(ar);  // 4-byte aligned (MM)
                    }
                }
                im.pack_a(src, rows, kc, pa + (ip - ic) * kc * kMR);
            }
            for (size_t jp = 0; jp < np; ++jp) {
                if (cancelled(g.cancel)) return;
                const float* bt = pb + jp * kc * kNR;
                const size_t cols = std::min(kNR, n - jp * kNR);
                for (size_t ip = ic; ip < ie; ++ip) {
                    const size_t rows = std::min(kMR, m - ip * kMR);
                    const char* at = reinterpret_cast<const char*>(pa + (ip - ic) * kc * kMR);
                    uint8_t* ct = g.c + ip * kMR * g.ldc + jp * kNR * 4;
                    if (rows == kMR && cols == kNR) {
                        im.ukr_f32(kc, at, 4, kMR * 4, bt, ct, g.ldc, zero);
                        continue;
                    }
                    if (cols == kNR) {
                        im.ukr_f32_part(rows, kc, at, bt, ct, g.ldc, zero);
                        continue;
                    }
                    std::memset(tmp, 0, sizeof tmp);
                    if (!zero)
                        for (size_t i = 0; i < rows; ++i)
                            std::memcpy(tmp + i * kNR * 4, ct + i * g.ldc, cols * 4);
                    im.ukr_f32(kc, at, 4, kMR * 4, bt, tmp, kNR * 4, zero);
                    for (size_t i = 0; i < rows; ++i)
                        std::memcpy(ct + i * g.ldc, tmp + i * kNR * 4, cols * 4);
                }
            }
        }
    }
}

namespace {

template <typename F>
inline void map1(float* __restrict y, const float* __restrict x, size_t n, F f) {
    for (size_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

}  // namespace

void apply_unary(isa::VUn f, float* y, const float* x, size_t n, float imm) {
    using isa::VUn;
    switch (f) {
        case VUn::COPY:
            std::memcpy(y, x, n * 4);
            break;
        case VUn::SET:
            for (size_t i = 0; i < n; ++i) y[i] = imm;
            break;
        case VUn::NEG:
            map1(y, x, n, [](float v) { return -v; });
            break;
        case VUn::ABS:
            map1(y, x, n, [](float v) { return std::fabs(v); });
            break;
        case VUn::RELU:
            map1(y, x, n, [](float v) { return v < 0.0f ? 0.0f : v; });
            break;
        // Transcendentals: evaluated in double and rounded once to fp32.
        case VUn::EXP:
            map1(y, x, n, [](float v) { return float(std::exp(double(v))); });
            break;
        case VUn::RSQRT:
            map1(y, x, n, [](float v) { return float(1.0 / std::sqrt(double(v))); });
            break;
        case VUn::SQRT:
            map1(y, x, n, [](float v) { return std::sqrt(v); });
            break;
        case VUn::RECIP:
            map1(y, x, n, [](float v) { return 1.0f / v; });
            break;
        case VUn::TANH:
            map1(y, x, n, [](float v) { return float(std::tanh(double(v))); });
            break;
        case VUn::GELU:
            map1(y, x, n, [](float v) {
                const double d = v;
                return float(0.5 * d * std::erfc(-d * 0.70710678118654752440));
            });
            break;
        case VUn::SILU:
            map1(y, x, n, [](float v) {
                const double d = v;
                return float(d / (1.0 + std::exp(-d)));
            });
            break;
        case VUn::LOG:
            map1(y, x, n, [](float v) { return float(std::log(double(v))); });
            break;
        case VUn::SIN:
            map1(y, x, n, [](float v) { return float(std::sin(double(v))); });
            break;
        case VUn::COS:
            map1(y, x, n, [](float v) { return float(std::cos(double(v))); });
            break;
        case VUn::GELU_TANH:
            // 0.5 x (1 + tanh(u)) written as x / (1 + e^(-2u)): no cancellation for x << 0
            map1(y, x, n, [](float v) {
                if (std::isinf(v)) return v > 0 ? v : -0.0f;
                const double d = v;
                const double u = 0.79788456080286535588 * (d + 0.044715 * d * d * d);
                return float(d / (1.0 + std::exp(-2.0 * u)));
            });
            break;
        // Exact: the rounding functions keep -0, +-inf and NaN; ROUND ties to even (torch.round)
        case VUn::FLOOR:
            map1(y, x, n, [](float v) { return std::floor(v); });
            break;
        case VUn::CEIL:
            map1(y, x, n, [](float v) { return std::ceil(v); });
            break;
        case VUn::TRUNC:
            map1(y, x, n, [](float v) { return std::trunc(v); });
            break;
        case VUn::ROUND:
            map1(y, x, n, [](float v) { return std::nearbyint(v); });
            break;
        case VUn::SIGN:  // torch.sign: NaN -> 0, -0 -> +0
            map1(y, x, n, [](float v) { return float((v > 0.0f) - (v < 0.0f)); });
            break;
        case VUn::ERF:
            map1(y, x, n, [](float v) { return float(std::erf(double(v))); });
            break;
        case VUn::ERFC:
            map1(y, x, n, [](float v) { return float(std::erfc(double(v))); });
            break;
        case VUn::LOG1P:
            map1(y, x, n, [](float v) { return float(std::log1p(double(v))); });
            break;
        case VUn::EXPM1:
            map1(y, x, n, [](float v) { return float(std::expm1(double(v))); });
            break;
        case VUn::EXP2:
            map1(y, x, n, [](float v) { return float(std::exp2(double(v))); });
            break;
        case VUn::LOG2:
            map1(y, x, n, [](float v) { return float(std::log2(double(v))); });
            break;
        case VUn::LOG10:
            map1(y, x, n, [](float v) { return float(std::log10(double(v))); });
            break;
        case VUn::TAN:
            map1(y, x, n, [](float v) { return float(std::tan(double(v))); });
            break;
        case VUn::ASIN:
            map1(y, x, n, [](float v) { return float(std::asin(double(v))); });
            break;
        case VUn::ACOS:
            map1(y, x, n, [](float v) { return float(std::acos(double(v))); });
            break;
        case VUn::ATAN:
            map1(y, x, n, [](float v) { return float(std::atan(double(v))); });
            break;
        case VUn::SINH:
            map1(y, x, n, [](float v) { return float(std::sinh(double(v))); });
            break;
        case VUn::COSH:
            map1(y, x, n, [](float v) { return float(std::cosh(double(v))); });
            break;
        case VUn::ASINH:
            map1(y, x, n, [](float v) { return float(std::asinh(double(v))); });
            break;
        case VUn::ACOSH:
            map1(y, x, n, [](float v) { return float(std::acosh(double(v))); });
            break;
        case VUn::ATANH:
            map1(y, x, n, [](float v) { return float(std::atanh(double(v))); });
            break;
        default:
            break;
    }
}

void apply_binary(isa::VBin f, float* __restrict y, const float* __restrict a,
                  const float* __restrict b, size_t n) {
    using isa::VBin;
    switch (f) {
        case VBin::ADD:
            for (size_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
            break;
        case VBin::SUB:
            for (size_t i = 0; i < n; ++i) y[i] = a[i] - b[i];
            break;
        case VBin::MUL:
            for (size_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
            break;
        case VBin::DIV:
            for (size_t i = 0; i < n; ++i) y[i] = a[i] / b[i];
            break;
        case VBin::MAX:
            for (size_t i = 0; i < n; ++i) y[i] = fmax_nan(a[i], b[i]);
            break;
        case VBin::MIN:
            for (size_t i = 0; i < n; ++i) y[i] = fmin_nan(a[i], b[i]);
            break;
        // IEEE comparisons: false with a NaN operand except NE; -0 == +0
        case VBin::EQ:
            for (size_t i = 0; i < n; ++i) y[i] = a[i] == b[i] ? 1.0f : 0.0f;
            break;
        case VBin::NE:
            for (size_t i = 0; i < n; ++i) y[i] = a[i] != b[i] ? 1.0f : 0.0f;
            break;
        case VBin::LT:
            for (size_t i = 0; i < n; ++i) y[i] = a[i] < b[i] ? 1.0f : 0.0f;
            break;
        case VBin::LE:
            for (size_t i = 0; i < n; ++i) y[i] = a[i] <= b[i] ? 1.0f : 0.0f;
            break;
        case VBin::GT:
            for (size_t i = 0; i < n; ++i) y[i] = a[i] > b[i] ? 1.0f : 0.0f;
            break;
        case VBin::GE:
            for (size_t i = 0; i < n; ++i) y[i] = a[i] >= b[i] ? 1.0f : 0.0f;
            break;
        default:
            break;
    }
}

void vunary(isa::VUn f, DType dt, DType st, uint8_t* dst, const uint8_t* src, uint64_t rows,
            uint64_t cols, uint64_t dstride, uint64_t sstride, float imm, const Cancel* cancel) {
    float* xb = grow(tl_f0, cols);
    float* yb = grow(tl_f1, cols);
    const size_t dbytes = cols * isa::dtype_size(dt);
    for (uint64_t r = 0; r < rows; ++r) {
        if (cancelled(cancel)) return;
        uint8_t* d = dst + r * dstride;
        const uint8_t* sr = src + r * sstride;
        const float* x = xb;
        if (f != isa::VUn::SET) {
            // fp32 rows are read in place (4-byte aligned) unless the row overlaps its output
            if (st == DType::F32 && (sr + cols * 4 <= d || d + dbytes <= sr))
                x = reinterpret_cast<const float*>(sr);
            else
                load_row(st, sr, cols, xb);
        }
        const float* y = x;  // COPY only converts
        if (f != isa::VUn::COPY) {
            apply_unary(f, yb, x, cols, imm);
            y = yb;
        }
        store_row(dt, d, cols, y);
    }
}

void vbinary(isa::VBin f, isa::Bcast mode, DType dt, DType st, uint8_t* dst, const uint8_t* s1,
             const uint8_t* s2, uint64_t rows, uint64_t cols, uint64_t dstride, uint64_t s1stride,
             uint64_t s2stride, float imm, const Cancel* cancel) {
    using isa::Bcast;
    float* x = grow(tl_f0, cols);
    float* z = grow(tl_f1, cols);
    float* y = grow(tl_f2, cols);
    const size_t es = isa::dtype_size(st);
    for (uint64_t r = 0; r < rows; ++r) {
        if (cancelled(cancel)) return;
        load_row(st, s1 + r * s1stride, cols, x);
        float v;
        switch (mode) {
            case Bcast::NONE:
                load_row(st, s2 + r * s2stride, cols, z);
                break;
            case Bcast::ROW:
                load_row(st, s2, cols, z);
                break;
            case Bcast::SCALAR:
            case Bcast::COL:
            case Bcast::IMM:
                if (mode == Bcast::IMM)
                    v = imm;
                else
                    load_row(st, s2 + (mode == Bcast::COL ? r * s2stride : 0), 1, &v);
                for (size_t i = 0; i < cols; ++i) z[i] = v;
                break;
            default:
                break;
        }
        (void)es;
        apply_binary(f, y, x, z, cols);
        store_row(dt, dst + r * dstride, cols, y);
    }
}

void vreduce(isa::Red f, int axis, DType dt, DType st, uint8_t* dst, const uint8_t* src,
             uint64_t rows, uint64_t cols, uint64_t sstride, const Cancel* cancel) {
    using isa::Red;
    float* x = grow(tl_f0, cols);
    const size_t outn = axis == 0 ? rows : cols;
    float* out = grow(tl_f3, outn);
    double* acc = grow(tl_d0, outn);
    if (axis == 0) {
        for (uint64_t r = 0; r < rows; ++r) {
            if (cancelled(cancel)) return;
            load_row(st, src + r * sstride, cols, x);
            if (f == Red::SUM) {
                double s = 0.0;
                for (size_t i = 0; i < cols; ++i) s += x[i];
                out[r] = static_cast<float>(s);
            } else {
                float m = cols ? x[0] : (f == Red::MAX ? -INFINITY : INFINITY);
                for (size_t i = 1; i < cols; ++i)
                    m = f == Red::MAX ? fmax_nan(m, x[i]) : fmin_nan(m, x[i]);
                out[r] = m;
            }
        }
    } else {
        for (size_t i = 0; i < cols; ++i) acc[i] = 0.0;
        for (uint64_t r = 0; r < rows; ++r) {
            if (cancelled(cancel)) return;
            load_row(st, src + r * sstride, cols, x);
            if (f == Red::SUM) {
                for (size_t i = 0; i < cols; ++i) acc[i] += x[i];
            } else if (r == 0) {
                std::memcpy(out, x, cols * 4);
            } else {
                for (size_t i = 0; i < cols; ++i)
                    out[i] = f == Red::MAX ? fmax_nan(out[i], x[i]) : fmin_nan(out[i], x[i]);
            }
        }
        if (f == Red::SUM)
            for (size_t i = 0; i < cols; ++i) out[i] = static_cast<float>(acc[i]);
        else if (rows == 0)
            for (size_t i = 0; i < cols; ++i) out[i] = f == Red::MAX ? -INFINITY : INFINITY;
    }
    store_row(dt, dst, outn, out);
}

void combine(isa::Red f, float* acc, const float* x, size_t n) {
    using isa::Red;
    for (size_t i = 0; i < n; ++i)
        acc[i] = f == Red::SUM   ? acc[i] + x[i]
                 : f == Red::MAX ? fmax_nan(acc[i], x[i])
                                 : fmin_nan(acc[i], x[i]);
}

}  // namespace spyre::kern

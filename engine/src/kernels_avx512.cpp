// SPDX-License-Identifier: MIT
// AVX-512 kernels (F/BW/VL/DQ with FMA and F16C; int8 matmul with AVX512-VNNI), chosen at run
// time by kernels.cpp when the CPU runs them. Compiled with per-function target attributes, no
// global -march flags. Bit-identical to the portable kernels:
//  - matmul F32/F16/BF16: inputs converted to fp32 exactly, then every C element sees
//    s = fma(A[i][k], B[k][j], s) for k ascending, one FMA per step, partial sums kept in C (fp32)
//    between K blocks, exactly the normative order of isa.md (only which tile is computed when
//    differs);
//  - matmul I8: wrapping int32 sums of exact products, so any grouping gives the same bits;
//    VPDPBUSD multiplies unsigned by signed bytes, so B is offset by 128 (b + 128 = b ^ 0x80) and
//    128 * (row sum of A) is subtracted once, all modulo 2^32;
//  - conversions: the roundings of spyre/numerics.hpp (fp16 with VCVTPS2PH / VCVTPH2PS and the
//    signalling-NaN fix; bf16 and integers with integer operations: VCVTNEPS2BF16 flushes
//    subnormals, so it is not used).
#include "kernels_impl.hpp"

#ifdef SPYRE_KERN_X86

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <new>
#include <utility>

namespace spyre::kern::detail {

namespace {

using isa::DType;

#define SPYRE_AVX512_TARGETS "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2"
#define SPYRE_AVX512 __attribute__((target(SPYRE_AVX512_TARGETS)))
#define SPYRE_AVX512_VNNI __attribute__((target(SPYRE_AVX512_TARGETS ",avx512vnni")))
#define SPYRE_AVX512_BF16 __attribute__((target(SPYRE_AVX512_TARGETS ",avx512bf16")))

SPYRE_AVX512 inline __mmask16 mask16(size_t n) {
    return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
}
SPYRE_AVX512 inline __mmask64 mask64(size_t n) {
    return n >= 64 ? ~__mmask64{0} : __mmask64((uint64_t{1} << n) - 1);
}

// 64-byte aligned per-thread buffers, grown without zeroing.
template <typename T>
struct AlignedBuf {
    T* p = nullptr;
    size_t n = 0;
    ~AlignedBuf() { release(); }
    void release() {
        if (p) ::operator delete[](p, std::align_val_t{64});
        p = nullptr;
        n = 0;
    }
    T* get(size_t want) {
        if (n < want) {
            release();
            p = static_cast<T*>(::operator new[](want * sizeof(T), std::align_val_t{64}));
            n = want;
        }
        return p;
    }
};

thread_local AlignedBuf<float> tl_pb, tl_pa;
thread_local AlignedBuf<uint8_t> tl_pb8;
thread_local AlignedBuf<uint32_t> tl_rowsum;

// ---- conversions ------------------------------------------------------------------------------

SPYRE_AVX512 inline __m512 h2f16(__m256i h) {
    __m512 f = _mm512_cvtph_ps(h);
    const __m512i x = _mm512_cvtepu16_epi32(h);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fff)),
                                                  _mm512_set1_epi32(0x7c00));
    if (nan) {
        // keep signalling NaNs signalling, as num::f16_to_f32 does
        const __m512i bits = _mm512_or_si512(
            _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x8000)), 16),
                            _mm512_set1_epi32(0x7f800000)),
            _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x3ff)), 13));
        f = _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(bits));
    }
    return f;
}

SPYRE_AVX512 void h2f_avx512(const uint8_t* p, size_t n, float* out) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i,
                         h2f16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i))));
    if (i < n) {
        const __mmask16 m = mask16(n - i);
        _mm512_mask_storeu_ps(out + i, m, h2f16(_mm256_maskz_loadu_epi16(m, p + 2 * i)));
    }
}

SPYRE_AVX512 void f2h_avx512(uint8_t* p, size_t n, const float* in) {
    // round to nearest even; NaN -> quiet NaN with the top payload bits, like num::f32_to_f16
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 2 * i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        const __mmask16 m = mask16(n - i);
        _mm256_mask_storeu_epi16(
            p + 2 * i, m,
            _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, in + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

SPYRE_AVX512 inline __m512 bf2f16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

SPYRE_AVX512 void bf2f_avx512(const uint8_t* p, size_t n, float* out) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i,
                         bf2f16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i))));
    if (i < n) {
        const __mmask16 m = mask16(n - i);
        _mm512_mask_storeu_ps(out + i, m, bf2f16(_mm256_maskz_loadu_epi16(m, p + 2 * i)));
    }
}

// num::f32_to_bf16: NaN -> (bits >> 16) | 0x40 (quiet); else round to nearest even on the bits.
SPYRE_AVX512 inline __m256i f2bf16(__m512 f) {
    const __m512i x = _mm512_castps_si512(f);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i hi = _mm512_srli_epi32(x, 16);
    const __m512i odd = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), odd), 16);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

SPYRE_AVX512 void f2bf_avx512(uint8_t* p, size_t n, const float* in) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 2 * i), f2bf16(_mm512_loadu_ps(in + i)));
    if (i < n) {
        const __mmask16 m = mask16(n - i);
        _mm256_mask_storeu_epi16(p + 2 * i, m, f2bf16(_mm512_maskz_loadu_ps(m, in + i)));
    }
}

SPYRE_AVX512 void i8f_avx512(const uint8_t* p, size_t n, float* out) {
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask16(n - i);
        const __m128i b = _mm_maskz_loadu_epi8(m, p + i);
        _mm512_mask_storeu_ps(out + i, m, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)));
    }
}

// num::f32_to_i8: NaN -> 0, saturate to [-128, 127], else nearbyint (the current rounding mode,
// like VCVTPS2DQ).
SPYRE_AVX512 void fi8_avx512(uint8_t* p, size_t n, const float* in) {
    const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask16(n - i);
        const __m512 f = _mm512_maskz_loadu_ps(m, in + i);
        const __mmask16 num = _mm512_cmp_ps_mask(f, f, _CMP_ORD_Q);
        const __m512 c = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
        const __m512i v = _mm512_maskz_mov_epi32(num, _mm512_cvtps_epi32(c));
        _mm_mask_storeu_epi8(p + i, m, _mm512_cvtepi32_epi8(v));
    }
}

SPYRE_AVX512 void i32f_avx512(const uint8_t* p, size_t n, float* out) {
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask16(n - i);
        _mm512_mask_storeu_ps(out + i, m,
                              _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(m, p + 4 * i)));
    }
}

// num::f32_to_i32: NaN -> 0, >= 2^31 -> INT32_MAX, <= -2^31 -> INT32_MIN (VCVTPS2DQ's
// "indefinite" value), else nearbyint.
SPYRE_AVX512 void fi32_avx512(uint8_t* p, size_t n, const float* in) {
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask16(n - i);
        const __m512 f = _mm512_maskz_loadu_ps(m, in + i);
        __m512i v = _mm512_cvtps_epi32(f);
        v = _mm512_mask_mov_epi32(v,
                                  _mm512_cmp_ps_mask(f, _mm512_set1_ps(2147483648.0f), _CMP_GE_OQ),
                                  _mm512_set1_epi32(0x7fffffff));
        v = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(f, f, _CMP_ORD_Q), v);
        _mm512_mask_storeu_epi32(p + 4 * i, m, v);
    }
}

// ---- fp32 / fp16 / bf16 matmul ----------------------------------------------------------------
//
// Blocking: columns in blocks of kNC, K in blocks of kKC, rows in blocks of kMC. Per (column
// block, K block) B is converted to fp32 and packed into panels of 32 columns (the last one 16 or
// 32 wide, zero padded), k-major, so the micro-kernel loads a step of a panel with one or two
// aligned 64-byte loads; A is read in place for F32 (one broadcast per row and step) and converted
// to fp32 rows (kMC x kKC) otherwise. The micro-kernel computes R <= kMR rows x 16 * NV columns of
// C in registers over the K block, starting from C (or +0 in the first block without accumulate)
// and storing back with column masks. K blocks run in ascending order, so every C element sees its
// FMAs in ascending k.

constexpr size_t kMR = 8;    // rows of a register tile
constexpr size_t kNR = 32;   // columns of a register tile (two zmm)
constexpr size_t kKC = 256;  // K block: a B panel is 32 KiB
constexpr size_t kMC = 256;  // rows per A block (fp32 A block <= 256 KiB)
constexpr size_t kNC = 512;  // columns per B block (<= 512 KiB)

using UkrF = void (*)(size_t kc, const float* a, size_t lda, const float* b, uint8_t* c, size_t ldc,
                      __mmask16 mlast, bool zero);

template <int R, int NV>
SPYRE_AVX512 void ukr_f(size_t kc, const float* a, size_t lda, const float* b, uint8_t* c,
                        size_t ldc, __mmask16 mlast, bool zero) {
    __m512 acc[R][NV];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
        const float* ci = reinterpret_cast<const float*>(c + i * ldc);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v)
            acc[i][v] = zero ? _mm512_setzero_ps()
                             : _mm512_maskz_loadu_ps(v == NV - 1 ? mlast : 0xffff, ci + 16 * v);
    }
#pragma GCC unroll 4
    for (size_t k = 0; k < kc; ++k, b += 16 * NV, ++a) {
        __m512 bv[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
            const __m512 ai = _mm512_set1_ps(a[i * lda]);
#pragma GCC unroll 2
            for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
        float* ci = reinterpret_cast<float*>(c + i * ldc);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v)
            _mm512_mask_storeu_ps(ci + 16 * v, v == NV - 1 ? mlast : 0xffff, acc[i][v]);
    }
}

template <int NV, size_t... R>
constexpr std::array<UkrF, kMR> ukr_f_table(std::index_sequence<R...>) {
    return {&ukr_f<int(R) + 1, NV>...};
}
constexpr std::array<UkrF, kMR> kUkrF[2] = {ukr_f_table<1>(std::make_index_sequence<kMR>()),
                                            ukr_f_table<2>(std::make_index_sequence<kMR>())};

// 32 (or 16 when w == 16) elements of type t at p, `cols` of them valid, as fp32 (zeros past
// cols) into dst (64-byte aligned).
SPYRE_AVX512 inline void pack_b_row(DType t, const uint8_t* p, size_t cols, size_t w, float* dst) {
    const __mmask16 m0 = mask16(cols), m1 = mask16(cols > 16 ? cols - 16 : 0);
    switch (t) {
        case DType::F32: {
            const float* s = reinterpret_cast<const float*>(p);
            _mm512_store_ps(dst, _mm512_maskz_loadu_ps(m0, s));
            if (w > 16) _mm512_store_ps(dst + 16, _mm512_maskz_loadu_ps(m1, s + 16));
            break;
        }
        case DType::F16:
            // sNaN inputs are quieted here; MM results from NaN are NaN (payload unspecified)
            _mm512_store_ps(dst, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, p)));
            if (w > 16)
                _mm512_store_ps(dst + 16, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, p + 32)));
            break;
        default:  // BF16
            _mm512_store_ps(dst, bf2f16(_mm256_maskz_loadu_epi16(m0, p)));
            if (w > 16) _mm512_store_ps(dst + 16, bf2f16(_mm256_maskz_loadu_epi16(m1, p + 32)));
            break;
    }
}

// One row of C over P full panels (32 P columns): 2 P independent accumulators where the 1-row
// micro-kernel has 2, whose FMA latency bounds it (a decode step's MMs are all one row). The
// same FMAs per element in the same order.
template <int P>
SPYRE_AVX512 void ukr_row(size_t kc, const float* a, const float* b, size_t pstride, uint8_t* c,
                          bool zero) {
    float* ci = reinterpret_cast<float*>(c);
    __m512 acc[2 * P];
#pragma GCC unroll 8
    for (int v = 0; v < 2 * P; ++v)
        acc[v] = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(ci + 16 * v);
    for (size_t k = 0; k < kc; ++k) {
        const __m512 ai = _mm512_set1_ps(a[k]);
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p) {
            const float* bp = b + p * pstride + k * kNR;
            acc[2 * p] = _mm512_fmadd_ps(ai, _mm512_load_ps(bp), acc[2 * p]);
            acc[2 * p + 1] = _mm512_fmadd_ps(ai, _mm512_load_ps(bp + 16), acc[2 * p + 1]);
        }
    }
#pragma GCC unroll 8
    for (int v = 0; v < 2 * P; ++v) _mm512_storeu_ps(ci + 16 * v, acc[v]);
}

// 16 x 16 fp32 transposition in registers: on return r[j] holds column j of the rows r[0..15].
SPYRE_AVX512 inline void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {  // per 128-bit lane L: columns 4L, 4L+1 / 4L+2, 4L+3
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  // u[i + c], lane L: rows i .. i+3 of column 4L + c
        u[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; ++c) {  // column 4L + c: lane L of u[c], u[4 + c], u[8 + c], u[12 + c]
        const __m512 a0 = _mm512_shuffle_f32x4(u[c], u[4 + c], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512 a1 = _mm512_shuffle_f32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 1, 3, 1));
        const __m512 b0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512 b1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 1, 3, 1));
        r[c] = _mm512_shuffle_f32x4(a0, b0, _MM_SHUFFLE(2, 0, 2, 0));
        r[4 + c] = _mm512_shuffle_f32x4(a1, b1, _MM_SHUFFLE(2, 0, 2, 0));
        r[8 + c] = _mm512_shuffle_f32x4(a0, b0, _MM_SHUFFLE(3, 1, 3, 1));
        r[12 + c] = _mm512_shuffle_f32x4(a1, b1, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

// A B panel from B stored transposed (fp32, N x K, row stride ldb bytes): dst[kk * w + jj] =
// bt[jj][kk] for jj < cols, zero for cols <= jj < w (w = 16 or 32), kk < kc. Pure data movement.
SPYRE_AVX512 void pack_bt_f32(const uint8_t* bt, size_t ldb, size_t cols, size_t kc, size_t w,
                              float* dst) {
    for (size_t j0 = 0; j0 < w; j0 += 16) {
        const size_t rows = cols > j0 ? std::min<size_t>(16, cols - j0) : 0;
        for (size_t k0 = 0; k0 < kc; k0 += 16) {
            const size_t n = std::min<size_t>(16, kc - k0);
            const __mmask16 mk = mask16(n);
            __m512 r[16];
            for (size_t i = 0; i < 16; ++i)
                r[i] = i < rows ? _mm512_maskz_loadu_ps(
                                      mk, reinterpret_cast<const float*>(bt + (j0 + i) * ldb) + k0)
                                : _mm512_setzero_ps();
            transpose16(r);
            for (size_t kk = 0; kk < n; ++kk) _mm512_store_ps(dst + (k0 + kk) * w + j0, r[kk]);
        }
    }
}

// One row of A times an fp32 B stored transposed (N x K, row stride ldb bytes), G groups of 16
// columns from column j0 (cols of them valid): each 16 x 16 block of B^T is transposed in
// registers and used at once, without the panels (a decode step's nn.Linear: B is read once).
// Each C element gets the FMAs of the panel kernels in the same order.
template <int G>
SPYRE_AVX512 void row_bt_f32(const MatmulArgs& g, size_t j0, size_t cols, bool zero) {
    const float* a = reinterpret_cast<const float*>(g.a);
    float* c = reinterpret_cast<float*>(g.c) + j0;
    const uint8_t* bt = g.b + j0 * g.ldb;
    __m512 acc[G];
    __mmask16 mc[G];
    size_t rows[G];
#pragma GCC unroll 4
    for (int v = 0; v < G; ++v) {
        rows[v] = cols > 16u * v ? std::min<size_t>(16, cols - 16 * v) : 0;
        mc[v] = mask16(rows[v]);
        acc[v] = zero ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mc[v], c + 16 * v);
    }
    // Group v runs kSkew blocks of 16 k behind group v - 1: with a power-of-two row stride (a
    // linear's K = 512: 2 KiB) the same k of 64 rows falls into two L1 sets, and the lines the
    // prefetcher brings in evict each other before they are read; skewed, the groups' rows
    // spread over 4x the sets (one [1, 512] x [512, 1024] MM: 73 -> 44 us, torch_spyre.md).
    // Each group's k still ascends, so every C element gets the same FMAs in the same order.
    constexpr size_t kSkew = G > 1 ? 8 : 0;
    const size_t nk = (g.k + 15) / 16;
    for (size_t t = 0; t < nk + kSkew * (G - 1); ++t) {
#pragma GCC unroll 4
        for (int v = 0; v < G; ++v) {
            if (t < kSkew * v || t - kSkew * v >= nk) continue;
            const size_t k0 = (t - kSkew * v) * 16;
            const size_t n = std::min<size_t>(16, g.k - k0);
            const __mmask16 mk = mask16(n);
            __m512 r[16];
            for (size_t i = 0; i < 16; ++i)
                r[i] = i < rows[v]
                           ? _mm512_maskz_loadu_ps(
                                 mk, reinterpret_cast<const float*>(bt + (16 * v + i) * g.ldb) + k0)
                           : _mm512_setzero_ps();
            transpose16(r);
            for (size_t kk = 0; kk < n; ++kk)
                acc[v] = _mm512_fmadd_ps(_mm512_set1_ps(a[k0 + kk]), r[kk], acc[v]);
        }
    }
#pragma GCC unroll 4
    for (int v = 0; v < G; ++v) _mm512_mask_storeu_ps(c + 16 * v, mc[v], acc[v]);
}

SPYRE_AVX512 void mm_float_avx512(const MatmulArgs& g) {
    const size_t m = g.m, n = g.n, k = g.k;
    const DType t = g.in;
    if (m == 1 && t == DType::F32 && g.b_trans) {
        const bool zero = !g.accumulate;
        size_t j = 0;
        for (; j + 64 <= n; j += 64) {
            if (cancelled(g.cancel)) return;
            row_bt_f32<4>(g, j, 64, zero);
        }
        for (; j < n; j += 16) row_bt_f32<1>(g, j, std::min<size_t>(16, n - j), zero);
        return;
    }
    const size_t es = isa::dtype_size(t);
    const size_t kcmax = std::min(kKC, k), kcp = (kcmax + 15) / 16 * 16;
    float* pb = tl_pb.get((std::min(kNC, n) + kNR - 1) / kNR * kNR * kcmax);
    float* pa = t == DType::F32 ? nullptr : tl_pa.get(std::min(kMC, m) * kcp);
    void (*conv)(const uint8_t*, size_t, float*) =
        t == DType::F16 ? h2f_avx512 : bf2f_avx512;  // A rows (not F32)
    for (size_t jc = 0; jc < n; jc += kNC) {
        const size_t nc = std::min(kNC, n - jc), npan = (nc + kNR - 1) / kNR;
        for (size_t pc = 0; pc < k; pc += kKC) {
            if (cancelled(g.cancel)) return;
            const size_t kc = std::min(kKC, k - pc);
            const bool zero = !g.accumulate && pc == 0;
            // B rows pc .. pc + kc, columns jc .. jc + nc: panel jp at pb + jp * 32 * kc
            if (g.b_trans) {  // F32 stored N x K: a panel is the transpose of its rows of B^T
                for (size_t jp = 0; jp < npan; ++jp) {
                    const size_t cols = std::min(kNR, nc - jp * kNR);
                    const size_t w = cols > 16 ? 32 : 16;
                    pack_bt_f32(g.b + (jc + jp * kNR) * g.ldb + pc * 4, g.ldb, cols, kc, w,
                                pb + jp * kNR * kc);
                }
            }
            for (size_t kk = 0; kk < kc && !g.b_trans; ++kk) {
                const uint8_t* row = g.b + (pc + kk) * g.ldb + jc * es;
                for (size_t jp = 0; jp < npan; ++jp) {
                    const size_t cols = std::min(kNR, nc - jp * kNR);
                    const size_t w = cols > 16 ? 32 : 16;
                    pack_b_row(t, row + jp * kNR * es, cols, w, pb + jp * kNR * kc + kk * w);
                }
            }
            for (size_t ic = 0; ic < m; ic += kMC) {
                const size_t mc = std::min(kMC, m - ic);
                const float* a;
                size_t lda;
                if (t == DType::F32) {
                    a = reinterpret_cast<const float*>(g.a + ic * g.lda + pc * 4);
                    lda = g.lda / 4;  // MM: A rows aligned to the element size
                } else {
                    for (size_t i = 0; i < mc; ++i) {
                        if ((i & 63) == 0 && cancelled(g.cancel)) return;
                        conv(g.a + (ic + i) * g.lda + pc * es, kc, pa + i * kcp);
                    }
                    a = pa;
                    lda = kcp;
                }
                size_t jp = 0;
                if (mc == 1) {  // one row: four or two full panels at a time
                    auto row = [&](auto ukr, size_t panels) {
                        for (; (jp + panels) * kNR <= nc; jp += panels)
                            ukr(kc, a, pb + jp * kNR * kc, kNR * kc,
                                g.c + ic * g.ldc + (jc + jp * kNR) * 4, zero);
                    };
                    if (cancelled(g.cancel)) return;
                    row(ukr_row<4>, 4);
                    row(ukr_row<2>, 2);
                }
                for (; jp < npan; ++jp) {
                    if (cancelled(g.cancel)) return;
                    const size_t cols = std::min(kNR, nc - jp * kNR);
                    const size_t nv = cols > 16 ? 2 : 1;
                    const __mmask16 ml = mask16(cols - (nv - 1) * 16);
                    const float* bp = pb + jp * kNR * kc;
                    uint8_t* cp = g.c + ic * g.ldc + (jc + jp * kNR) * 4;
                    const std::array<UkrF, kMR>& tab = kUkrF[nv - 1];
                    for (size_t ip = 0; ip < mc; ip += kMR) {
                        const size_t rows = std::min(kMR, mc - ip);
                        tab[rows - 1](kc, a + ip * lda, lda, bp, cp + ip * g.ldc, g.ldc, ml, zero);
                    }
                }
            }
        }
    }
}

// ---- bf16 matmul with VDPBF16PS (AVX512-BF16), where it is exact -----------------------------
//
// VDPBF16PS adds two bf16 products to an fp32 lane: the Intel SDM defines it as two FP32 FMAs,
// element 2i+1 first, then 2i, rounded to nearest even, with bf16 inputs' subnormals read as zero
// and subnormal results flushed to zero. With the halves of every (k, k+1) pair swapped (k in the
// high half) that is s = fma(A[k], B[k], s); s = fma(A[k+1], B[k+1], s): the normative order. The
// flushing never applies when (checked before the kernel runs, else the FMA kernels above run):
//  - no bf16 input is subnormal, and e_a + e_b >= -112 for the smallest exponents of the nonzero
//    finite values of A and of B: every product is then a multiple of 2^(e_a + e_b - 14) >=
//    2^-126 (8-bit significands);
//  - every initial C value (accumulate) is zero, not finite, or at least 2^-103 in magnitude (a
//    multiple of 2^-126).
// Then every partial sum is a multiple of 2^-126 (sums of such multiples, rounded to fp32, stay
// multiples), so it is zero or normal, and nothing is flushed. A padding step (odd K) multiplies
// -0 by +0, adding -0: s unchanged, also s = -0. Whether the CPU implements the SDM definition is
// checked once (dpbf16_selftest) before the kernel is enabled.

constexpr size_t kKCB = 512;  // k per K block (256 pair steps; a B panel is 32 KiB)

using UkrBf = void (*)(size_t steps, const uint32_t* a, size_t lda, const uint32_t* b, uint8_t* c,
                       size_t ldc, __mmask16 mlast, bool zero);

SPYRE_AVX512_BF16 inline __m512 dpbf16(__m512 acc, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

template <int R, int NV>
SPYRE_AVX512_BF16 void ukr_bf(size_t steps, const uint32_t* a, size_t lda, const uint32_t* b,
                              uint8_t* c, size_t ldc, __mmask16 mlast, bool zero) {
    __m512 acc[R][NV];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
        const float* ci = reinterpret_cast<const float*>(c + i * ldc);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v)
            acc[i][v] = zero ? _mm512_setzero_ps()
                             : _mm512_maskz_loadu_ps(v == NV - 1 ? mlast : 0xffff, ci + 16 * v);
    }
#pragma GCC unroll 4
    for (size_t s = 0; s < steps; ++s, b += 16 * NV, ++a) {
        __m512i bv[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_si512(b + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
            const __m512i ai = _mm512_set1_epi32(int32_t(a[i * lda]));
#pragma GCC unroll 2
            for (int v = 0; v < NV; ++v) acc[i][v] = dpbf16(acc[i][v], ai, bv[v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
        float* ci = reinterpret_cast<float*>(c + i * ldc);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v)
            _mm512_mask_storeu_ps(ci + 16 * v, v == NV - 1 ? mlast : 0xffff, acc[i][v]);
    }
}

template <int NV, size_t... R>
constexpr std::array<UkrBf, kMR> ukr_bf_table(std::index_sequence<R...>) {
    return {&ukr_bf<int(R) + 1, NV>...};
}
constexpr std::array<UkrBf, kMR> kUkrBf[2] = {ukr_bf_table<1>(std::make_index_sequence<kMR>()),
                                              ukr_bf_table<2>(std::make_index_sequence<kMR>())};

// Exponent scan of bf16 operands, three operations per 32 values: the unsigned 16-bit minimum of
// y = 2h - 1 (wrapping: the sign is shifted out, +-0 give 0xffff). A nonzero finite magnitude x
// (bits 1 .. 0x7f7f) gives 2x - 1 < 0xfeff, infinities and NaNs 0xfeff and more; so the minimum is
// 2x - 1 for the smallest nonzero finite magnitude x, if there is one.
SPYRE_AVX512 inline __m512i exp_scan(__m512i ymin, __m512i h) {
    return _mm512_min_epu16(ymin, _mm512_sub_epi16(_mm512_add_epi16(h, h), _mm512_set1_epi16(1)));
}

struct ExpMin {
    int e;     // smallest biased exponent of the nonzero finite values, 255 if there are none
    bool sub;  // one of them is subnormal
};

SPYRE_AVX512 inline unsigned exp_reduce(__m512i ymin) {
    const __m256i h =
        _mm256_min_epu16(_mm512_castsi512_si256(ymin), _mm512_extracti64x4_epi64(ymin, 1));
    const __m128i q = _mm_min_epu16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    return unsigned(_mm_extract_epi16(_mm_minpos_epu16(q), 0));
}

SPYRE_AVX512 inline ExpMin exp_min(unsigned y) {
    if (y >= 0xfeff) return {255, false};
    const unsigned x = (y + 1) >> 1;
    return {int(x >> 7), x < 0x80};
}

SPYRE_AVX512 inline __mmask32 mask32(size_t n) {
    return n >= 32 ? ~__mmask32{0} : __mmask32((1u << n) - 1);
}

// Whether every value of the fp32 rows x cols matrix C is zero, not finite or >= 2^-103 in
// magnitude (biased exponent >= 24).
SPYRE_AVX512 bool c_init_ok(const uint8_t* c, size_t rows, size_t cols, size_t ldc) {
    const __m512i mabs = _mm512_set1_epi32(0x7fffffff), lim = _mm512_set1_epi32(24 << 23);
    for (size_t r = 0; r < rows; ++r)
        for (size_t j = 0; j < cols; j += 16) {
            const __m512i x = _mm512_and_si512(
                _mm512_maskz_loadu_epi32(mask16(cols - j), c + r * ldc + 4 * j), mabs);
            if (_mm512_test_epi32_mask(x, x) & _mm512_cmplt_epu32_mask(x, lim)) return false;
        }
    return true;
}

bool g_dpbf16_ok = false;  // set by avx512_fill after the self-test
thread_local uint64_t tl_dp_calls = 0;

// Packed bf16 operands kept for the next MMs of a job (MatmulArgs::a_gen / b_gen): the cores of
// a matmul job read the same rows of A (B) of device memory, and while no device memory is written
// (the generation stays the same) the packing and its exponent scan are the same too. A few per
// operand, at most kCacheMax bytes each, replaced round robin.
struct Packed {
    uint64_t gen = 0;  // 0: empty
    const uint8_t* p = nullptr;
    const uint8_t* end = nullptr;  // past the operand's last byte
    size_t ld = 0, rows = 0, cols = 0;
    ExpMin e{};
    AlignedBuf<float> buf;
};
constexpr size_t kCacheWays = 8, kCacheMax = 256 * 1024;
struct PackCache {
    std::array<Packed, kCacheWays> e;
    unsigned next = 0;
    // The entry of the operand at p (ld, rows x cols), or nullptr.
    Packed* find(uint64_t gen, const uint8_t* p, size_t ld, size_t rows, size_t cols) {
        for (Packed& x : e)
            if (x.gen == gen && x.p == p && x.ld == ld && x.rows == rows && x.cols == cols)
                return &x;
        return nullptr;
    }
    Packed& victim() { return e[next++ % kCacheWays]; }
    void forget(const uint8_t* lo, const uint8_t* hi) {
        for (Packed& x : e)
            if (x.gen && x.p < hi && lo < x.end) x.gen = 0;
    }
};
thread_local PackCache tl_cache_a, tl_cache_b;
thread_local uint64_t tl_pack_hits = 0;

// A as rows of pair words p[2s] << 16 | p[2s + 1] (-0 past K, rows sap words apart); false if
// cancelled. The scan's minima are reduced per block of 64 rows: a vector live across the
// cancellation checks (calls clobber every vector register) made GCC keep it in memory.
SPYRE_AVX512 bool pack_a_bf(const MatmulArgs& g, size_t sap, uint32_t* pa, ExpMin& ea) {
    const size_t m = g.m, k = g.k;
    const __m512i pad = _mm512_set1_epi16(int16_t(0x8000));
    unsigned ya = 0xffff;
    const size_t kfull = k / 32 * 32;
    const __mmask32 mtail = mask32(k - kfull);
    for (size_t i0 = 0; i0 < m; i0 += 64) {
        if (cancelled(g.cancel)) return false;
        __m512i y = _mm512_set1_epi16(-1);
        for (size_t i = i0; i < std::min(m, i0 + 64); ++i) {
            const uint8_t* row = g.a + i * g.lda;
            uint32_t* w = pa + i * sap;
            size_t j = 0;
            for (; j < kfull; j += 32) {
                const __m512i x = _mm512_loadu_si512(row + 2 * j);
                y = exp_scan(y, x);
                _mm512_store_si512(w + j / 2, _mm512_rol_epi32(x, 16));
            }
            if (j < k) {
                const __m512i x = _mm512_mask_loadu_epi16(pad, mtail, row + 2 * j);
                y = exp_scan(y, x);
                _mm512_store_si512(w + j / 2, _mm512_rol_epi32(x, 16));
            }
        }
        ya = std::min(ya, exp_reduce(y));
    }
    ea = exp_min(ya);
    return true;
}

// B as panels of 32 (or 16) columns, per pair step and column B[2s][j] << 16 | B[2s + 1][j] (+0
// past K and past the columns); panel jp at pb + jp * 32 * steps; false if cancelled.
SPYRE_AVX512_BF16 bool pack_b_bf(const MatmulArgs& g, size_t steps, uint32_t* pb, ExpMin& eb) {
    const size_t n = g.n, k = g.k;
    // word w of a pair step: column w / 2, half w % 2 (0: row 2s + 1, 1: row 2s)
    alignas(64) uint16_t idx[2][32];
    for (int h = 0; h < 2; ++h)
        for (int w = 0; w < 32; ++w) idx[h][w] = uint16_t((w & 1 ? 32 : 0) + 16 * h + w / 2);
    const __m512i ix0 = _mm512_load_si512(idx[0]), ix1 = _mm512_load_si512(idx[1]);
    const size_t nfull = n / kNR;  // full panels (32 columns)
    const size_t tcols = n - nfull * kNR, tw = tcols > 16 ? 32 : 16;
    const __mmask32 tm = mask32(tcols);
    unsigned yb = 0xffff;
    for (size_t s0 = 0; s0 < steps; s0 += 64) {
        if (cancelled(g.cancel)) return false;
        __m512i y = _mm512_set1_epi16(-1);
        for (size_t s = s0; s < std::min(steps, s0 + 64); ++s) {
            const uint8_t* r0 = g.b + 2 * s * g.ldb;
            const bool odd = 2 * s + 1 == k;  // the padding row past K: +0
            const uint8_t* r1 = odd ? r0 : r0 + g.ldb;
            uint32_t* d = pb + s * kNR;
            for (size_t jp = 0; jp < nfull; ++jp, d += kNR * steps) {
                const __m512i x0 = _mm512_loadu_si512(r0 + jp * kNR * 2);
                const __m512i x1 =
                    odd ? _mm512_setzero_si512() : _mm512_loadu_si512(r1 + jp * kNR * 2);
                y = exp_scan(exp_scan(y, x0), x1);
                _mm512_store_si512(d, _mm512_permutex2var_epi16(x1, ix0, x0));
                _mm512_store_si512(d + 16, _mm512_permutex2var_epi16(x1, ix1, x0));
            }
            if (tcols) {  // the last panel, 16 or 32 wide (its steps are tw words)
                const __m512i x0 = _mm512_maskz_loadu_epi16(tm, r0 + nfull * kNR * 2);
                const __m512i x1 = odd ? _mm512_setzero_si512()
                                       : _mm512_maskz_loadu_epi16(tm, r1 + nfull * kNR * 2);
                y = exp_scan(exp_scan(y, x0), x1);
                uint32_t* dt = pb + nfull * kNR * steps + s * tw;
                _mm512_store_si512(dt, _mm512_permutex2var_epi16(x1, ix0, x0));
                if (tw > 16) _mm512_store_si512(dt + 16, _mm512_permutex2var_epi16(x1, ix1, x0));
            }
        }
        yb = std::min(yb, exp_reduce(y));
    }
    eb = exp_min(yb);
    return true;
}

// An operand packed by `pack` into `words` words: from the cache when gen is set and it holds
// the same operand (p, ld, rows x cols) of this generation, else packed (into the cache when gen
// is set and it fits). nullptr if cancelled.
template <typename Pack>
SPYRE_AVX512 const uint32_t* packed(PackCache& cache, AlignedBuf<float>& scratch, uint64_t gen,
                                    const uint8_t* p, size_t ld, size_t rows, size_t cols,
                                    size_t words, ExpMin& e, Pack pack) {
    const bool keep = gen && words * 4 <= kCacheMax;
    if (keep) {
        if (const Packed* x = cache.find(gen, p, ld, rows, cols)) {
            ++tl_pack_hits;
            e = x->e;
            return reinterpret_cast<const uint32_t*>(x->buf.p);
        }
        Packed& x = cache.victim();
        x.gen = 0;
        uint32_t* d = reinterpret_cast<uint32_t*>(x.buf.get(words));
        if (!pack(d, e)) return nullptr;
        x.gen = gen, x.p = p, x.ld = ld, x.rows = rows, x.cols = cols, x.e = e;
        x.end = p + (rows - 1) * ld + cols * 2;  // bf16
        return d;
    }
    uint32_t* d = reinterpret_cast<uint32_t*>(scratch.get(words));
    return pack(d, e) ? d : nullptr;
}

// Runs the matmul with VDPBF16PS and returns true, or returns false without writing anything when
// the exactness conditions above do not hold. All of A and B is packed first (the exponents are
// gathered on the way, pack_a_bf / pack_b_bf), or taken from the cache.
SPYRE_AVX512_BF16 bool mm_bf16_dp(const MatmulArgs& g) {
    const size_t m = g.m, n = g.n, k = g.k;
    const size_t steps = (k + 1) / 2, sap = (steps + 15) / 16 * 16;  // A row stride (words)
    const size_t npan = (n + kNR - 1) / kNR;
    ExpMin ea, eb;
    const uint32_t* pa = packed(tl_cache_a, tl_pa, g.a_gen, g.a, g.lda, m, k, m * sap, ea,
                                [&](uint32_t* d, ExpMin& e) { return pack_a_bf(g, sap, d, e); });
    if (!pa) return true;  // cancelled
    if (ea.sub) return false;
    const uint32_t* pb =
        packed(tl_cache_b, tl_pb, g.b_gen, g.b, g.ldb, k, n, npan * kNR * steps, eb,
               [&](uint32_t* d, ExpMin& e) { return pack_b_bf(g, steps, d, e); });
    if (!pb) return true;
    if (eb.sub) return false;
    if (ea.e != 255 && eb.e != 255 && ea.e + eb.e < 142) return false;  // (ea-127)+(eb-127) < -112
    if (g.accumulate && !c_init_ok(g.c, m, n, g.ldc)) return false;
    ++tl_dp_calls;
    for (size_t jc = 0; jc < n; jc += kNC) {
        const size_t nc = std::min(kNC, n - jc), jp0 = jc / kNR, np = (nc + kNR - 1) / kNR;
        for (size_t pc = 0; pc < k; pc += kKCB) {
            const size_t s0 = pc / 2, st = (std::min(kKCB, k - pc) + 1) / 2;
            const bool zero = !g.accumulate && pc == 0;
            for (size_t ic = 0; ic < m; ic += kMC) {
                const size_t mc = std::min(kMC, m - ic);
                for (size_t jp = jp0; jp < jp0 + np; ++jp) {
                    if (cancelled(g.cancel)) return true;
                    const size_t cols = std::min(kNR, n - jp * kNR);
                    const size_t nv = cols > 16 ? 2 : 1;
                    const __mmask16 ml = mask16(cols - (nv - 1) * 16);
                    const uint32_t* bp = pb + jp * kNR * steps + s0 * 16 * nv;
                    uint8_t* cp = g.c + ic * g.ldc + jp * kNR * 4;
                    const std::array<UkrBf, kMR>& tab = kUkrBf[nv - 1];
                    for (size_t ip = 0; ip < mc; ip += kMR) {
                        const size_t rows = std::min(kMR, mc - ip);
                        tab[rows - 1](st, pa + (ic + ip) * sap + s0, sap, bp, cp + ip * g.ldc,
                                      g.ldc, ml, zero);
                    }
                }
            }
        }
    }
    return true;
}

// VDPBF16PS against two sequential FMAs (element 2i+1 first) on values whose products and sums
// stay normal: random significands and exponents, with cancellations.
SPYRE_AVX512_BF16 bool dpbf16_selftest() {
    uint32_t x = 12345;
    auto rnd = [&x] {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        return x;
    };
    auto bf = [](uint32_t h) {
        const uint32_t b = h << 16;
        float f;
        std::memcpy(&f, &b, 4);
        return f;
    };
    for (int it = 0; it < 4096; ++it) {
        alignas(64) uint32_t a[16], b[16];
        alignas(64) float c[16], want[16];
        for (int l = 0; l < 16; ++l) {
            auto gen = [&] {
                return uint32_t((rnd() & 0x8000) | ((117 + rnd() % 21) << 7) | (rnd() & 0x7f));
            };
            const uint32_t a1 = gen(), a0 = gen(), b1 = gen(), b0 = gen();
            a[l] = a1 << 16 | a0;
            b[l] = b1 << 16 | b0;
            c[l] = (it & 1) ? -bf(a1) * bf(b1) : bf(gen()) * 3.0f;  // odd: cancels the first step
            want[l] = std::fma(bf(a0), bf(b0), std::fma(bf(a1), bf(b1), c[l]));
        }
        const __m512 r = dpbf16(_mm512_load_ps(c), _mm512_load_si512(a), _mm512_load_si512(b));
        alignas(64) float got[16];
        _mm512_store_ps(got, r);
        if (std::memcmp(got, want, sizeof got) != 0) return false;
    }
    return true;
}

SPYRE_AVX512 void mm_float_or_dp(const MatmulArgs& g) {
    if (g.in == DType::BF16 && g_dpbf16_ok && mm_bf16_dp(g)) return;
    mm_float_avx512(g);
}

// ---- int8 matmul (AVX512-VNNI) ----------------------------------------------------------------
//
// Same blocking with steps of 4 k: B is packed per (column block, K block) into panels of 32 (or
// 16) columns, per step and column the 4 bytes b[k..k+3][j] ^ 0x80 (b + 128 as unsigned; zero past
// K and past the columns); A is read in place, a step being the 4 bytes A[i][k..k+3] (the last,
// partial step loaded with a byte mask). VPDPBUSD adds (b + 128) * a over the 4 bytes; the first K
// block starts from C (or 0) minus 128 * sum_k A[i][k]. All sums wrap modulo 2^32.

constexpr size_t kKC8 = 1024;  // k per K block (256 steps; a B panel is 32 KiB)

using UkrI8 = void (*)(size_t steps, size_t tail, const uint8_t* a, size_t lda, const uint8_t* b,
                       uint8_t* c, size_t ldc, __mmask16 mlast, bool zero, const uint32_t* add);

template <int R, int NV>
SPYRE_AVX512_VNNI void ukr_i8(size_t steps, size_t tail, const uint8_t* a, size_t lda,
                              const uint8_t* b, uint8_t* c, size_t ldc, __mmask16 mlast, bool zero,
                              const uint32_t* add) {
    __m512i acc[R][NV];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
        const uint8_t* ci = c + i * ldc;
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) {
            acc[i][v] = zero ? _mm512_setzero_si512()
                             : _mm512_maskz_loadu_epi32(v == NV - 1 ? mlast : 0xffff, ci + 64 * v);
            if (add) acc[i][v] = _mm512_add_epi32(acc[i][v], _mm512_set1_epi32(int32_t(add[i])));
        }
    }
#pragma GCC unroll 4
    for (size_t s = 0; s < steps; ++s, b += 64 * NV, a += 4) {
        __m512i bv[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_si512(b + 64 * v);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
            int32_t w;
            std::memcpy(&w, a + i * lda, 4);
            const __m512i ai = _mm512_set1_epi32(w);
#pragma GCC unroll 2
            for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], bv[v], ai);
        }
    }
    if (tail) {
        __m512i bv[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_si512(b + 64 * v);
        const __mmask16 tm = mask16(tail);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
            const __m512i ai = _mm512_broadcastd_epi32(_mm_maskz_loadu_epi8(tm, a + i * lda));
#pragma GCC unroll 2
            for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], bv[v], ai);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
        uint8_t* ci = c + i * ldc;
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v)
            _mm512_mask_storeu_epi32(ci + 64 * v, v == NV - 1 ? mlast : 0xffff, acc[i][v]);
    }
}

template <int NV, size_t... R>
constexpr std::array<UkrI8, kMR> ukr_i8_table(std::index_sequence<R...>) {
    return {&ukr_i8<int(R) + 1, NV>...};
}
constexpr std::array<UkrI8, kMR> kUkrI8[2] = {ukr_i8_table<1>(std::make_index_sequence<kMR>()),
                                              ukr_i8_table<2>(std::make_index_sequence<kMR>())};

// Sum of the k signed bytes at p (|sum| <= 128 * 4096: no overflow).
SPYRE_AVX512_VNNI uint32_t row_sum_i8(const uint8_t* p, size_t k) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i acc = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 64 <= k; i += 64) acc = _mm512_dpbusd_epi32(acc, ones, _mm512_loadu_si512(p + i));
    if (i < k) acc = _mm512_dpbusd_epi32(acc, ones, _mm512_maskz_loadu_epi8(mask64(k - i), p + i));
    return static_cast<uint32_t>(_mm512_reduce_add_epi32(acc));
}

// One step of a B panel: rows r[0..3] (nullptr: past K) of `cols` valid bytes, w (16 or 32)
// columns of 4 bytes (b ^ 0x80, zero where invalid) into dst.
SPYRE_AVX512_VNNI inline void pack_b8_step(const uint8_t* const r[4], size_t cols, size_t w,
                                           uint8_t* dst) {
    const __m128i x80 = _mm_set1_epi8(char(0x80));
    for (size_t h = 0; h * 16 < w; ++h) {
        const __mmask16 m = mask16(cols > h * 16 ? cols - h * 16 : 0);
        __m128i x[4];
        for (int q = 0; q < 4; ++q)
            x[q] = r[q] ? _mm_maskz_mov_epi8(
                              m, _mm_xor_si128(_mm_maskz_loadu_epi8(m, r[q] + h * 16), x80))
                        : _mm_setzero_si128();
        const __m128i t0 = _mm_unpacklo_epi8(x[0], x[1]), t1 = _mm_unpackhi_epi8(x[0], x[1]);
        const __m128i t2 = _mm_unpacklo_epi8(x[2], x[3]), t3 = _mm_unpackhi_epi8(x[2], x[3]);
        __m128i* d = reinterpret_cast<__m128i*>(dst + h * 64);
        _mm_store_si128(d + 0, _mm_unpacklo_epi16(t0, t2));  // columns 0-3
        _mm_store_si128(d + 1, _mm_unpackhi_epi16(t0, t2));  // 4-7
        _mm_store_si128(d + 2, _mm_unpacklo_epi16(t1, t3));  // 8-11
        _mm_store_si128(d + 3, _mm_unpackhi_epi16(t1, t3));  // 12-15
    }
}

SPYRE_AVX512_VNNI void mm_i8_vnni(const MatmulArgs& g) {
    const size_t m = g.m, n = g.n, k = g.k;
    const size_t kcmax = std::min(kKC8, k), smax = (kcmax + 3) / 4;
    uint8_t* pb = tl_pb8.get((std::min(kNC, n) + kNR - 1) / kNR * kNR * 4 * smax);
    uint32_t* corr = tl_rowsum.get(m);
    for (size_t i = 0; i < m; ++i) {
        if ((i & 63) == 0 && cancelled(g.cancel)) return;
        corr[i] = 0u - 128u * row_sum_i8(g.a + i * g.lda, k);
    }
    for (size_t jc = 0; jc < n; jc += kNC) {
        const size_t nc = std::min(kNC, n - jc), npan = (nc + kNR - 1) / kNR;
        for (size_t pc = 0; pc < k; pc += kKC8) {
            if (cancelled(g.cancel)) return;
            const size_t kc = std::min(kKC8, k - pc), steps = kc / 4, tail = kc % 4;
            const size_t nst = steps + (tail != 0);
            const bool zero = !g.accumulate && pc == 0;
            // panel jp at pb + jp * 128 * nst, a step of it w * 4 bytes
            for (size_t s = 0; s < nst; ++s) {
                const uint8_t* r[4];
                for (size_t q = 0; q < 4; ++q)
                    r[q] = 4 * s + q < kc ? g.b + (pc + 4 * s + q) * g.ldb + jc : nullptr;
                for (size_t jp = 0; jp < npan; ++jp) {
                    const size_t cols = std::min(kNR, nc - jp * kNR);
                    const size_t w = cols > 16 ? 32 : 16;
                    const uint8_t* rj[4];
                    for (size_t q = 0; q < 4; ++q) rj[q] = r[q] ? r[q] + jp * kNR : nullptr;
                    pack_b8_step(rj, cols, w, pb + jp * kNR * 4 * nst + s * w * 4);
                }
            }
            for (size_t ic = 0; ic < m; ic += kMC) {
                const size_t mc = std::min(kMC, m - ic);
                const uint8_t* a = g.a + ic * g.lda + pc;
                for (size_t jp = 0; jp < npan; ++jp) {
                    if (cancelled(g.cancel)) return;
                    const size_t cols = std::min(kNR, nc - jp * kNR);
                    const size_t nv = cols > 16 ? 2 : 1;
                    const __mmask16 ml = mask16(cols - (nv - 1) * 16);
                    const uint8_t* bp = pb + jp * kNR * 4 * nst;
                    uint8_t* cp = g.c + ic * g.ldc + (jc + jp * kNR) * 4;
                    const std::array<UkrI8, kMR>& tab = kUkrI8[nv - 1];
                    for (size_t ip = 0; ip < mc; ip += kMR) {
                        const size_t rows = std::min(kMR, mc - ip);
                        tab[rows - 1](steps, tail, a + ip * g.lda, g.lda, bp, cp + ip * g.ldc,
                                      g.ldc, ml, zero, pc == 0 ? corr + ic + ip : nullptr);
                    }
                }
            }
        }
    }
}

}  // namespace

bool avx512_supported() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2");
}

bool avx512_vnni_supported() {
    __builtin_cpu_init();
    return avx512_supported() && __builtin_cpu_supports("avx512vnni");
}

uint64_t bf16_dp_matmuls() { return tl_dp_calls; }
uint64_t bf16_pack_hits() { return tl_pack_hits; }

void avx512_forget_packed(const uint8_t* lo, const uint8_t* hi) {
    tl_cache_a.forget(lo, hi);
    tl_cache_b.forget(lo, hi);
}

bool avx512_bf16_supported() {
    __builtin_cpu_init();
    return avx512_supported() && __builtin_cpu_supports("avx512bf16");
}

void avx512_fill(Impl& im) {
    im.h2f = h2f_avx512;
    im.f2h = f2h_avx512;
    im.bf2f = bf2f_avx512;
    im.f2bf = f2bf_avx512;
    im.i8f = i8f_avx512;
    im.fi8 = fi8_avx512;
    im.i32f = i32f_avx512;
    im.fi32 = fi32_avx512;
    im.mm_float = mm_float_avx512;
    im.mm_f32_b_trans = true;  // also through mm_float_or_dp: F32 goes to mm_float_avx512
    if (avx512_bf16_supported()) {
        static const bool ok = dpbf16_selftest();
        g_dpbf16_ok = ok;
        if (ok) im.mm_float = mm_float_or_dp;
    }
    if (avx512_vnni_supported()) im.mm_i8 = mm_i8_vnni;  // else the AVX2 int8 kernels
}

}  // namespace spyre::kern::detail

#endif  // SPYRE_KERN_X86

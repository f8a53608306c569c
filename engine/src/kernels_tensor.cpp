// SPDX-License-Identifier: MIT
// Numeric kernels of the tensor instructions (Documentation/isa.md "Vector unit"): VTRANS,
// VSEL, VIOTA, VFMA, mixed-type VBIN and the operand transposition of MM. Kept apart from
// kernels.cpp (matmul, conversions) so the two evolve independently.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "kernels.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace spyre::kern {

using isa::Bcast;
using isa::DType;

namespace {

template <typename T>
struct Buf {
    std::unique_ptr<T[]> p;
    size_t n = 0;
    T* get(size_t want) {
        if (n < want) {
            p.reset();
            p.reset(new T[want]);
            n = want;
        }
        return p.get();
    }
};

// Row buffers of the elementwise kernels, and the larger transposition buffers.
thread_local Buf<float> tl_r0, tl_r1, tl_r2, tl_r3, tl_t0, tl_t1;
thread_local Buf<uint8_t> tl_b0, tl_b1, tl_mm[2];

// Row r of an operand as cols fp32 values. Re-read for every row (isa.md: each row reads its
// sources before writing its destination, which may overlap them); only IMM is fixed.
struct RowSrc {
    const VecOperand& op;
    uint64_t cols;
    float* buf;
    RowSrc(const VecOperand& o, uint64_t n, Buf<float>& b) : op(o), cols(n), buf(b.get(n ? n : 1)) {
        if (op.mode == Bcast::IMM) std::fill_n(buf, cols, op.imm);
    }
    const float* row(uint64_t r) {
        switch (op.mode) {
            case Bcast::NONE:
                load_row(op.t, op.p + r * op.stride, cols, buf);
                break;
            case Bcast::ROW:
                load_row(op.t, op.p, cols, buf);
                break;
            case Bcast::SCALAR:
            case Bcast::COL: {
                float v;
                load_row(op.t, op.p + (op.mode == Bcast::COL ? r * op.stride : 0), 1, &v);
                std::fill_n(buf, cols, v);
                break;
            }
            default:
                break;
        }
        return buf;
    }
};

// 8 x 8 tiles of the transposition: dst row j = src column j. Pure data movement (no
// arithmetic), so the bits are the same whichever version runs.
void tile8_generic_u32(uint8_t* dst, const uint8_t* src, uint64_t dstride, uint64_t sstride) {
    for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j)
            std::memcpy(dst + j * dstride + i * 4, src + i * sstride + j * 4, 4);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) void tile8_avx2_u32(uint8_t* dst, const uint8_t* src,
                                                    uint64_t dstride, uint64_t sstride) {
    __m256 r[8], t[8], s[8];
    for (int i = 0; i < 8; ++i)
        r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(src + i * sstride));
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int h = 0; h < 8; h += 4) {
        s[h] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(1, 0, 1, 0));
        s[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(3, 2, 3, 2));
        s[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(1, 0, 1, 0));
        s[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int j = 0; j < 4; ++j) {
        _mm256_storeu_ps(reinterpret_cast<float*>(dst + j * dstride),
                         _mm256_permute2f128_ps(s[j], s[j + 4], 0x20));
        _mm256_storeu_ps(reinterpret_cast<float*>(dst + (j + 4) * dstride),
                         _mm256_permute2f128_ps(s[j], s[j + 4], 0x31));
    }
}

// SSE2 (every x86-64): 8 x 8 of 16-bit elements.
void tile8_sse2_u16(uint8_t* dst, const uint8_t* src, uint64_t dstride, uint64_t sstride) {
    __m128i r[8], a[8], b[8];
    for (int i = 0; i < 8; ++i)
        r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * sstride));
    for (int i = 0; i < 8; i += 2) {
        a[i] = _mm_unpacklo_epi16(r[i], r[i + 1]);      // columns 0-3 of rows i, i + 1
        a[i + 1] = _mm_unpackhi_epi16(r[i], r[i + 1]);  // columns 4-7
    }
    for (int h = 0; h < 8; h += 4) {
        b[h] = _mm_unpacklo_epi32(a[h], a[h + 2]);          // columns 0-1 of 4 rows
        b[h + 1] = _mm_unpackhi_epi32(a[h], a[h + 2]);      // 2-3
        b[h + 2] = _mm_unpacklo_epi32(a[h + 1], a[h + 3]);  // 4-5
        b[h + 3] = _mm_unpackhi_epi32(a[h + 1], a[h + 3]);  // 6-7
    }
    for (int j = 0; j < 4; ++j) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * j * dstride),
                         _mm_unpacklo_epi64(b[j], b[j + 4]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * j + 1) * dstride),
                         _mm_unpackhi_epi64(b[j], b[j + 4]));
    }
}
#endif

using Tile8 = void (*)(uint8_t*, const uint8_t*, uint64_t, uint64_t);
Tile8 pick_tile8_u32() {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) return tile8_avx2_u32;
#endif
    return tile8_generic_u32;
}
Tile8 pick_tile8_u16() {
#if defined(__x86_64__) && defined(__GNUC__)
    return tile8_sse2_u16;
#else
    return [](uint8_t* dst, const uint8_t* src, uint64_t dstride, uint64_t sstride) {
        for (int i = 0; i < 8; ++i)
            for (int j = 0; j < 8; ++j)
                std::memcpy(dst + j * dstride + i * 2, src + i * sstride + j * 2, 2);
    };
#endif
}
const Tile8 tile8_u32 = pick_tile8_u32();
const Tile8 tile8_u16 = pick_tile8_u16();

template <typename T>
void transpose_bits(uint8_t* dst, const uint8_t* src, uint64_t rows, uint64_t cols,
                    uint64_t dstride, uint64_t sstride) {
    constexpr uint64_t kB = 32;  // square blocks: both sides stay in cache
    // whole 8 x 8 tiles of 2- and 4-byte elements in SIMD registers, the edges element-wise
    const Tile8 tile = sizeof(T) == 4 ? tile8_u32 : sizeof(T) == 2 ? tile8_u16 : nullptr;
    for (uint64_t i0 = 0; i0 < rows; i0 += kB) {
        const uint64_t i1 = std::min(rows, i0 + kB);
        for (uint64_t j0 = 0; j0 < cols; j0 += kB) {
            const uint64_t j1 = std::min(cols, j0 + kB);
            uint64_t ti = i0, tj = j0;  // [i0, ti) x [j0, tj): done by tiles
            if (tile) {
                ti = i0 + (i1 - i0) / 8 * 8;
                tj = j0 + (j1 - j0) / 8 * 8;
                for (uint64_t i = i0; i < ti; i += 8)
                    for (uint64_t j = j0; j < tj; j += 8)
                        tile(dst + j * dstride + i * sizeof(T), src + i * sstride + j * sizeof(T),
                             dstride, sstride);
            }
            for (uint64_t i = i0; i < i1; ++i)
                for (uint64_t j = i < ti ? tj : j0; j < j1; ++j) {
                    T v;
                    std::memcpy(&v, src + i * sstride + j * sizeof(T), sizeof(T));
                    std::memcpy(dst + j * dstride + i * sizeof(T), &v, sizeof(T));
                }
        }
    }
}

void transpose_es(uint32_t es, uint8_t* dst, const uint8_t* src, uint64_t rows, uint64_t cols,
                  uint64_t dstride, uint64_t sstride) {
    switch (es) {
        case 1:
            return transpose_bits<uint8_t>(dst, src, rows, cols, dstride, sstride);
        case 2:
            return transpose_bits<uint16_t>(dst, src, rows, cols, dstride, sstride);
        default:
            return transpose_bits<uint32_t>(dst, src, rows, cols, dstride, sstride);
    }
}

bool overlaps(const uint8_t* a, uint64_t arows, uint64_t astride, uint64_t abytes, const uint8_t* b,
              uint64_t brows, uint64_t bstride, uint64_t bbytes) {
    const uint8_t* a1 = a + (arows - 1) * astride + abytes;
    const uint8_t* b1 = b + (brows - 1) * bstride + bbytes;
    return a < b1 && b < a1;
}

// Stores an int64 as type t: integers saturate exactly, floats via fp32 (RNE) like every
// vector result.
void store_i64_row(DType t, uint8_t* p, uint64_t n, const int64_t* v, float* tmp) {
    if (t == DType::I32) {
        for (uint64_t j = 0; j < n; ++j) {
            const int32_t x = static_cast<int32_t>(std::clamp<int64_t>(v[j], INT32_MIN, INT32_MAX));
            std::memcpy(p + 4 * j, &x, 4);
        }
    } else if (t == DType::I8) {
        for (uint64_t j = 0; j < n; ++j)
            p[j] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp<int64_t>(v[j], -128, 127)));
    } else {
        for (uint64_t j = 0; j < n; ++j) tmp[j] = static_cast<float>(v[j]);
        store_row(t, p, n, tmp);
    }
}

// out = fma(x, y, z) elementwise: one rounding each (std::fma); the AVX2 version performs the
// same IEEE operation, so both give identical bits.
void fma_row_generic(float* out, const float* x, const float* y, const float* z, uint64_t n) {
    for (uint64_t j = 0; j < n; ++j) out[j] = std::fma(x[j], y[j], z[j]);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) void fma_row_avx2(float* out, const float* x, const float* y,
                                                      const float* z, uint64_t n) {
    uint64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(out + j, _mm256_fmadd_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(y + j),
                                                  _mm256_loadu_ps(z + j)));
    for (; j < n; ++j) out[j] = std::fma(x[j], y[j], z[j]);
}
#endif

using FmaRow = void (*)(float*, const float*, const float*, const float*, uint64_t);
FmaRow pick_fma_row() {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return fma_row_avx2;
#endif
    return fma_row_generic;  // std::fma: a libm call per element without hardware FMA
}
const FmaRow fma_row = pick_fma_row();

}  // namespace

void transpose(DType dt, DType st, uint8_t* dst, const uint8_t* src, uint64_t rows, uint64_t cols,
               uint64_t dstride, uint64_t sstride, const Cancel* cancel) {
    if (rows == 0 || cols == 0) return;
    const uint32_t ses = isa::dtype_size(st), des = isa::dtype_size(dt);
    if (dt == st) {
        if (overlaps(dst, cols, dstride, rows * des, src, rows, sstride, cols * ses)) {
            // read the whole source first: copy it aside
            uint8_t* tmp = tl_b0.get(rows * cols * ses);
            for (uint64_t i = 0; i < rows; ++i)
                std::memcpy(tmp + i * cols * ses, src + i * sstride, cols * ses);
            src = tmp;
            sstride = cols * ses;
        }
        // blocks of 256 source rows between cancel checks
        for (uint64_t i0 = 0; i0 < rows; i0 += 256) {
            if (cancelled(cancel)) return;
            transpose_es(ses, dst + i0 * des, src + i0 * sstride,
                         std::min<uint64_t>(256, rows - i0), cols, dstride, sstride);
        }
        return;
    }
    // conversion: every source row to fp32 first (so overlap is harmless), then fp32 transpose
    float* a = tl_t0.get(rows * cols);
    float* b = tl_t1.get(rows * cols);
    for (uint64_t i = 0; i < rows; ++i) {
        if ((i & 255) == 0 && cancelled(cancel)) return;
        load_row(st, src + i * sstride, cols, a + i * cols);
    }
    transpose_bits<uint32_t>(reinterpret_cast<uint8_t*>(b), reinterpret_cast<const uint8_t*>(a),
                             rows, cols, rows * 4, cols * 4);
    for (uint64_t j = 0; j < cols; ++j) {
        if ((j & 255) == 0 && cancelled(cancel)) return;
        store_row(dt, dst + j * dstride, rows, b + j * rows);
    }
}

const uint8_t* transposed_copy(int slot, uint32_t es, const uint8_t* src, uint64_t rows,
                               uint64_t cols, uint64_t sstride) {
    uint8_t* out = tl_mm[slot & 1].get(std::max<uint64_t>(rows * cols * es, 1));
    transpose_es(es, out, src, rows, cols, rows * es, sstride);
    return out;
}

void vbinary_mixed(isa::VBin f, DType dt, uint8_t* dst, uint64_t dstride, uint64_t rows,
                   uint64_t cols, const VecOperand& s1, const VecOperand& s2,
                   const Cancel* cancel) {
    RowSrc a(s1, cols, tl_r0), b(s2, cols, tl_r1);
    float* y = tl_r2.get(cols);
    for (uint64_t r = 0; r < rows; ++r) {
        if (cancelled(cancel)) return;
        const float* x = a.row(r);
        const float* z = b.row(r);
        apply_binary(f, y, x, z, cols);
        store_row(dt, dst + r * dstride, cols, y);
    }
}

void vselect(DType dt, uint8_t* dst, uint64_t dstride, uint64_t rows, uint64_t cols,
             const VecOperand& x, const VecOperand& y, const VecOperand& mask, bool invert,
             const Cancel* cancel) {
    RowSrc xs(x, cols, tl_r0), ys(y, cols, tl_r1), ms(mask, cols, tl_r2);
    float* out = tl_r3.get(cols);
    for (uint64_t r = 0; r < rows; ++r) {
        if (cancelled(cancel)) return;
        const float* xv = xs.row(r);
        const float* yv = ys.row(r);
        const float* mv = ms.row(r);
        // NaN masks are true (NaN != 0); -0 is false
        for (uint64_t j = 0; j < cols; ++j) out[j] = ((mv[j] != 0.0f) != invert) ? xv[j] : yv[j];
        store_row(dt, dst + r * dstride, cols, out);
    }
}

void viota(isa::Iota f, DType dt, uint8_t* dst, uint64_t dstride, uint64_t rows, uint64_t cols,
           const VecOperand& src, int64_t alpha, int64_t beta, int64_t gamma, float fill,
           const Cancel* cancel) {
    int64_t* v = reinterpret_cast<int64_t*>(tl_b1.get(cols * 8));
    float* out = tl_r3.get(cols);
    float* x = tl_r0.get(cols);
    const uint64_t ub = static_cast<uint64_t>(beta);
    for (uint64_t r = 0; r < rows; ++r) {
        if (cancelled(cancel)) return;
        // wrapping int64 arithmetic, like the scalar ALU
        const uint64_t base = r * static_cast<uint64_t>(alpha) + static_cast<uint64_t>(gamma);
        for (uint64_t j = 0; j < cols; ++j) v[j] = static_cast<int64_t>(base + j * ub);
        if (f == isa::Iota::IOTA) {
            store_i64_row(dt, dst + r * dstride, cols, v, out);
            continue;
        }
        load_row(src.t, src.p + r * src.stride, cols, x);
        for (uint64_t j = 0; j < cols; ++j) out[j] = v[j] >= 0 ? x[j] : fill;
        store_row(dt, dst + r * dstride, cols, out);
    }
}

void vfma(DType dt, uint8_t* dst, uint64_t dstride, uint64_t rows, uint64_t cols,
          const VecOperand& s1, const VecOperand& s2, const VecOperand& s3, const Cancel* cancel) {
    RowSrc a(s1, cols, tl_r0), b(s2, cols, tl_r1), c(s3, cols, tl_r2);
    float* out = tl_r3.get(cols);
    for (uint64_t r = 0; r < rows; ++r) {
        if (cancelled(cancel)) return;
        const float* x = a.row(r);
        const float* y = b.row(r);
        const float* z = c.row(r);
        fma_row(out, x, y, z, cols);
        store_row(dt, dst + r * dstride, cols, out);
    }
}

}  // namespace spyre::kern

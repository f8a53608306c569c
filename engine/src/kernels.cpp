// SPDX-License-Identifier: MIT
#include "kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "spyre/numerics.hpp"

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

thread_local std::vector<float> tl_f0, tl_f1, tl_f2, tl_f3;
thread_local std::vector<uint32_t> tl_u0, tl_u1, tl_u2;
thread_local std::vector<double> tl_d0;

template <typename V>
inline auto* grow(V& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
}

}  // namespace

void load_row(DType t, const uint8_t* p, size_t n, float* out) {
    if (n == 0) return;
    switch (t) {
        case DType::F32:
            std::memcpy(out, p, n * 4);
            break;
        case DType::F16:
            for (size_t i = 0; i < n; ++i) out[i] = num::f16_to_f32(ld<uint16_t>(p + 2 * i));
            break;
        case DType::BF16:
            for (size_t i = 0; i < n; ++i) out[i] = num::bf16_to_f32(ld<uint16_t>(p + 2 * i));
            break;
        case DType::I8:
            for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<int8_t>(p[i]));
            break;
        case DType::I32:
            for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(ld<int32_t>(p + 4 * i));
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
            for (size_t i = 0; i < n; ++i) st<uint16_t>(p + 2 * i, num::f32_to_f16(in[i]));
            break;
        case DType::BF16:
            for (size_t i = 0; i < n; ++i) st<uint16_t>(p + 2 * i, num::f32_to_bf16(in[i]));
            break;
        case DType::I8:
            for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(num::f32_to_i8(in[i]));
            break;
        case DType::I32:
            for (size_t i = 0; i < n; ++i) st<int32_t>(p + 4 * i, num::f32_to_i32(in[i]));
            break;
        default:
            break;
    }
}

namespace {

// C[m][n] += A[m][k] * B[k][n] on packed, contiguous operands; k ascending for every element.
// Four rows of C share each loaded row of B; columns are blocked to stay in L1.
template <typename T>
void gemm_packed(T* __restrict c, const T* __restrict a, const T* __restrict b, size_t m, size_t n,
                 size_t k) {
    constexpr size_t kColBlock = 256;
    for (size_t j0 = 0; j0 < n; j0 += kColBlock) {
        const size_t nb = std::min(kColBlock, n - j0);
        size_t i = 0;
        for (; i + 4 <= m; i += 4) {
            T* __restrict c0 = c + (i + 0) * n + j0;
            T* __restrict c1 = c + (i + 1) * n + j0;
            T* __restrict c2 = c + (i + 2) * n + j0;
            T* __restrict c3 = c + (i + 3) * n + j0;
            for (size_t kk = 0; kk < k; ++kk) {
                const T a0 = a[(i + 0) * k + kk], a1 = a[(i + 1) * k + kk];
                const T a2 = a[(i + 2) * k + kk], a3 = a[(i + 3) * k + kk];
                const T* __restrict br = b + kk * n + j0;
                for (size_t j = 0; j < nb; ++j) {
                    const T bv = br[j];
                    c0[j] += a0 * bv;
                    c1[j] += a1 * bv;
                    c2[j] += a2 * bv;
                    c3[j] += a3 * bv;
                }
            }
        }
        for (; i < m; ++i) {
            T* __restrict c0 = c + i * n + j0;
            for (size_t kk = 0; kk < k; ++kk) {
                const T a0 = a[i * k + kk];
                const T* __restrict br = b + kk * n + j0;
                for (size_t j = 0; j < nb; ++j) c0[j] += a0 * br[j];
            }
        }
    }
}

// Non-template entry points with an AVX2 clone chosen at load time. No FMA contraction
// (-ffp-contract=off), so both clones give bit-identical results.
__attribute__((target_clones("avx2", "default"))) void gemm_f32(float* c, const float* a,
                                                                const float* b, size_t m, size_t n,
                                                                size_t k) {
    gemm_packed<float>(c, a, b, m, n, k);
}
__attribute__((target_clones("avx2", "default"))) void gemm_u32(uint32_t* c, const uint32_t* a,
                                                                const uint32_t* b, size_t m,
                                                                size_t n, size_t k) {
    gemm_packed<uint32_t>(c, a, b, m, n, k);
}

}  // namespace

void matmul(const MatmulArgs& g) {
    const size_t m = g.m, n = g.n, k = g.k;
    if (m == 0 || n == 0) return;
    if (g.in == DType::I8) {
        uint32_t* a = grow(tl_u0, m * k);
        uint32_t* b = grow(tl_u1, k * n);
        uint32_t* c = grow(tl_u2, m * n);
        for (size_t i = 0; i < m; ++i)
            for (size_t kk = 0; kk < k; ++kk)
                a[i * k + kk] = static_cast<uint32_t>(
                    static_cast<int32_t>(static_cast<int8_t>(g.a[i * g.lda + kk])));
        for (size_t kk = 0; kk < k; ++kk)
            for (size_t j = 0; j < n; ++j)
                b[kk * n + j] = static_cast<uint32_t>(
                    static_cast<int32_t>(static_cast<int8_t>(g.b[kk * g.ldb + j])));
        for (size_t i = 0; i < m; ++i) {
            if (g.accumulate)
                std::memcpy(c + i * n, g.c + i * g.ldc, n * 4);
            else
                std::memset(c + i * n, 0, n * 4);
        }
        gemm_u32(c, a, b, m, n, k);
        for (size_t i = 0; i < m; ++i) std::memcpy(g.c + i * g.ldc, c + i * n, n * 4);
        return;
    }
    float* a = grow(tl_f0, m * k);
    float* b = grow(tl_f1, k * n);
    float* c = grow(tl_f2, m * n);
    for (size_t i = 0; i < m; ++i) load_row(g.in, g.a + i * g.lda, k, a + i * k);
    for (size_t kk = 0; kk < k; ++kk) load_row(g.in, g.b + kk * g.ldb, n, b + kk * n);
    for (size_t i = 0; i < m; ++i) {
        if (g.accumulate)
            std::memcpy(c + i * n, g.c + i * g.ldc, n * 4);
        else
            std::memset(c + i * n, 0, n * 4);
    }
    gemm_f32(c, a, b, m, n, k);
    for (size_t i = 0; i < m; ++i) std::memcpy(g.c + i * g.ldc, c + i * n, n * 4);
}

namespace {

template <typename F>
inline void map1(float* __restrict y, const float* __restrict x, size_t n, F f) {
    for (size_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

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
        default:
            break;
    }
}

}  // namespace

void vunary(isa::VUn f, DType dt, DType st, uint8_t* dst, const uint8_t* src, uint64_t rows,
            uint64_t cols, uint64_t dstride, uint64_t sstride, float imm) {
    float* x = grow(tl_f0, cols);
    float* y = grow(tl_f1, cols);
    for (uint64_t r = 0; r < rows; ++r) {
        if (f != isa::VUn::SET) load_row(st, src + r * sstride, cols, x);
        apply_unary(f, y, x, cols, imm);
        store_row(dt, dst + r * dstride, cols, y);
    }
}

void vbinary(isa::VBin f, isa::Bcast mode, DType dt, DType st, uint8_t* dst, const uint8_t* s1,
             const uint8_t* s2, uint64_t rows, uint64_t cols, uint64_t dstride, uint64_t s1stride,
             uint64_t s2stride, float imm) {
    using isa::Bcast;
    float* x = grow(tl_f0, cols);
    float* z = grow(tl_f1, cols);
    float* y = grow(tl_f2, cols);
    const size_t es = isa::dtype_size(st);
    for (uint64_t r = 0; r < rows; ++r) {
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
             uint64_t rows, uint64_t cols, uint64_t sstride) {
    using isa::Red;
    float* x = grow(tl_f0, cols);
    const size_t outn = axis == 0 ? rows : cols;
    float* out = grow(tl_f3, outn);
    double* acc = grow(tl_d0, outn);
    if (axis == 0) {
        for (uint64_t r = 0; r < rows; ++r) {
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

// SPDX-License-Identifier: MIT
// Exact integer kernels: VINT (elementwise arithmetic, bitwise ops, shifts, compares,
// conversions) and VRED's integer path (Documentation/isa.md "VINT"). Values are widened to
// int64 (sign-extended, U8 zero-extended), computed with wrapping 64-bit arithmetic and wrapped
// to the destination width: the same bits as wrapping arithmetic in the narrower type.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels.hpp"

namespace spyre::kern {

using isa::DType;
using isa::load_int;
using isa::store_int;
using isa::VInt;

namespace {

// Bits of a type (shift counts at or beyond it give 0 / the sign fill).
int width(DType t) { return static_cast<int>(isa::dtype_size(t)) * 8; }

int64_t wrap_add(int64_t a, int64_t b) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrap_sub(int64_t a, int64_t b) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t wrap_mul(int64_t a, int64_t b) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// Floor division and remainder with the divisor's sign; b != 0. INT64_MIN / -1 wraps to
// INT64_MIN with remainder 0 (the only overflowing case).
int64_t floor_div(int64_t a, int64_t b) {
    if (b == -1) return static_cast<int64_t>(0 - static_cast<uint64_t>(a));
    const int64_t q = a / b, r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
int64_t floor_rem(int64_t a, int64_t b) {
    if (b == -1) return 0;
    const int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

// One function on widened values; st gives the shift width and the sign of SHR.
int64_t apply(VInt f, DType st, int64_t a, int64_t b) {
    const int w = width(st);
    switch (f) {
        case VInt::ADD:
            return wrap_add(a, b);
        case VInt::SUB:
            return wrap_sub(a, b);
        case VInt::MUL:
            return wrap_mul(a, b);
        case VInt::DIV:
            return floor_div(a, b);
        case VInt::REM:
            return floor_rem(a, b);
        case VInt::MAX:
            return a > b ? a : b;
        case VInt::MIN:
            return a < b ? a : b;
        case VInt::AND:
            return a & b;
        case VInt::OR:
            return a | b;
        case VInt::XOR:
            return a ^ b;
        case VInt::SHL:
            // counts read as signed values of the type: negative or >= width give 0 (torch)
            return (b < 0 || b >= w) ? 0 : static_cast<int64_t>(static_cast<uint64_t>(a) << b);
        case VInt::SHR:
            // negative or >= width: the sign fill (0 for U8, whose values are non-negative)
            return a >> ((b < 0 || b >= w) ? 63 : b);
        case VInt::EQ:
            return a == b;
        case VInt::NE:
            return a != b;
        case VInt::LT:
            return a < b;
        case VInt::LE:
            return a <= b;
        case VInt::GT:
            return a > b;
        case VInt::GE:
            return a >= b;
        case VInt::NEG:
            return wrap_sub(0, a);
        case VInt::ABS:
            return a < 0 ? wrap_sub(0, a) : a;
        case VInt::NOT:
            return ~a;
        default:
            return a;
    }
}

int64_t lo_of(DType t) {
    switch (t) {
        case DType::I8:
            return -128;
        case DType::U8:
            return 0;
        case DType::I32:
            return std::numeric_limits<int32_t>::min();
        default:
            return std::numeric_limits<int64_t>::min();
    }
}
int64_t hi_of(DType t) {
    switch (t) {
        case DType::I8:
            return 127;
        case DType::U8:
            return 255;
        case DType::I32:
            return std::numeric_limits<int32_t>::max();
        default:
            return std::numeric_limits<int64_t>::max();
    }
}

// float -> integer: truncated toward zero, NaN -> 0, saturated to the type's range.
int64_t float_to_int(float v, DType t) {
    if (std::isnan(v)) return 0;
    const double d = std::trunc(static_cast<double>(v));
    // 2^63 is exact in double; every float below it converts without overflow
    if (d >= 9223372036854775808.0) return hi_of(t);
    if (d < -9223372036854775808.0) return lo_of(t);
    const int64_t i = static_cast<int64_t>(d);
    return i < lo_of(t) ? lo_of(t) : i > hi_of(t) ? hi_of(t) : i;
}

// Row-wise conversion of n elements between any two types.
void convert_row(DType dt, DType st, uint8_t* dst, const uint8_t* src, size_t n,
                 std::vector<float>& fbuf) {
    const size_t des = isa::dtype_size(dt), ses = isa::dtype_size(st);
    const bool si = isa::int_type(st), di = isa::int_type(dt);
    if (si && di) {
        for (size_t j = 0; j < n; ++j) store_int(dt, dst + j * des, load_int(st, src + j * ses));
        return;
    }
    fbuf.resize(n);
    if (si) {
        // int -> fp32 rounds to nearest even once (as torch converts through float), then to dt
        for (size_t j = 0; j < n; ++j) fbuf[j] = static_cast<float>(load_int(st, src + j * ses));
        store_row(dt, dst, n, fbuf.data());
        return;
    }
    load_row(st, src, n, fbuf.data());  // exact for the float types
    if (di) {
        for (size_t j = 0; j < n; ++j) store_int(dt, dst + j * des, float_to_int(fbuf[j], dt));
        return;
    }
    store_row(dt, dst, n, fbuf.data());
}

constexpr uint64_t kPollRows = 4096;  // poll the cancel flag every this many elements

}  // namespace

int64_t vint(VInt f, DType dt, DType st, uint8_t* dst, uint64_t dstride, const uint8_t* s1,
             uint64_t s1stride, const IntOperand& s2, uint64_t rows, uint64_t cols,
             const Cancel* cancel) {
    const size_t des = isa::dtype_size(dt), ses = isa::dtype_size(st);
    thread_local std::vector<int64_t> a, b, y;
    thread_local std::vector<float> fbuf;
    thread_local std::vector<uint8_t> tmp;
    uint64_t since = 0;
    for (uint64_t r = 0; r < rows; ++r) {
        if ((since += cols) >= kPollRows) {
            since = 0;
            if (cancelled(cancel)) return -1;
        }
        const uint8_t* x = s1 + r * s1stride;
        uint8_t* out = dst + r * dstride;
        if (f == VInt::CVT) {
            // the whole row is read before it is written (in place with another element size)
            tmp.assign(x, x + cols * ses);
            convert_row(dt, st, out, tmp.data(), cols, fbuf);
            continue;
        }
        a.resize(cols), b.resize(cols), y.resize(cols);
        for (uint64_t j = 0; j < cols; ++j) a[j] = load_int(st, x + j * ses);
        if (!isa::vint_unary(f)) {
            switch (s2.mode) {
                case isa::Bcast::NONE:
                    for (uint64_t j = 0; j < cols; ++j)
                        b[j] = load_int(st, s2.p + r * s2.stride + j * ses);
                    break;
                case isa::Bcast::ROW:
                    for (uint64_t j = 0; j < cols; ++j) b[j] = load_int(st, s2.p + j * ses);
                    break;
                case isa::Bcast::SCALAR:
                    std::fill(b.begin(), b.end(), load_int(st, s2.p));
                    break;
                case isa::Bcast::COL:
                    std::fill(b.begin(), b.end(), load_int(st, s2.p + r * s2.stride));
                    break;
                default:
                    std::fill(b.begin(), b.end(), s2.imm);
                    break;
            }
            if (f == VInt::DIV || f == VInt::REM)
                for (uint64_t j = 0; j < cols; ++j)
                    if (b[j] == 0) return static_cast<int64_t>(r * cols + j);
        }
        for (uint64_t j = 0; j < cols; ++j) y[j] = apply(f, st, a[j], b[j]);
        for (uint64_t j = 0; j < cols; ++j) store_int(dt, out + j * des, y[j]);
    }
    return -1;
}

void vreduce_int(isa::Red f, int axis, DType dt, DType st, uint8_t* dst, const uint8_t* src,
                 uint64_t rows, uint64_t cols, uint64_t sstride, const Cancel* cancel) {
    const size_t des = isa::dtype_size(dt), ses = isa::dtype_size(st);
    const int64_t init = f == isa::Red::SUM    ? 0
                         : f == isa::Red::PROD ? 1
                         : f == isa::Red::MAX  ? std::numeric_limits<int64_t>::min()
                                               : std::numeric_limits<int64_t>::max();
    auto step = [f](int64_t acc, int64_t v) {
        switch (f) {
            case isa::Red::SUM:
                return wrap_add(acc, v);
            case isa::Red::PROD:
                return wrap_mul(acc, v);
            case isa::Red::MAX:
                return acc > v ? acc : v;
            default:
                return acc < v ? acc : v;
        }
    };
    thread_local std::vector<int64_t> acc;
    acc.assign(axis == 0 ? rows : cols, init);
    uint64_t since = 0;
    for (uint64_t r = 0; r < rows; ++r) {
        if ((since += cols) >= kPollRows) {
            since = 0;
            if (cancelled(cancel)) return;
        }
        const uint8_t* x = src + r * sstride;
        if (axis == 0) {
            int64_t s = acc[r];
            for (uint64_t j = 0; j < cols; ++j) s = step(s, load_int(st, x + j * ses));
            acc[r] = s;
        } else {
            for (uint64_t j = 0; j < cols; ++j) acc[j] = step(acc[j], load_int(st, x + j * ses));
        }
    }
    for (size_t i = 0; i < acc.size(); ++i) store_int(dt, dst + i * des, acc[i]);
}

}  // namespace spyre::kern

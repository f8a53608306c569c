// SPDX-License-Identifier: MIT
#include "ops/sort_program.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "ops/sticks.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

using isa::Bcast;
using isa::DType;
using isa::VInt;

constexpr int64_t kNanKey = 0x7FC00000;  // above +inf's key 0x7F800000
constexpr int64_t kInt32Min = -0x80000000LL;

struct Layout {
    uint64_t r0 = 0, x = 0, s = 0, ka = 0, kb = 0, end = 0;
};

Layout layout(const SortShape& sh, uint64_t chunk) {
    const uint64_t P = sort_padded(sh.N);
    Layout l;
    l.x = up128(chunk * sh.N * sh.es);
    l.s = l.x + up128(4 * P * chunk);
    l.ka = l.s + up128(4 * P * chunk);
    l.kb = l.ka + up128(8 * P * chunk);
    l.end = l.kb + up128(8 * P * chunk);
    return l;
}

// Rows per stick-aligned step of the input, the values and the indices.
uint64_t row_quantum(const SortShape& s) {
    auto q = [](uint64_t bytes) { return kStick / std::gcd(kStick, bytes); };
    return std::lcm(q(s.N * s.es), std::lcm(q(s.K * s.es), q(s.K * 8)));
}

class Emitter {
  public:
    explicit Emitter(ProgramBuilder& b) : b_(b) {}
    // dst = f(s1, s2 or imm) over rows x cols of type st (dst type dt); r14..r16 addresses,
    // r20.. the descriptor
    void vint(VInt f, DType dt, DType st, uint64_t dst, uint64_t s1, int64_t s2, bool imm,
              uint64_t rows, uint64_t cols, uint64_t dstride, uint64_t sstride, int64_t value = 0) {
        b_.li(14, int64_t(dst));
        b_.li(15, int64_t(s1));
        if (!imm) b_.li(16, s2);
        b_.set_regs(20, {int64_t(rows), int64_t(cols), int64_t(dstride), int64_t(sstride),
                         int64_t(sstride)});
        b_.vint(f, imm ? Bcast::IMM : Bcast::NONE, dt, st, 14, 15, imm ? 0 : 16, 20, value);
    }
    // one contiguous run of n elements
    void flat(VInt f, DType t, uint64_t dst, uint64_t s1, int64_t s2, bool imm, uint64_t n,
              int64_t value = 0) {
        vint(f, t, t, dst, s1, s2, imm, 1, n, 0, 0, value);
    }
    void cvt(DType dt, DType st, uint64_t dst, uint64_t src, uint64_t n) {
        vint(VInt::CVT, dt, st, dst, src, 0, true, 1, n, 0, 0);
    }

  private:
    ProgramBuilder& b_;
};

}  // namespace

uint64_t sort_padded(uint64_t n) { return std::bit_ceil(std::max<uint64_t>(n, 1)); }

uint64_t sort_lx_bytes(const SortShape& s, uint64_t chunk) { return layout(s, chunk).end; }

std::vector<uint8_t> build_sort(const SortShape& s, const SortPlan& p) {
    using isa::Alu;
    const uint64_t k = p.chunk, N = s.N, M = s.K, P = sort_padded(N), es = s.es;
    const Layout l = layout(s, k);
    const DType I32 = DType::I32, I64 = DType::I64;
    ProgramBuilder b;
    Emitter e(b);
    // r3 x, r4 values, r5 indices (DDR); r6 first row of this core, r7 its row count; r8 chunks,
    // r9 chunk; r10 rows of the chunk, r11 its first row; r12 DDR address, r13 bytes; r14..r16
    // LX addresses, r20..r26 descriptor; r27 LX address of a DMA
    b.arg(3, 0), b.arg(4, 1), b.arg(5, 2);
    b.muli(6, 1, int64_t(p.per_core));
    b.li(9, int64_t(s.O));
    b.sub(7, 9, 6);
    b.li(9, int64_t(p.per_core));
    b.alu(Alu::MIN, 7, 7, 9);
    ProgramBuilder::Label done = b.label();
    b.br(isa::Cond::GE, 0, 7, done);
    b.addi(8, 7, int64_t(k) - 1);
    b.alu(Alu::DIVU, 8, 8, 0, int64_t(k));
    b.loop(8, 0, 9);
    {
        b.muli(11, 9, int64_t(k));
        b.sub(10, 7, 11);
        b.li(12, int64_t(k));
        b.alu(Alu::MIN, 10, 10, 12);
        b.add(11, 11, 6);
        // load the rows [cnt, N]
        b.muli(12, 11, int64_t(N * es));
        b.add(12, 12, 3);
        b.muli(13, 10, int64_t(N * es));
        b.li(27, int64_t(l.r0));
        b.span(12);
        b.load(27, 12, 13);
        // transposed to [N, k] fp32 bits
        b.li(14, int64_t(l.x)), b.li(15, int64_t(l.r0));
        b.mov(20, 10);
        b.li(21, int64_t(N)), b.li(22, int64_t(k * 4)), b.li(23, int64_t(N * es));
        b.vtrans(DType::F32, s.t, 14, 15, 20);
        // keys: key32 = a ^ sign (a = magnitude bits), -0 -> 0 (z = 1), NaN -> kNanKey
        const uint64_t nk = N * k, ka_hi = l.ka + 4 * P * k;
        e.flat(VInt::EQ, I32, l.s, l.x, 0, true, nk, kInt32Min);      // z
        e.flat(VInt::AND, I32, l.ka, l.x, 0, true, nk, 0x7FFFFFFF);   // a
        e.flat(VInt::GT, I32, ka_hi, l.ka, 0, true, nk, 0x7F800000);  // isnan
        e.flat(VInt::SHR, I32, l.x, l.x, 0, true, nk, 31);            // sign: 0 or -1
        e.flat(VInt::XOR, I32, l.ka, l.ka, int64_t(l.x), false, nk);
        e.flat(VInt::ADD, I32, l.ka, l.ka, int64_t(l.s), false, nk);
        b.li(14, int64_t(l.x)), b.li(15, int64_t(l.ka));
        b.set_regs(20, {1, int64_t(nk), 0, 0, 0});
        b.vint(VInt::NEG, Bcast::IMM, I32, I32, 14, 15, 0, 20);
        e.flat(VInt::ADD, I32, l.x, l.x, 0, true, nk, kNanKey);
        e.flat(VInt::MUL, I32, l.x, l.x, int64_t(ka_hi), false, nk);
        e.flat(VInt::ADD, I32, l.ka, l.ka, int64_t(l.x), false, nk);
        if (s.descending) {
            b.li(14, int64_t(l.ka)), b.li(15, int64_t(l.ka));
            b.vint(VInt::NOT, Bcast::IMM, I32, I32, 14, 15, 0, 20);
        }
        e.cvt(I64, I32, l.kb, l.ka, nk);
        e.flat(VInt::SHL, I64, l.kb, l.kb, 0, true, nk, 32);
        // low word: index * 2 + z
        b.li(14, int64_t(l.x));
        b.set_regs(20, {int64_t(N), int64_t(k), int64_t(k * 4), 0, 2, 0, 0});
        b.viota(I32, 14, 20);
        e.flat(VInt::ADD, I32, l.x, l.x, int64_t(l.s), false, nk);
        e.cvt(I64, I32, l.ka, l.x, nk);
        e.flat(VInt::OR, I64, l.ka, l.ka, int64_t(l.kb), false, nk);
        if (P > N)  // padding: the largest key, sorted past the row
            e.flat(VInt::MAX, I64, l.ka + 8 * nk, l.ka + 8 * nk, 0, true, (P - N) * k, INT64_MAX);
        // bitonic network over the rows of [P, k]: compare-exchange = MIN and MAX
        uint64_t cur = l.ka, oth = l.kb;
        const uint64_t rb = k * 8;
        auto ce = [&](bool asc, uint64_t base, uint64_t rows, uint64_t stride, uint64_t j) {
            const uint64_t lo = base, hi = base + j * rb;
            e.vint(asc ? VInt::MIN : VInt::MAX, I64, I64, oth + lo, cur + lo, int64_t(cur + hi),
                   false, rows, j * k, stride, stride);
            e.vint(asc ? VInt::MAX : VInt::MIN, I64, I64, oth + hi, cur + lo, int64_t(cur + hi),
                   false, rows, j * k, stride, stride);
        };
        for (uint64_t B = 2; B <= P; B *= 2)
            for (uint64_t j = B / 2; j >= 1; j /= 2) {
                const uint64_t R = B / (2 * j), nm = P / (2 * B);
                if (B == P) {
                    ce(true, 0, R, 2 * j * rb, j);
                } else if (nm <= R) {
                    for (uint64_t m = 0; m < nm; ++m) {
                        ce(true, m * 2 * B * rb, R, 2 * j * rb, j);
                        ce(false, (m * 2 * B + B) * rb, R, 2 * j * rb, j);
                    }
                } else {
                    for (uint64_t r = 0; r < R; ++r) {
                        ce(true, r * 2 * j * rb, nm, 2 * B * rb, j);
                        ce(false, (B + r * 2 * j) * rb, nm, 2 * B * rb, j);
                    }
                }
                std::swap(cur, oth);
            }
        // decode the first M positions: values' bits into x, indices into s
        const uint64_t mk = M * k, oth_hi = oth + 4 * P * k;
        e.flat(VInt::AND, I64, oth, cur, 0, true, mk, 1);
        e.cvt(I32, I64, l.s, oth, mk);  // z
        e.flat(VInt::SHR, I64, oth, cur, 0, true, mk, 32);
        e.cvt(I32, I64, l.x, oth, mk);  // key32
        if (s.descending) {
            b.li(14, int64_t(l.x)), b.li(15, int64_t(l.x));
            b.set_regs(20, {1, int64_t(mk), 0, 0, 0});
            b.vint(VInt::NOT, Bcast::IMM, I32, I32, 14, 15, 0, 20);
        }
        e.flat(VInt::SHR, I32, oth_hi, l.x, 0, true, mk, 31);
        e.flat(VInt::XOR, I32, l.x, l.x, int64_t(oth_hi), false, mk);
        e.flat(VInt::AND, I32, oth_hi, oth_hi, 0, true, mk, kInt32Min);
        e.flat(VInt::OR, I32, l.x, l.x, int64_t(oth_hi), false, mk);
        e.flat(VInt::SHL, I32, l.s, l.s, 0, true, mk, 31);
        e.flat(VInt::OR, I32, l.x, l.x, int64_t(l.s), false, mk);
        // values [cnt, M] of the type at r0
        b.li(14, int64_t(l.r0)), b.li(15, int64_t(l.x));
        b.li(20, int64_t(M));
        b.mov(21, 10);
        b.li(22, int64_t(M * es)), b.li(23, int64_t(k * 4));
        b.vtrans(s.t, DType::F32, 14, 15, 20);
        // indices: (low word) >> 1, transposed as int32, widened into oth
        e.flat(VInt::AND, I64, oth, cur, 0, true, mk, 0xFFFFFFFF);
        e.flat(VInt::SHR, I64, oth, oth, 0, true, mk, 1);
        e.cvt(I32, I64, l.s, oth, mk);
        b.li(14, int64_t(l.x)), b.li(15, int64_t(l.s));
        b.li(20, int64_t(M));
        b.mov(21, 10);
        b.li(22, int64_t(M * 4)), b.li(23, int64_t(k * 4));
        b.vtrans(I32, I32, 14, 15, 20);
        b.li(14, int64_t(oth)), b.li(15, int64_t(l.x));
        b.mov(20, 10);
        b.li(21, int64_t(M)), b.li(22, int64_t(M * 8)), b.li(23, int64_t(M * 4));
        b.vint(VInt::CVT, Bcast::IMM, I64, I32, 14, 15, 0, 20);
        // store values and indices
        b.muli(12, 11, int64_t(M * es));
        b.add(12, 12, 4);
        b.muli(13, 10, int64_t(M * es));
        b.li(27, int64_t(l.r0));
        b.span(12);
        b.store(27, 12, 13);
        b.muli(12, 11, int64_t(M * 8));
        b.add(12, 12, 5);
        b.muli(13, 10, int64_t(M * 8));
        b.li(27, int64_t(oth));
        b.span(12);
        b.store(27, 12, 13);
    }
    b.endloop();
    b.bind(done);
    b.halt();
    return b.finish();
}

SortPlan plan_sort(const Pricer& pricer, const SortShape& s, uint32_t max_cores) {
    if (s.t != DType::F32 && s.t != DType::F16 && s.t != DType::BF16)
        throw std::invalid_argument("sort: values must be fp32, fp16 or bf16");
    if (s.K > s.N || s.N >= (uint64_t(1) << 30))
        throw std::invalid_argument("sort: k must be at most the row length");
    const uint64_t q = row_quantum(s), budget = pricer.lx_budget();
    uint64_t kmax = 0;
    if (sort_lx_bytes(s, s.O) <= budget) {
        kmax = s.O;
    } else {
        uint64_t lo = 0, hi = s.O / q;
        while (lo < hi) {
            const uint64_t mid = (lo + hi + 1) / 2;
            if (sort_lx_bytes(s, mid * q) <= budget)
                lo = mid;
            else
                hi = mid - 1;
        }
        kmax = lo * q;
    }
    if (!kmax)
        throw std::invalid_argument("sort: a row (padded to a power of two) does not fit in LX");
    const uint64_t xb = up128(s.O * s.N * s.es), vb = up128(s.O * s.K * s.es);
    const uint64_t ib = up128(s.O * s.K * 8);
    SortPlan best{};
    for (uint32_t cores : {max_cores, max_cores / 2, max_cores / 4, max_cores / 8, 1u}) {
        if (!cores) continue;
        SortPlan p;
        const uint64_t share = (s.O + cores - 1) / cores;
        p.per_core = cores == 1 ? s.O : std::min(s.O, (share + q - 1) / q * q);
        p.cores = static_cast<uint32_t>((s.O + p.per_core - 1) / p.per_core);
        p.chunk = std::min(p.per_core, kmax);
        if (p.chunk < p.per_core && p.chunk % q) continue;
        p.cycles =
            pricer.price(build_sort(s, p), p.cores, {0, xb, xb + vb}, xb + vb + ib).total_cycles;
        if (!best.cycles || p.cycles < best.cycles) best = p;
    }
    return best;
}

}  // namespace spyre::ops

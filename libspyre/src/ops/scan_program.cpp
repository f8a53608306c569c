// SPDX-License-Identifier: MIT
#include "ops/scan_program.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "ops/sticks.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

using isa::DType;

bool is_int(DType t) { return isa::int_type(t); }

uint64_t slab_bytes(const ScanShape& s) { return s.N * s.I * s.es; }

// Slabs per stick-aligned step: a chunk boundary every `q` slabs starts on a stick.
uint64_t slab_quantum(const ScanShape& s) { return kStick / std::gcd(kStick, slab_bytes(s)); }

// fp16/bf16 accumulator, fp32 prefix sums: one fp32 buffer beside the chunk.
uint64_t acc_offset(const ScanShape& s, uint64_t chunk) { return up128(chunk * slab_bytes(s)); }

// The scan of a chunk whose slab count is in r10, loaded at LX 0. Leaves the result at LX 0
// (returns 0) or at the accumulator (returns its offset).
int64_t emit_scan(ProgramBuilder& b, const ScanShape& s, uint64_t chunk) {
    using isa::Bcast;
    const int64_t N = int64_t(s.N), I = int64_t(s.I), es = int64_t(s.es);
    const int64_t S = int64_t(slab_bytes(s)), A = int64_t(acc_offset(s, chunk));
    // r14 = LX 0 (the chunk), r18 = the fp32 buffer; r15..r23 scratch; r24.. descriptor
    b.li(14, 0);
    b.li(18, A);
    if (is_int(s.t)) {
        // in place: x[:, j, :] = x[:, j-1, :] op x[:, j, :]
        b.mov(24, 10);
        b.li(25, I), b.li(26, S), b.li(27, S), b.li(28, S);
        b.loopi(N - 1, 15);
        {
            b.muli(16, 15, I * es);
            b.addi(16, 16, I * es);
            b.addi(17, 16, -I * es);
            b.vint(s.op == ScanOp::SUM ? isa::VInt::ADD : isa::VInt::MUL, Bcast::NONE, s.t, s.t, 16,
                   17, 16, 24);
        }
        b.endloop();
        return 0;
    }
    if (s.t != DType::F32 || s.op == ScanOp::PROD) {
        // fp32 copy, the recurrence in fp32 (torch's float accumulator), one rounding back; fp32
        // products the same recurrence (an fp32 accumulator, as torch's CUDA kernel: the CPU
        // multiplies in double, ops.md "Scans")
        const int64_t S4 = N * I * 4;
        b.li(24, 1);
        b.muli(25, 10, N * I);
        b.li(26, 0), b.li(27, 0);
        b.vun(isa::VUn::COPY, DType::F32, s.t, 18, 14, 24);
        b.mov(24, 10);
        b.li(25, I), b.li(26, S4), b.li(27, S4), b.li(28, S4);
        if (s.op == ScanOp::SUM)  // torch starts from +0.0: -0.0 at j = 0 becomes +0.0
            b.vbin(isa::VBin::ADD, Bcast::IMM, DType::F32, DType::F32, 18, 18, 0, 24, 0.0f);
        b.loopi(N - 1, 15);
        {
            b.muli(16, 15, I * 4);
            b.addi(16, 16, A + I * 4);
            b.addi(17, 16, -I * 4);
            b.vbin(s.op == ScanOp::SUM ? isa::VBin::ADD : isa::VBin::MUL, Bcast::NONE, DType::F32,
                   DType::F32, 16, 17, 16, 24);
        }
        b.endloop();
        b.li(24, 1);
        b.muli(25, 10, N * I);
        b.li(26, 0), b.li(27, 0);
        b.vun(isa::VUn::COPY, s.t, DType::F32, 14, 18, 24);
        return 0;
    }
    if (I == 1) {
        // output j of every slab: VRED of each row's first j + 1 elements into T[j, :]
        // (T = [N, chunk] at r18), then T transposed back over the chunk
        b.mov(24, 10);
        b.li(26, S);
        b.loopi(N, 15);
        {
            b.addi(25, 15, 1);
            b.muli(16, 15, int64_t(chunk) * 4);
            b.add(16, 16, 18);
            b.vred(isa::Red::SUM, 0, DType::F32, DType::F32, 16, 14, 24);
        }
        b.endloop();
        b.li(24, N);
        b.mov(25, 10);
        b.li(26, S), b.li(27, int64_t(chunk) * 4);
        b.vtrans(DType::F32, DType::F32, 14, 18, 24);
        return 0;
    }
    // I > 1: out[o, j, :] = VRED across rows 0..j of slab o
    b.li(25, I), b.li(26, I * 4);
    b.loop(10, 0, 15);
    {
        b.muli(17, 15, S);  // slab o in the chunk
        b.loopi(N, 16);
        {
            b.addi(24, 16, 1);
            b.muli(19, 16, I * 4);
            b.add(19, 19, 17);
            b.add(19, 19, 18);
            b.vred(isa::Red::SUM, 1, DType::F32, DType::F32, 19, 17, 24);
        }
        b.endloop();
    }
    b.endloop();
    return A;
}

}  // namespace

bool scan_supported(const ScanShape& s) {
    if (is_int(s.t)) return true;
    if (s.t == DType::F16 || s.t == DType::BF16) return true;
    return s.t == DType::F32;
}

uint64_t scan_lx_bytes(const ScanShape& s, uint64_t chunk) {
    const uint64_t x = up128(chunk * slab_bytes(s));
    return is_int(s.t) ? x : x + up128(chunk * s.N * s.I * 4);
}

std::vector<uint8_t> build_scan(const ScanShape& s, const ScanPlan& p) {
    using isa::Alu;
    const int64_t S = int64_t(slab_bytes(s)), k = int64_t(p.chunk);
    ProgramBuilder b;
    // r3 x, r4 out (DDR); r5 first slab of this core, r6 its slab count; r7 chunks, r8 chunk;
    // r9 first slab of the chunk in the core, r10 its slab count, r11 its byte offset, r12 DDR
    // address, r13 bytes
    b.arg(3, 0), b.arg(4, 1);
    b.muli(5, 1, int64_t(p.per_core));
    b.li(9, int64_t(s.O));
    b.sub(6, 9, 5);
    b.li(9, int64_t(p.per_core));
    b.alu(Alu::MIN, 6, 6, 9);
    ProgramBuilder::Label done = b.label();
    b.br(isa::Cond::GE, 0, 6, done);  // no slabs for this core
    b.addi(7, 6, k - 1);
    b.alu(Alu::DIVU, 7, 7, 0, k);
    b.loop(7, 0, 8);
    {
        b.muli(9, 8, k);
        b.sub(10, 6, 9);
        b.li(11, k);
        b.alu(Alu::MIN, 10, 10, 11);
        b.add(11, 5, 9);
        b.muli(11, 11, S);
        b.add(12, 3, 11);
        b.muli(13, 10, S);
        b.li(14, 0);
        b.span(12);
        b.load(14, 12, 13);
        const int64_t result = emit_scan(b, s, p.chunk);
        b.add(12, 4, 11);
        b.muli(13, 10, S);
        b.li(14, result);
        b.span(12);
        b.store(14, 12, 13);
    }
    b.endloop();
    b.bind(done);
    b.halt();
    return b.finish();
}

ScanPlan plan_scan(const Pricer& pricer, const ScanShape& s, uint32_t max_cores) {
    if (!scan_supported(s)) throw std::invalid_argument("scan: op and type not offered");
    const uint64_t q = slab_quantum(s), budget = pricer.lx_budget();
    // the largest chunk: all slabs, or a multiple of q (chunks start on sticks)
    uint64_t kmax = 0;
    if (scan_lx_bytes(s, s.O) <= budget) {
        kmax = s.O;
    } else {
        uint64_t lo = 0, hi = s.O / q;  // in units of q
        while (lo < hi) {
            const uint64_t mid = (lo + hi + 1) / 2;
            if (scan_lx_bytes(s, mid * q) <= budget)
                lo = mid;
            else
                hi = mid - 1;
        }
        kmax = lo * q;
    }
    if (!kmax) throw std::invalid_argument("scan: one chunk of slabs does not fit in LX");
    const uint64_t total = up128(s.O * slab_bytes(s));
    ScanPlan best{};
    for (uint32_t cores : {max_cores, max_cores / 2, max_cores / 4, max_cores / 8, 1u}) {
        if (!cores) continue;
        ScanPlan p;
        const uint64_t share = (s.O + cores - 1) / cores;
        p.per_core = cores == 1 ? s.O : std::min(s.O, (share + q - 1) / q * q);
        p.cores = static_cast<uint32_t>((s.O + p.per_core - 1) / p.per_core);
        p.chunk = std::min(p.per_core, kmax);
        if (p.chunk < p.per_core && p.chunk % q) continue;
        p.cycles = pricer.price(build_scan(s, p), p.cores, {0, total}, 2 * total).total_cycles;
        if (!best.cycles || p.cycles < best.cycles) best = p;
    }
    return best;
}

}  // namespace spyre::ops

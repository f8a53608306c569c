// SPDX-License-Identifier: MIT
// Instruction sequences the attention forward (attention_program.cpp) and both backward passes
// (attention_backward_program.cpp) emit alike: how many key blocks a query block sees, and the
// two masks a score tile S (fp32, rows x bk, at LX address r28) needs at its edges. Register
// use is the programs' shared convention: r10, r17, r18, r21..r27 and r29 are scratch here.
#pragma once

#include <cstdint>
#include <limits>

#include "spyre/program_builder.hpp"

namespace spyre::ops::attention_emit {

using Reg = ProgramBuilder::Reg;

// r16 = the key blocks query block `qb` sees: all nkb, or (causal) up to the block holding its
// last row's limit qb*bq + bq - 1 + off, where off = Lk - Lq.
inline void key_block_count(ProgramBuilder& b, bool causal, Reg qb, int64_t bq, int64_t bk,
                            int64_t off, int64_t nkb) {
    if (!causal) {
        b.li(16, nkb);
        return;
    }
    b.muli(16, qb, bq);
    b.addi(16, 16, bq - 1 + off);
    b.li(10, bk);
    b.alu(isa::Alu::DIVU, 16, 16, 10);
    b.addi(16, 16, 1);
    b.li(10, nkb);
    b.alu(isa::Alu::MINU, 16, 16, 10);
}

// -inf for the keys of key block `kb` past Lk (keep j <= Lk - 1 - kb*bk); a full block
// (v >= bk - 1) branches over the mask pass. lk_arg >= 0: Lk is that launch argument.
inline void mask_key_tail(ProgramBuilder& b, Reg kb, int64_t rows, int64_t bk, uint64_t Lk,
                          int lk_arg = -1) {
    ProgramBuilder::Label full = b.label();
    b.muli(18, kb, -bk);
    if (lk_arg >= 0) {  // r18 = Lk - kb*bk, full from bk on
        b.arg(17, uint32_t(lk_arg));
        b.add(18, 18, 17);
        b.li(10, bk);
    } else {
        b.addi(18, 18, int64_t(Lk) - 1);
        b.li(10, bk - 1);
    }
    b.br(isa::Cond::GE, 18, 10, full);
    b.li(21, rows), b.li(22, bk), b.li(23, bk * 4), b.li(24, bk * 4);
    b.li(25, 0), b.li(26, -1);
    if (lk_arg >= 0)
        b.addi(27, 18, -1);
    else
        b.mov(27, 18);
    b.vmask(isa::DType::F32, isa::DType::F32, 28, 28, 21, -std::numeric_limits<float>::infinity());
    b.bind(full);
}

// The causal limit of tile (qb, kb) for each of the `heads` heads' bq rows: keep
// kb*bk + j <= qb*bq + i + off, i.e. v = i - j + (qb*bq + off - kb*bk) >= 0. Tiles below the
// diagonal (v >= 0 at i = 0, j = bk - 1) keep everything and skip the pass.
inline void mask_causal(ProgramBuilder& b, Reg qb, Reg kb, int64_t heads, int64_t bq, int64_t bk,
                        int64_t off) {
    ProgramBuilder::Label below = b.label();
    b.muli(17, qb, bq);
    b.addi(17, 17, off);
    b.muli(18, kb, bk);
    b.sub(17, 17, 18);
    b.li(10, bk - 1);
    b.br(isa::Cond::GE, 17, 10, below);
    for (int64_t h = 0; h < heads; ++h) {
        b.addi(29, 28, h * bq * bk * 4);
        b.li(21, bq), b.li(22, bk), b.li(23, bk * 4), b.li(24, bk * 4);
        b.li(25, 1), b.li(26, -1), b.mov(27, 17);
        b.vmask(isa::DType::F32, isa::DType::F32, 29, 29, 21,
                -std::numeric_limits<float>::infinity());
    }
    b.bind(below);
}

}  // namespace spyre::ops::attention_emit

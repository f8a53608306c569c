// SPDX-License-Identifier: MIT
// The loop of the pointwise programs (elementwise and fused): each core takes an even share of
// n elements in units of `unit` elements, and walks it in chunks of at most `chunk` elements,
// software pipelined over two LX regions (a parity offset flips between them). The registers
// are fixed so that both programs keep their own register maps around them.
#pragma once

#include <cstdint>

#include "spyre/program_builder.hpp"

namespace spyre::ops::chunk_loop {

using Reg = ProgramBuilder::Reg;

// r7 chunk start (element), r8 the core's end, r9 chunk elements, r10 parity offset, r11 chunk
// count; r1 holds the core id (hardware.md), r16-r18 take the next chunk.
inline constexpr Reg rPos = 7, rEnd = 8, rE = 9, rPar = 10, rN = 11;
inline constexpr Reg rNextPos = 16, rNextE = 17, rNextPar = 18;

// The core's elements [rPos, rEnd): `units` units of `unit` split evenly over `cores`; rN
// chunks, the first of rE elements, parity 0. `core` holds the core's index among `cores`
// (r1: its id in the job).
inline void emit_core_range(ProgramBuilder& b, uint64_t n, uint64_t unit, uint64_t units,
                            uint64_t cores, uint64_t chunk, Reg core = 1) {
    b.muli(rPos, core, units);
    b.alu(isa::Alu::DIVU, rPos, rPos, 0, cores);
    b.muli(rPos, rPos, unit);
    b.addi(rEnd, core, 1);
    b.muli(rEnd, rEnd, units);
    b.alu(isa::Alu::DIVU, rEnd, rEnd, 0, cores);
    b.muli(rEnd, rEnd, unit);
    b.alu(isa::Alu::MINU, rEnd, rEnd, 0, n);
    b.sub(rN, rEnd, rPos);
    b.addi(rN, rN, static_cast<int64_t>(chunk - 1));
    b.alu(isa::Alu::DIVU, rN, rN, 0, chunk);
    b.li(rPar, 0);
    b.sub(rE, rEnd, rPos);
    b.alu(isa::Alu::MINU, rE, rE, 0, chunk);
}

// The next chunk's start, elements and parity in rNextPos, rNextE, rNextPar (its loads are
// queued before this chunk's passes).
inline void emit_next_chunk(ProgramBuilder& b, uint64_t chunk, uint64_t region) {
    b.add(rNextPos, rPos, rE);
    b.sub(rNextE, rEnd, rNextPos);
    b.alu(isa::Alu::MINU, rNextE, rNextE, 0, chunk);
    b.alu(isa::Alu::XOR, rNextPar, rPar, 0, region);
}

// On to the next chunk: start, parity and elements.
inline void emit_advance(ProgramBuilder& b, uint64_t chunk, uint64_t region) {
    b.add(rPos, rPos, rE);
    b.alu(isa::Alu::XOR, rPar, rPar, 0, region);
    b.sub(rE, rEnd, rPos);
    b.alu(isa::Alu::MINU, rE, rE, 0, chunk);
}

}  // namespace spyre::ops::chunk_loop

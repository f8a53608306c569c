// SPDX-License-Identifier: MIT
// C++ builder for Spyre engine programs (Documentation/isa.md). Emits the binary image that
// spyre_engine_run() and the device's LAUNCH command take. Registers are plain numbers 0..31:
// r0 reads zero, r1 holds the core id and r2 the number of cores at program start.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <vector>

#include "spyre/isa.hpp"

namespace spyre {

class ProgramBuilder {
  public:
    using Reg = uint8_t;
    struct Label {
        uint32_t id;
    };

    // ---- raw access (tests, fuzzing) ----
    uint32_t emit(const isa::Instr& in) {
        code_.push_back(in);
        return static_cast<uint32_t>(code_.size() - 1);
    }
    uint32_t size() const { return static_cast<uint32_t>(code_.size()); }

    // ---- labels ----
    Label label() {
        labels_.push_back(-1);
        return Label{static_cast<uint32_t>(labels_.size() - 1)};
    }
    void bind(Label l) { labels_.at(l.id) = static_cast<int64_t>(code_.size()); }

    // ---- scalar ----
    void nop() { emit(mk(isa::Op::NOP)); }
    void halt() { emit(mk(isa::Op::HALT)); }
    void li(Reg rd, int64_t v) { emit(mk(isa::Op::LI, 0, rd, 0, 0, 0, 0, 0, v)); }
    void arg(Reg rd, uint32_t index) { emit(mk(isa::Op::ARG, 0, rd, 0, 0, 0, 0, 0, index)); }
    // rd = rs1 OP (rs2 + imm)
    void alu(isa::Alu f, Reg rd, Reg rs1, Reg rs2, int64_t imm = 0) {
        emit(mk(isa::Op::ALU, 0, rd, rs1, rs2, 0, static_cast<uint8_t>(f), 0, imm));
    }
    void add(Reg rd, Reg rs1, Reg rs2) { alu(isa::Alu::ADD, rd, rs1, rs2); }
    void addi(Reg rd, Reg rs1, int64_t imm) { alu(isa::Alu::ADD, rd, rs1, 0, imm); }
    void sub(Reg rd, Reg rs1, Reg rs2) { alu(isa::Alu::SUB, rd, rs1, rs2); }
    void mul(Reg rd, Reg rs1, Reg rs2) { alu(isa::Alu::MUL, rd, rs1, rs2); }
    void muli(Reg rd, Reg rs1, int64_t imm) { alu(isa::Alu::MUL, rd, rs1, 0, imm); }
    void mov(Reg rd, Reg rs) { alu(isa::Alu::ADD, rd, rs, 0, 0); }
    void br(isa::Cond c, Reg rs1, Reg rs2, Label target) {
        fixups_.push_back({size(), target.id});
        emit(mk(isa::Op::BR, 0, 0, rs1, rs2, 0, static_cast<uint8_t>(c)));
    }
    void jmp(Label target) { br(isa::Cond::ALWAYS, 0, 0, target); }
    // Counted loop: body runs (count + imm) times (none if <= 0); idx (if not r0) = iteration.
    void loop(Reg count, int64_t imm = 0, Reg idx = 0) {
        emit(mk(isa::Op::LOOP, 0, idx, count, 0, 0, 0, 0, imm));
    }
    void loopi(int64_t count, Reg idx = 0) { loop(0, count, idx); }
    void endloop() { emit(mk(isa::Op::ENDLOOP)); }
    void lxld(Reg rd, Reg addr, int64_t imm = 0) {
        emit(mk(isa::Op::LXLD, 0, rd, addr, 0, 0, 0, 0, imm));
    }
    void lxst(Reg addr, Reg value, int64_t imm = 0) {
        emit(mk(isa::Op::LXST, 0, 0, addr, value, 0, 0, 0, imm));
    }
    void span(Reg base, int64_t imm = 0) { emit(mk(isa::Op::SPAN, 0, 0, base, 0, 0, 0, 0, imm)); }
    // Sets desc, desc+1, ... to the given values (LI each).
    void set_regs(Reg first, std::initializer_list<int64_t> values) {
        Reg r = first;
        for (int64_t v : values) li(r++, v);
    }

    // ---- DMA: DDR <-> LX in sticks ----
    // Rows of len bytes; desc (if not r0) names 6 registers: n1, ddr_stride1, lx_stride1,
    // n2, ddr_stride2, lx_stride2. DDR address = r[ddr] + imm.
    void load(Reg lx, Reg ddr, Reg len, Reg desc = 0, int64_t imm = 0) {
        emit(mk(isa::Op::LOAD, 0, lx, ddr, len, desc, 0, 0, imm));
    }
    void store(Reg lx, Reg ddr, Reg len, Reg desc = 0, int64_t imm = 0) {
        emit(mk(isa::Op::STORE, 0, lx, ddr, len, desc, 0, 0, imm));
    }
    // Multicast load: every core of the group (bit mask in register `group`; r0 = all cores)
    // executes it with the same DDR source; one DDR read is delivered to each member's lx.
    void mcload(Reg lx, Reg ddr, Reg len, Reg group, Reg desc = 0, int64_t imm = 0) {
        emit(mk(isa::Op::MCLOAD, 0, lx, ddr, len, desc, group, 0, imm));
    }

    // ---- compute on LX ----
    // desc: M, N, K, lda, ldb, ldc (bytes). C is fp32 (int32 for int8 inputs). trans_a: A is
    // stored K x M (lda = its row stride); trans_b: B is stored N x K (C = A x B^T, e.g. Q K^T).
    void matmul(isa::DType in, Reg c, Reg a, Reg b, Reg desc, bool accumulate, bool trans_a = false,
                bool trans_b = false) {
        emit(mk(
            isa::Op::MM, static_cast<uint8_t>(in), c, a, b, desc, 0,
            static_cast<uint8_t>((accumulate ? isa::kMmAccumulate : 0) |
                                 (trans_a ? isa::kMmTransA : 0) | (trans_b ? isa::kMmTransB : 0))));
    }
    // desc: rows, cols, dst_stride, src_stride (bytes). imm: fp32 value for SET.
    void vun(isa::VUn f, isa::DType dst_t, isa::DType src_t, Reg dst, Reg src, Reg desc,
             float imm = 0.0f) {
        emit(mk(isa::Op::VUN, isa::dt_pair(dst_t, src_t), dst, src, 0, desc,
                static_cast<uint8_t>(f), 0, std::bit_cast<uint32_t>(imm)));
    }
    // desc: rows, cols, dst_stride, src1_stride, src2_stride (bytes). imm: fp32 for Bcast::IMM.
    void vbin(isa::VBin f, isa::Bcast mode, isa::DType dst_t, isa::DType src_t, Reg dst, Reg s1,
              Reg s2, Reg desc, float imm = 0.0f) {
        emit(mk(isa::Op::VBIN, isa::dt_pair(dst_t, src_t), dst, s1, s2, desc,
                static_cast<uint8_t>(f), static_cast<uint8_t>(mode), std::bit_cast<uint32_t>(imm)));
    }
    // Like vbin, with src2 of its own type src2_t (e.g. fp32 row statistics on fp16 data).
    // EQ..GE compare and write 1.0 / 0.0.
    void vbin2(isa::VBin f, isa::Bcast mode, isa::DType dst_t, isa::DType src_t, isa::DType src2_t,
               Reg dst, Reg s1, Reg s2, Reg desc, float imm = 0.0f) {
        emit(mk(isa::Op::VBIN, isa::dt_pair(dst_t, src_t), dst, s1, s2, desc,
                static_cast<uint8_t>(f), isa::operand_mode(mode, src2_t),
                std::bit_cast<uint32_t>(imm)));
    }
    // Exact integer op (VINT): desc as vbin; src2 has src_t; imm is the 64-bit IMM operand.
    // Unary functions (NEG, ABS, NOT, CVT) take s2 = 0 and mode IMM with imm 0.
    void vint(isa::VInt f, isa::Bcast mode, isa::DType dst_t, isa::DType src_t, Reg dst, Reg s1,
              Reg s2, Reg desc, int64_t imm = 0) {
        const bool un = isa::vint_unary(f);
        emit(mk(isa::Op::VINT, isa::dt_pair(dst_t, src_t), dst, s1, un ? 0 : s2, desc,
                static_cast<uint8_t>(f), un ? 0 : static_cast<uint8_t>(mode), un ? 0 : imm));
    }
    // dst = src^T: desc rows, cols (of src), dst_stride, src_stride; dst is cols x rows.
    void vtrans(isa::DType dst_t, isa::DType src_t, Reg dst, Reg src, Reg desc) {
        emit(mk(isa::Op::VTRANS, isa::dt_pair(dst_t, src_t), dst, src, 0, desc));
    }
    // dst = mask != 0 ? x : y (invert: mask ? y : x). desc (7 registers): rows, cols,
    // dst_stride, x_stride, y_stride, mask address, mask_stride. y_mode: broadcast of y as in
    // vbin (IMM: fp32 imm); mask_mode: NONE, SCALAR, ROW or COL. Types default to src_t.
    void vsel(isa::DType dst_t, isa::DType src_t, Reg dst, Reg x, Reg y, Reg desc,
              isa::Bcast y_mode = isa::Bcast::NONE, float imm = 0.0f, bool invert = false,
              isa::Bcast mask_mode = isa::Bcast::NONE, isa::DType mask_t = isa::kSrcType,
              isa::DType y_t = isa::kSrcType) {
        emit(mk(isa::Op::VSEL, isa::dt_pair(dst_t, src_t), dst, x, y, desc,
                isa::sel_func(invert, mask_mode, mask_t), isa::operand_mode(y_mode, y_t),
                y_mode == isa::Bcast::IMM ? std::bit_cast<uint32_t>(imm) : 0));
    }
    // dst[i][j] = alpha*i + beta*j + gamma (int64). desc (7 registers): rows, cols,
    // dst_stride, src_stride (unused), alpha, beta, gamma.
    void viota(isa::DType dst_t, Reg dst, Reg desc) {
        emit(mk(isa::Op::VIOTA, isa::dt_pair(dst_t, isa::DType::F32), dst, 0, 0, desc,
                static_cast<uint8_t>(isa::Iota::IOTA)));
    }
    // dst[i][j] = alpha*i + beta*j + gamma >= 0 ? src[i][j] : fill. Causal mask (keep j <= i +
    // off): alpha = 1, beta = -1, gamma = off, fill = -inf. In place allowed.
    void vmask(isa::DType dst_t, isa::DType src_t, Reg dst, Reg src, Reg desc, float fill) {
        emit(mk(isa::Op::VIOTA, isa::dt_pair(dst_t, src_t), dst, src, 0, desc,
                static_cast<uint8_t>(isa::Iota::MASK), 0, std::bit_cast<uint32_t>(fill)));
    }
    // dst = s1 * s2 + s3 (one fp32 fused multiply-add). desc (7 registers): rows, cols,
    // dst_stride, s1_stride, s2_stride, s3 address, s3_stride. m2/m3: broadcast of s2/s3 (IMM:
    // imm2/imm3); t2/t3: their types (default src_t).
    void vfma(isa::DType dst_t, isa::DType src_t, Reg dst, Reg s1, Reg s2, Reg desc,
              isa::Bcast m2 = isa::Bcast::NONE, isa::Bcast m3 = isa::Bcast::NONE, float imm2 = 0.0f,
              float imm3 = 0.0f, isa::DType t2 = isa::kSrcType, isa::DType t3 = isa::kSrcType) {
        const uint64_t lo = m2 == isa::Bcast::IMM ? std::bit_cast<uint32_t>(imm2) : 0;
        const uint64_t hi = m3 == isa::Bcast::IMM ? std::bit_cast<uint32_t>(imm3) : 0;
        emit(mk(isa::Op::VFMA, isa::dt_pair(dst_t, src_t), dst, s1, s2, desc,
                isa::operand_mode(m3, t3), isa::operand_mode(m2, t2),
                static_cast<int64_t>(lo | hi << 32)));
    }
    // Random numbers (isa.md VRNG). desc (7 registers): rows, cols, dst_stride, seed, offset,
    // base, row_step; element (i, j) is stream element base + i*row_step + j. UNIFORM/NORMAL
    // write fma(x, scale, shift); BITS writes raw words (dst_t I32).
    void vrng(isa::Rng f, isa::DType dst_t, Reg dst, Reg desc, float scale = 1.0f,
              float shift = 0.0f) {
        const bool bits = f == isa::Rng::BITS;
        const uint64_t lo = bits ? 0 : std::bit_cast<uint32_t>(scale);
        const uint64_t hi = bits ? 0 : std::bit_cast<uint32_t>(shift);
        emit(mk(isa::Op::VRNG, isa::dt_pair(dst_t, isa::DType::F32), dst, 0, 0, desc,
                static_cast<uint8_t>(f), 0, static_cast<int64_t>(lo | hi << 32)));
    }
    // desc: rows, cols, src_stride (bytes). axis 0: reduce each row -> dst[rows];
    // axis 1: reduce across rows -> dst[cols]. Results are contiguous.
    void vred(isa::Red f, int axis, isa::DType dst_t, isa::DType src_t, Reg dst, Reg src,
              Reg desc) {
        emit(mk(isa::Op::VRED, isa::dt_pair(dst_t, src_t), dst, src, 0, desc,
                static_cast<uint8_t>(f), static_cast<uint8_t>(axis)));
    }

    // ---- ring and synchronization ----
    void send(isa::Dir d, Reg lx, Reg len) {
        emit(mk(isa::Op::SEND, 0, lx, 0, len, 0, static_cast<uint8_t>(d)));
    }
    // Receives the next message travelling in direction d (sent by the neighbour behind).
    void recv(isa::Dir d, Reg lx, Reg len) {
        emit(mk(isa::Op::RECV, 0, lx, 0, len, 0, static_cast<uint8_t>(d)));
    }
    // Collectives over the cores of a group: bit mask in register `group` (r0 = all cores).
    void allreduce(isa::Red f, isa::DType t, Reg dst, Reg src, Reg count, Reg group = 0) {
        emit(mk(isa::Op::ALLRED, static_cast<uint8_t>(t), dst, src, count, group,
                static_cast<uint8_t>(f)));
    }
    void barrier(Reg group = 0) { emit(mk(isa::Op::BAR, 0, 0, group)); }

    // Resolves labels and returns the program image (header + instructions).
    std::vector<uint8_t> finish() const {
        std::vector<isa::Instr> code = code_;
        for (const auto& f : fixups_) {
            int64_t t = labels_.at(f.label);
            if (t < 0) throw std::logic_error("ProgramBuilder: unbound label");
            code[f.at].imm = t;
        }
        isa::Header h{};
        h.magic = isa::kMagic;
        h.version = isa::kVersion;
        h.header_bytes = isa::kHeaderBytes;
        h.num_instructions = static_cast<uint32_t>(code.size());
        std::vector<uint8_t> out(isa::kHeaderBytes + code.size() * isa::kInstrBytes);
        std::memcpy(out.data(), &h, sizeof h);  // little-endian host
        for (size_t i = 0; i < code.size(); ++i)
            isa::encode(code[i], out.data() + isa::kHeaderBytes + i * isa::kInstrBytes);
        return out;
    }

    static isa::Instr mk(isa::Op op, uint8_t dt = 0, uint8_t a = 0, uint8_t b = 0, uint8_t c = 0,
                         uint8_t d = 0, uint8_t func = 0, uint8_t flags = 0, int64_t imm = 0) {
        isa::Instr in;
        in.op = static_cast<uint8_t>(op), in.dt = dt, in.a = a, in.b = b, in.c = c, in.d = d;
        in.func = func, in.flags = flags, in.imm = imm;
        return in;
    }

  private:
    struct Fixup {
        uint32_t at, label;
    };
    std::vector<isa::Instr> code_;
    std::vector<int64_t> labels_;
    std::vector<Fixup> fixups_;
};

}  // namespace spyre

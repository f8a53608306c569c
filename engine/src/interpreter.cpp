// SPDX-License-Identifier: MIT
// Per-core instruction loop: scalar instructions inline, the others dispatched to exec_*.
#include <stdexcept>

#include "engine_impl.hpp"

namespace spyre::eng {

// Runs core c until it halts, fails or blocks at a synchronization point.
bool Engine::run_core(Core& c) {
    if (static_cast<int>(c.id) == throw_core_)
        throw std::runtime_error("test hook SPYRE_ENGINE_TEST_THROW_CORE");
    const std::vector<Instr>& code = prog_->code;
    const uint32_t n = static_cast<uint32_t>(code.size());
    for (;;) {
        if (c.pc >= n) return fail(c, SPYRE_ENGINE_ERR_NO_HALT, "ran past the last instruction");
        if (c.stats.instructions >= max_instr_)
            return fail(c, SPYRE_ENGINE_ERR_INSTR_BUDGET, "instruction budget %llu exceeded",
                        (unsigned long long)max_instr_);
        if (c.trace.over_budget())
            return fail(c, SPYRE_ENGINE_ERR_INSTR_BUDGET,
                        "more than %llu timed operations in one job: split it into launches",
                        (unsigned long long)kMaxJobRecords);
        // every instruction (a few ns): long instructions also poll inside their kernels
        if (cancelled()) return fail(c, SPYRE_ENGINE_ERR_CANCELLED, "job cancelled");
        // time slice used up: stop at this instruction boundary (run_slice)
        if (c.stats.instructions >= c.slice_end ||
            (job_->preempt && __atomic_load_n(job_->preempt, __ATOMIC_RELAXED))) {
            c.sliced = true;
            return true;
        }
        const Instr& in = code[c.pc];
        const Op op = static_cast<Op>(in.op);
        if (op == Op::RECV) {
            int r = exec_recv(c, in);
            if (r < 0) return false;
            if (r == 0) {
                c.st = St::BlockedRecv;
                return true;
            }
        }
        c.stats.instructions++;
        c.trace.count_issue();
        if (!charge(c, kUnitScalar, 1)) return false;
        uint64_t* r = c.r;
        uint32_t next = c.pc + 1;
        switch (op) {
            case Op::NOP:
                break;
            case Op::HALT: {
                c.trace.add_sync(TKind::Halt, 0, 0);
                c.st = St::Halted;
                return true;
            }
            case Op::LI:
                r[in.a] = static_cast<uint64_t>(in.imm);
                break;
            case Op::ARG:
                if (static_cast<uint64_t>(in.imm) >= job_->num_args)
                    return fail(c, SPYRE_ENGINE_ERR_BAD_ARG, "ARG %lld but the launch has %u args",
                                (long long)in.imm, job_->num_args);
                r[in.a] = job_->args[in.imm];
                break;
            case Op::ALU: {
                const uint64_t x = r[in.b], y = r[in.c] + static_cast<uint64_t>(in.imm);
                const int64_t sx = static_cast<int64_t>(x), sy = static_cast<int64_t>(y);
                uint64_t v = 0;
                switch (static_cast<isa::Alu>(in.func)) {
                    case isa::Alu::ADD:
                        v = x + y;
                        break;
                    case isa::Alu::SUB:
                        v = x - y;
                        break;
                    case isa::Alu::MUL:
                        v = x * y;
                        break;
                    case isa::Alu::DIVU:
                    case isa::Alu::REMU:
                        if (y == 0) return fail(c, SPYRE_ENGINE_ERR_DIV_ZERO, "division by zero");
                        v = in.func == static_cast<uint8_t>(isa::Alu::DIVU) ? x / y : x % y;
                        break;
                    case isa::Alu::AND:
                        v = x & y;
                        break;
                    case isa::Alu::OR:
                        v = x | y;
                        break;
                    case isa::Alu::XOR:
                        v = x ^ y;
                        break;
                    case isa::Alu::SHL:
                        v = x << (y & 63);
                        break;
                    case isa::Alu::SHR:
                        v = x >> (y & 63);
                        break;
                    case isa::Alu::SRA:
                        v = static_cast<uint64_t>(sx >> (y & 63));
                        break;
                    case isa::Alu::MIN:
                        v = static_cast<uint64_t>(std::min(sx, sy));
                        break;
                    case isa::Alu::MAX:
                        v = static_cast<uint64_t>(std::max(sx, sy));
                        break;
                    case isa::Alu::MINU:
                        v = std::min(x, y);
                        break;
                    case isa::Alu::MAXU:
                        v = std::max(x, y);
                        break;
                    case isa::Alu::SLT:
                        v = sx < sy;
                        break;
                    case isa::Alu::SLTU:
                        v = x < y;
                        break;
                    case isa::Alu::SEQ:
                        v = x == y;
                        break;
                    default:
                        break;
                }
                r[in.a] = v;
                break;
            }
            case Op::BR: {
                const uint64_t x = r[in.b], y = r[in.c];
                const int64_t sx = static_cast<int64_t>(x), sy = static_cast<int64_t>(y);
                bool take = false;
                switch (static_cast<isa::Cond>(in.func)) {
                    case isa::Cond::ALWAYS:
                        take = true;
                        break;
                    case isa::Cond::EQ:
                        take = x == y;
                        break;
                    case isa::Cond::NE:
                        take = x != y;
                        break;
                    case isa::Cond::LT:
                        take = sx < sy;
                        break;
                    case isa::Cond::GE:
                        take = sx >= sy;
                        break;
                    case isa::Cond::LTU:
                        take = x < y;
                        break;
                    case isa::Cond::GEU:
                        take = x >= y;
                        break;
                    default:
                        break;
                }
                if (take) next = static_cast<uint32_t>(in.imm);
                break;
            }
            case Op::LOOP: {
                const int64_t cnt = static_cast<int64_t>(r[in.b] + static_cast<uint64_t>(in.imm));
                if (cnt <= 0) {
                    next = prog_->match[c.pc] + 1;
                    break;
                }
                // static validation bounds the nesting depth
                c.loops[c.depth++] = {c.pc + 1, prog_->match[c.pc], static_cast<uint64_t>(cnt), 0,
                                      in.a};
                r[in.a] = 0;
                break;
            }
            case Op::ENDLOOP: {
                LoopFrame& lf = c.loops[c.depth - 1];
                if (++lf.index < lf.count) {
                    r[lf.idx_reg] = lf.index;
                    next = lf.start;
                } else {
                    --c.depth;
                }
                break;
            }
            case Op::LXLD:
            case Op::LXST: {
                const uint64_t a = r[in.b] + static_cast<uint64_t>(in.imm);
                if (a % 8)
                    return fail(c, SPYRE_ENGINE_ERR_MISALIGNED, "LX scalar access 0x%llx",
                                (unsigned long long)a);
                Range rg;
                if (!check_lx(c, op_info(in.op).name, a, 1, 0, 8, &rg)) return false;
                const uint64_t deps = op == Op::LXLD ? hazards(c, &rg, 1, nullptr, 0)
                                                     : hazards(c, nullptr, 0, &rg, 1);
                if (deps) c.trace.add_sync(TKind::Wait, deps, 0);
                lx_touch(c, rg);
                if (op == Op::LXLD) {
                    if (timing_only_)
                        r[in.a] = 0;
                    else
                        std::memcpy(&r[in.a], c.lx + a, 8);
                } else {
                    if (!timing_only_) std::memcpy(c.lx + a, &r[in.c], 8);
                    c.lx_hw = std::max(c.lx_hw, rg.hi);
                }
                break;
            }
            case Op::SPAN: {
                const uint64_t b = r[in.b] + static_cast<uint64_t>(in.imm);
                if (b % kS)
                    return fail(c, SPYRE_ENGINE_ERR_MISALIGNED, "SPAN base 0x%llx",
                                (unsigned long long)b);
                c.span_base = b;
                break;
            }
            case Op::LOAD:
            case Op::STORE:
                if (!exec_dma(c, in, op == Op::LOAD)) return false;
                break;
            case Op::MM:
                if (!exec_mm(c, in)) return false;
                break;
            case Op::VUN:
            case Op::VBIN:
            case Op::VRED:
                if (!exec_vec(c, in)) return false;
                break;
            case Op::VTRANS:
                if (!exec_vtrans(c, in)) return false;
                break;
            case Op::VSEL:
                if (!exec_vsel(c, in)) return false;
                break;
            case Op::VIOTA:
                if (!exec_viota(c, in)) return false;
                break;
            case Op::VFMA:
                if (!exec_vfma(c, in)) return false;
                break;
            case Op::VINT:
                if (!exec_vint(c, in)) return false;
                break;
            case Op::VRNG:
                if (!exec_vrng(c, in)) return false;
                break;
            case Op::SEND:
                if (!exec_send(c, in)) return false;
                break;
            case Op::RECV:
                break;  // done above
            case Op::BAR:
            case Op::ALLRED:
            case Op::MCLOAD: {
                const uint64_t g = group_of(c);
                const uint64_t all = ncores_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << ncores_) - 1;
                if (!(g >> c.id & 1) || (g & ~all))
                    return fail(
                        c, SPYRE_ENGINE_ERR_BAD_OPERAND,
                        "%s: group 0x%llx must contain this core and only the job's %u cores",
                        op_info(in.op).name, (unsigned long long)g, ncores_);
                c.group = g;
                c.st = op == Op::BAR      ? St::AtBarrier
                       : op == Op::ALLRED ? St::AtAllred
                                          : St::AtMcast;
                // pc stays at the collective until it is released
                r[0] = 0;
                return true;
            }
        }
        r[0] = 0;
        c.pc = next;
    }
}

}  // namespace spyre::eng

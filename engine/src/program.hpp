// SPDX-License-Identifier: MIT
// Static program description: decoded instructions, loop structure, and the validation that a
// program image passes before any core runs it (Documentation/isa.md "Program format").
#pragma once

#include <cstdint>
#include <vector>

#include "util.hpp"

namespace spyre::eng {

// Fields an opcode uses (others must be zero).
enum : uint8_t {
    F_DT = 1,
    F_A = 2,
    F_B = 4,
    F_C = 8,
    F_D = 16,
    F_FUNC = 32,
    F_FLAGS = 64,
    F_IMM = 128
};

struct OpInfo {
    bool valid;
    uint8_t fields;
    uint8_t desc_regs;  // registers named by the d field (descriptor)
    const char* name;
};

OpInfo op_info(uint8_t op);

struct Program {
    std::vector<Instr> code;
    std::vector<uint32_t> match;  // LOOP -> its ENDLOOP, ENDLOOP -> its LOOP
};

struct Failure {
    int code = SPYRE_ENGINE_OK;
    int core = -1;
    uint64_t pc = 0;
    char msg[SPYRE_ENGINE_MSG_LEN] = {};
    uint64_t fault_va = 0;  // SPYRE_ENGINE_ERR_MMU_FAULT
    uint32_t fault_access = 0;
};

__attribute__((format(printf, 5, 6))) void set_fail(Failure& f, int code, int core, uint64_t pc,
                                                    const char* fmt, ...);

// Types of the fp32 vector path (F32..I32); any_dtype_ok adds VINT's I64 and U8.
inline bool dtype_ok(uint8_t t) { return t < isa::kVecTypes; }
inline bool any_dtype_ok(uint8_t t) { return t < static_cast<uint8_t>(DType::COUNT); }
// VRED reduces exactly in integers when either type is I64 or U8 (types no earlier program used).
inline bool vred_int_path(uint8_t dt) {
    const uint8_t lo = dt & 15, hi = dt >> 4;
    auto wide = [](uint8_t t) {
        return t == static_cast<uint8_t>(DType::I64) || t == static_cast<uint8_t>(DType::U8);
    };
    return wide(lo) || wide(hi);
}
inline bool float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Decodes and checks a program image; on failure fills f (core -1) and returns false.
bool validate(const uint8_t* bytes, uint64_t size, Program& p, Failure& f);

}  // namespace spyre::eng

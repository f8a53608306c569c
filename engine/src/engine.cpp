// SPDX-License-Identifier: MIT
// Spyre engine: program validation, per-core interpreter, deterministic cycle model, job
// scheduler (phases of parallel core execution separated by synchronization points) and C API.
#include "spyre/engine.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "kernels.hpp"
#include "spyre/isa.hpp"
#include "spyre/numerics.hpp"
#include "thread_pool.hpp"

namespace spyre::eng {

using isa::DType;
using isa::Instr;
using isa::Op;
using u128 = unsigned __int128;

constexpr uint32_t kS = isa::kStickBytes;

inline uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }
inline uint64_t round_up(uint64_t a, uint64_t b) { return ceil_div(a, b) * b; }

// ---------------------------------------------------------------------------------------------
// Static program description and validation

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

OpInfo op_info(uint8_t op) {
    switch (static_cast<Op>(op)) {
        case Op::NOP:
            return {true, 0, 0, "NOP"};
        case Op::HALT:
            return {true, 0, 0, "HALT"};
        case Op::LI:
            return {true, F_A | F_IMM, 0, "LI"};
        case Op::ARG:
            return {true, F_A | F_IMM, 0, "ARG"};
        case Op::ALU:
            return {true, F_A | F_B | F_C | F_FUNC | F_IMM, 0, "ALU"};
        case Op::BR:
            return {true, F_B | F_C | F_FUNC | F_IMM, 0, "BR"};
        case Op::LOOP:
            return {true, F_A | F_B | F_IMM, 0, "LOOP"};
        case Op::ENDLOOP:
            return {true, 0, 0, "ENDLOOP"};
        case Op::LXLD:
            return {true, F_A | F_B | F_IMM, 0, "LXLD"};
        case Op::LXST:
            return {true, F_B | F_C | F_IMM, 0, "LXST"};
        case Op::SPAN:
            return {true, F_B | F_IMM, 0, "SPAN"};
        case Op::LOAD:
            return {true, F_A | F_B | F_C | F_D | F_IMM, 6, "LOAD"};
        case Op::STORE:
            return {true, F_A | F_B | F_C | F_D | F_IMM, 6, "STORE"};
        case Op::MM:
            return {true, F_DT | F_A | F_B | F_C | F_D | F_FLAGS, 6, "MM"};
        case Op::VUN:
            return {true, F_DT | F_A | F_B | F_D | F_FUNC | F_IMM, 4, "VUN"};
        case Op::VBIN:
            return {true, F_DT | F_A | F_B | F_C | F_D | F_FUNC | F_FLAGS | F_IMM, 5, "VBIN"};
        case Op::VRED:
            return {true, F_DT | F_A | F_B | F_D | F_FUNC | F_FLAGS, 3, "VRED"};
        case Op::SEND:
            return {true, F_A | F_C | F_FUNC, 0, "SEND"};
        case Op::RECV:
            return {true, F_A | F_C | F_FUNC, 0, "RECV"};
        case Op::ALLRED:
            return {true, F_DT | F_A | F_B | F_C | F_FUNC, 0, "ALLRED"};
        case Op::BAR:
            return {true, 0, 0, "BAR"};
    }
    return {false, 0, 0, "?"};
}

struct Program {
    std::vector<Instr> code;
    std::vector<uint32_t> match;  // LOOP -> its ENDLOOP, ENDLOOP -> its LOOP
};

struct Failure {
    int code = SPYRE_ENGINE_OK;
    int core = -1;
    uint64_t pc = 0;
    char msg[SPYRE_ENGINE_MSG_LEN] = {};
};

__attribute__((format(printf, 5, 6))) void set_fail(Failure& f, int code, int core, uint64_t pc,
                                                    const char* fmt, ...) {
    f.code = code;
    f.core = core;
    f.pc = pc;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(f.msg, sizeof f.msg, fmt, ap);
    va_end(ap);
}

bool dtype_ok(uint8_t t) { return t < static_cast<uint8_t>(DType::COUNT); }
bool float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

bool check_operands(const Instr& in, uint32_t pc, Failure& f) {
    auto bad = [&](const char* what) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_OPERAND, -1, pc, "%s: %s", op_info(in.op).name, what);
        return false;
    };
    const uint8_t lo = in.dt & 15, hi = in.dt >> 4;
    switch (static_cast<Op>(in.op)) {
        case Op::ALU:
            if (in.func >= static_cast<uint8_t>(isa::Alu::COUNT)) return bad("bad ALU function");
            break;
        case Op::BR:
            if (in.func >= static_cast<uint8_t>(isa::Cond::COUNT)) return bad("bad condition");
            break;
        case Op::ARG:
            if (in.imm < 0 || in.imm >= static_cast<int64_t>(isa::kMaxArgs))
                return bad("argument index >= 16");
            break;
        case Op::MM: {
            if (in.dt != static_cast<uint8_t>(DType::F16) &&
                in.dt != static_cast<uint8_t>(DType::BF16) &&
                in.dt != static_cast<uint8_t>(DType::I8) &&
                in.dt != static_cast<uint8_t>(DType::F32))
                return bad("input type must be f16, bf16, i8 or f32");
            if (in.flags & ~isa::kMmAccumulate) return bad("reserved flag bits set");
            break;
        }
        case Op::VUN:
        case Op::VBIN:
        case Op::VRED: {
            if (!dtype_ok(lo) || !dtype_ok(hi)) return bad("bad data type");
            if (static_cast<uint64_t>(in.imm) >> 32) return bad("imm must be fp32 bits");
            Op op = static_cast<Op>(in.op);
            if (op == Op::VUN && in.func >= static_cast<uint8_t>(isa::VUn::COUNT))
                return bad("bad unary function");
            if (op == Op::VBIN) {
                if (in.func >= static_cast<uint8_t>(isa::VBin::COUNT))
                    return bad("bad binary function");
                if (in.flags >= static_cast<uint8_t>(isa::Bcast::COUNT))
                    return bad("bad broadcast mode");
            }
            if (op == Op::VRED) {
                if (in.func >= static_cast<uint8_t>(isa::Red::COUNT))
                    return bad("bad reduction function");
                if (in.flags > 1) return bad("axis must be 0 or 1");
            }
            break;
        }
        case Op::SEND:
        case Op::RECV:
            if (in.func >= static_cast<uint8_t>(isa::Dir::COUNT)) return bad("bad direction");
            break;
        case Op::ALLRED:
            if (!dtype_ok(in.dt) || !float_dtype(static_cast<DType>(in.dt)))
                return bad("type must be f32, f16 or bf16");
            if (in.func >= static_cast<uint8_t>(isa::Red::COUNT))
                return bad("bad reduction function");
            break;
        default:
            break;
    }
    return true;
}

bool validate(const uint8_t* bytes, uint64_t size, Program& p, Failure& f) {
    if (bytes == nullptr || size < isa::kHeaderBytes) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0, "program shorter than its header");
        return false;
    }
    isa::Header h;
    std::memcpy(&h, bytes, sizeof h);
    if (h.magic != isa::kMagic) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0, "bad magic 0x%08x", h.magic);
        return false;
    }
    if (h.version != isa::kVersion || h.header_bytes != isa::kHeaderBytes) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0, "unsupported version %u / header %u",
                 h.version, h.header_bytes);
        return false;
    }
    if (h.flags || h.reserved[0] || h.reserved[1] || h.reserved[2] || h.reserved[3]) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0, "nonzero header flags/reserved");
        return false;
    }
    if (h.num_instructions == 0 || h.num_instructions > isa::kMaxInstructions ||
        size != isa::kHeaderBytes + uint64_t{h.num_instructions} * isa::kInstrBytes) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_PROGRAM, -1, 0,
                 "%u instructions do not match program size %llu", h.num_instructions,
                 static_cast<unsigned long long>(size));
        return false;
    }
    const uint32_t n = h.num_instructions;
    p.code.resize(n);
    p.match.assign(n, 0);
    std::vector<int32_t> parent(n, -1);
    std::vector<uint32_t> stack;
    for (uint32_t i = 0; i < n; ++i) {
        const Instr in = isa::decode(bytes + isa::kHeaderBytes + uint64_t{i} * isa::kInstrBytes);
        p.code[i] = in;
        OpInfo oi = op_info(in.op);
        if (!oi.valid) {
            set_fail(f, SPYRE_ENGINE_ERR_ILLEGAL_OPCODE, -1, i, "illegal opcode 0x%02x", in.op);
            return false;
        }
        const uint8_t fields[8] = {in.dt, in.a, in.b, in.c, in.d, in.func, in.flags, 0};
        for (int b = 0; b < 7; ++b) {
            if (!(oi.fields & (1u << b)) && fields[b]) {
                set_fail(f, SPYRE_ENGINE_ERR_BAD_OPERAND, -1, i, "%s: reserved field %d nonzero",
                         oi.name, b + 1);
                return false;
            }
        }
        if (!(oi.fields & F_IMM) && in.imm) {
            set_fail(f, SPYRE_ENGINE_ERR_BAD_OPERAND, -1, i, "%s: reserved imm nonzero", oi.name);
            return false;
        }
        for (int b = 1; b <= 3; ++b) {
            if (fields[b] >= isa::kNumRegs) {
                set_fail(f, SPYRE_ENGINE_ERR_BAD_REGISTER, -1, i, "%s: register r%u", oi.name,
                         fields[b]);
                return false;
            }
        }
        if (oi.fields & F_D) {
            bool used = in.d != 0 || (in.op != static_cast<uint8_t>(Op::LOAD) &&
                                      in.op != static_cast<uint8_t>(Op::STORE));
            if (in.d >= isa::kNumRegs || (used && in.d + oi.desc_regs > isa::kNumRegs)) {
                set_fail(f, SPYRE_ENGINE_ERR_BAD_REGISTER, -1, i,
                         "%s: descriptor r%u..r%u beyond r31", oi.name, in.d,
                         in.d + oi.desc_regs - 1);
                return false;
            }
        }
        if (!check_operands(in, i, f)) return false;
        const Op op = static_cast<Op>(in.op);
        parent[i] = stack.empty() ? -1 : static_cast<int32_t>(stack.back());
        if (op == Op::LOOP) {
            if (stack.size() >= isa::kMaxLoopDepth) {
                set_fail(f, SPYRE_ENGINE_ERR_BAD_LOOP, -1, i, "loops nested deeper than %u",
                         isa::kMaxLoopDepth);
                return false;
            }
            stack.push_back(i);
        } else if (op == Op::ENDLOOP) {
            if (stack.empty()) {
                set_fail(f, SPYRE_ENGINE_ERR_BAD_LOOP, -1, i, "ENDLOOP without LOOP");
                return false;
            }
            p.match[i] = stack.back();
            p.match[stack.back()] = i;
            stack.pop_back();
        }
    }
    if (!stack.empty()) {
        set_fail(f, SPYRE_ENGINE_ERR_BAD_LOOP, -1, stack.back(), "LOOP without ENDLOOP");
        return false;
    }
    for (uint32_t i = 0; i < n; ++i) {
        const Instr& in = p.code[i];
        if (in.op != static_cast<uint8_t>(Op::BR)) continue;
        if (in.imm < 0 || in.imm >= static_cast<int64_t>(n)) {
            set_fail(f, SPYRE_ENGINE_ERR_BAD_BRANCH, -1, i, "branch target %lld out of range",
                     static_cast<long long>(in.imm));
            return false;
        }
        if (parent[in.imm] != parent[i]) {
            set_fail(f, SPYRE_ENGINE_ERR_BAD_BRANCH, -1, i,
                     "branch to %lld crosses a loop boundary", static_cast<long long>(in.imm));
            return false;
        }
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Per-core state

enum class St : uint8_t { Running, BlockedRecv, AtBarrier, AtAllred, Halted, Failed };

struct SbEntry {
    uint64_t lo, hi, ready;
    bool write;
};

struct Msg {
    std::vector<uint8_t> data;
    uint64_t arrival;
    uint32_t pc;
};

struct LoopFrame {
    uint32_t start, end;
    uint64_t count, index;
    uint8_t idx_reg;
};

struct Core {
    uint32_t id = 0;
    uint64_t r[isa::kNumRegs] = {};
    uint32_t pc = 0;
    St st = St::Running;
    LoopFrame loops[isa::kMaxLoopDepth] = {};
    uint32_t depth = 0;
    uint64_t span_base = 0;
    uint8_t* lx = nullptr;
    uint64_t lx_hw = 0;  // highest LX byte written + 1 (becomes stale at the next job start)
    // One bit per LX stick: the stick must read as zero but its bytes may still hold an earlier
    // job's data. Sticks are zeroed lazily when first touched, or just marked clean when a LOAD
    // overwrites them completely (saves zeroing the scratchpads at every job start).
    uint64_t* stale = nullptr;
    // timing
    uint64_t t = 0;  // issue clock
    uint64_t unit_free[SPYRE_UNIT_COUNT] = {};
    uint64_t ring_free[2] = {};
    std::vector<uint64_t> q[SPYRE_UNIT_COUNT];  // end times of the last queue_depth ops
    uint32_t qh[SPYRE_UNIT_COUNT] = {};
    std::vector<SbEntry> sb;
    spyre_engine_core_stats stats = {};
    // ring: messages sent this phase (by direction) and messages delivered to this core
    std::vector<Msg> out[2];
    std::deque<Msg> in[2];
    uint64_t in_bytes[2] = {};
    uint64_t arrive = 0;  // arrival cycle at a barrier/all-reduce
    Failure fail;
};

struct Range {
    uint64_t lo, hi;
};

// Zeroes the stale sticks overlapping LX bytes [lo, hi) (before any access to them).
inline void lx_touch(Core& c, uint64_t lo, uint64_t hi) {
    if (hi <= lo) return;
    const uint64_t s0 = lo / kS, s1 = (hi + kS - 1) / kS;
    for (uint64_t w = s0 / 64; w <= (s1 - 1) / 64; ++w) {
        uint64_t mask = ~uint64_t{0};
        if (w == s0 / 64) mask &= ~uint64_t{0} << (s0 % 64);
        if (w == (s1 - 1) / 64 && s1 % 64) mask &= ~(~uint64_t{0} << (s1 % 64));
        uint64_t bits = c.stale[w] & mask;
        if (!bits) continue;
        c.stale[w] &= ~bits;
        while (bits) {
            const int b = std::countr_zero(bits);
            bits &= bits - 1;
            std::memset(c.lx + (w * 64 + b) * kS, 0, kS);
        }
    }
}
inline void lx_touch(Core& c, const Range& r) { lx_touch(c, r.lo, r.hi); }

// LX bytes [lo, hi) are about to be overwritten completely: whole sticks inside need no zeroing.
inline void lx_overwrite(Core& c, uint64_t lo, uint64_t hi) {
    const uint64_t s0 = (lo + kS - 1) / kS, s1 = hi / kS;
    if (s1 <= s0) {
        lx_touch(c, lo, hi);
        return;
    }
    lx_touch(c, lo, s0 * kS);
    lx_touch(c, s1 * kS, hi);
    for (uint64_t w = s0 / 64; w <= (s1 - 1) / 64; ++w) {
        uint64_t mask = ~uint64_t{0};
        if (w == s0 / 64) mask &= ~uint64_t{0} << (s0 % 64);
        if (w == (s1 - 1) / 64 && s1 % 64) mask &= ~(~uint64_t{0} << (s1 % 64));
        c.stale[w] &= ~mask;
    }
}

// Zeroed scratchpad memory of all cores. On Linux an anonymous mapping advised to use huge pages
// (the scratchpads total tens of MiB and every job streams through them: fewer TLB misses).
struct LxMem {
    uint8_t* p = nullptr;
    size_t size = 0;
    bool mapped = false;
    explicit LxMem(size_t n) : size(n) {
#if defined(__linux__) && defined(MAP_ANONYMOUS)
        void* m = n ? mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                    : MAP_FAILED;
        if (m != MAP_FAILED) {
#ifdef MADV_HUGEPAGE
            madvise(m, n, MADV_HUGEPAGE);
#endif
            p = static_cast<uint8_t*>(m);
            mapped = true;
            return;
        }
#endif
        p = new uint8_t[n]();
    }
    ~LxMem() {
#if defined(__linux__) && defined(MAP_ANONYMOUS)
        if (mapped) {
            munmap(p, size);
            return;
        }
#endif
        delete[] p;
    }
    LxMem(const LxMem&) = delete;
    LxMem& operator=(const LxMem&) = delete;
    uint8_t* get() const { return p; }
};

// ---------------------------------------------------------------------------------------------
// Engine

// Host threads for a config: num_threads, or one per host CPU; never more than the cores (a
// phase runs at most num_cores cores in parallel, more threads would only idle).
unsigned pool_threads(const spyre_engine_config& cfg) {
    unsigned t = cfg.num_threads ? cfg.num_threads : std::thread::hardware_concurrency();
    return std::clamp(t, 1u, cfg.num_cores);
}

// Test hook: SPYRE_ENGINE_TEST_THROW_CORE=<n> makes core n throw a C++ exception when it starts
// running (checks that an exception on a pool thread becomes a job error). -1 = off.
int test_throw_core() {
    const char* v = std::getenv("SPYRE_ENGINE_TEST_THROW_CORE");
    return v && *v ? std::atoi(v) : -1;
}

class Engine {
  public:
    explicit Engine(const spyre_engine_config& cfg)
        : cfg_(cfg),
          pool_(pool_threads(cfg)),
          cores_(cfg.num_cores),
          lx_mem_(uint64_t{cfg.lx_bytes} * cfg.num_cores) {
        stale_words_ = (cfg.lx_bytes / kS + 63) / 64;
        stale_mem_.reset(new uint64_t[stale_words_ * cfg.num_cores]());
        for (uint32_t i = 0; i < cfg.num_cores; ++i) {
            cores_[i].lx = lx_mem_.get() + uint64_t{i} * cfg.lx_bytes;
            cores_[i].stale = stale_mem_.get() + uint64_t{i} * stale_words_;
            cores_[i].lx_hw = 0;
        }
        cancel_tok_.engine = &cancel_;
        throw_core_ = test_throw_core();
    }

    const spyre_engine_config& config() const { return cfg_; }
    void cancel() { cancel_.store(true, std::memory_order_relaxed); }
    int run(const spyre_engine_job& job, spyre_engine_result& res);

  private:
    // job state
    const Program* prog_ = nullptr;
    const spyre_engine_job* job_ = nullptr;
    uint32_t ncores_ = 0;
    uint8_t* mem_ = nullptr;
    uint64_t mem_size_ = 0;
    std::vector<spyre_engine_window> windows_;
    uint64_t max_instr_ = 0, max_cycles_ = 0;

    bool run_core(Core& c);
    bool fail(Core& c, int code, const char* fmt, ...) __attribute__((format(printf, 4, 5)));
    bool check_lx(Core& c, const char* what, uint64_t addr, uint64_t rows, uint64_t stride,
                  uint64_t row_bytes, Range* out);
    bool check_ddr_row(Core& c, uint64_t addr, uint64_t len);
    // cycle model helpers
    uint64_t hazard(const Core& c, const Range* reads, int nr, const Range* writes, int nw) const;
    bool unit_op(Core& c, int unit, uint64_t dep, uint64_t cost, uint32_t latency,
                 const Range* reads, int nr, const Range* writes, int nw, uint64_t* end_out,
                 int lane = -1);
    uint64_t dma_cycles(uint64_t bytes) const;

    bool exec_dma(Core& c, const Instr& in, bool is_load);
    bool exec_mm(Core& c, const Instr& in);
    bool exec_vec(Core& c, const Instr& in);
    bool exec_send(Core& c, const Instr& in);
    int exec_recv(Core& c, const Instr& in);  // 1 done, 0 blocked, -1 failed
    void release_barrier(std::vector<Core*>& live);
    bool release_allred(std::vector<Core*>& live, Failure& f);

    spyre_engine_config cfg_;
    ThreadPool pool_;
    std::vector<Core> cores_;
    LxMem lx_mem_;
    std::unique_ptr<uint64_t[]> stale_mem_;
    uint64_t stale_words_ = 0;
    std::atomic<bool> cancel_{false};
    kern::Cancel cancel_tok_;  // cancel_ and the running job's cancel flag
    int throw_core_ = -1;
    std::mutex run_mu_;

    bool cancelled() const { return cancel_tok_(); }
};

bool Engine::fail(Core& c, int code, const char* fmt, ...) {
    c.fail.code = code;
    c.fail.core = static_cast<int>(c.id);
    c.fail.pc = c.pc;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(c.fail.msg, sizeof c.fail.msg, fmt, ap);
    va_end(ap);
    c.st = St::Failed;
    return false;
}

// LX operand: rows of row_bytes at addr + i*stride must lie in [0, lx_bytes).
bool Engine::check_lx(Core& c, const char* what, uint64_t addr, uint64_t rows, uint64_t stride,
                      uint64_t row_bytes, Range* out) {
    if (rows == 0 || row_bytes == 0) {
        *out = {0, 0};
        return true;
    }
    u128 hi = u128{addr} + u128{rows - 1} * stride + row_bytes;
    if (hi > cfg_.lx_bytes)
        return fail(c, SPYRE_ENGINE_ERR_LX_RANGE,
                    "%s: LX range 0x%llx + %llu rows x %llu B (stride %llu) beyond LX %llu", what,
                    (unsigned long long)addr, (unsigned long long)rows,
                    (unsigned long long)row_bytes, (unsigned long long)stride,
                    (unsigned long long)cfg_.lx_bytes);
    *out = {addr, static_cast<uint64_t>(hi)};
    return true;
}

bool Engine::check_ddr_row(Core& c, uint64_t addr, uint64_t len) {
    bool in_window = false;
    for (const auto& w : windows_) {
        if (addr >= w.addr && len <= w.size && addr - w.addr <= w.size - len) {
            in_window = true;
            break;
        }
    }
    if (!in_window)
        return fail(c, SPYRE_ENGINE_ERR_DDR_WINDOW,
                    "DDR access 0x%llx+%llu outside the job's memory windows",
                    (unsigned long long)addr, (unsigned long long)len);
    if (addr < c.span_base || addr - c.span_base > cfg_.span_bytes ||
        len > cfg_.span_bytes - (addr - c.span_base))
        return fail(c, SPYRE_ENGINE_ERR_DDR_SPAN,
                    "DDR access 0x%llx+%llu outside the core's span 0x%llx+%llu",
                    (unsigned long long)addr, (unsigned long long)len,
                    (unsigned long long)c.span_base, (unsigned long long)cfg_.span_bytes);
    return true;
}

uint64_t Engine::hazard(const Core& c, const Range* reads, int nr, const Range* writes,
                        int nw) const {
    uint64_t ready = 0;
    for (const SbEntry& e : c.sb) {
        if (e.ready <= ready) continue;
        for (int i = 0; i < nr; ++i)
            if (e.write && reads[i].lo < e.hi && e.lo < reads[i].hi) ready = e.ready;
        for (int i = 0; i < nw; ++i)
            if (writes[i].lo < e.hi && e.lo < writes[i].hi) ready = e.ready;
    }
    return ready;
}

// Issues one operation on a unit: waits for a queue slot, the unit, `dep` and LX hazards; the
// latency is charged when the unit starts from idle. Records the LX ranges in the scoreboard.
bool Engine::unit_op(Core& c, int unit, uint64_t dep, uint64_t cost, uint32_t latency,
                     const Range* reads, int nr, const Range* writes, int nw, uint64_t* end_out,
                     int lane) {
    auto& q = c.q[unit];
    c.t = std::max(c.t, q[c.qh[unit]]);  // queue full: issue stalls
    uint64_t& free_at = lane >= 0 ? c.ring_free[lane] : c.unit_free[unit];
    uint64_t start = std::max({c.t, free_at, dep, hazard(c, reads, nr, writes, nw)});
    if (start > free_at) cost += latency;
    uint64_t end = start + cost;
    if (end > max_cycles_ || end < start)
        return fail(c, SPYRE_ENGINE_ERR_CYCLE_BUDGET, "cycle budget %llu exceeded (cycle %llu)",
                    (unsigned long long)max_cycles_, (unsigned long long)end);
    free_at = end;
    c.unit_free[unit] = std::max(c.unit_free[unit], end);
    c.stats.busy[unit] += cost;
    q[c.qh[unit]] = end;
    c.qh[unit] = (c.qh[unit] + 1) % q.size();
    // prune finished entries, then record this op's ranges
    std::erase_if(c.sb, [&](const SbEntry& e) { return e.ready <= c.t; });
    for (int i = 0; i < nr; ++i)
        if (reads[i].hi > reads[i].lo) c.sb.push_back({reads[i].lo, reads[i].hi, end, false});
    for (int i = 0; i < nw; ++i)
        if (writes[i].hi > writes[i].lo) {
            c.sb.push_back({writes[i].lo, writes[i].hi, end, true});
            c.lx_hw = std::max(c.lx_hw, writes[i].hi);
        }
    if (end_out) *end_out = end;
    return true;
}

uint64_t Engine::dma_cycles(uint64_t bytes) const {
    // The job's cores share the DDR bandwidth equally; one core is limited by its port.
    u128 num = u128{bytes} * ncores_ * cfg_.clock_hz;
    u128 share = (num + cfg_.ddr_bytes_per_s - 1) / cfg_.ddr_bytes_per_s;
    uint64_t port = ceil_div(bytes, cfg_.dma_port_bytes_per_cycle);
    return std::max<uint64_t>(port, share > UINT64_MAX / 2 ? UINT64_MAX / 2 : (uint64_t)share);
}

bool Engine::exec_dma(Core& c, const Instr& in, bool is_load) {
    const char* what = is_load ? "LOAD" : "STORE";
    const uint64_t lx = c.r[in.a];
    const uint64_t ddr = c.r[in.b] + static_cast<uint64_t>(in.imm);
    const uint64_t len = c.r[in.c];
    uint64_t n1 = 1, ds1 = 0, ls1 = 0, n2 = 1, ds2 = 0, ls2 = 0;
    if (in.d) {
        n1 = c.r[in.d], ds1 = c.r[in.d + 1], ls1 = c.r[in.d + 2];
        n2 = c.r[in.d + 3], ds2 = c.r[in.d + 4], ls2 = c.r[in.d + 5];
    }
    if (len == 0 || n1 == 0 || n2 == 0) return true;
    if (lx % kS || ddr % kS || ds1 % kS || ls1 % kS || ds2 % kS || ls2 % kS)
        return fail(c, SPYRE_ENGINE_ERR_MISALIGNED,
                    "%s: LX 0x%llx / DDR 0x%llx addresses and strides must be multiples of 128",
                    what, (unsigned long long)lx, (unsigned long long)ddr);
    const uint64_t padded = round_up(len, kS);
    if (len > cfg_.lx_bytes || n1 > cfg_.lx_bytes || n2 > cfg_.lx_bytes ||
        u128{n1} * n2 * padded > cfg_.lx_bytes)
        return fail(c, SPYRE_ENGINE_ERR_TOO_LARGE, "%s: %llu x %llu rows of %llu B exceed LX", what,
                    (unsigned long long)n2, (unsigned long long)n1, (unsigned long long)len);
    // LX extent: bounding box of all rows
    u128 lx_hi = u128{lx} + u128{n1 - 1} * ls1 + u128{n2 - 1} * ls2 + (is_load ? padded : len);
    if (lx_hi > cfg_.lx_bytes)
        return fail(c, SPYRE_ENGINE_ERR_LX_RANGE, "%s: LX range 0x%llx..0x%llx beyond LX %llu",
                    what, (unsigned long long)lx,
                    (unsigned long long)(lx_hi > UINT64_MAX ? UINT64_MAX : (uint64_t)lx_hi),
                    (unsigned long long)cfg_.lx_bytes);
    // DDR: check every row (fast path: bounding box inside one window and the span)
    u128 ddr_hi = u128{ddr} + u128{n1 - 1} * ds1 + u128{n2 - 1} * ds2 + len;
    bool fast = false;
    if (ddr_hi <= UINT64_MAX && ddr >= c.span_base &&
        ddr_hi <= u128{c.span_base} + cfg_.span_bytes) {
        for (const auto& w : windows_)
            if (ddr >= w.addr && ddr_hi <= u128{w.addr} + w.size) fast = true;
    }
    if (!fast) {
        for (uint64_t i2 = 0; i2 < n2; ++i2)
            for (uint64_t i1 = 0; i1 < n1; ++i1) {
                u128 a = u128{ddr} + u128{i2} * ds2 + u128{i1} * ds1;
                if (a > UINT64_MAX)
                    return fail(c, SPYRE_ENGINE_ERR_DDR_WINDOW, "%s: DDR address overflow", what);
                if (!check_ddr_row(c, static_cast<uint64_t>(a), len)) return false;
            }
    }
    // timing: the DDR moves whole sticks
    const uint64_t bytes = n1 * n2 * padded;
    Range lr{lx, static_cast<uint64_t>(lx_hi)};
    bool ok = is_load ? unit_op(c, SPYRE_UNIT_DMA, 0, dma_cycles(bytes), cfg_.dma_latency, nullptr,
                                0, &lr, 1, nullptr)
                      : unit_op(c, SPYRE_UNIT_DMA, 0, dma_cycles(bytes), cfg_.dma_latency, &lr, 1,
                                nullptr, 0, nullptr);
    if (!ok) return false;
    (is_load ? c.stats.ddr_read_bytes : c.stats.ddr_write_bytes) += bytes;
    // data
    for (uint64_t i2 = 0; i2 < n2; ++i2)
        for (uint64_t i1 = 0; i1 < n1; ++i1) {
            uint8_t* l = c.lx + lx + i2 * ls2 + i1 * ls1;
            uint8_t* d = mem_ + ddr + i2 * ds2 + i1 * ds1;
            if (is_load) {
                lx_overwrite(c, l - c.lx, l - c.lx + padded);
                std::memcpy(l, d, len);
                if (padded != len) std::memset(l + len, 0, padded - len);
            } else {
                lx_touch(c, l - c.lx, l - c.lx + len);
                std::memcpy(d, l, len);
            }
        }
    return true;
}

bool Engine::exec_mm(Core& c, const Instr& in) {
    const DType t = static_cast<DType>(in.dt);
    const uint64_t* d = &c.r[in.d];
    const uint64_t m = d[0], n = d[1], k = d[2], lda = d[3], ldb = d[4], ldc = d[5];
    const uint64_t ca = c.r[in.a], aa = c.r[in.b], ba = c.r[in.c];
    if (m == 0 || n == 0) return true;
    if (m > isa::kMaxMatDim || n > isa::kMaxMatDim || k > isa::kMaxMatDim)
        return fail(c, SPYRE_ENGINE_ERR_TOO_LARGE, "MM: %llux%llux%llu exceeds 4096",
                    (unsigned long long)m, (unsigned long long)n, (unsigned long long)k);
    const uint64_t es = isa::dtype_size(t);
    if (aa % es || ba % es || lda % es || ldb % es || ca % 4 || ldc % 4)
        return fail(c, SPYRE_ENGINE_ERR_MISALIGNED,
                    "MM: operand addresses/strides not element aligned");
    Range ra, rb, rc;
    if (!check_lx(c, "MM A", aa, m, lda, k * es, &ra) ||
        !check_lx(c, "MM B", ba, k, ldb, n * es, &rb) ||
        !check_lx(c, "MM C", ca, m, ldc, n * 4, &rc))
        return false;
    // cycles: 8-row x 64-lane tiles over the corelets, one K step per cycle
    uint64_t tiles = ceil_div(m, cfg_.pe_rows) * ceil_div(n, cfg_.pe_lanes);
    uint64_t steps = ceil_div(tiles, cfg_.corelets_per_core);
    uint64_t cycles = t == DType::I8    ? steps * ceil_div(k, cfg_.mm_int8_speedup)
                      : t == DType::F32 ? steps * k * cfg_.mm_fp32_slowdown
                                        : steps * k;
    const bool acc = in.flags & isa::kMmAccumulate;
    Range reads[3] = {ra, rb, rc};
    if (!unit_op(c, SPYRE_UNIT_MATRIX, 0, cycles, cfg_.mm_fill_latency, reads, acc ? 3 : 2, &rc, 1,
                 nullptr))
        return false;
    c.stats.macs += m * n * k;
    lx_touch(c, ra);
    lx_touch(c, rb);
    if (!acc && (m == 1 || ldc == n * 4))
        lx_overwrite(c, rc.lo, rc.hi);  // C is contiguous and written completely
    else
        lx_touch(c, rc);
    kern::matmul({t, c.lx + ca, c.lx + aa, c.lx + ba, m, n, k, lda, ldb, ldc, acc, &cancel_tok_});
    return true;
}

bool Engine::exec_vec(Core& c, const Instr& in) {
    const Op op = static_cast<Op>(in.op);
    const DType dt = static_cast<DType>(in.dt & 15), st = static_cast<DType>(in.dt >> 4);
    const uint64_t* d = &c.r[in.d];
    const uint64_t rows = d[0], cols = d[1];
    const uint64_t dst = c.r[in.a], s1 = c.r[in.b], s2 = op == Op::VBIN ? c.r[in.c] : 0;
    const char* name = op_info(in.op).name;
    if (rows == 0 || cols == 0) return true;
    if (rows > cfg_.lx_bytes || cols > cfg_.lx_bytes || u128{rows} * cols > cfg_.lx_bytes)
        return fail(c, SPYRE_ENGINE_ERR_TOO_LARGE, "%s: %llu x %llu elements exceed LX", name,
                    (unsigned long long)rows, (unsigned long long)cols);
    const uint64_t des = isa::dtype_size(dt), ses = isa::dtype_size(st);
    const float imm = std::bit_cast<float>(static_cast<uint32_t>(in.imm));
    Range reads[2] = {}, w{};
    int nr = 0;
    uint64_t dstride = 0, s1stride = 0, s2stride = 0;
    uint64_t out_rows = rows, out_bytes = cols * des;
    isa::Bcast mode = isa::Bcast::NONE;
    if (op == Op::VRED) {
        s1stride = d[2];
        const int axis = in.flags;
        out_rows = 1;
        out_bytes = (axis == 0 ? rows : cols) * des;
    } else {
        dstride = d[2];
        s1stride = d[3];
        if (op == Op::VBIN) {
            s2stride = d[4];
            mode = static_cast<isa::Bcast>(in.flags);
        }
    }
    const bool uses_s2 = op == Op::VBIN && mode != isa::Bcast::IMM;
    const bool uses_s2stride = mode == isa::Bcast::NONE || mode == isa::Bcast::COL;
    if (dst % des || s1 % ses || (uses_s2 && s2 % ses) || dstride % des || s1stride % ses ||
        (uses_s2 && uses_s2stride && s2stride % ses))
        return fail(c, SPYRE_ENGINE_ERR_MISALIGNED, "%s: addresses/strides not element aligned",
                    name);
    if (!check_lx(c, name, dst, out_rows, dstride, out_bytes, &w)) return false;
    const bool reads_src1 = !(op == Op::VUN && in.func == static_cast<uint8_t>(isa::VUn::SET));
    if (reads_src1 && !check_lx(c, name, s1, rows, s1stride, cols * ses, &reads[nr++]))
        return false;
    if (op == Op::VBIN) {
        bool ok = true;
        switch (mode) {
            case isa::Bcast::NONE:
                ok = check_lx(c, name, s2, rows, s2stride, cols * ses, &reads[nr++]);
                break;
            case isa::Bcast::SCALAR:
                ok = check_lx(c, name, s2, 1, 0, ses, &reads[nr++]);
                break;
            case isa::Bcast::ROW:
                ok = check_lx(c, name, s2, 1, 0, cols * ses, &reads[nr++]);
                break;
            case isa::Bcast::COL:
                ok = check_lx(c, name, s2, rows, s2stride, ses, &reads[nr++]);
                break;
            default:
                break;
        }
        if (!ok) return false;
    }
    // cycles: lanes of both corelets; 32-bit types use the narrower lane count
    const bool wide = des == 4 || ses == 4;
    const uint64_t lanes =
        uint64_t{wide ? cfg_.vec_lanes_32 : cfg_.vec_lanes_16} * cfg_.corelets_per_core;
    uint64_t per_vec = 1;
    if (op == Op::VUN) {
        auto f = static_cast<isa::VUn>(in.func);
        if (f >= isa::VUn::EXP) per_vec = cfg_.vec_special_cycles;
    } else if (op == Op::VBIN && in.func == static_cast<uint8_t>(isa::VBin::DIV)) {
        per_vec = cfg_.vec_special_cycles;
    }
    uint64_t cycles = ceil_div(rows * cols, lanes) * per_vec;
    if (!unit_op(c, SPYRE_UNIT_VECTOR, 0, cycles, cfg_.vec_latency, reads, nr, &w, 1, nullptr))
        return false;
    for (int i = 0; i < nr; ++i) lx_touch(c, reads[i]);
    // a contiguous destination is written completely: its stale sticks need no zeroing
    if (out_rows && out_bytes && (out_rows == 1 || dstride == out_bytes))
        lx_overwrite(c, w.lo, w.hi);
    else
        lx_touch(c, w);
    switch (op) {
        case Op::VUN:
            kern::vunary(static_cast<isa::VUn>(in.func), dt, st, c.lx + dst, c.lx + s1, rows, cols,
                         dstride, s1stride, imm, &cancel_tok_);
            break;
        case Op::VBIN:
            kern::vbinary(static_cast<isa::VBin>(in.func), mode, dt, st, c.lx + dst, c.lx + s1,
                          c.lx + s2, rows, cols, dstride, s1stride, s2stride, imm, &cancel_tok_);
            break;
        default:
            kern::vreduce(static_cast<isa::Red>(in.func), in.flags, dt, st, c.lx + dst, c.lx + s1,
                          rows, cols, s1stride, &cancel_tok_);
            break;
    }
    return true;
}

bool Engine::exec_send(Core& c, const Instr& in) {
    const uint64_t lx = c.r[in.a], len = c.r[in.c];
    const int dir = in.func;
    Range r;
    if (len > cfg_.lx_bytes)
        return fail(c, SPYRE_ENGINE_ERR_TOO_LARGE, "SEND: %llu bytes", (unsigned long long)len);
    if (!check_lx(c, "SEND", lx, 1, 0, len, &r)) return false;
    uint64_t pending = len;
    for (const Msg& m : c.out[dir]) pending += m.data.size();
    if (pending > cfg_.ring_max_bytes)
        return fail(c, SPYRE_ENGINE_ERR_RING, "SEND: more than %llu bytes undelivered",
                    (unsigned long long)cfg_.ring_max_bytes);
    uint64_t end = 0;
    if (!unit_op(c, SPYRE_UNIT_RING, 0, ceil_div(len, cfg_.ring_bytes_per_cycle), 0, &r, 1, nullptr,
                 0, &end, dir))
        return false;
    c.stats.ring_bytes += len;
    lx_touch(c, r);
    Msg m;
    m.data.assign(c.lx + lx, c.lx + lx + len);
    m.arrival = end + cfg_.ring_hop_latency;
    m.pc = c.pc;
    c.out[dir].push_back(std::move(m));
    return true;
}

int Engine::exec_recv(Core& c, const Instr& in) {
    const int dir = in.func;
    if (c.in[dir].empty()) return 0;
    const uint64_t lx = c.r[in.a], len = c.r[in.c];
    Msg& m = c.in[dir].front();
    if (m.data.size() != len) {
        fail(c, SPYRE_ENGINE_ERR_RING, "RECV of %llu bytes, but the message has %zu bytes",
             (unsigned long long)len, m.data.size());
        return -1;
    }
    Range w;
    if (!check_lx(c, "RECV", lx, 1, 0, len, &w)) return -1;
    // the core stalls until the message has arrived and the destination is free
    uint64_t ready = std::max(m.arrival, hazard(c, nullptr, 0, &w, 1));
    if (ready > c.t) {
        c.stats.wait_cycles += ready - c.t;
        c.t = ready;
    }
    lx_touch(c, w);
    if (len) std::memcpy(c.lx + lx, m.data.data(), len);
    c.lx_hw = std::max(c.lx_hw, w.hi);
    c.in_bytes[dir] -= len;
    c.in[dir].pop_front();
    return 1;
}

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
        // every instruction (a few ns): long instructions also poll inside their kernels
        if (cancelled()) return fail(c, SPYRE_ENGINE_ERR_CANCELLED, "job cancelled");
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
        c.t++;
        c.stats.busy[SPYRE_UNIT_SCALAR]++;
        if (c.t > max_cycles_)
            return fail(c, SPYRE_ENGINE_ERR_CYCLE_BUDGET, "cycle budget %llu exceeded",
                        (unsigned long long)max_cycles_);
        uint64_t* r = c.r;
        uint32_t next = c.pc + 1;
        switch (op) {
            case Op::NOP:
                break;
            case Op::HALT: {
                uint64_t end = c.t;
                for (uint64_t f : c.unit_free) end = std::max(end, f);
                c.t = end;
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
                uint64_t ready =
                    op == Op::LXLD ? hazard(c, &rg, 1, nullptr, 0) : hazard(c, nullptr, 0, &rg, 1);
                c.t = std::max(c.t, ready);
                lx_touch(c, rg);
                if (op == Op::LXLD) {
                    std::memcpy(&r[in.a], c.lx + a, 8);
                } else {
                    std::memcpy(c.lx + a, &r[in.c], 8);
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
            case Op::SEND:
                if (!exec_send(c, in)) return false;
                break;
            case Op::RECV:
                break;  // done above
            case Op::BAR:
            case Op::ALLRED: {
                uint64_t a = c.t;
                for (uint64_t f : c.unit_free) a = std::max(a, f);
                c.arrive = a;
                c.st = op == Op::BAR ? St::AtBarrier : St::AtAllred;
                // pc stays at the collective until it is released
                r[0] = 0;
                return true;
            }
        }
        r[0] = 0;
        c.pc = next;
    }
}

void Engine::release_barrier(std::vector<Core*>& live) {
    uint64_t rel = 0;
    for (Core* c : live) rel = std::max(rel, c->arrive);
    rel += cfg_.barrier_latency;
    for (Core* c : live) {
        c->stats.wait_cycles += rel - c->arrive;
        c->t = rel;
        c->pc++;
        c->st = St::Running;
    }
}

bool Engine::release_allred(std::vector<Core*>& live, Failure& f) {
    const Core& c0 = *live[0];
    const Instr& i0 = prog_->code[c0.pc];
    const uint64_t count = c0.r[i0.c];
    for (Core* c : live) {
        const Instr& in = prog_->code[c->pc];
        if (in.dt != i0.dt || in.func != i0.func || c->r[in.c] != count) {
            set_fail(f, SPYRE_ENGINE_ERR_COLLECTIVE_MISMATCH, static_cast<int>(c->id), c->pc,
                     "ALLRED type/function/count differ from core %u", c0.id);
            return false;
        }
    }
    const DType t = static_cast<DType>(i0.dt);
    const uint64_t es = isa::dtype_size(t), bytes = count * es;
    if (bytes > cfg_.lx_bytes) {
        set_fail(f, SPYRE_ENGINE_ERR_TOO_LARGE, static_cast<int>(c0.id), c0.pc,
                 "ALLRED of %llu elements", (unsigned long long)count);
        return false;
    }
    std::vector<Range> src(live.size()), dst(live.size());
    for (size_t i = 0; i < live.size(); ++i) {
        Core& c = *live[i];
        const Instr& in = prog_->code[c.pc];
        if (c.r[in.a] % es || c.r[in.b] % es) {
            fail(c, SPYRE_ENGINE_ERR_MISALIGNED, "ALLRED: addresses not element aligned");
            f = c.fail;
            return false;
        }
        if (!check_lx(c, "ALLRED src", c.r[in.b], 1, 0, bytes, &src[i]) ||
            !check_lx(c, "ALLRED dst", c.r[in.a], 1, 0, bytes, &dst[i])) {
            f = c.fail;
            return false;
        }
    }
    // ring all-reduce (reduce-scatter + all-gather): 2(N-1) steps of B/N bytes per core
    const uint64_t nc = live.size();
    const uint64_t chunk = ceil_div(bytes, nc);
    const uint64_t ring = nc > 1 ? 2 * (nc - 1) * ceil_div(chunk, cfg_.ring_bytes_per_cycle) : 0;
    const uint64_t lat = nc > 1 ? 2 * (nc - 1) * uint64_t{cfg_.ring_hop_latency} : 0;
    uint64_t start = 0;
    for (Core* c : live) start = std::max(start, c->arrive);
    const uint64_t end = start + ring + lat;
    std::vector<float> acc(count), x(count);
    for (size_t i = 0; i < live.size(); ++i) {
        lx_touch(*live[i], src[i]);
        lx_touch(*live[i], dst[i]);
    }
    for (size_t i = 0; i < live.size(); ++i) {
        kern::load_row(t, live[i]->lx + src[i].lo, count, i == 0 ? acc.data() : x.data());
        if (i) kern::combine(static_cast<isa::Red>(i0.func), acc.data(), x.data(), count);
    }
    for (size_t i = 0; i < live.size(); ++i) {
        Core& c = *live[i];
        kern::store_row(t, c.lx + dst[i].lo, count, acc.data());
        c.lx_hw = std::max(c.lx_hw, dst[i].hi);
        c.stats.wait_cycles += start - c.arrive;
        c.stats.busy[SPYRE_UNIT_RING] += ring + lat;
        c.stats.ring_bytes += nc > 1 ? 2 * (nc - 1) * chunk : 0;
        c.unit_free[SPYRE_UNIT_RING] = std::max(c.unit_free[SPYRE_UNIT_RING], end);
        c.t = end;
        c.pc++;
        c.st = St::Running;
    }
    return true;
}

int Engine::run(const spyre_engine_job& job, spyre_engine_result& res) {
    std::lock_guard<std::mutex> lk(run_mu_);
    cancel_.store(false, std::memory_order_relaxed);
    cancel_tok_.job = job.cancel;
    std::memset(&res, 0, sizeof res);
    Failure f;
    auto finish_fail = [&](const Failure& fl) {
        res.status = -1;
        res.error = fl.code;
        res.core = fl.core;
        res.pc = fl.pc;
        std::memcpy(res.message, fl.msg, sizeof res.message);
        res.message[sizeof res.message - 1] = 0;
        return fl.code;
    };
    // job arguments
    const uint32_t nc = job.num_cores ? job.num_cores : cfg_.num_cores;
    res.num_cores = nc;
    if (nc > cfg_.num_cores || job.num_args > isa::kMaxArgs || (job.num_args && !job.args) ||
        (job.num_windows && !job.windows) || (job.mem_size && !job.mem) || job.flags) {
        set_fail(f, SPYRE_ENGINE_ERR_INVALID_ARGUMENT, -1, 0,
                 "invalid job (cores %u, args %u, windows %u, flags 0x%x)", nc, job.num_args,
                 job.num_windows, job.flags);
        return finish_fail(f);
    }
    windows_.clear();
    uint64_t span0 = UINT64_MAX;
    for (uint32_t i = 0; i < job.num_windows; ++i) {
        const auto& w = job.windows[i];
        if (w.size == 0) continue;
        if (w.addr > job.mem_size || w.size > job.mem_size - w.addr) {
            set_fail(f, SPYRE_ENGINE_ERR_INVALID_ARGUMENT, -1, 0,
                     "window %u (0x%llx+%llu) beyond device memory %llu", i,
                     (unsigned long long)w.addr, (unsigned long long)w.size,
                     (unsigned long long)job.mem_size);
            return finish_fail(f);
        }
        windows_.push_back(w);
        span0 = std::min(span0, w.addr & ~uint64_t{kS - 1});
    }
    if (span0 == UINT64_MAX) span0 = 0;
    Program prog;
    if (!validate(static_cast<const uint8_t*>(job.program), job.program_size, prog, f))
        return finish_fail(f);
    prog_ = &prog;
    job_ = &job;
    ncores_ = nc;
    mem_ = static_cast<uint8_t*>(job.mem);
    mem_size_ = job.mem_size;
    max_instr_ = job.max_instructions    ? job.max_instructions
                 : cfg_.max_instructions ? cfg_.max_instructions
                                         : UINT64_MAX;
    max_cycles_ = job.max_cycles ? job.max_cycles : cfg_.max_cycles ? cfg_.max_cycles : UINT64_MAX;

    // reset cores (what the previous job wrote becomes stale: it reads as zero)
    for (uint32_t i = 0; i < cfg_.num_cores; ++i) {
        Core& c = cores_[i];
        uint8_t* lx = c.lx;
        uint64_t* stale = c.stale;
        const uint64_t sticks = ceil_div(std::min(c.lx_hw, cfg_.lx_bytes), kS);
        for (uint64_t w = 0; w < sticks / 64; ++w) stale[w] = ~uint64_t{0};
        if (sticks % 64) stale[sticks / 64] |= ~(~uint64_t{0} << (sticks % 64));
        c.~Core();
        new (&c) Core();
        c.id = i;
        c.lx = lx;
        c.stale = stale;
        c.r[isa::kRegCoreId] = i;
        c.r[isa::kRegNumCores] = nc;
        c.span_base = span0;
        for (auto& q : c.q) q.assign(cfg_.queue_depth, 0);
        c.st = i < nc ? St::Running : St::Halted;
    }

    std::vector<uint32_t> runnable;
    std::vector<Core*> live;
    bool failed = false;
    for (;;) {
        runnable.clear();
        for (uint32_t i = 0; i < nc; ++i)
            if (cores_[i].st == St::Running) runnable.push_back(i);
        if (!runnable.empty()) {
            pool_.parallel_for(runnable.size(), [&](size_t k) { run_core(cores_[runnable[k]]); });
            for (uint32_t i : runnable)
                if (cores_[i].st == St::Failed) {
                    f = cores_[i].fail;
                    failed = true;
                    break;
                }
            if (failed) break;
            // deliver this phase's ring messages (each channel has a single sender)
            for (uint32_t i = 0; i < nc && !failed; ++i) {
                for (int d = 0; d < 2 && !failed; ++d) {
                    Core& s = cores_[i];
                    Core& dst = cores_[d == 0 ? (i + 1) % nc : (i + nc - 1) % nc];
                    for (Msg& m : s.out[d]) {
                        if (dst.in_bytes[d] + m.data.size() > cfg_.ring_max_bytes) {
                            set_fail(f, SPYRE_ENGINE_ERR_RING, static_cast<int>(i), m.pc,
                                     "SEND: core %u has more than %llu bytes undelivered", dst.id,
                                     (unsigned long long)cfg_.ring_max_bytes);
                            failed = true;
                            break;
                        }
                        dst.in_bytes[d] += m.data.size();
                        dst.in[d].push_back(std::move(m));
                    }
                    s.out[d].clear();
                }
            }
            if (failed) break;
            for (uint32_t i = 0; i < nc; ++i) {
                Core& c = cores_[i];
                if (c.st == St::BlockedRecv && !c.in[prog.code[c.pc].func].empty())
                    c.st = St::Running;
            }
            continue;
        }
        if (cancelled()) {
            set_fail(f, SPYRE_ENGINE_ERR_CANCELLED, -1, 0, "job cancelled");
            failed = true;
            break;
        }
        // nobody can run: release a collective or report a deadlock
        live.clear();
        uint32_t halted = 0;
        Core* recv_blocked = nullptr;
        for (uint32_t i = 0; i < nc; ++i) {
            Core& c = cores_[i];
            if (c.st == St::Halted) {
                ++halted;
                continue;
            }
            live.push_back(&c);
            if (c.st == St::BlockedRecv && !recv_blocked) recv_blocked = &c;
        }
        if (live.empty()) break;
        if (recv_blocked) {
            const Instr& in = prog.code[recv_blocked->pc];
            uint32_t from =
                in.func == 0 ? (recv_blocked->id + nc - 1) % nc : (recv_blocked->id + 1) % nc;
            set_fail(f, SPYRE_ENGINE_ERR_DEADLOCK, static_cast<int>(recv_blocked->id),
                     recv_blocked->pc, "RECV waits for a message from core %u that never comes",
                     from);
            failed = true;
            break;
        }
        if (halted) {
            uint32_t h = 0;
            while (cores_[h].st != St::Halted) ++h;
            set_fail(f, SPYRE_ENGINE_ERR_DEADLOCK, static_cast<int>(live[0]->id), live[0]->pc,
                     "%s waits for core %u, which has halted",
                     live[0]->st == St::AtBarrier ? "BAR" : "ALLRED", h);
            failed = true;
            break;
        }
        bool mixed = false;
        for (Core* c : live)
            if (c->st != live[0]->st) {
                set_fail(f, SPYRE_ENGINE_ERR_COLLECTIVE_MISMATCH, static_cast<int>(c->id), c->pc,
                         "core %u waits in %s, core %u in %s", c->id,
                         c->st == St::AtBarrier ? "BAR" : "ALLRED", live[0]->id,
                         live[0]->st == St::AtBarrier ? "BAR" : "ALLRED");
                mixed = true;
                break;
            }
        if (mixed) {
            failed = true;
            break;
        }
        if (live[0]->st == St::AtBarrier) {
            release_barrier(live);
        } else if (!release_allred(live, f)) {
            failed = true;
            break;
        }
        for (Core* c : live)
            if (c->t > max_cycles_) {
                set_fail(f, SPYRE_ENGINE_ERR_CYCLE_BUDGET, static_cast<int>(c->id), c->pc,
                         "cycle budget %llu exceeded", (unsigned long long)max_cycles_);
                failed = true;
            }
        if (failed) break;
    }

    // results (also filled for failed jobs: statistics up to the failure)
    for (uint32_t i = 0; i < nc; ++i) {
        Core& c = cores_[i];
        uint64_t end = c.t;
        for (uint64_t u : c.unit_free) end = std::max(end, u);
        c.stats.end_cycle = end;
        res.total_cycles = std::max(res.total_cycles, end);
    }
    for (uint32_t i = 0; i < nc; ++i) {
        Core& c = cores_[i];
        c.stats.idle_cycles = res.total_cycles - c.stats.end_cycle;
        res.cores[i] = c.stats;
        res.ddr_read_bytes += c.stats.ddr_read_bytes;
        res.ddr_write_bytes += c.stats.ddr_write_bytes;
        res.ring_bytes += c.stats.ring_bytes;
        res.instructions += c.stats.instructions;
        res.macs += c.stats.macs;
    }
    prog_ = nullptr;
    job_ = nullptr;
    if (failed) return finish_fail(f);
    return SPYRE_ENGINE_OK;
}

bool config_valid(const spyre_engine_config& c) {
    return c.num_cores >= 1 && c.num_cores <= SPYRE_ENGINE_MAX_CORES && c.corelets_per_core >= 1 &&
           c.pe_rows >= 1 && c.pe_lanes >= 1 && c.lx_bytes >= kS && c.lx_bytes % kS == 0 &&
           c.lx_bytes <= (uint64_t{1} << 30) && c.clock_hz >= 1 && c.ddr_bytes_per_s >= 1 &&
           c.dma_port_bytes_per_cycle >= 1 && c.span_bytes >= kS && c.mm_int8_speedup >= 1 &&
           c.mm_fp32_slowdown >= 1 && c.vec_lanes_16 >= 1 && c.vec_lanes_32 >= 1 &&
           c.vec_special_cycles >= 1 && c.ring_bytes_per_cycle >= 1 && c.queue_depth >= 1 &&
           c.queue_depth <= 64 && c.num_threads <= 1024;
}

}  // namespace spyre::eng

// ---------------------------------------------------------------------------------------------
// C API

struct spyre_engine {
    spyre::eng::Engine impl;
    explicit spyre_engine(const spyre_engine_config& c) : impl(c) {}
};

extern "C" {

void spyre_engine_config_default(spyre_engine_config* c) {
    if (!c) return;
    std::memset(c, 0, sizeof *c);
    c->num_cores = 32;
    c->corelets_per_core = 2;
    c->pe_rows = 8;
    c->pe_lanes = 64;
    c->lx_bytes = 2u << 20;
    c->clock_hz = 1500000000ull;
    c->ddr_bytes_per_s = 204800000000ull;
    c->dma_port_bytes_per_cycle = 128;
    c->dma_latency = 150;
    c->span_bytes = 256ull << 20;
    c->mm_fill_latency = 16;
    c->mm_int8_speedup = 2;
    c->mm_fp32_slowdown = 4;
    c->vec_lanes_16 = 64;
    c->vec_lanes_32 = 32;
    c->vec_latency = 8;
    c->vec_special_cycles = 4;
    c->ring_bytes_per_cycle = 128;
    c->ring_hop_latency = 8;
    c->barrier_latency = 16;
    c->queue_depth = 4;
    c->num_threads = 0;
    c->ring_max_bytes = 8ull << 20;
    c->max_instructions = 1000000000ull;
    c->max_cycles = 15000000000ull;
}

spyre_engine* spyre_engine_create(const spyre_engine_config* cfg) {
    spyre_engine_config c;
    if (cfg)
        c = *cfg;
    else
        spyre_engine_config_default(&c);
    if (!spyre::eng::config_valid(c)) return nullptr;
    try {
        return new spyre_engine(c);
    } catch (...) {
        return nullptr;
    }
}

void spyre_engine_destroy(spyre_engine* e) { delete e; }

const spyre_engine_config* spyre_engine_get_config(const spyre_engine* e) {
    return e ? &e->impl.config() : nullptr;
}

int spyre_engine_run(spyre_engine* e, const spyre_engine_job* job, spyre_engine_result* res) {
    spyre_engine_result local;
    spyre_engine_result* r = res ? res : &local;
    if (!e || !job) {
        std::memset(r, 0, sizeof *r);
        r->status = -1;
        r->error = SPYRE_ENGINE_ERR_INVALID_ARGUMENT;
        r->core = -1;
        std::snprintf(r->message, sizeof r->message, "NULL engine or job");
        return r->error;
    }
    // Host resource failures anywhere in the engine (also on a pool thread: the pool hands
    // exceptions back to this thread) end the job with NO_MEMORY; nothing escapes the C API.
    auto host_fail = [r](const char* what) {
        std::memset(r, 0, sizeof *r);
        r->status = -1;
        r->error = SPYRE_ENGINE_ERR_NO_MEMORY;
        r->core = -1;
        std::snprintf(r->message, sizeof r->message, "%s", what);
        return r->error;
    };
    try {
        return e->impl.run(*job, *r);
    } catch (const std::bad_alloc&) {
        return host_fail("out of host memory");
    } catch (const std::exception& ex) {
        char msg[SPYRE_ENGINE_MSG_LEN];
        std::snprintf(msg, sizeof msg, "host error in the engine: %s", ex.what());
        return host_fail(msg);
    } catch (...) {
        return host_fail("host error in the engine");
    }
}

void spyre_engine_cancel(spyre_engine* e) {
    if (e) e->impl.cancel();
}

const char* spyre_engine_error_name(int error) {
    static const char* const names[] = {"OK",
                                        "INVALID_ARGUMENT",
                                        "BAD_PROGRAM",
                                        "ILLEGAL_OPCODE",
                                        "BAD_REGISTER",
                                        "BAD_OPERAND",
                                        "BAD_LOOP",
                                        "BAD_BRANCH",
                                        "NO_HALT",
                                        "BAD_ARG",
                                        "LX_RANGE",
                                        "DDR_WINDOW",
                                        "DDR_SPAN",
                                        "MISALIGNED",
                                        "DIV_ZERO",
                                        "DEADLOCK",
                                        "COLLECTIVE_MISMATCH",
                                        "RING",
                                        "INSTR_BUDGET",
                                        "CYCLE_BUDGET",
                                        "TOO_LARGE",
                                        "CANCELLED",
                                        "NO_MEMORY"};
    static_assert(sizeof names / sizeof names[0] == SPYRE_ENGINE_ERR_COUNT);
    if (error < 0 || error >= SPYRE_ENGINE_ERR_COUNT) return "UNKNOWN";
    return names[error];
}

}  // extern "C"

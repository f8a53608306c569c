// SPDX-License-Identifier: MIT
// C API of the op library (include/spyre/ops.h): tensor checks, stick-layout normalisation,
// plan cache and launch. Built on the public C API of spyre.h, so ops run on every backend.
#include <algorithm>
#include <cstring>
#include <format>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "error.hpp"
#include "ops/attention_program.hpp"
#include "ops/matmul_planner.hpp"
#include "ops/pricing.hpp"
#include "ops/rotary_program.hpp"
#include "spyre/ops.h"

namespace spyre::ops {
namespace {

constexpr uint64_t kStick = 128;
uint64_t up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

// A public-API call inside the op library: failures keep the callee's message.
void call(spyre_status st) {
    if (st != SPYRE_SUCCESS) {
        std::string m = spyre_last_error();
        if (const auto p = m.find(": "); p != std::string::npos) m = m.substr(p + 2);
        fail(st, m);
    }
}

void require(bool ok, const std::string& message) {
    if (!ok) fail(SPYRE_ERROR_INVALID_ARGUMENT, message);
}

const char* dtype_name(int32_t t) {
    switch (t) {
        case SPYRE_DTYPE_FLOAT32:
            return "float32";
        case SPYRE_DTYPE_FLOAT16:
            return "float16";
        case SPYRE_DTYPE_BFLOAT16:
            return "bfloat16";
        case SPYRE_DTYPE_INT8:
            return "int8";
        case SPYRE_DTYPE_INT32:
            return "int32";
        default:
            return "unknown";
    }
}

// A checked tensor argument.
struct Tensor {
    const char* name;
    spyre_buffer_t buffer;
    uint64_t addr;  // device address of element 0
    uint64_t offset;
    isa::DType t;
    uint64_t es;
    std::vector<int64_t> shape, strides;
    int64_t numel() const {
        return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    }
    int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
    int64_t stride(int i) const { return strides[i < 0 ? strides.size() + i : i]; }
};

Tensor check_tensor(const spyre_tensor* t, const char* name) {
    require(t != nullptr, std::format("tensor `{}` is NULL", name));
    require(t->dtype >= SPYRE_DTYPE_FLOAT32 && t->dtype <= SPYRE_DTYPE_INT32,
            std::format("tensor `{}`: unknown dtype {}", name, t->dtype));
    require(t->ndim <= SPYRE_TENSOR_MAX_DIMS,
            std::format("tensor `{}`: {} dims, at most {}", name, t->ndim, SPYRE_TENSOR_MAX_DIMS));
    Tensor r{name, t->buffer, 0, t->offset, static_cast<isa::DType>(t->dtype), 0, {}, {}};
    r.es = isa::dtype_size(r.t);
    uint64_t size = 0, base = 0;
    call(spyre_buffer_size(t->buffer, &size));
    call(spyre_buffer_device_address(t->buffer, &base));
    bool empty = false;
    uint64_t last = 0;  // largest element offset
    for (uint32_t d = 0; d < t->ndim; ++d) {
        require(t->shape[d] >= 0 && t->strides[d] >= 0,
                std::format("tensor `{}`: dim {} has size {} and stride {} (must be >= 0)", name, d,
                            t->shape[d], t->strides[d]));
        r.shape.push_back(t->shape[d]);
        r.strides.push_back(t->strides[d]);
        if (t->shape[d] == 0)
            empty = true;
        else
            last += uint64_t(t->shape[d] - 1) * uint64_t(t->strides[d]);
    }
    if (!empty) {
        const uint64_t extent = (last + 1) * r.es;
        require(t->offset <= size && extent <= size - t->offset,
                std::format("tensor `{}`: elements reach byte {} of a {}-byte buffer (offset {})",
                            name, t->offset + extent, size, t->offset));
    }
    r.addr = base + t->offset;
    return r;
}

// A matrix view inside a tensor: rows x cols with element strides (rs, cs) and the byte
// stride of a batch step (one batch dim after collapsing; 0 = shared by all batch elements).
struct Mat {
    const Tensor* t;
    uint64_t rows, cols;
    int64_t rs, cs;
    uint64_t batch;
    int64_t bs;  // elements
};

// Collapses the leading dims of t (all but the last two) into one batch dim.
Mat as_batched_matrix(const Tensor& t) {
    require(t.shape.size() >= 2, std::format("tensor `{}` has {} dims: a matrix needs 2 or more",
                                             t.name, t.shape.size()));
    Mat m{&t, uint64_t(t.dim(-2)), uint64_t(t.dim(-1)), t.stride(-2), t.stride(-1), 1, 0};
    const size_t nb = t.shape.size() - 2;
    for (size_t d = 0; d < nb; ++d) m.batch *= uint64_t(t.shape[d]);
    // batch dims must be one uniform stride (size-1 dims do not matter)
    int64_t bs = -1;
    uint64_t inner = 1;
    for (size_t d = nb; d-- > 0;) {
        if (t.shape[d] == 1) continue;
        if (bs < 0) {
            bs = t.strides[d];
        } else if (t.strides[d] != bs * int64_t(inner)) {
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("tensor `{}`: batch dims with strides that do not collapse into one",
                             t.name));
        }
        inner *= uint64_t(t.shape[d]);
    }
    m.bs = bs < 0 ? 0 : bs;
    return m;
}

// ---- per-thread op info, process-wide plan and program caches ----

thread_local spyre_op_info g_last{};

struct PlanEntry {
    std::vector<uint8_t> image;
    uint32_t cores = 0;
    uint64_t cycles = 0;
    std::string plan;
};

struct Caches {
    std::mutex mu;
    std::map<std::string, std::shared_ptr<const PlanEntry>> plans;
    std::map<std::pair<std::string, const void*>, spyre_program_t> programs;  // (card, image)
    std::map<std::string, std::shared_ptr<MatmulPlanner>> planners;           // by card config
    uint64_t hits = 0, misses = 0;
};

// Never destroyed: programs stay loaded for the life of the process (like a module cache),
// and no destructor runs after libspyre's own statics are gone.
Caches& caches() {
    static Caches* c = new Caches;
    return *c;
}

struct Card {
    spyre_device_t dev;
    spyre_device_info info;
    std::string key;  // backend and index
};

Card card_of(spyre_buffer_t b) {
    Card c{};
    call(spyre_buffer_get_device(b, &c.dev));
    call(spyre_device_get_info(c.dev, &c.info));
    c.key = std::format("{}:{}", c.info.backend, c.info.index);
    return c;
}

spyre_engine_config engine_config_of(const spyre_device_info& info) {
    spyre_engine_config cfg = default_engine_config();
    if (info.num_cores) cfg.num_cores = info.num_cores;
    if (info.lx_bytes) cfg.lx_bytes = info.lx_bytes;
    if (info.clock_mhz) cfg.clock_hz = uint64_t{info.clock_mhz} * 1000000;
    return cfg;
}

std::shared_ptr<MatmulPlanner> planner_for(const Card& c) {
    const spyre_engine_config cfg = engine_config_of(c.info);
    const std::string k = std::format("{}/{}/{}", cfg.num_cores, cfg.lx_bytes, cfg.clock_hz);
    auto& cs = caches();
    std::lock_guard lock(cs.mu);
    auto& p = cs.planners[k];
    if (!p) p = std::make_shared<MatmulPlanner>(cfg);
    return p;
}

spyre_program_t program_for(const Card& c, const std::shared_ptr<const PlanEntry>& e) {
    auto& cs = caches();
    std::lock_guard lock(cs.mu);
    auto& prog = cs.programs[{c.key, e.get()}];
    if (!prog) call(spyre_program_load(c.dev, e->image.data(), e->image.size(), &prog));
    return prog;
}

// A scratch buffer for one op; freed once queued (queued work keeps its memory alive).
struct Scratch {
    spyre_buffer_t buf = nullptr;
    ~Scratch() { spyre_free(buf); }
};

void launch(const Card& c, const std::shared_ptr<const PlanEntry>& e, spyre_stream_t stream,
            const std::vector<uint64_t>& args, std::vector<spyre_buffer_t> bufs) {
    std::sort(bufs.begin(), bufs.end());
    bufs.erase(std::unique(bufs.begin(), bufs.end()), bufs.end());
    spyre_launch_params lp{};
    lp.num_cores = e->cores;
    lp.num_args = static_cast<uint32_t>(args.size());
    std::copy(args.begin(), args.end(), lp.args);
    lp.buffers = bufs.data();
    lp.num_buffers = static_cast<uint32_t>(bufs.size());
    call(spyre_launch_async(program_for(c, e), &lp, stream));
    g_last.launches++;
    g_last.modeled_cycles += e->cycles;
}

// A matrix operand in stick layout: rows start 128-aligned, row stride a multiple of 128.
struct StickMat {
    spyre_buffer_t buf;
    uint64_t addr;  // device address of element (0, 0) of batch 0
    uint64_t ld;    // bytes between rows
    uint64_t bs;    // bytes between batch elements (0 = shared)
    bool trans;     // stored transposed (cols x rows)
};

// Uses m directly if its layout is stick rows (or, when allowed, transposed stick rows) of
// exactly rows_p x cols_p; else copies it into zero-padded scratch of that shape.
StickMat to_stick(const Mat& m, uint64_t rows_p, uint64_t cols_p, bool allow_trans,
                  spyre_stream_t stream, Scratch& scratch) {
    const uint64_t es = m.t->es;
    const bool aligned_addr = m.t->addr % kStick == 0;
    const bool bs_ok = m.batch == 1 || (uint64_t(m.bs) * es) % kStick == 0;
    if (rows_p == m.rows && cols_p == m.cols && aligned_addr && bs_ok) {
        if (m.cs == 1 && (uint64_t(m.rs) * es) % kStick == 0 && (m.rows == 1 || m.rs > 0))
            return {m.t->buffer, m.t->addr, m.rows == 1 ? up(m.cols * es, kStick) : m.rs * es,
                    m.bs * es, false};
        if (allow_trans && m.rs == 1 && (uint64_t(m.cs) * es) % kStick == 0 && m.cs > 0)
            return {m.t->buffer, m.t->addr, uint64_t(m.cs) * es, m.bs * es, true};
    }
    // zero-padded copy, one row of contiguous elements per strided copy row: rows of `cols`
    // elements (cs == 1), or for a transposed view (rs == 1, allowed) its stored rows
    const bool trans = m.cs != 1 && allow_trans && m.rs == 1;
    if (m.cs != 1 && !trans)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("tensor `{}`: a matrix whose rows and columns both have non-unit "
                         "element strides ({}, {}); make it contiguous first",
                         m.t->name, m.rs, m.cs));
    const uint64_t srows = trans ? m.cols : m.rows, scols = trans ? m.rows : m.cols;
    const uint64_t prows = trans ? cols_p : rows_p, pcols = trans ? rows_p : cols_p;
    const int64_t spitch = trans ? m.cs : m.rs;
    const uint64_t ld = up(pcols * es, kStick);
    const uint64_t batches = m.bs ? m.batch : 1;
    call(spyre_malloc(card_of(m.t->buffer).dev, ld * prows * batches, &scratch.buf));
    call(spyre_memset_async(scratch.buf, 0, 0, ld * prows * batches, stream));
    spyre_memcpy3d_params p{};
    p.src_buffer = m.t->buffer;
    p.src_offset = m.t->offset;
    p.src_pitch = uint64_t(spitch) * es;
    p.src_slice_pitch = m.bs ? uint64_t(m.bs) * es : p.src_pitch * srows;
    p.dst_buffer = scratch.buf;
    p.dst_pitch = ld;
    p.dst_slice_pitch = ld * prows;
    p.width = scols * es;
    p.height = srows;
    p.depth = batches;
    if (srows == 1) p.src_pitch = p.width;  // a single row: its pitch does not matter
    if (p.src_pitch < p.width || (batches > 1 && p.src_slice_pitch < p.src_pitch * p.height)) {
        // rows overlap (e.g. a broadcast view with stride 0): copy row by row
        for (uint64_t bi = 0; bi < batches; ++bi)
            for (uint64_t r = 0; r < srows; ++r)
                call(spyre_memcpy_dtod_async(scratch.buf, (bi * prows + r) * ld, m.t->buffer,
                                             m.t->offset + (bi * m.bs + r * spitch) * es,
                                             scols * es, stream));
    } else {
        if (batches == 1) p.src_slice_pitch = p.src_pitch * p.height;
        call(spyre_memcpy_3d_async(&p, stream));
    }
    g_last.launches++;
    uint64_t a = 0;
    call(spyre_buffer_device_address(scratch.buf, &a));
    return {scratch.buf, a, ld, m.bs ? ld * prows : 0, trans};
}

std::shared_ptr<const PlanEntry> matmul_plan(const Card& c, const MatmulShape& s) {
    const spyre_engine_config cfg = engine_config_of(c.info);
    const std::string key = std::format(
        "mm/{}/{}/{} {}x{}x{} in{} out{} tb{} bias{}:{} act{}:{} g{} ld{},{},{} b{} {},{},{}",
        cfg.num_cores, cfg.lx_bytes, cfg.clock_hz, s.M, s.N, s.K, int(s.in), int(s.out), s.trans_b,
        s.has_bias, int(s.bias_t), s.has_act, int(s.act), s.gated, s.lda, s.ldb, s.ldc, s.batch,
        s.batch_a, s.batch_b, s.batch_c);
    auto& cs = caches();
    {
        std::lock_guard lock(cs.mu);
        if (auto it = cs.plans.find(key); it != cs.plans.end()) {
            cs.hits++;
            g_last.plan_cached = 1;
            return it->second;
        }
    }
    auto planner = planner_for(c);
    PricedSplit best;
    try {
        best = planner->plan(s);
    } catch (const std::invalid_argument& e) {
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("matmul {}x{}x{}: {}", s.M, s.N, s.K, e.what()));
    }
    auto e = std::make_shared<PlanEntry>();
    e->image = build_matmul(s, best.split);
    e->cores = static_cast<uint32_t>(matmul_cores(best.split));
    e->cycles = best.cycles;
    e->plan = split_name(best.split);
    std::lock_guard lock(cs.mu);
    cs.misses++;
    return cs.plans.emplace(key, e).first->second;
}

bool float_type(isa::DType t) {
    return t == isa::DType::F16 || t == isa::DType::BF16 || t == isa::DType::F32;
}

void begin_op(const char* name) {
    g_last = spyre_op_info{};
    std::snprintf(g_last.op, sizeof g_last.op, "%s", name);
}

void finish_info_ns(const Card& c) {
    const uint64_t mhz = c.info.clock_mhz ? c.info.clock_mhz : 1500;
    g_last.modeled_ns = g_last.modeled_cycles * 1000 / mhz;
}

void finish_info(const Card& c, const PlanEntry& e) {
    std::snprintf(g_last.plan, sizeof g_last.plan, "%s", e.plan.c_str());
    g_last.cores = e.cores;
    finish_info_ns(c);
}

// out = act(a @ b + bias) on batched matrices.
// out = act(a @ b + bias), or with b2 (gated): out = act(a @ b) * (a @ b2).
void matmul_impl(spyre_stream_t stream, const Mat& a, const Mat& b, const Tensor* bias,
                 spyre_activation act, const Tensor& out_t, const Mat* b2 = nullptr) {
    const Mat out = as_batched_matrix(out_t);
    const isa::DType in = a.t->t;
    require(float_type(in), std::format("matmul: {} inputs are not supported (float32, float16, "
                                        "bfloat16)",
                                        dtype_name(int(in))));
    require(b.t->t == in, std::format("matmul: `{}` is {} but `{}` is {}", a.t->name,
                                      dtype_name(int(in)), b.t->name, dtype_name(int(b.t->t))));
    require(out_t.t == in || out_t.t == isa::DType::F32,
            std::format("matmul: output `{}` is {}; it must be {} or float32", out_t.name,
                        dtype_name(int(out_t.t)), dtype_name(int(in))));
    require(a.cols == b.rows, std::format("matmul: `{}` has {} columns but `{}` has {} rows",
                                          a.t->name, a.cols, b.t->name, b.rows));
    require(out.rows == a.rows && out.cols == b.cols,
            std::format("matmul: output `{}` is {}x{}, expected {}x{}", out_t.name, out.rows,
                        out.cols, a.rows, b.cols));
    const uint64_t batch = out.batch;
    require((a.batch == batch || a.batch == 1) && (b.batch == batch || b.batch == 1) &&
                (a.batch == batch || b.batch == batch),
            std::format("matmul: batch sizes {} and {} do not give the output's {}", a.batch,
                        b.batch, batch));
    if (bias) {
        require(bias->shape.size() == 1 && uint64_t(bias->shape[0]) == out.cols,
                std::format("linear: bias must have shape [{}]", out.cols));
        require(float_type(bias->t), "linear: bias must be a floating-point tensor");
    }
    const Card c = card_of(out_t.buffer);
    for (const Tensor* t : {a.t, b.t, bias})
        if (t)
            require(card_of(t->buffer).key == c.key,
                    std::format("matmul: `{}` is on another card than `{}`", t->name, out_t.name));
    if (a.rows == 0 || b.cols == 0 || batch == 0) return;
    const uint64_t es = isa::dtype_size(in), oes = isa::dtype_size(out_t.t);
    if (a.cols == 0) {  // empty sum
        require(!bias, "linear: K = 0 with a bias is not supported");
        fail(SPYRE_ERROR_NOT_SUPPORTED, "matmul: K = 0 (nothing to multiply)");
    }
    // stick-aligned padded sizes: K and N to whole sticks of the input and output types
    const uint64_t Kp = up(a.cols, kStick / es);
    const uint64_t Np = up(b.cols, std::max(kStick / es, kStick / oes));
    Scratch sa, sb, sc, sbias;
    const StickMat A = to_stick(a, a.rows, Kp, false, stream, sa);
    StickMat B = to_stick(b, Kp, Np, true, stream, sb);
    if (B.trans && (B.ld / es) < Kp) B = to_stick(b, Kp, Np, false, stream, sb);
    Scratch sb2;
    StickMat B2{};
    if (b2) {  // the second weight must be laid out exactly like the first
        require(b2->t->t == in && b2->rows == b.rows && b2->cols == b.cols && b2->batch == b.batch,
                std::format("gated matmul: `{}` must match `{}`", b2->t->name, b.t->name));
        require(card_of(b2->t->buffer).key == card_of(b.t->buffer).key,
                "gated matmul: weights on different cards");
        B2 = to_stick(*b2, Kp, Np, true, stream, sb2);
        if (B2.trans != B.trans || B2.ld != B.ld || B2.bs != B.bs) {
            B = to_stick(b, Kp, Np, false, stream, sb);
            B2 = to_stick(*b2, Kp, Np, false, stream, sb2);
            if (B.trans != B2.trans || B.ld != B2.ld || B.bs != B2.bs)
                fail(SPYRE_ERROR_INTERNAL, "gated matmul: padded weights differ in layout");
        }
    }
    // the output: written in place when it has stick rows of width Np
    const bool direct_out = out.cols == Np && out.cs == 1 && out_t.addr % kStick == 0 &&
                            (uint64_t(out.rs) * oes) % kStick == 0 &&
                            (batch == 1 || (uint64_t(out.bs) * oes) % kStick == 0) &&
                            (out.rows == 1 || out.rs > 0);
    StickMat C{};
    if (direct_out) {
        C = {out_t.buffer, out_t.addr,
             out.rows == 1 ? up(out.cols * oes, kStick) : uint64_t(out.rs) * oes,
             uint64_t(out.bs) * oes, false};
    } else {
        const uint64_t ld = up(Np * oes, kStick);
        call(spyre_malloc(c.dev, ld * a.rows * batch, &sc.buf));
        uint64_t addr = 0;
        call(spyre_buffer_device_address(sc.buf, &addr));
        C = {sc.buf, addr, ld, ld * a.rows, false};
    }
    uint64_t bias_addr = 0;
    spyre_buffer_t bias_buf = nullptr;
    if (bias) {
        const uint64_t bes = bias->es;
        if (bias->addr % kStick == 0 && bias->strides[0] == 1 && Np == out.cols) {
            bias_addr = bias->addr, bias_buf = bias->buffer;
        } else {
            call(spyre_malloc(c.dev, up(Np * bes, kStick), &sbias.buf));
            call(spyre_memset_async(sbias.buf, 0, 0, up(Np * bes, kStick), stream));
            for (uint64_t j = 0; j < out.cols; ++j)
                if (bias->strides[0] != 1 || j == 0)
                    call(spyre_memcpy_dtod_async(
                        sbias.buf, j * bes, bias->buffer, bias->offset + j * bias->strides[0] * bes,
                        bias->strides[0] == 1 ? out.cols * bes : bes, stream));
            call(spyre_buffer_device_address(sbias.buf, &bias_addr));
            bias_buf = sbias.buf;
            g_last.launches++;
        }
    }
    MatmulShape s;
    s.M = a.rows, s.N = Np, s.K = Kp;
    s.in = in, s.out = out_t.t;
    s.trans_b = B.trans;
    s.gated = b2 != nullptr;
    s.has_bias = bias != nullptr;
    if (bias) s.bias_t = bias->t;
    s.has_act = act != SPYRE_ACTIVATION_NONE;
    switch (act) {
        case SPYRE_ACTIVATION_RELU:
            s.act = isa::VUn::RELU;
            break;
        case SPYRE_ACTIVATION_GELU:
            s.act = isa::VUn::GELU;
            break;
        case SPYRE_ACTIVATION_GELU_TANH:
            s.act = isa::VUn::GELU_TANH;
            break;
        case SPYRE_ACTIVATION_SILU:
            s.act = isa::VUn::SILU;
            break;
        default:
            require(act == SPYRE_ACTIVATION_NONE, std::format("unknown activation {}", int(act)));
    }
    s.lda = A.ld, s.ldb = B.ld, s.ldc = C.ld;
    s.batch = batch;
    s.batch_a = a.batch == 1 ? 0 : A.bs;
    s.batch_b = b.batch == 1 ? 0 : B.bs;
    s.batch_c = C.bs;
    auto plan = matmul_plan(c, s);
    launch(c, plan, stream, {A.addr, B.addr, C.addr, bias_addr, b2 ? B2.addr : 0},
           {A.buf, B.buf, C.buf, bias_buf ? bias_buf : A.buf, b2 ? B2.buf : A.buf});
    if (!direct_out) {  // drop the padding columns into the caller's output
        spyre_memcpy3d_params p{};
        p.src_buffer = C.buf;
        p.src_pitch = C.ld;
        p.src_slice_pitch = C.bs;
        p.dst_buffer = out_t.buffer;
        p.dst_offset = out_t.offset;
        p.dst_pitch = uint64_t(out.rs) * oes;
        p.dst_slice_pitch = uint64_t(out.bs) * oes;
        p.width = out.cols * oes;
        p.height = out.rows;
        p.depth = batch;
        require(out.cs == 1 && p.dst_pitch >= p.width &&
                    (batch == 1 || p.dst_slice_pitch >= p.dst_pitch * p.height),
                std::format("matmul: output `{}` must have unit column stride and rows that do "
                            "not overlap",
                            out_t.name));
        if (batch == 1) p.dst_slice_pitch = p.dst_pitch * p.height;
        call(spyre_memcpy_3d_async(&p, stream));
        g_last.launches++;
    }
    finish_info(c, *plan);
}

std::shared_ptr<const PlanEntry> attention_plan(const Card& c, const AttentionShape& s) {
    const spyre_engine_config cfg = engine_config_of(c.info);
    std::string key =
        std::format("attn/{}/{}/{} B{} H{}/{} L{}x{} D{} t{} c{} s{}", cfg.num_cores, cfg.lx_bytes,
                    cfg.clock_hz, s.B, s.Hq, s.Hkv, s.Lq, s.Lk, s.D, int(s.t), s.causal, s.scale);
    for (const uint64_t* st : {s.q_st, s.k_st, s.v_st, s.o_st})
        key += std::format(" {},{},{}", st[0], st[1], st[2]);
    auto& cs = caches();
    {
        std::lock_guard lock(cs.mu);
        if (auto it = cs.plans.find(key); it != cs.plans.end()) {
            cs.hits++;
            g_last.plan_cached = 1;
            return it->second;
        }
    }
    AttentionPlan p;
    try {
        const Pricer pricer(cfg);
        p = plan_attention(pricer, s, cfg.num_cores);
    } catch (const std::invalid_argument& e) {
        fail(SPYRE_ERROR_NOT_SUPPORTED, e.what());
    }
    auto e = std::make_shared<PlanEntry>();
    e->image = build_attention(s, p);
    e->cores = p.cores;
    e->cycles = p.cycles;
    e->plan = std::format("q block {} x {} heads, key block {}, {} cores", p.bq, s.Hq / s.Hkv, p.bk,
                          p.cores);
    std::lock_guard lock(cs.mu);
    cs.misses++;
    return cs.plans.emplace(key, e).first->second;
}

void attention_impl(spyre_stream_t stream, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& o, bool causal, float scale) {
    for (const Tensor* t : {&q, &k, &v, &o}) {
        require(
            t->shape.size() == 4,
            std::format("attention: `{}` must be 4-D [batch, heads, length, head_dim]", t->name));
        require(t->t == q.t, std::format("attention: `{}` is {} but `q` is {}", t->name,
                                         dtype_name(int(t->t)), dtype_name(int(q.t))));
    }
    require(float_type(q.t), "attention: float32, float16 or bfloat16 tensors");
    const int64_t B = q.dim(0), Hq = q.dim(1), Lq = q.dim(2), D = q.dim(3);
    const int64_t Hkv = k.dim(1), Lk = k.dim(2);
    require(k.dim(0) == B && v.dim(0) == B && k.dim(3) == D && v.dim(3) == D && v.dim(1) == Hkv &&
                v.dim(2) == Lk,
            std::format("attention: k and v must be [{}, Hkv, Lk, {}] alike", B, D));
    require(o.dim(0) == B && o.dim(1) == Hq && o.dim(2) == Lq && o.dim(3) == D,
            std::format("attention: `out` must be [{}, {}, {}, {}]", B, Hq, Lq, D));
    require(Hkv > 0 && Hq % Hkv == 0,
            std::format("attention: {} query heads are not a multiple of {} kv heads", Hq, Hkv));
    const Card c = card_of(o.buffer);
    for (const Tensor* t : {&q, &k, &v})
        require(card_of(t->buffer).key == c.key,
                std::format("attention: `{}` is on another card than `out`", t->name));
    if (B == 0 || Hq == 0 || Lq == 0 || D == 0) return;
    require(Lk > 0, "attention: no keys (Lk = 0)");
    AttentionShape s;
    s.B = B, s.Hq = Hq, s.Hkv = Hkv, s.Lq = Lq, s.Lk = Lk, s.D = D;
    s.t = q.t, s.causal = causal, s.scale = scale;
    auto strides = [&](const Tensor& t, uint64_t* st) {
        if (t.stride(3) != 1 || t.addr % kStick)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("attention: `{}` needs contiguous head rows starting 128-byte "
                             "aligned (make it contiguous first)",
                             t.name));
        // a size-1 dim's stride is never used (its index is 0)
        for (int d = 0; d < 3; ++d) st[d] = t.dim(d) == 1 ? 0 : uint64_t(t.stride(d)) * t.es;
    };
    strides(q, s.q_st), strides(k, s.k_st), strides(v, s.v_st), strides(o, s.o_st);
    auto plan = attention_plan(c, s);
    launch(c, plan, stream, {q.addr, k.addr, v.addr, o.addr},
           {q.buffer, k.buffer, v.buffer, o.buffer});
    finish_info(c, *plan);
}

void rotary_impl(spyre_stream_t stream, const Tensor& x, const Tensor& cs, const Tensor& sn,
                 const Tensor& o) {
    require(x.shape.size() == 4 && o.shape == x.shape,
            "rotary: `x` and `out` must be 4-D [batch, heads, length, head_dim] of one shape");
    require(float_type(x.t) && o.t == x.t, "rotary: `x` and `out` must be one floating type");
    const int64_t B = x.dim(0), H = x.dim(1), L = x.dim(2), D = x.dim(3);
    // cos/sin [L, D], [B, L, D] or [B, 1, L, D] (batch 1 = shared)
    RotaryShape s;
    s.B = B, s.H = H, s.L = L, s.D = D, s.t = x.t, s.ct = cs.t;
    auto table = [&](const Tensor& t, uint64_t* st) {
        require(float_type(t.t) && t.t == cs.t,
                "rotary: `cos` and `sin` must be one floating type");
        std::vector<int64_t> sh = t.shape, sd = t.strides;
        if (sh.size() == 4 && sh[1] == 1) sh.erase(sh.begin() + 1), sd.erase(sd.begin() + 1);
        if (sh.size() == 2) sh.insert(sh.begin(), 1), sd.insert(sd.begin(), 0);
        require(sh.size() == 3 && (sh[0] == B || sh[0] == 1) && sh[1] == L && sh[2] == D,
                std::format("rotary: `{}` must be [{}, {}], [{} or 1, {}, {}] or [{} or 1, 1, "
                            "{}, {}]",
                            t.name, L, D, B, L, D, B, L, D));
        if (sd[2] != 1 || t.addr % kStick)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("rotary: `{}` needs contiguous rows starting 128-byte aligned",
                             t.name));
        st[0] = sh[0] == 1 ? 0 : uint64_t(sd[0]) * t.es;
        st[1] = L == 1 ? 0 : uint64_t(sd[1]) * t.es;
        if (!st[0] && !st[1]) st[1] = up(uint64_t(D) * t.es, kStick);  // one row: any stride
    };
    uint64_t sst[2];
    table(cs, s.c_st);
    table(sn, sst);
    require(sst[0] == s.c_st[0] && sst[1] == s.c_st[1],
            "rotary: `cos` and `sin` must have the same strides");
    auto strides = [&](const Tensor& t, uint64_t* st) {
        if (t.stride(3) != 1 || t.addr % kStick)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("rotary: `{}` needs contiguous head rows starting 128-byte aligned",
                             t.name));
        for (int d = 0; d < 3; ++d) st[d] = t.dim(d) == 1 ? 0 : uint64_t(t.stride(d)) * t.es;
        if (!st[0] && !st[1] && !st[2]) st[2] = up(uint64_t(D) * t.es, kStick);
    };
    strides(x, s.x_st), strides(o, s.o_st);
    const Card c = card_of(o.buffer);
    for (const Tensor* t : {&x, &cs, &sn})
        require(card_of(t->buffer).key == c.key,
                std::format("rotary: `{}` is on another card than `out`", t->name));
    if (B == 0 || H == 0 || L == 0 || D == 0) return;
    const spyre_engine_config cfg = engine_config_of(c.info);
    std::string key = std::format("rope/{}/{}/{} {}x{}x{}x{} t{} ct{}", cfg.num_cores, cfg.lx_bytes,
                                  cfg.clock_hz, B, H, L, D, int(s.t), int(s.ct));
    for (const uint64_t* st : {s.x_st, s.o_st})
        key += std::format(" {},{},{}", st[0], st[1], st[2]);
    key += std::format(" {},{}", s.c_st[0], s.c_st[1]);
    auto& cache = caches();
    std::shared_ptr<const PlanEntry> plan;
    {
        std::lock_guard lock(cache.mu);
        if (auto it = cache.plans.find(key); it != cache.plans.end()) {
            cache.hits++;
            g_last.plan_cached = 1;
            plan = it->second;
        }
    }
    if (!plan) {
        RotaryPlan p;
        try {
            const Pricer pricer(cfg);
            p = plan_rotary(pricer, s, cfg.num_cores);
        } catch (const std::invalid_argument& e) {
            fail(SPYRE_ERROR_NOT_SUPPORTED, e.what());
        }
        auto e = std::make_shared<PlanEntry>();
        e->image = build_rotary(s, p);
        e->cores = p.cores;
        e->cycles = p.cycles;
        e->plan = std::format("{} positions per unit, {} cores", p.bl, p.cores);
        std::lock_guard lock(cache.mu);
        cache.misses++;
        plan = cache.plans.emplace(key, e).first->second;
    }
    launch(c, plan, stream, {x.addr, cs.addr, sn.addr, o.addr},
           {x.buffer, cs.buffer, sn.buffer, o.buffer});
    finish_info(c, *plan);
}

}  // namespace
}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

namespace {
template <typename F>
spyre_status op_guard(const char* fn, F&& body) noexcept {
    try {
        body();
        return SPYRE_SUCCESS;
    } catch (const Error& e) {
        set_last_error(std::format("{}: {}", fn, e.what()));
        return e.status();
    } catch (const std::bad_alloc&) {
        set_last_error(std::format("{}: out of host memory", fn));
        return SPYRE_ERROR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        set_last_error(std::format("{}: internal error: {}", fn, e.what()));
        return SPYRE_ERROR_INTERNAL;
    }
}
}  // namespace

spyre_status spyre_tensor_init(spyre_tensor* t, spyre_buffer_t buffer, uint64_t offset,
                               spyre_dtype dtype, uint32_t ndim, const int64_t* shape) {
    return op_guard(__func__, [&] {
        ops::require(t != nullptr, "tensor `t` is NULL");
        ops::require(ndim <= SPYRE_TENSOR_MAX_DIMS,
                     std::format("{} dims, at most {}", ndim, SPYRE_TENSOR_MAX_DIMS));
        ops::require(ndim == 0 || shape != nullptr, "shape is NULL");
        spyre_tensor r{};
        r.buffer = buffer;
        r.offset = offset;
        r.dtype = dtype;
        r.ndim = ndim;
        int64_t stride = 1;
        for (uint32_t d = ndim; d-- > 0;) {
            ops::require(shape[d] >= 0, std::format("dim {} has size {}", d, shape[d]));
            r.shape[d] = shape[d];
            r.strides[d] = stride;
            stride *= std::max<int64_t>(shape[d], 1);
        }
        *t = r;
    });
}

spyre_status spyre_op_matmul(spyre_stream_t stream, const spyre_tensor* a, const spyre_tensor* b,
                             const spyre_tensor* out) {
    return op_guard(__func__, [&] {
        begin_op("matmul");
        const Tensor ta = check_tensor(a, "a"), tb = check_tensor(b, "b"),
                     to = check_tensor(out, "out");
        matmul_impl(stream, as_batched_matrix(ta), as_batched_matrix(tb), nullptr,
                    SPYRE_ACTIVATION_NONE, to);
    });
}

spyre_status spyre_op_linear(spyre_stream_t stream, const spyre_tensor* x,
                             const spyre_tensor* weight, const spyre_tensor* bias,
                             spyre_activation activation, const spyre_tensor* out) {
    return op_guard(__func__, [&] {
        begin_op("linear");
        const Tensor tx = check_tensor(x, "x"), tw = check_tensor(weight, "weight"),
                     to = check_tensor(out, "out");
        Tensor tbias{};
        if (bias) tbias = check_tensor(bias, "bias");
        ops::require(tw.shape.size() == 2, "linear: `weight` must be 2-D [out_features, in]");
        ops::require(!tx.shape.empty() && !to.shape.empty(), "linear: `x` and `out` need a dim");
        // x [..., in] as an M x in matrix: its leading dims must collapse into rows
        const uint64_t in = uint64_t(tx.dim(-1));
        uint64_t rows = 1;
        for (size_t d = 0; d + 1 < tx.shape.size(); ++d) rows *= uint64_t(tx.shape[d]);
        int64_t rs = tx.shape.size() >= 2 ? tx.stride(-2) : int64_t(in);
        for (size_t d = tx.shape.size() - 1; d-- > 1;)
            if (tx.shape[d - 1] != 1 && tx.strides[d - 1] != tx.strides[d] * tx.shape[d])
                fail(SPYRE_ERROR_NOT_SUPPORTED,
                     "linear: the leading dims of `x` do not collapse into rows (make it "
                     "contiguous first)");
        ops::require(uint64_t(tw.dim(1)) == in,
                     std::format("linear: `x` has {} features but `weight` is {}x{}", in, tw.dim(0),
                                 tw.dim(1)));
        uint64_t orows = 1;
        for (size_t d = 0; d + 1 < to.shape.size(); ++d) orows *= uint64_t(to.shape[d]);
        ops::require(
            orows == rows && uint64_t(to.dim(-1)) == uint64_t(tw.dim(0)),
            std::format("linear: `out` must have shape [..., {}] with the rows of `x`", tw.dim(0)));
        int64_t ors = to.shape.size() >= 2 ? to.stride(-2) : to.dim(-1);
        for (size_t d = to.shape.size() - 1; d-- > 1;)
            if (to.shape[d - 1] != 1 && to.strides[d - 1] != to.strides[d] * to.shape[d])
                fail(SPYRE_ERROR_NOT_SUPPORTED,
                     "linear: the leading dims of `out` do not collapse into rows");
        Tensor x2 = tx;
        x2.shape = {int64_t(rows), int64_t(in)};
        x2.strides = {rs, tx.stride(-1)};
        Tensor o2 = to;
        o2.shape = {int64_t(rows), to.dim(-1)};
        o2.strides = {ors, to.stride(-1)};
        // weight^T as a K x N view
        Tensor wt = tw;
        wt.shape = {tw.dim(1), tw.dim(0)};
        wt.strides = {tw.stride(1), tw.stride(0)};
        matmul_impl(stream, as_batched_matrix(x2), as_batched_matrix(wt), bias ? &tbias : nullptr,
                    activation, o2);
    });
}

spyre_status spyre_op_attention(spyre_stream_t stream, const spyre_tensor* q, const spyre_tensor* k,
                                const spyre_tensor* v, const spyre_tensor* out, int causal,
                                float scale) {
    return op_guard(__func__, [&] {
        begin_op("attention");
        attention_impl(stream, check_tensor(q, "q"), check_tensor(k, "k"), check_tensor(v, "v"),
                       check_tensor(out, "out"), causal != 0, scale);
    });
}

spyre_status spyre_op_mlp(spyre_stream_t stream, const spyre_tensor* x, const spyre_tensor* w_gate,
                          const spyre_tensor* w_up, const spyre_tensor* w_down,
                          spyre_activation activation, const spyre_tensor* out) {
    return op_guard(__func__, [&] {
        begin_op("mlp");
        const Tensor tx = check_tensor(x, "x"), tu = check_tensor(w_up, "w_up"),
                     td = check_tensor(w_down, "w_down"), to = check_tensor(out, "out");
        Tensor tg{};
        if (w_gate) tg = check_tensor(w_gate, "w_gate");
        ops::require(
            tu.shape.size() == 2 && td.shape.size() == 2 && (!w_gate || tg.shape.size() == 2),
            "mlp: weights must be 2-D [out_features, in_features]");
        ops::require(tx.shape.size() == 2 && to.shape.size() == 2,
                     "mlp: `x` and `out` must be 2-D [tokens, features]");
        const int64_t M = tx.dim(0), H = tx.dim(1), I = tu.dim(0);
        ops::require(tu.dim(1) == H && (!w_gate || (tg.dim(0) == I && tg.dim(1) == H)) &&
                         td.dim(0) == H && td.dim(1) == I && to.dim(0) == M && to.dim(1) == H,
                     std::format("mlp: with x [{}, {}] the weights must be up/gate [I, {}] and "
                                 "down [{}, I], and out [{}, {}]",
                                 M, H, H, H, M, H));
        const Card c = card_of(to.buffer);
        // the hidden activations: stick rows of I elements in scratch
        const uint64_t es = tx.es, ld = up(uint64_t(I) * es, kStick);
        Scratch hs;
        call(spyre_malloc(c.dev, std::max<uint64_t>(ld * uint64_t(M), kStick), &hs.buf));
        Tensor th{"hidden", hs.buf, 0, 0, tx.t, es, {M, I}, {int64_t(ld / es), 1}};
        call(spyre_buffer_device_address(hs.buf, &th.addr));
        auto weight_t = [](const Tensor& w) {  // w^T as a K x N view
            Tensor r = w;
            r.shape = {w.dim(1), w.dim(0)};
            r.strides = {w.stride(1), w.stride(0)};
            return r;
        };
        const Tensor ut = weight_t(tu), dt = weight_t(td);
        const Mat xm = as_batched_matrix(tx), um = as_batched_matrix(ut);
        if (w_gate) {
            const Tensor gt = weight_t(tg);
            matmul_impl(stream, xm, as_batched_matrix(gt), nullptr, activation, th, &um);
        } else {
            matmul_impl(stream, xm, um, nullptr, activation, th);
        }
        std::string plan = std::string(w_gate ? "gate/up " : "up ") + g_last.plan;
        const uint32_t cores = g_last.cores;
        matmul_impl(stream, as_batched_matrix(th), as_batched_matrix(dt), nullptr,
                    SPYRE_ACTIVATION_NONE, to);
        plan += std::string("; down ") + g_last.plan;
        std::snprintf(g_last.plan, sizeof g_last.plan, "%s", plan.c_str());
        g_last.cores = std::max(cores, g_last.cores);
        finish_info_ns(c);
    });
}

spyre_status spyre_op_rotary(spyre_stream_t stream, const spyre_tensor* x, const spyre_tensor* cos,
                             const spyre_tensor* sin, const spyre_tensor* out) {
    return op_guard(__func__, [&] {
        begin_op("rotary");
        rotary_impl(stream, check_tensor(x, "x"), check_tensor(cos, "cos"),
                    check_tensor(sin, "sin"), check_tensor(out, "out"));
    });
}

spyre_status spyre_op_get_last_info(spyre_op_info* info) {
    return op_guard(__func__, [&] {
        ops::require(info != nullptr, "output pointer `info` is NULL");
        *info = g_last;
    });
}

spyre_status spyre_op_get_cache_stats(uint64_t* hits, uint64_t* misses) {
    return op_guard(__func__, [&] {
        auto& cs = caches();
        std::lock_guard lock(cs.mu);
        if (hits) *hits = cs.hits;
        if (misses) *misses = cs.misses;
    });
}

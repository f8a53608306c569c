// SPDX-License-Identifier: MIT
// C API of fused pointwise kernels (spyre_op_fused): a kernel description compiled to one
// program by ops/fused_program.hpp, planned and cached per description, n and card
// configuration; or prepared once (spyre_fused_kernel_create) and launched by handle.
#include <mutex>
#include <unordered_map>

#include "c_boundary.hpp"
#include "ops/api_common.hpp"
#include "ops/fused_program.hpp"
#include "ops/pricing.hpp"
#include "pinned_launch.hpp"

using namespace spyre;
using namespace spyre::ops;

namespace {

// Parsed descriptions by text: a compiled graph calls the same few kernels over and over.
std::shared_ptr<const FusedKernel> parsed(const char* text) {
    static std::mutex mu;
    static std::unordered_map<std::string, std::shared_ptr<const FusedKernel>> cache;
    std::string key(text);
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    std::shared_ptr<const FusedKernel> k;
    try {
        k = std::make_shared<const FusedKernel>(parse_fused(key));
    } catch (const std::invalid_argument& e) {
        fail(SPYRE_ERROR_NOT_SUPPORTED, e.what());
    }
    if (cache.size() > 4096) cache.clear();
    return cache.emplace(std::move(key), k).first->second;
}

// What the description allows for n positions, checked before planning (the same errors at a
// launch and at a prepare).
void check_positions(const FusedKernel& k, uint64_t n) {
    if (k.cols && n % k.cols)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("fused: n = {} is not a whole number of rows of {}", n, k.cols));
    if (!fused_views_fit(k, n))
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("fused: a view of the kernel is not of n = {} positions", n));
}

// The program of `text` (parsed as k) for n positions on cards of configuration cfg, from the
// plan cache (memory, then disk) or planned and generated now.
std::shared_ptr<const PlanEntry> fused_plan(const spyre_engine_config& cfg, const FusedKernel& k,
                                            const char* text, uint64_t n) {
    PlanKey key("fused", cfg);
    key.add(n);
    return cached_plan(key.str() + text, [&] {
        const Pricer pricer(cfg);
        // rows that do not fit a core's scratchpad run as long rows (column chunks on every
        // core); rows that cannot (their rows do not start on sticks) are refused: the caller
        // runs its eager form
        FusedPlan p;
        try {
            p = plan_fused(pricer, k, n, cfg.num_cores);
        } catch (const std::invalid_argument& e) {
            fail(SPYRE_ERROR_NOT_SUPPORTED, std::format("fused: {}", e.what()));
        }
        PlanEntry e;
        e.image = build_fused(k, n, p);
        e.cores = p.cores;
        e.cycles = p.cycles;
        e.plan = fused_plan_name(p);
        return e;
    });
}

// The operands of a launch of k over n positions, checked against the description; their card
// is the first output's.
std::vector<Tensor> fused_operands(const FusedKernel& k, uint64_t n, const spyre_tensor* inputs,
                                   uint32_t num_inputs, const spyre_tensor* outputs,
                                   uint32_t num_outputs, Card& card) {
    require(num_inputs == 0 || inputs, "fused: `inputs` is NULL");
    require(outputs && num_outputs, "fused: no outputs");
    require(k.inputs.size() == num_inputs && k.outputs.size() == num_outputs,
            "fused: the kernel has {} inputs and {} outputs, {} and {} were given", k.inputs.size(),
            k.outputs.size(), num_inputs, num_outputs);
    std::vector<Tensor> ts;
    ts.reserve(num_inputs + num_outputs);
    for (uint32_t i = 0; i < num_inputs; ++i) ts.push_back(check_tensor(&inputs[i], "input"));
    for (uint32_t j = 0; j < num_outputs; ++j) ts.push_back(check_tensor(&outputs[j], "output"));
    check_positions(k, n);
    for (uint32_t i = 0; i < ts.size(); ++i) {
        const Tensor& t = ts[i];
        const bool out = i >= num_inputs;
        const FkKind kind =
            out ? (i - num_inputs < k.out_kinds.size() ? k.out_kinds[i - num_inputs] : FkKind::FULL)
                : (k.inputs[i].scalar ? FkKind::SCALAR : k.inputs[i].kind);
        const isa::DType want = out ? k.outputs[i - num_inputs] : k.inputs[i].t;
        if (t.t != want)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("fused: {} {} has another type than the kernel says", t.name, i));
        static const FkView dense;
        const FkView& view =
            out ? (i - num_inputs < k.out_views.size() ? k.out_views[i - num_inputs] : dense)
                : k.inputs[i].view;
        // a view reaches its extent, which may be more or fewer elements than n
        const uint64_t need = fused_operand_elems(k, n, kind, view);
        if (kind == FkKind::SCALAR
                ? t.numel() < 1
                : (!is_dense(t) || uint64_t(t.numel()) < need || t.addr % kStick))
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("fused: {} {} must be {}", t.name, i,
                             kind == FkKind::SCALAR
                                 ? "a tensor of at least one element"
                                 : std::format("dense, of at least {} elements, 128-byte "
                                               "aligned",
                                               need)));
    }
    card = card_of(ts[num_inputs].buffer);
    for (const Tensor& t : ts) require_same_card(card, {&t}, "fused");
    return ts;
}

void launch_fused(const Card& c, const std::shared_ptr<const PlanEntry>& plan,
                  spyre_stream_t stream, const std::vector<Tensor>& ts) {
    std::vector<uint64_t> args;
    std::vector<spyre_buffer_t> bufs;
    for (const Tensor& t : ts) args.push_back(t.addr), bufs.push_back(t.buffer);
    launch(c, plan, stream, args, bufs);
    finish_info(c, *plan);
}

bool same_config(const spyre_engine_config& a, const spyre_engine_config& b) {
    return a.num_cores == b.num_cores && a.lx_bytes == b.lx_bytes && a.clock_hz == b.clock_hz;
}

// A prepared kernel: the description, n, the card configuration it was planned for and its
// plan (holding the program image; loaded per card on first use, on the preparing card at once).
struct PreparedFused {
    std::shared_ptr<const FusedKernel> kernel;
    uint64_t n = 0;
    spyre_engine_config cfg{};
    std::shared_ptr<const PlanEntry> plan;  // null when n == 0
};

}  // namespace

spyre_status spyre_op_fused(spyre_stream_t stream, const char* kernel, uint64_t n,
                            const spyre_tensor* inputs, uint32_t num_inputs,
                            const spyre_tensor* outputs, uint32_t num_outputs) {
    return guard(__func__, [&] {
        begin_op("fused");
        require(kernel != nullptr, "fused: `kernel` is NULL");
        const auto kp = parsed(kernel);
        Card c{};
        const std::vector<Tensor> ts =
            fused_operands(*kp, n, inputs, num_inputs, outputs, num_outputs, c);
        if (n == 0) return;
        launch_fused(c, fused_plan(engine_config_of(c.info), *kp, kernel, n), stream, ts);
    });
}

spyre_status spyre_fused_kernel_create(spyre_device_t device, const char* kernel, uint64_t n,
                                       spyre_fused_kernel_t* out) {
    if (out) *out = nullptr;
    return guard(__func__, [&] {
        require(out != nullptr, "output pointer `out` is NULL");
        require(kernel != nullptr, "fused: `kernel` is NULL");
        spyre_device_info info{};
        call(spyre_device_get_info(device, &info));
        auto p = std::make_shared<PreparedFused>();
        p->kernel = parsed(kernel);
        p->n = n;
        p->cfg = engine_config_of(info);
        check_positions(*p->kernel, n);
        if (n) {
            p->plan = fused_plan(p->cfg, *p->kernel, kernel, n);
            pin_program(device, p->plan->id, p->plan->image);
        }
        *out = reinterpret_cast<spyre_fused_kernel_t>(add_fused_kernel_handle(std::move(p)));
    });
}

spyre_status spyre_op_fused_prepared(spyre_stream_t stream, spyre_fused_kernel_t kernel,
                                     const spyre_tensor* inputs, uint32_t num_inputs,
                                     const spyre_tensor* outputs, uint32_t num_outputs) {
    return guard(__func__, [&] {
        begin_op("fused");
        const auto p = std::static_pointer_cast<const PreparedFused>(fused_kernel_of(kernel));
        Card c{};
        const std::vector<Tensor> ts =
            fused_operands(*p->kernel, p->n, inputs, num_inputs, outputs, num_outputs, c);
        if (p->n == 0) return;
        const spyre_engine_config cfg = engine_config_of(c.info);
        require(same_config(cfg, p->cfg),
                "fused: the kernel was prepared for cards of {} cores, {} bytes of scratchpad "
                "at {} Hz; the output's card has {}, {} and {}",
                p->cfg.num_cores, p->cfg.lx_bytes, p->cfg.clock_hz, cfg.num_cores, cfg.lx_bytes,
                cfg.clock_hz);
        launch_fused(c, p->plan, stream, ts);
    });
}

spyre_status spyre_fused_kernel_destroy(spyre_fused_kernel_t kernel) {
    return guard(__func__, [&] { remove_fused_kernel_handle(kernel); });
}

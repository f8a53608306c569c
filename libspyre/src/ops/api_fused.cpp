// SPDX-License-Identifier: MIT
// C API of fused pointwise kernels (spyre_op_fused): a kernel description compiled to one
// program by ops/fused_program.hpp, planned and cached per description, n and card.
#include <mutex>
#include <unordered_map>

#include "ops/api_common.hpp"
#include "ops/fused_program.hpp"
#include "ops/pricing.hpp"

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

}  // namespace

spyre_status spyre_op_fused(spyre_stream_t stream, const char* kernel, uint64_t n,
                            const spyre_tensor* inputs, uint32_t num_inputs,
                            const spyre_tensor* outputs, uint32_t num_outputs) {
    return guard(__func__, [&] {
        begin_op("fused");
        require(kernel != nullptr, "fused: `kernel` is NULL");
        require(num_inputs == 0 || inputs, "fused: `inputs` is NULL");
        require(outputs && num_outputs, "fused: no outputs");
        const auto kp = parsed(kernel);
        const FusedKernel& k = *kp;
        require(k.inputs.size() == num_inputs && k.outputs.size() == num_outputs,
                "fused: the kernel has {} inputs and {} outputs, {} and {} were given",
                k.inputs.size(), k.outputs.size(), num_inputs, num_outputs);
        std::vector<Tensor> ts;
        ts.reserve(num_inputs + num_outputs);
        for (uint32_t i = 0; i < num_inputs; ++i) ts.push_back(check_tensor(&inputs[i], "input"));
        for (uint32_t j = 0; j < num_outputs; ++j)
            ts.push_back(check_tensor(&outputs[j], "output"));
        if (k.cols && n % k.cols)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("fused: n = {} is not a whole number of rows of {}", n, k.cols));
        if (!fused_views_fit(k, n))
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("fused: a view of the kernel is not of n = {} positions", n));
        for (uint32_t i = 0; i < ts.size(); ++i) {
            const Tensor& t = ts[i];
            const bool out = i >= num_inputs;
            const FkKind kind =
                out ? (i - num_inputs < k.out_kinds.size() ? k.out_kinds[i - num_inputs]
                                                           : FkKind::FULL)
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
        const Card c = card_of(ts[num_inputs].buffer);
        for (const Tensor& t : ts) require_same_card(c, {&t}, "fused");
        if (n == 0) return;
        const spyre_engine_config cfg = engine_config_of(c.info);
        PlanKey key("fused", cfg);
        key.add(n);
        auto plan = cached_plan(key.str() + kernel, [&] {
            const Pricer pricer(cfg);
            // rows that do not fit a core's scratchpad run as long rows (column chunks on
            // every core); rows that cannot (their rows do not start on sticks) are refused:
            // the caller runs its eager form
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
        std::vector<uint64_t> args;
        std::vector<spyre_buffer_t> bufs;
        for (const Tensor& t : ts) args.push_back(t.addr), bufs.push_back(t.buffer);
        launch(c, plan, stream, args, bufs);
        finish_info(c, *plan);
    });
}

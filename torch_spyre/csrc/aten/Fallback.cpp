#include "Fallback.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>

namespace torch_spyre::aten {
namespace {

std::mutex g_mu;
std::map<std::string, uint64_t> g_counts;
std::set<std::string> g_warned;

bool is_spyre(const at::Tensor& t) { return t.defined() && t.is_privateuseone(); }

// The spyre device the operator's results go to, and the check that all spyre arguments
// share it.
struct Target {
    std::optional<c10::Device> device;
    const c10::OperatorName& op;

    void see(const c10::Device& d) {
        if (!device) {
            device = d;
            return;
        }
        TORCH_CHECK(*device == d,
                    "Expected all tensors to be on the same device, but found at least two "
                    "devices, ",
                    *device, " and ", d, "! (running ", op, " on the CPU fallback)");
    }
};

// A spyre tensor argument and its CPU stand-in.
struct Moved {
    size_t arg;
    at::Tensor spyre;
    at::Tensor cpu;
};

at::Tensor host_copy(const at::Tensor& t, bool write_only) {
    // An out= argument is only written: an empty CPU tensor of its layout will do.
    if (write_only)
        return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
    return t.to(at::kCPU);
}

// Writes the CPU result of a mutated argument back into its spyre tensor.
void write_back(const at::Tensor& spyre, const at::Tensor& cpu) {
    if (!spyre.sizes().equals(cpu.sizes())) spyre.resize_(cpu.sizes());  // out= resized
    spyre.copy_(cpu);
}

}  // namespace

bool strict_mode() {
    const char* v = std::getenv("TORCH_SPYRE_STRICT");
    return v && *v && std::strcmp(v, "0") != 0;
}

void note_cpu_work(const std::string& what) {
    TORCH_CHECK_NOT_IMPLEMENTED(!strict_mode(), "torch_spyre: ", what,
                                " has no spyre kernel, and TORCH_SPYRE_STRICT=1 forbids running "
                                "it on the CPU fallback");
    bool first = false;
    {
        std::lock_guard lock(g_mu);
        ++g_counts[what];
        first = g_warned.insert(what).second;
    }
    if (first)
        TORCH_WARN("torch_spyre: ", what,
                   " has no spyre kernel yet; it runs on the CPU (spyre inputs are copied to the "
                   "host and the results back). This warning is shown once per operator; "
                   "TORCH_SPYRE_STRICT=1 makes it an error.");
}

std::vector<std::pair<std::string, uint64_t>> fallback_counts() {
    std::lock_guard lock(g_mu);
    return {g_counts.begin(), g_counts.end()};
}

void reset_fallback_counts() {
    std::lock_guard lock(g_mu);
    g_counts.clear();
    g_warned.clear();
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    note_cpu_work(c10::toString(op.schema().operator_name()));
    run_on_cpu(op, stack);
}

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    const c10::FunctionSchema& schema = op.schema();
    const auto& args = schema.arguments();
    const auto& rets = schema.returns();

    // A view must share its input's storage: it cannot be computed on the host.
    for (const auto& r : rets) {
        const c10::AliasInfo* ai = r.alias_info();
        TORCH_CHECK_NOT_IMPLEMENTED(
            ai == nullptr || ai->isWrite(), "torch_spyre: ", schema.operator_name(),
            " is a view operator without a spyre kernel; views cannot run on the CPU fallback "
            "(they must share the spyre tensor's storage). Implement it in csrc/aten/Views.cpp.");
    }

    Target target{std::nullopt, schema.operator_name()};
    std::vector<Moved> tensors;                                     // plain Tensor arguments
    std::vector<std::pair<size_t, c10::List<at::Tensor>>> lists;    // Tensor[] (originals)
    std::vector<std::pair<size_t, c10::List<std::optional<at::Tensor>>>> opt_lists;

    const size_t begin = stack->size() - args.size();
    for (size_t i = 0; i < args.size(); ++i) {
        c10::IValue& v = (*stack)[begin + i];
        const bool write_only = args[i].is_out();
        if (v.isTensor()) {
            const at::Tensor& t = v.toTensor();
            if (!is_spyre(t)) continue;
            target.see(t.device());
            at::Tensor cpu = host_copy(t, write_only);
            tensors.push_back({i, t, cpu});
            v = c10::IValue(cpu);
        } else if (v.isTensorList()) {
            c10::List<at::Tensor> orig = v.toTensorList();
            c10::List<at::Tensor> cpu;
            cpu.reserve(orig.size());
            for (const at::Tensor& t : orig) {
                if (is_spyre(t)) target.see(t.device());
                cpu.push_back(is_spyre(t) ? host_copy(t, write_only) : t);
            }
            lists.emplace_back(i, orig);
            v = c10::IValue(cpu);
        } else if (v.isOptionalTensorList()) {
            c10::List<std::optional<at::Tensor>> orig = v.toOptionalTensorList();
            c10::List<std::optional<at::Tensor>> cpu;
            cpu.reserve(orig.size());
            for (const std::optional<at::Tensor>& t : orig) {
                if (t && is_spyre(*t)) {
                    target.see(t->device());
                    cpu.push_back(host_copy(*t, write_only));
                } else {
                    cpu.push_back(t);
                }
            }
            opt_lists.emplace_back(i, orig);
            v = c10::IValue(cpu);
        } else if (v.isDevice() && v.toDevice().is_privateuseone()) {
            target.see(v.toDevice());  // factory functions: device=spyre
            v = c10::IValue(c10::Device(at::kCPU));
        }
    }
    // Keep the CPU stand-ins of the lists (the stack's copies are consumed by the call).
    std::vector<std::vector<at::Tensor>> cpu_lists;
    for (auto& [i, orig] : lists) cpu_lists.push_back((*stack)[begin + i].toTensorVector());
    std::vector<c10::List<std::optional<at::Tensor>>> cpu_opt_lists;
    for (auto& [i, orig] : opt_lists)
        cpu_opt_lists.push_back((*stack)[begin + i].toOptionalTensorList());

    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

    // Mutated arguments: write the host results back into the spyre tensors (views included).
    auto written = [&](size_t i) {
        const c10::AliasInfo* ai = args[i].alias_info();
        return ai != nullptr && ai->isWrite();
    };
    for (const Moved& m : tensors)
        if (written(m.arg)) write_back(m.spyre, m.cpu);
    for (size_t k = 0; k < lists.size(); ++k) {
        if (!written(lists[k].first)) continue;
        for (size_t j = 0; j < lists[k].second.size(); ++j) {
            const at::Tensor& t = lists[k].second.get(j);
            if (is_spyre(t)) write_back(t, cpu_lists[k][j]);
        }
    }
    for (size_t k = 0; k < opt_lists.size(); ++k) {
        if (!written(opt_lists[k].first)) continue;
        for (size_t j = 0; j < opt_lists[k].second.size(); ++j) {
            const std::optional<at::Tensor> t = opt_lists[k].second.get(j);
            const std::optional<at::Tensor> c = cpu_opt_lists[k].get(j);
            if (t && is_spyre(*t) && c) write_back(*t, *c);
        }
    }

    // Results: a mutable alias of an argument returns the original spyre argument; anything
    // else new goes to the target device.
    const size_t rbegin = stack->size() - rets.size();
    for (size_t r = 0; r < rets.size(); ++r) {
        c10::IValue& v = (*stack)[rbegin + r];
        const c10::AliasInfo* ai = rets[r].alias_info();
        if (ai != nullptr) {
            std::optional<c10::IValue> orig;
            for (const Moved& m : tensors)
                if (args[m.arg].alias_info() && *args[m.arg].alias_info() == *ai)
                    orig = c10::IValue(m.spyre);
            for (auto& [i, list] : lists)
                if (args[i].alias_info() && *args[i].alias_info() == *ai) orig = c10::IValue(list);
            // An alias of an argument that was not on spyre is already right.
            if (orig) v = *orig;
            continue;
        }
        if (!target.device) continue;
        if (v.isTensor()) {
            const at::Tensor& t = v.toTensor();
            if (t.defined() && t.device().is_cpu()) v = c10::IValue(t.to(*target.device));
        } else if (v.isTensorList()) {
            c10::List<at::Tensor> out;
            for (const at::Tensor& t : v.toTensorList())
                out.push_back(t.defined() && t.device().is_cpu() ? t.to(*target.device) : t);
            v = c10::IValue(out);
        }
    }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
    m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace torch_spyre::aten

#include "Fallback.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

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

// A spyre tensor among the arguments (plain, or element `elem` of a list) and its CPU
// stand-in.
struct Ref {
    size_t arg;
    int64_t elem;  // -1: a plain Tensor argument
    at::Tensor spyre;
    bool write_only;  // an out= argument: its contents are not read
    at::Tensor cpu;
};

// Elements from a tensor's first element to its last (strides are never negative).
int64_t span_elems(const at::Tensor& t) {
    int64_t n = 1;
    for (int64_t i = 0; i < t.dim(); ++i) n += (t.size(i) - 1) * t.stride(i);
    return n;
}

void host_copy(Ref& r) {
    const at::Tensor& t = r.spyre;
    // An out= argument is only written: an empty CPU tensor of its layout will do.
    r.cpu = r.write_only ? at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU))
                         : t.to(at::kCPU);
}

// Arguments that share one spyre storage (x.add_(x), a view and its base, out= into an
// argument) get CPU views of one host copy of the bytes they span, so the CPU kernel sees the
// same aliasing (and raises the same overlap errors) as it would on CPU tensors.
void host_alias_group(std::vector<Ref>& refs, const std::vector<size_t>& group) {
    int64_t lo = INT64_MAX, hi = 0;
    for (size_t k : group) {
        const at::Tensor& t = refs[k].spyre;
        if (t.is_conj() || t.is_neg()) {  // math bits: copies of their own
            for (size_t j : group) host_copy(refs[j]);
            return;
        }
        if (t.numel() == 0) continue;
        const int64_t b0 = t.storage_offset() * t.element_size();
        lo = std::min(lo, b0);
        hi = std::max(hi, b0 + span_elems(t) * t.element_size());
    }
    if (lo >= hi) {  // all empty
        for (size_t k : group) host_copy(refs[k]);
        return;
    }
    const at::Tensor& first = refs[group[0]].spyre;
    const c10::Storage storage = first.storage();
    lo = lo / 16 * 16;  // keeps every member's offset a multiple of its element size
    hi = std::min<int64_t>((hi + 15) / 16 * 16, static_cast<int64_t>(storage.nbytes()));
    at::Tensor bytes = at::empty({0}, first.options().dtype(at::kByte));
    bytes.set_(storage, lo, {hi - lo}, {1});
    const at::Tensor host = bytes.to(at::kCPU);
    for (size_t k : group) {
        const at::Tensor& t = refs[k].spyre;
        const auto opts = t.options().device(at::kCPU);
        if (t.numel() == 0) {
            refs[k].cpu = at::empty_strided(t.sizes(), t.strides(), opts);
            continue;
        }
        const int64_t offset = (t.storage_offset() * t.element_size() - lo) / t.element_size();
        refs[k].cpu = at::empty({0}, opts).set_(host.storage(), offset, t.sizes(), t.strides());
    }
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
    // TORCH_WARN (not verbatim): Python reports the warning at the user's line.
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
    const std::string name = c10::toString(op.schema().operator_name());
    note_cpu_work(name);
    // A range of its own in torch.profiler, around the copies and the CPU kernel.
    at::RecordFunction range(at::RecordScope::USER_SCOPE);
    if (range.isActive()) range.before("spyre::cpu_fallback " + name);
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
    std::vector<Ref> refs;
    std::map<size_t, c10::IValue> lists;  // list arguments as the caller passed them
    const size_t begin = stack->size() - args.size();
    for (size_t i = 0; i < args.size(); ++i) {
        c10::IValue& v = (*stack)[begin + i];
        const bool write_only = args[i].is_out();
        auto see = [&](const at::Tensor& t, int64_t elem) {
            if (!is_spyre(t)) return;
            target.see(t.device());
            refs.push_back({i, elem, t, write_only, {}});
        };
        if (v.isTensor()) {
            see(v.toTensor(), -1);
        } else if (v.isTensorList()) {
            lists[i] = v;
            const c10::List<at::Tensor> l = v.toTensorList();
            for (size_t j = 0; j < l.size(); ++j) see(l.get(j), static_cast<int64_t>(j));
        } else if (v.isOptionalTensorList()) {
            lists[i] = v;
            const c10::List<std::optional<at::Tensor>> l = v.toOptionalTensorList();
            for (size_t j = 0; j < l.size(); ++j) {
                const std::optional<at::Tensor> t = l.get(j);
                if (t) see(*t, static_cast<int64_t>(j));
            }
        } else if (v.isDevice() && v.toDevice().is_privateuseone()) {
            target.see(v.toDevice());  // factory functions: device=spyre
            v = c10::IValue(c10::Device(at::kCPU));
        }
    }

    // Host copies: one per tensor, or one per storage shared by several arguments.
    std::map<const c10::StorageImpl*, std::vector<size_t>> by_storage;
    for (size_t k = 0; k < refs.size(); ++k)
        by_storage[refs[k].spyre.storage().unsafeGetStorageImpl()].push_back(k);
    for (const auto& [storage, group] : by_storage) {
        if (group.size() == 1)
            host_copy(refs[group[0]]);
        else
            host_alias_group(refs, group);
    }

    // The CPU stand-ins go onto the stack (lists are copied: the caller's lists stay).
    std::map<size_t, c10::IValue> cpu_lists;
    for (const auto& [i, l] : lists)
        cpu_lists[i] = l.isTensorList() ? c10::IValue(l.toTensorList().copy())
                                        : c10::IValue(l.toOptionalTensorList().copy());
    for (const Ref& r : refs) {
        if (r.elem < 0) {
            (*stack)[begin + r.arg] = c10::IValue(r.cpu);
        } else if (cpu_lists[r.arg].isTensorList()) {
            cpu_lists[r.arg].toTensorList().set(static_cast<size_t>(r.elem), r.cpu);
        } else {
            cpu_lists[r.arg].toOptionalTensorList().set(static_cast<size_t>(r.elem), r.cpu);
        }
    }
    for (auto& [i, l] : cpu_lists) (*stack)[begin + i] = l;

    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

    // Mutated arguments: write the host results back into the spyre tensors (views included).
    for (const Ref& r : refs) {
        const c10::AliasInfo* ai = args[r.arg].alias_info();
        if (ai != nullptr && ai->isWrite()) write_back(r.spyre, r.cpu);
    }

    // Results: a mutable alias of an argument returns the original spyre argument; anything
    // else new goes to the target device.
    const size_t rbegin = stack->size() - rets.size();
    for (size_t r = 0; r < rets.size(); ++r) {
        c10::IValue& v = (*stack)[rbegin + r];
        const c10::AliasInfo* ai = rets[r].alias_info();
        if (ai != nullptr) {
            for (size_t i = 0; i < args.size(); ++i) {
                const c10::AliasInfo* arg_ai = args[i].alias_info();
                if (arg_ai == nullptr || !(*arg_ai == *ai)) continue;
                if (lists.count(i)) {
                    v = lists[i];
                } else {
                    for (const Ref& ref : refs)
                        if (ref.arg == i && ref.elem < 0) v = c10::IValue(ref.spyre);
                }
                break;  // an alias of an argument that was not on spyre is already right
            }
            continue;
        }
        if (!target.device) continue;
        if (v.isTensor()) {
            const at::Tensor& t = v.toTensor();
            if (t.defined() && t.device().is_cpu()) v = c10::IValue(t.to(*target.device));
        } else if (v.isTensorList()) {
            const c10::List<at::Tensor> in = v.toTensorList();
            c10::List<at::Tensor> out;
            for (size_t j = 0; j < in.size(); ++j) {
                const at::Tensor t = in.get(j);
                out.push_back(t.defined() && t.device().is_cpu() ? t.to(*target.device) : t);
            }
            v = c10::IValue(out);
        }
    }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
    m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace torch_spyre::aten

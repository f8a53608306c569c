// The CPU fallback: every aten operator without a spyre kernel runs on the CPU.
//
// Registered as the boxed fallback of the PrivateUse1 dispatch key (csrc/aten/Fallback.cpp), so
// a kernel registered for an operator (TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) in one file per
// op family under csrc/aten/) replaces it for that operator. The fallback copies the spyre
// tensor arguments to the host, runs the CPU kernel, copies mutated arguments (in-place `self`,
// `out=` tensors, including views of larger spyre tensors) back into their spyre tensors and
// moves new results to the arguments' spyre device. View operators cannot run this way (a view
// must share the spyre storage) and are an error; csrc/aten/Views.cpp implements them.
//
// Each operator warns once (a UserWarning naming it); TORCH_SPYRE_STRICT=1 (read at every call)
// makes running an operator on the CPU a NotImplementedError instead.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/CPUFallback.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch_spyre::aten {

// The boxed fallback: note_cpu_work(operator name), then run_on_cpu.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Runs `op` on the CPU for spyre arguments (the mechanics of the fallback, without the warning).
void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Every piece of CPU computation done for spyre tensors goes through here: counts it under
// `what` (e.g. "aten::add.Tensor"), warns the first time, throws under TORCH_SPYRE_STRICT=1.
void note_cpu_work(const std::string& what);
bool strict_mode();

// How often each operator ran on the CPU since the start (or the last reset), sorted by name.
std::vector<std::pair<std::string, uint64_t>> fallback_counts();
// Clears the counts and the set of operators already warned about.
void reset_fallback_counts();

// For a spyre kernel that does not handle a case (a dtype, a layout) itself:
//   return fallback_to_cpu<ATEN_OP2(fill_, Scalar)>(self, value);
// runs the operator through the CPU fallback (with its warning and strict-mode check).
template <class Op, class... Args>
decltype(auto) fallback_to_cpu(Args&&... args) {
    return at::native::call_fallback_fn<&cpu_fallback, Op>::call(std::forward<Args>(args)...);
}

}  // namespace torch_spyre::aten

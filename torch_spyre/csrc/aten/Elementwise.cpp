#include "Elementwise.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>

#include "OpLibrary.h"

namespace torch_spyre::aten {

// An operand as the library loads it: dense in its own shape; a full-size one also starts on
// a stick (broadcast operands may start anywhere).
std::optional<at::Tensor> loadable(const at::Tensor& t, const at::Tensor& out, const char* name) {
    if (t.is_contiguous() && (t.numel() != out.numel() || is_stick_dense(t))) return t;
    return stick_dense(t, name);
}

// Every operand expanded to out's shape and made dense on the card: the broadcasts the
// library does not take natively.
std::optional<at::Tensor> expanded(const at::Tensor& t, const at::Tensor& out, const char* name) {
    if (t.sizes() == out.sizes()) return loadable(t, out, name);
    return stick_dense(t.expand(out.sizes()), name);
}

std::optional<double> real_number(const at::Scalar& s) {
    if (s.isComplex()) return std::nullopt;
    return s.toDouble();
}

std::optional<Operand> as_operand(const at::Tensor& t) {
    if (!t.is_privateuseone()) {
        if (t.dim() != 0 || !t.device().is_cpu() || t.is_complex()) return std::nullopt;
        return Operand{at::Tensor(), t.item<double>()};
    }
    if (!is_float(t.scalar_type())) return std::nullopt;
    return Operand{t, 0.0};
}

at::Tensor operand_tensor(const Operand& o, const at::Tensor& like) {
    if (!o.is_number()) return o.tensor;
    return at::full({}, o.number, like.options().dtype(at::kFloat));
}

bool binary_into(const char* name, spyre_binary_op op, const at::Tensor& a, const Operand& b,
                 double alpha, const at::Tensor& out) {
    c10::DeviceGuard guard(out.device());
    if (out.numel() == 0) return true;
    const Operand oa{a, 0.0};
    return with_operands(name, out, {&oa, &b}, [&](const auto& ts, const at::Tensor& w) {
        const spyre_tensor ta = op_tensor(*ts[0]), to = op_tensor(w);
        spyre_tensor tb{};
        if (ts[1]) tb = op_tensor(*ts[1]);
        return op_ran(name, spyre_op_binary(op_stream(w), op, &ta, ts[1] ? &tb : nullptr, b.number,
                                            alpha, &to));
    });
}

bool binary_out(const char* name, spyre_binary_op op, const at::Tensor& self,
                const at::Tensor& other, double alpha, const at::Tensor& out) {
    if (!out.is_privateuseone()) return false;
    const at::ScalarType type = at::result_type(self, other);
    if (!is_float(type) || out.scalar_type() != type) return false;
    // an integer or bool spyre operand of a float result (`int_tensor * 0.5`, true division of
    // integers) is converted on the card first, as torch computes in the result type
    auto promoted = [&](const at::Tensor& t) {
        if (t.is_privateuseone() && at::isIntegralType(t.scalar_type(), /*includeBool=*/true))
            return std::optional<Operand>(Operand{t.to(type), 0.0});
        return as_operand(t);
    };
    const auto a = promoted(self), b = promoted(other);
    if (!a || !b) return false;
    at::assert_no_internal_overlap(out);
    at::assert_no_partial_overlap(out, self);
    at::assert_no_partial_overlap(out, other);
    at::native::resize_output(out, at::infer_size(self.sizes(), other.sizes()));
    return binary_into(name, op, operand_tensor(*a, out), *b, alpha, out);
}

namespace {

// The library's calls of one tensor and two operands that may be numbers (where's a and b,
// clamp's bounds): (stream, first, b, b_number, c, c_number, out), NULL for a number.
using TernaryCall = spyre_status (*)(spyre_stream_t, const spyre_tensor*, const spyre_tensor*,
                                     double, const spyre_tensor*, double, const spyre_tensor*);

bool ternary_into(const char* name, TernaryCall call, const at::Tensor& first, const Operand& b,
                  const Operand& c, const at::Tensor& out) {
    c10::DeviceGuard guard(out.device());
    if (out.numel() == 0) return true;
    const Operand of{first, 0.0};
    return with_operands(name, out, {&of, &b, &c}, [&](const auto& ts, const at::Tensor& w) {
        const spyre_tensor tf = op_tensor(*ts[0]), to = op_tensor(w);
        spyre_tensor tb{}, tc{};
        if (ts[1]) tb = op_tensor(*ts[1]);
        if (ts[2]) tc = op_tensor(*ts[2]);
        return op_ran(name, call(op_stream(w), &tf, ts[1] ? &tb : nullptr, b.number,
                                 ts[2] ? &tc : nullptr, c.number, &to));
    });
}

}  // namespace

bool where_into(const char* name, const at::Tensor& cond, const Operand& a, const Operand& b,
                const at::Tensor& out) {
    if (!cond.is_privateuseone() || !op_dtype(cond.scalar_type()) ||
        cond.scalar_type() == at::kLong)
        return false;
    return ternary_into(name, spyre_op_where, cond, a, b, out);
}

bool clamp_into(const char* name, const at::Tensor& x, const Operand& lo, const Operand& hi,
                const at::Tensor& out) {
    return ternary_into(name, spyre_op_clamp, x, lo, hi, out);
}

}  // namespace torch_spyre::aten

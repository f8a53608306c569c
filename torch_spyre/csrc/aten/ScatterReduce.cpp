// Tensor.scatter_reduce on the card, composed as torch's CPU kernel computes it. "sum" and
// "mean": the base is self, or (include_self=False) self with every position the index reaches
// set to 0 (`untouched`: a scatter_add of ones); the values are added with scatter_add
// (spyre_op_scatter, duplicates summed in ascending order); "mean" divides by the count of
// values each position received (1 more with include_self, at least 1), in self's dtype
// (floor division for integers, as torch). "amax" and "amin" of floats: the values are sorted
// ascending along dim (stable, NaN largest; "amin" sorts the negated values) with their
// indices, and scattered without accumulation: the scatter applies a slab's positions in
// ascending order and a repeated target keeps the last write, which is the largest value (NaN
// if any, as torch propagates it); with include_self the result is maximum/minimum with self.
// Integers (int64, int32, int8, uint8: sorted by the radix of float sorts, aten/Sort.cpp) take
// the same path, "amin" sorting descending instead of negating (-INT_MIN wraps; integers have
// no NaN to keep last). "prod": the values are sorted by their target along dim (stable), a
// segmented inclusive product scan over each run of equal targets (log2(n) rounds of
// multiplying by the value 2^k places back where the target is the same: the targets are
// sorted, so equal there means one run) leaves each run's product at its last position, which
// the last-write scatter puts in a table of ones; include_self multiplies self by it, without
// it the touched positions take the products. Floats multiply in a tree order, not the CPU's
// sequential one (a rounding difference, not a different answer); integers wrap alike.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {

bool scatter_last_write(const char* name, const at::Tensor& table, int64_t d,
                        const at::Tensor& index, const at::Tensor& rows) {
    const auto i = stick_dense(index, name);
    const auto r = stick_dense(rows, name);
    if (!i || !r) return false;
    const spyre_tensor tt = op_tensor(table), ti = op_tensor(*i), tr = op_tensor(*r);
    return op_ran(name,
                  spyre_op_scatter(op_stream(table), &tt, static_cast<int32_t>(d), &ti, &tr, 0));
}

namespace {

// t narrowed to the index's extent in every dim but d.
at::Tensor corner_of(const at::Tensor& t, const at::Tensor& index, int64_t d) {
    at::Tensor c = t;
    for (int64_t k = 0; k < t.dim(); ++k)
        if (k != d && index.size(k) < t.size(k)) c = c.narrow(k, 0, index.size(k));
    return c;
}

// base.scatter_add(d, index, src) for an index smaller than base in the other dims too (the
// card's scatter_add takes only an index of base's extent there): the corner the index
// covers is scattered into, the rest of base copied.
at::Tensor scatter_add_corner(const at::Tensor& base, int64_t d, const at::Tensor& index,
                              const at::Tensor& src) {
    const at::Tensor corner = corner_of(base, index, d);
    if (corner.sizes() == base.sizes()) return base.scatter_add(d, index, src);
    at::Tensor out = base.clone();
    corner_of(out, index, d).copy_(corner.scatter_add(d, index, src));
    return out;
}

// "amax" or "amin" (floats: the amax of the negated values; integers: the values sorted
// descending); nothing if not taken.
std::optional<at::Tensor> scatter_extreme(const at::Tensor& self, int64_t d,
                                          const at::Tensor& index, const at::Tensor& src, bool amin,
                                          bool include_self) {
    if (index.numel() == 0) return self.clone();
    const bool negate = amin && is_float(self.scalar_type());
    at::Tensor v = src;
    for (int64_t k = 0; k < src.dim(); ++k)
        if (index.size(k) < src.size(k)) v = v.narrow(k, 0, index.size(k));
    if (negate) v = -v;
    const at::Tensor order = at::argsort(v, /*stable=*/true, d, /*descending=*/amin && !negate);
    const at::Tensor rows = v.gather(d, order), targets = index.gather(d, order);
    // a fresh dense copy: the scatter writes it in place (self must stay as it is)
    at::Tensor table =
        corner_of(negate ? -self : self, index, d).clone(at::MemoryFormat::Contiguous);
    if (!scatter_last_write("aten::scatter_reduce", table, d, targets, rows)) return std::nullopt;
    if (negate) table = -table;
    at::Tensor scat = self.clone();
    corner_of(scat, index, d).copy_(table);
    if (include_self) scat = amin ? at::minimum(self, scat) : at::maximum(self, scat);
    // the table started as self's corner: where no index points scat holds self already (the
    // floats' negation round trip keeps every bit too, but torch's where is kept for them; the
    // card's where takes float values only)
    if (!is_float(self.scalar_type())) return scat;
    const at::Tensor untouched =
        scatter_add_corner(at::zeros(self.sizes(), self.options().dtype(at::kInt)), d, index,
                           at::ones(index.sizes(), index.options().dtype(at::kInt)))
            .eq(0);
    return at::where(untouched, self, scat);
}

// The inclusive product of each run of equal keys along d (keys sorted along d).
at::Tensor segmented_prod(at::Tensor v, const at::Tensor& keys, int64_t d) {
    const int64_t n = v.size(d);
    for (int64_t k = 1; k < n; k *= 2) {
        const at::Tensor same = keys.narrow(d, k, n - k).eq(keys.narrow(d, 0, n - k));
        const at::Tensor head = v.narrow(d, k, n - k), back = v.narrow(d, 0, n - k);
        at::Tensor next = v.clone();
        if (is_float(v.scalar_type())) {
            next.narrow(d, k, n - k).copy_(at::where(same, head * back, head));
        } else {  // the card's where takes float values: a select by arithmetic
            const at::Tensor s = same.to(v.scalar_type());
            next.narrow(d, k, n - k).copy_(head * (back * s + (1 - s)));
        }
        v = next;
    }
    return v;
}

// "prod"; nothing if not taken.
std::optional<at::Tensor> scatter_prod(const at::Tensor& self, int64_t d, const at::Tensor& index,
                                       const at::Tensor& src, bool include_self) {
    if (index.numel() == 0) return self.clone();
    at::Tensor v = src;
    for (int64_t k = 0; k < src.dim(); ++k)
        if (index.size(k) < src.size(k)) v = v.narrow(k, 0, index.size(k));
    const at::Tensor order = at::argsort(index, /*stable=*/true, d, /*descending=*/false);
    const at::Tensor targets = index.gather(d, order);
    const at::Tensor rows = segmented_prod(v.gather(d, order), targets, d);
    at::Tensor table = at::ones(corner_of(self, index, d).sizes(), self.options());
    if (!scatter_last_write("aten::scatter_reduce", table, d, targets, rows)) return std::nullopt;
    at::Tensor products = at::ones_like(self);
    corner_of(products, index, d).copy_(table);
    if (include_self) return self * products;
    const at::Tensor untouched =
        scatter_add_corner(at::zeros(self.sizes(), self.options().dtype(at::kInt)), d, index,
                           at::ones(index.sizes(), index.options().dtype(at::kInt)))
            .eq(0);
    if (is_float(self.scalar_type())) return at::where(untouched, self, products);
    const at::Tensor u = untouched.to(self.scalar_type());
    return products * (self * u + (1 - u));
}

at::Tensor& scatter_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                               const at::Tensor& src, c10::string_view reduce, bool include_self,
                               at::Tensor& out) {
    const bool sum = reduce == "sum", mean = reduce == "mean";
    if ((sum || mean) && self.is_privateuseone() && index.is_privateuseone() &&
        src.is_privateuseone() && op_dtype(self.scalar_type()) && self.scalar_type() != at::kBool &&
        src.scalar_type() == self.scalar_type() && out.scalar_type() == self.scalar_type() &&
        self.dim() >= 1 && index.dim() == self.dim() && src.dim() == self.dim() &&
        (index.scalar_type() == at::kLong || index.scalar_type() == at::kInt)) {
        c10::DeviceGuard guard(self.device());
        const int64_t d = at::maybe_wrap_dim(dim, self.dim());
        at::Tensor base = self;
        if (!include_self && index.numel() > 0) {
            const at::Tensor untouched =
                scatter_add_corner(at::zeros(self.sizes(), self.options().dtype(at::kInt)), d,
                                   index, at::ones(index.sizes(), index.options().dtype(at::kInt)))
                    .eq(0);
            // floats: where (a NaN or inf of self must not survive as NaN); integers: a product
            base = at::isFloatingType(self.scalar_type())
                       ? at::where(untouched, self, at::zeros({}, self.options()))
                       : self * untouched;
        }
        at::Tensor result =
            index.numel() == 0 ? base.clone() : scatter_add_corner(base, d, index, src);
        if (mean && index.numel() > 0) {
            at::Tensor count = include_self ? at::ones_like(self) : at::zeros_like(self);
            count = scatter_add_corner(count, d, index, at::ones(index.sizes(), self.options()));
            if (at::isFloatingType(self.scalar_type())) {  // at least 1
                count = at::where(count.eq(0), at::ones({}, self.options()), count);
                result = result / count;
            } else {
                result = at::floor_divide(result, count + count.eq(0));
            }
        }
        at::native::resize_output(out, self.sizes());
        out.copy_(result);
        return out;
    }
    const bool extreme = reduce == "amax" || reduce == "amin", prod = reduce == "prod";
    const at::ScalarType t = self.scalar_type();
    const bool sortable =
        is_float(t) || t == at::kLong || t == at::kInt || t == at::kChar || t == at::kByte;
    if ((extreme || prod) && self.is_privateuseone() && index.is_privateuseone() &&
        src.is_privateuseone() && sortable && src.scalar_type() == self.scalar_type() &&
        out.scalar_type() == self.scalar_type() && self.dim() >= 1 && index.dim() == self.dim() &&
        src.dim() == self.dim() &&
        (index.scalar_type() == at::kLong || index.scalar_type() == at::kInt)) {
        c10::DeviceGuard guard(self.device());
        const int64_t d = at::maybe_wrap_dim(dim, self.dim());
        if (auto r = prod ? scatter_prod(self, d, index, src, include_self)
                          : scatter_extreme(self, d, index, src, reduce == "amin", include_self)) {
            at::native::resize_output(out, self.sizes());
            out.copy_(*r);
            return out;
        }
    }
    return fallback_to_cpu<ATEN_OP2(scatter_reduce, two_out)>(self, dim, index, src, reduce,
                                                              include_self, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("scatter_reduce.two_out", TORCH_FN(scatter_reduce_out));
}

}  // namespace torch_spyre::aten

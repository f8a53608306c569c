// kthvalue, median, nanmedian and mode along a dim on the card (values and int64 indices),
// composed of device ops over one stable sort of the rows (aten/Sort.cpp: fp32/fp16/bf16 with
// NaN largest; int64, int32, int8, uint8 exactly; bool for mode):
// - kthvalue: the k-th sorted element;
// - median: the lower middle, (n - 1) / 2, or the first NaN (sorted after the numbers) when the
//   row has one, as the CPU returns it;
// - nanmedian: the lower middle of the m non-NaN values, (m - 1) / 2, the first NaN (index 0
//   among them) when all are NaN;
// - mode: the longest run of equal sorted values, the smallest such value (the CPU's scan keeps
//   the first run that is strictly longer): each position's count of equal values before it in
//   its run, from a cummax of the run starts, and the first maximum (argmax);
// the position is found per row in fp32 (exact below 2^24 elements) and the value and index
// read there. Values are the CPU's exactly. Indices: among equal values the stable sort keeps
// the original order, so kthvalue and median give the k-th (the middle) occurrence in that
// order and mode the last occurrence of its value; the CPU's index among ties comes from
// nth_element (median, kthvalue) or an unstable sort (mode) and may be another one holding an
// equal value (a NaN in a mode row makes the CPU's answer unspecified; on the card every NaN is
// its own value). Empty rows, k out of range (the CPU's errors) and other dtypes run on the CPU
// fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/WrapDimUtils.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "Composed.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// self's rows along dim, sorted stably, and where the results go.
struct SortedRows {
    at::Tensor values, order;  // [..., n]
    int64_t n = 0, d = 0;
    bool scalar = false;  // a 0-d self: 0-d results
};

bool sortable(at::ScalarType t, bool with_bool) {
    return is_float(t) || t == at::kLong || t == at::kInt || t == at::kChar || t == at::kByte ||
           (with_bool && t == at::kBool);
}

std::optional<SortedRows> sorted_rows(const at::Tensor& self, int64_t dim, bool with_bool) {
    if (!self.is_privateuseone() || !sortable(self.scalar_type(), with_bool) ||
        self.dim() > SPYRE_TENSOR_MAX_DIMS)
        return std::nullopt;
    const at::Tensor x = self.dim() ? self : self.view({1});
    const int64_t d = at::maybe_wrap_dim(dim, x.dim());
    const int64_t n = x.size(d);
    if (n == 0 || n >= (int64_t{1} << 24)) return std::nullopt;
    SortedRows r;
    r.n = n;
    r.d = d;
    r.scalar = self.dim() == 0;
    std::tie(r.values, r.order) = at::sort(x.movedim(d, -1), /*stable=*/true, -1, false);
    return r;
}

// The element of every row at position pos ([...] float, integral), values and indices, shaped
// as torch's results (the dim kept as 1 or dropped).
std::tuple<at::Tensor, at::Tensor> pick(const SortedRows& r, const at::Tensor& pos, bool keepdim) {
    const at::Tensor lead_pos = pos.to(at::kLong).reshape({-1});
    const int64_t rows = lead_pos.size(0);
    const at::Tensor flat = at::arange(rows, lead_pos.options()) * r.n + lead_pos;
    at::Tensor v = at::index_select(r.values.reshape({-1}), 0, flat).view(pos.sizes());
    at::Tensor i = at::index_select(r.order.reshape({-1}), 0, flat).view(pos.sizes());
    if (r.scalar) return {v.reshape({}), i.reshape({})};
    if (keepdim) {
        v = v.unsqueeze(r.d);
        i = i.unsqueeze(r.d);
    }
    return {v, i};
}

std::tuple<at::Tensor, at::Tensor> pick_at(const SortedRows& r, int64_t k, bool keepdim) {
    const auto lead = r.values.sizes().slice(0, r.values.dim() - 1);
    return pick(r, at::full(lead, static_cast<double>(k), r.values.options().dtype(at::kFloat)),
                keepdim);
}

// The number of NaN in every row, as fp32 (0 for other dtypes).
at::Tensor nan_count(const SortedRows& r) { return at::isnan(r.values).to(at::kFloat).sum(-1); }

std::tuple<at::Tensor&, at::Tensor&> assign_both(at::Tensor& values, at::Tensor& indices,
                                                 const std::tuple<at::Tensor, at::Tensor>& r) {
    assign(values, std::get<0>(r));
    assign(indices, std::get<1>(r));
    return {values, indices};
}

bool outs_fit(const at::Tensor& self, const at::Tensor& values, const at::Tensor& indices) {
    return values.is_privateuseone() && indices.is_privateuseone() &&
           values.scalar_type() == self.scalar_type() && indices.scalar_type() == at::kLong;
}

std::tuple<at::Tensor&, at::Tensor&> kthvalue_values(const at::Tensor& self, int64_t k, int64_t dim,
                                                     bool keepdim, at::Tensor& values,
                                                     at::Tensor& indices) {
    if (outs_fit(self, values, indices)) {
        c10::DeviceGuard guard(self.device());
        const int64_t n = self.dim() ? self.size(at::maybe_wrap_dim(dim, self.dim())) : 1;
        if (k >= 1 && k <= n)
            if (const auto r = sorted_rows(self, dim, false))
                return assign_both(values, indices, pick_at(*r, k - 1, keepdim));
    }
    return fallback_to_cpu<ATEN_OP2(kthvalue, values)>(self, k, dim, keepdim, values, indices);
}

std::tuple<at::Tensor&, at::Tensor&> median_dim_values(const at::Tensor& self, int64_t dim,
                                                       bool keepdim, at::Tensor& values,
                                                       at::Tensor& indices) {
    if (outs_fit(self, values, indices)) {
        c10::DeviceGuard guard(self.device());
        if (const auto r = sorted_rows(self, dim, false)) {
            const int64_t middle = (r->n - 1) / 2;
            if (!is_float(self.scalar_type()))
                return assign_both(values, indices, pick_at(*r, middle, keepdim));
            // the first NaN (sorted last, in index order) when the row has one
            const at::Tensor nans = nan_count(*r);
            const at::Tensor pos = at::where(at::gt(nans, 0), nans.neg().add(r->n), middle);
            return assign_both(values, indices, pick(*r, pos, keepdim));
        }
    }
    return fallback_to_cpu<ATEN_OP2(median, dim_values)>(self, dim, keepdim, values, indices);
}

std::tuple<at::Tensor&, at::Tensor&> nanmedian_dim_values(const at::Tensor& self, int64_t dim,
                                                          bool keepdim, at::Tensor& values,
                                                          at::Tensor& indices) {
    if (outs_fit(self, values, indices)) {
        c10::DeviceGuard guard(self.device());
        if (const auto r = sorted_rows(self, dim, false)) {
            if (!is_float(self.scalar_type()))
                return assign_both(values, indices, pick_at(*r, (r->n - 1) / 2, keepdim));
            const at::Tensor m = nan_count(*r).neg().add(r->n);  // the numbers of every row
            const at::Tensor pos = at::where(at::gt(m, 0), at::floor(m.sub(1).mul(0.5)), 0);
            return assign_both(values, indices, pick(*r, pos, keepdim));
        }
    }
    return fallback_to_cpu<ATEN_OP2(nanmedian, dim_values)>(self, dim, keepdim, values, indices);
}

std::tuple<at::Tensor, at::Tensor> mode(const at::Tensor& self, int64_t dim, bool keepdim) {
    if (self.is_privateuseone()) {
        c10::DeviceGuard guard(self.device());
        if (const auto r = sorted_rows(self, dim, true)) {
            const at::Tensor& s = r->values;
            const int64_t n = r->n;
            // a run starts where the sorted value differs from the one before
            at::Tensor starts = at::ones(s.sizes(), s.options().dtype(at::kBool));
            if (n > 1)
                starts.narrow(-1, 1, n - 1)
                    .copy_(at::ne(s.narrow(-1, 1, n - 1), s.narrow(-1, 0, n - 1)));
            const at::Tensor position = at::arange(n, s.options().dtype(at::kFloat));
            const at::Tensor run_start =
                std::get<0>(at::cummax(at::where(starts, position, 0), -1));
            const at::Tensor count = position - run_start;  // equal values before, in the run
            return pick(*r, at::argmax(count, -1), keepdim);
        }
    }
    return fallback_to_cpu<ATEN_OP(mode)>(self, dim, keepdim);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("kthvalue.values", TORCH_FN(kthvalue_values));
    m.impl("median.dim_values", TORCH_FN(median_dim_values));
    m.impl("nanmedian.dim_values", TORCH_FN(nanmedian_dim_values));
    m.impl("mode", TORCH_FN(mode));
}

}  // namespace torch_spyre::aten

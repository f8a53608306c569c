// sort (argsort, msort) and topk on the card (spyre_op_sort): fp32/fp16/bf16 rows in the stable
// order with NaN largest, int64 indices. The library sorts along the last dim, so another dim is
// moved last by a dense copy on the card and the results moved back the same way. Integer and
// bool keys (int64, int32, int8, uint8, bool; the library sorts floats) are an LSD radix sort of
// stable float sorts: the key split into 22-bit digits (each exact in fp32; the top one signed),
// sorted by the least significant digit first, each later digit gathered in the order so far and
// sorted stably, so equal keys keep their index order (the stable order, ascending or descending).
// Rows too long for one sort program (about 32768 elements) sort in blocks (long_sort); other
// dtypes and k out of range (the CPU's error) run on the CPU fallback. The stable order is also a
// valid answer of the unstable sort and of topk (which leave the order of ties open).
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// What both sorts share: self's rows along dim and that dim (a 0-d self as one row), with values
// and indices resized to k along it; nullopt when not taken (devices, dtypes, k). key_ok says
// whether self's type is one the caller sorts.
struct SortRows {
    at::Tensor x;  // self, at least 1-d
    int64_t d;     // the sorted dim of x
};
std::optional<SortRows> sort_rows(const at::Tensor& self, bool key_ok, int64_t dim, int64_t k,
                                  at::Tensor& values, at::Tensor& indices) {
    if (!self.is_privateuseone() || !values.is_privateuseone() || !indices.is_privateuseone() ||
        !key_ok || values.scalar_type() != self.scalar_type() ||
        indices.scalar_type() != at::kLong || self.dim() > SPYRE_TENSOR_MAX_DIMS)
        return std::nullopt;
    const at::Tensor x = self.dim() ? self : self.view({1});
    const int64_t d = at::maybe_wrap_dim(dim, x.dim());
    if (k < 0 || k > x.size(d)) return std::nullopt;
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape[d] = k;
    at::native::resize_output(values, self.dim() ? at::IntArrayRef(shape) : self.sizes());
    at::native::resize_output(indices, self.dim() ? at::IntArrayRef(shape) : self.sizes());
    return SortRows{x, d};
}

// The library's sort of dense rows x [M, L] (L within what one program takes): the first k of
// each row's stable order, values and int64 indices; nullopt if it refuses.
std::optional<std::pair<at::Tensor, at::Tensor>> card_sort(const char* name, const at::Tensor& x,
                                                           int64_t k, bool descending) {
    const at::Tensor xd = x.is_contiguous() ? x : x.contiguous();
    at::Tensor v = at::empty({x.size(0), k}, x.options());
    at::Tensor i = at::empty({x.size(0), k}, x.options().dtype(at::kLong));
    const spyre_tensor tx = op_tensor(xd), tv = op_tensor(v), ti = op_tensor(i);
    if (!op_ran(name, spyre_op_sort(op_stream(v), &tx, -1, descending ? SPYRE_SORT_DESCENDING : 0,
                                    &tv, &ti)))
        return std::nullopt;
    return std::pair{v, i};
}

// Rows longer than one sort program takes (about 32768 elements) in blocks of kBlock elements
// (kTopBlock for the candidates)
// (the row padded to whole blocks with a value that sorts after every element: -inf descending,
// NaN ascending, and after the real ones of equal value by position, so never among the first k):
// - a small k (every block's first k fit one program): each block's first k, then the first k
//   of those candidates (in block order, so equal values stay in position order);
// - else a merge-split sort (Baudet and Stevenson): every block sorted, then one round per block,
//   alternately sorting the pairs of blocks (0, 1), (2, 3), ... and (1, 2), (3, 4), ...; each
//   pair sort is stable, so equal values keep their position order throughout.
// x dense [R, n]; the first k values and their int64 positions; nullopt if not taken.
constexpr int64_t kBlock = 8192, kTopBlock = 4096;
constexpr int64_t kMaxBlocks = 512;

std::optional<std::pair<at::Tensor, at::Tensor>> long_sort(const char* name, const at::Tensor& x,
                                                           int64_t k, bool descending) {
    const int64_t R = x.size(0), n = x.size(1);
    // the candidates' blocks are smaller: the library's top-k of a row takes less than its sort;
    // a block's candidates are whole sticks (else the library's chunks hold several rows)
    const int64_t per_stick = 128 / static_cast<int64_t>(x.element_size());
    const int64_t kc = (k + per_stick - 1) / per_stick * per_stick;
    const bool candidates = kc <= kTopBlock && ((n + kTopBlock - 1) / kTopBlock) * kc <= kBlock;
    const int64_t block = candidates ? kTopBlock : kBlock, C = (n + block - 1) / block;
    if (C > kMaxBlocks) return std::nullopt;
    at::Tensor v = at::empty({R, C * block}, x.options());
    v.narrow(1, 0, n).copy_(x);
    if (C * block > n)
        v.narrow(1, n, C * block - n)
            .fill_(descending ? -std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN());
    const at::Tensor starts = at::arange(C, x.options().dtype(at::kLong)).mul_(block);
    auto sorted_blocks =
        card_sort(name, v.view({R * C, block}), candidates ? kc : block, descending);
    if (!sorted_blocks) return std::nullopt;
    auto [bv, bi] = *sorted_blocks;
    const int64_t kb = bv.size(1);
    // positions in the row: a block's first position plus the position in the block
    at::Tensor pos = bi.view({R, C, kb}).add_(starts.view({1, C, 1})).view({R, C * kb});
    if (candidates) {  // the first k of the blocks' first k
        auto best = card_sort(name, bv.view({R, C * kb}), k, descending);
        if (!best) return std::nullopt;
        return std::pair{best->first, pos.gather(1, best->second)};
    }
    v = bv.view({R, C * block});
    for (int64_t round = 0; round < C; ++round) {
        const int64_t first = round % 2 ? block : 0, pairs = (C * block - first) / (2 * block);
        if (pairs == 0) continue;
        const at::Tensor vs = v.narrow(1, first, pairs * 2 * block);
        const at::Tensor ps = pos.narrow(1, first, pairs * 2 * block);
        auto merged = card_sort(name, vs.reshape({R * pairs, 2 * block}), 2 * block, descending);
        if (!merged) return std::nullopt;
        const at::Tensor moved = ps.reshape({R * pairs, 2 * block}).gather(1, merged->second);
        vs.copy_(merged->first.view({R, pairs * 2 * block}));
        ps.copy_(moved.view({R, pairs * 2 * block}));
    }
    return std::pair{v.narrow(1, 0, k), pos.narrow(1, 0, k)};
}

// values, indices = the first k of self's rows along dim in the stable order; false: not taken.
bool sort_into(const char* name, const at::Tensor& self, int64_t dim, int64_t k, bool descending,
               at::Tensor& values, at::Tensor& indices) {
    c10::DeviceGuard guard(self.device());
    const auto rows = sort_rows(self, is_float(self.scalar_type()), dim, k, values, indices);
    if (!rows) return false;
    if (values.numel() == 0) return true;
    const auto& [x, d] = *rows;
    const bool last = d == x.dim() - 1;
    const auto xd = stick_dense(last ? x : x.movedim(d, -1), name);
    if (!xd) return false;
    std::vector<int64_t> lshape(xd->sizes().begin(), xd->sizes().end());
    lshape.back() = k;
    const at::Tensor v = values.dim() ? values : values.view({1});
    const at::Tensor i = indices.dim() ? indices : indices.view({1});
    const at::Tensor wv = last ? writable_output(v) : at::empty(lshape, values.options());
    const at::Tensor wi = last ? writable_output(i) : at::empty(lshape, indices.options());
    const spyre_tensor tx = op_tensor(*xd), tv = op_tensor(wv), ti = op_tensor(wi);
    if (!op_ran(name, spyre_op_sort(op_stream(wv), &tx, -1, descending ? SPYRE_SORT_DESCENDING : 0,
                                    &tv, &ti))) {
        const int64_t n = xd->size(-1);
        if (n <= kBlock) return false;
        auto r = long_sort(name, xd->reshape({-1, n}), k, descending);
        if (!r) return false;
        wv.copy_(r->first.view(wv.sizes()));
        wi.copy_(r->second.view(wi.sizes()));
    }
    if (last) {
        finish_output(v, wv);
        finish_output(i, wi);
    } else {
        v.copy_(wv.movedim(-1, d));
        i.copy_(wi.movedim(-1, d));
    }
    return true;
}

// The integer keys int_sort_into takes: a radix sort of float sorts (bool as 0/1, one digit).
bool radix_key(at::ScalarType t) {
    return t == at::kLong || t == at::kInt || t == at::kChar || t == at::kByte || t == at::kBool;
}

// values, indices = the first k of the integer rows of self along dim in the stable order;
// false: not taken.
bool int_sort_into(const at::Tensor& self, int64_t dim, int64_t k, bool descending,
                   at::Tensor& values, at::Tensor& indices) {
    c10::DeviceGuard guard(self.device());
    const auto rows = sort_rows(self, radix_key(self.scalar_type()), dim, k, values, indices);
    if (!rows) return false;
    if (values.numel() == 0) return true;
    const auto& [x, d] = *rows;
    const at::Tensor row = x.movedim(d, -1);
    constexpr int64_t kDigit = (int64_t{1} << 22) - 1;
    std::vector<at::Tensor> digits;  // least significant first; the last one signed
    if (self.scalar_type() == at::kLong)
        digits = {row.bitwise_and(kDigit), row.__rshift__(22).bitwise_and(kDigit),
                  row.__rshift__(44)};
    else if (self.scalar_type() == at::kInt)
        digits = {row.bitwise_and(kDigit), row.__rshift__(22)};
    else
        digits = {row};
    at::Tensor perm;
    for (const at::Tensor& digit : digits) {
        const at::Tensor key = (perm.defined() ? digit.gather(-1, perm) : digit).to(at::kFloat);
        const at::Tensor order = std::get<1>(at::sort(key, /*stable=*/true, -1, descending));
        perm = perm.defined() ? perm.gather(-1, order) : order;
    }
    perm = perm.narrow(-1, 0, k);
    const at::Tensor v = values.dim() ? values : values.view({1});
    const at::Tensor i = indices.dim() ? indices : indices.view({1});
    v.copy_(row.gather(-1, perm).movedim(-1, d));
    i.copy_(perm.movedim(-1, d));
    return true;
}

std::tuple<at::Tensor&, at::Tensor&> sort_values_stable(const at::Tensor& self,
                                                        std::optional<bool> stable, int64_t dim,
                                                        bool descending, at::Tensor& values,
                                                        at::Tensor& indices) {
    const int64_t n = self.dim() ? self.size(at::maybe_wrap_dim(dim, self.dim())) : 1;
    if (sort_into("aten::sort", self, dim, n, descending, values, indices) ||
        int_sort_into(self, dim, n, descending, values, indices))
        return {values, indices};
    return fallback_to_cpu<ATEN_OP2(sort, values_stable)>(self, stable, dim, descending, values,
                                                          indices);
}

std::tuple<at::Tensor&, at::Tensor&> sort_values(const at::Tensor& self, int64_t dim,
                                                 bool descending, at::Tensor& values,
                                                 at::Tensor& indices) {
    const int64_t n = self.dim() ? self.size(at::maybe_wrap_dim(dim, self.dim())) : 1;
    if (sort_into("aten::sort", self, dim, n, descending, values, indices) ||
        int_sort_into(self, dim, n, descending, values, indices))
        return {values, indices};
    return fallback_to_cpu<ATEN_OP2(sort, values)>(self, dim, descending, values, indices);
}

std::tuple<at::Tensor&, at::Tensor&> topk_values(const at::Tensor& self, c10::SymInt k, int64_t dim,
                                                 bool largest, bool sorted, at::Tensor& values,
                                                 at::Tensor& indices) {
    // largest: the first k of the descending order; else of the ascending one (sorted either way).
    // torch has no bool topk: the CPU fallback raises its error.
    if (auto kk = k.maybe_as_int(); kk && self.scalar_type() != at::kBool)
        if (sort_into("aten::topk", self, dim, *kk, largest, values, indices) ||
            int_sort_into(self, dim, *kk, largest, values, indices))
            return {values, indices};
    return fallback_to_cpu<ATEN_OP2(topk, values)>(self, k.expect_int(), dim, largest, sorted,
                                                   values, indices);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("sort.values_stable", TORCH_FN(sort_values_stable));
    m.impl("sort.values", TORCH_FN(sort_values));
    m.impl("topk.values", TORCH_FN(topk_values));
}

}  // namespace torch_spyre::aten

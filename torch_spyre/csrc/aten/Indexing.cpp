// Gathers and scatters by index tensors on the card (spyre_op_gather / spyre_op_scatter):
// torch.gather, index_select along any dim, advanced indexing by one index tensor
// (x[:, idx]), scatter (a tensor or a number), scatter_add, index_copy, index_fill_, index_add,
// index_put_ (x[idx] = v, x[idx] += v) and masked_scatter_. The indexed tensor is made dense on the
// card when it is not; int64 or int32 indices. An index out of range stops the launch (a
// device-side assert reported by the next synchronize, like CUDA's); negative indices are taken
// only where torch takes them (advanced indexing). Duplicate indices of scatter_add are added in
// ascending order of the index position: the result is deterministic. Other cases (index shapes
// smaller than the data in other dims, index tensors on dims that are not adjacent, table slabs
// larger than a core's scratchpad) run on the CPU fallback; a gather's too-large table slab is
// first tried in chunks of its last dim.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "ElementFetch.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool index_type(const at::Tensor& index) {
    return index.is_privateuseone() &&
           (index.scalar_type() == at::kLong || index.scalar_type() == at::kInt);
}

bool data_type(const at::Tensor& t) {
    return t.is_privateuseone() && op_dtype(t.scalar_type()) && t.dim() <= SPYRE_TENSOR_MAX_DIMS;
}

// A 1-D index seen as [1, .., n, .., 1] of rank `rank` with n at `dim`.
at::Tensor spread(const at::Tensor& index, int64_t rank, int64_t dim) {
    std::vector<int64_t> shape(rank, 1);
    shape[dim] = index.numel();
    return index.reshape(shape);
}

// rows = table gathered along dim by index (the op library's shapes); false: not taken.
bool gather_into(const char* name, const at::Tensor& table, int64_t dim, const at::Tensor& index,
                 const at::Tensor& rows, uint32_t flags) {
    const auto t = stick_dense(table, name);
    const auto i = stick_dense(index, name);
    if (!t || !i) return false;
    const spyre_tensor tt = op_tensor(*t), ti = op_tensor(*i), tr = op_tensor(rows);
    return op_ran(
        name, spyre_op_gather(op_stream(rows), &tt, static_cast<int32_t>(dim), &ti, &tr, flags));
}

// table (stick dense, written in place) scattered into along dim; false: not taken.
bool scatter_into(const char* name, const at::Tensor& table, int64_t dim, const at::Tensor& index,
                  const at::Tensor& rows, uint32_t flags) {
    at::Tensor src = rows;
    if (src.is_alias_of(table) || index.is_alias_of(table)) src = src.clone();
    const auto r = stick_dense(src, name);
    const auto i = stick_dense(index.is_alias_of(table) ? index.clone() : index, name);
    if (!r || !i) return false;
    const spyre_tensor tt = op_tensor(table), ti = op_tensor(*i), tr = op_tensor(*r);
    return op_ran(
        name, spyre_op_scatter(op_stream(table), &tt, static_cast<int32_t>(dim), &ti, &tr, flags));
}

// A gather whose table slab (the dims from d on) is too large for a core's scratchpad, in
// chunks of the last dim (each chunk's table made dense, about 1 MiB of slab); false: not
// taken (d is the last dim, or one column is still too large).
bool gather_by_columns(const char* name, const at::Tensor& table, int64_t d,
                       const at::Tensor& index, const at::Tensor& out) {
    const int64_t last = table.dim() - 1;
    if (d == last || index.size(last) < 2) return false;
    constexpr int64_t kSlabBytes = int64_t{1} << 20;
    int64_t column_bytes = table.element_size();
    for (int64_t k = d; k < last; ++k) column_bytes *= table.size(k);
    const int64_t width = std::max<int64_t>(1, kSlabBytes / column_bytes);
    const int64_t cols = index.size(last);
    if (width >= cols) return false;  // the whole slab was tried
    for (int64_t c0 = 0; c0 < cols; c0 += width) {
        const int64_t w = std::min(width, cols - c0);
        const at::Tensor part = at::empty(index.narrow(last, c0, w).sizes(), out.options());
        if (!gather_into(name, table.narrow(last, c0, w), d, index.narrow(last, c0, w), part, 0))
            return false;
        out.narrow(last, c0, w).copy_(part);
    }
    return true;
}

at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                       bool sparse_grad, at::Tensor& out) {
    if (data_type(self) && index_type(index) && self.dim() == index.dim() && self.dim() >= 1 &&
        out.scalar_type() == self.scalar_type()) {
        c10::DeviceGuard guard(self.device());
        const int64_t d = at::maybe_wrap_dim(dim, self.dim());
        at::native::resize_output(out, index.sizes());
        if (out.numel() == 0) return out;
        // index may be smaller than self in the other dims: gather from that corner of self
        at::Tensor table = self;
        for (int64_t k = 0; k < self.dim(); ++k)
            if (k != d && index.size(k) < self.size(k)) table = table.narrow(k, 0, index.size(k));
        const at::Tensor w = writable_output(out);
        if (gather_into("aten::gather", table, d, index, w, 0) ||
            gather_by_columns("aten::gather", table, d, index, w)) {
            finish_output(out, w);
            return out;
        }
        if (self.dim() == 1 && ElementFetch::exact_for(self) &&
            index.numel() <= ElementFetch::kMaxPositions) {  // beyond the scratchpad
            out.copy_(ElementFetch(self)(index.to(at::kLong)));
            return out;
        }
    }
    return fallback_to_cpu<ATEN_OP2(gather, out)>(self, dim, index, sparse_grad, out);
}

// Along dim 0 of rows that are whole sticks: the embedding's row copies (DMA only).
std::optional<at::Tensor> select_rows(const at::Tensor& self, const at::Tensor& index) {
    if (self.dim() < 1 || !self.is_contiguous() || self.size(0) == 0) return std::nullopt;
    const int64_t row = self.numel() / self.size(0);
    const at::Tensor w = self.view({self.size(0), row});
    if (!is_stick_dense(w) || (row * self.element_size()) % 128) return std::nullopt;
    const auto idx = stick_dense(index.reshape({-1}), "aten::index_select");
    if (!idx) return std::nullopt;
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
    shape[0] = index.numel();
    at::Tensor out = at::empty(shape, self.options());
    const spyre_tensor ti = op_tensor(*idx), tw = op_tensor(w),
                       to = op_tensor(out.view({index.numel(), row}));
    if (!op_ran("aten::index_select", spyre_op_embedding(op_stream(out), &ti, &tw, &to)))
        return std::nullopt;
    return out;
}

// index_select along d > 0 whose spread index (one int64 per output element) is too large for
// one gather: in chunks of the leading dim of about 2^18 output elements each. false: not taken
// (a chunk of one leading index is still refused; out then holds garbage, the caller falls
// back and writes a new tensor).
bool select_by_leading_chunks(const at::Tensor& self, int64_t d, const at::Tensor& index,
                              const at::Tensor& out) {
    constexpr int64_t kChunkElements = int64_t{1} << 18;
    const int64_t lead = out.size(0), per_lead = out.numel() / std::max<int64_t>(lead, 1);
    const int64_t step = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(per_lead, 1));
    if (d == 0 || lead < 2 || step >= lead) return false;
    for (int64_t r0 = 0; r0 < lead; r0 += step) {
        const int64_t n = std::min(step, lead - r0);
        const at::Tensor part = self.narrow(0, r0, n);
        if (!gather_into("aten::index_select", part, d, spread(index, part.dim(), d),
                         out.narrow(0, r0, n), 0))
            return false;
    }
    return true;
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
    if (data_type(self) && index_type(index) && index.dim() <= 1 && self.dim() >= 1) {
        c10::DeviceGuard guard(self.device());
        const int64_t d = at::maybe_wrap_dim(dim, self.dim());
        std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
        shape[d] = index.numel();
        if (index.numel() == 0 || (self.numel() == 0 && self.size(d) > 0))
            return at::empty(shape, self.options());
        if (d == 0 && self.size(0) > 0 && index.numel() > 0)
            if (auto out = select_rows(self, index)) return *out;
        at::Tensor out = at::empty(shape, self.options());
        if (gather_into("aten::index_select", self, d, spread(index, self.dim(), d), out, 0) ||
            select_by_leading_chunks(self, d, index, out))
            return out;
        if (self.dim() == 1 && ElementFetch::exact_for(self) &&
            index.numel() <= ElementFetch::kMaxPositions)  // beyond the scratchpad
            return ElementFetch(self)(index.reshape({-1}).to(at::kLong));
    }
    return fallback_to_cpu<ATEN_OP(index_select)>(self, dim, index);
}

// A scatter split into parts that run one after another, in order: once a part has written
// into the table, a later part the card refuses is an error, not a fallback (the table no
// longer holds the caller's input).
void refuse_after_first_part(const char* name, bool first) {
    TORCH_CHECK(first, name,
                ": the card refused a later part of a scatter it had begun (the table is "
                "partly written)");
}

// A scatter with more positions than one program takes (a histogram of millions of inputs):
// in chunks of about 2^20 positions along d, one after another, so that repeated targets are
// still written (or added) in ascending order of position. false: not taken.
bool scatter_in_chunks(const char* name, const at::Tensor& table, int64_t d,
                       const at::Tensor& index, const at::Tensor& rows, uint32_t flags) {
    constexpr int64_t kChunkPositions = int64_t{1} << 20;
    const int64_t n = index.size(d), per_position = index.numel() / std::max<int64_t>(n, 1);
    const int64_t step = std::max<int64_t>(1, kChunkPositions / std::max<int64_t>(per_position, 1));
    if (index.numel() <= kChunkPositions || step >= n) return false;
    for (int64_t p0 = 0; p0 < n; p0 += step) {
        const int64_t len = std::min(step, n - p0);
        if (scatter_into(name, table, d, index.narrow(d, p0, len), rows.narrow(d, p0, len), flags))
            continue;
        refuse_after_first_part(name, p0 == 0);
        return false;
    }
    return true;
}

// A scatter into a 1-D table too large for the scatter program (it keeps the table's slab in
// a core's scratchpad): the table seen as 128-byte rows, and per chunk of positions the rows
// they touch gathered (row copies), the values scattered into those rows (a small table: the
// positions sorted stably by row, so repeated targets keep their order of position: the last
// write wins, or the values add in that order as the CPU's loop does) and the rows written
// back (spyre_op_scatter_rows). false: not taken.
bool scatter_into_long_vector(const char* name, const at::Tensor& table, const at::Tensor& index,
                              const at::Tensor& values, uint32_t flags) {
    constexpr int64_t kChunkPositions = 8192;  // gathered rows of at most 1 MiB
    const int64_t es = table.element_size(), per = 128 / es, N = table.numel();
    if (table.dim() != 1 || index.dim() != 1 || values.dim() != 1 || !is_stick_dense(table) ||
        index.numel() != values.numel() || N < per)
        return false;
    at::Tensor pos = index.to(at::kLong);
    if (flags & SPYRE_INDEX_WRAP_NEGATIVE) pos = at::where(pos < 0, pos + N, pos);
    if ((N * es) % 128) {
        // a padded copy; a position past the table then points past the padding too, so the
        // row copy still refuses it as it refuses one past the table
        const int64_t padded = (N + per - 1) / per * per;
        const at::Tensor whole = at::empty({padded}, table.options());
        whole.narrow(0, 0, N).copy_(table);
        if (!scatter_into_long_vector(name, whole, at::where(pos >= N, pos + padded, pos), values,
                                      flags & ~SPYRE_INDEX_WRAP_NEGATIVE))
            return false;
        table.copy_(whole.narrow(0, 0, N));
        return true;
    }
    const at::Tensor rows = table.view({N / per, per});
    for (int64_t p0 = 0; p0 < pos.numel(); p0 += kChunkPositions) {
        const int64_t n = std::min(kChunkPositions, pos.numel() - p0);
        const at::Tensor p = pos.narrow(0, p0, n);
        const at::Tensor row = p.div(per, "floor");
        const at::Tensor order = std::get<1>(at::sort(row, /*stable=*/true, 0, false));
        const at::Tensor sorted = row.index_select(0, order);
        at::Tensor first = at::ones({n}, row.options().dtype(at::kBool));
        if (n > 1)
            first.narrow(0, 1, n - 1)
                .copy_(sorted.narrow(0, 1, n - 1) != sorted.narrow(0, 0, n - 1));
        const at::Tensor segment = at::cumsum(first, 0, at::kLong).sub_(1);
        const at::Tensor distinct = sorted.masked_select(first);
        const at::Tensor touched = rows.index_select(0, distinct).contiguous();
        const at::Tensor within = segment * per + p.index_select(0, order).remainder(per);
        const at::Tensor moved = values.narrow(0, p0, n).index_select(0, order);
        const spyre_tensor ti = op_tensor(distinct), tr = op_tensor(touched), tt = op_tensor(rows);
        if (!scatter_into(name, touched.view({-1}), 0, within, moved,
                          flags & SPYRE_INDEX_ACCUMULATE) ||
            !op_ran(name, spyre_op_scatter_rows(op_stream(rows), &ti, &tr, &tt))) {
            refuse_after_first_part(name, p0 == 0);
            return false;
        }
    }
    return true;
}

// A scatter without accumulation of a few positions along d (index spread from 1-D, source
// of the table's shape with n at d) into a contiguous table whose dims after d are whole-stick
// rows: each (leading index, position) row copied by DMA (spyre_op_scatter_rows) where the
// scatter program reads and writes every slab (a decode step's one-row KV-cache write:
// index_copy_ along the sequence dim). Repeated positions: which row lands is unspecified, as
// torch says of index_copy_ and index_put_. false: not taken.
bool scatter_rows_along(const char* name, const at::Tensor& table, int64_t d,
                        const at::Tensor& index, const at::Tensor& source, uint32_t flags) {
    const int64_t n = index.numel(), L = table.size(d);
    if ((flags & SPYRE_INDEX_ACCUMULATE) || n == 0 || n != index.size(d) || n * 4 > L ||
        !table.is_contiguous() || !is_stick_dense(table) || source.dim() != table.dim())
        return false;
    int64_t row = 1;
    for (int64_t k = 0; k < table.dim(); ++k) {
        if (source.size(k) != (k == d ? n : table.size(k))) return false;
        if (k > d) row *= table.size(k);
    }
    if ((row * table.element_size()) % 128) return false;
    const int64_t outer = table.numel() / (L * row);
    at::Tensor pos = index.reshape({-1}).to(at::kLong);
    if (flags & SPYRE_INDEX_WRAP_NEGATIVE) pos = at::where(pos < 0, pos + L, pos);
    // a position outside [0, L) points past the table: the row copy's bounds check stops the job
    pos = at::where(pos.lt(0).logical_or_(pos.ge(L)), outer * L, pos);
    const at::Tensor rows =
        (at::arange(outer, pos.options()).mul_(L).unsqueeze(1) + pos.unsqueeze(0)).reshape({-1});
    const auto src = stick_dense(source.reshape({outer * n, row}), name);
    if (!src) return false;
    const spyre_tensor ti = op_tensor(rows), tr = op_tensor(*src),
                       tt = op_tensor(table.view({outer * L, row}));
    return op_ran(name, spyre_op_scatter_rows(op_stream(table), &ti, &tr, &tt));
}

// out = self with out[.., index[n], ..] (+)= source[.., n, ..] along dim (index 1-D, or the
// shape of source for scatter_add).
at::Tensor& scatter_out(const char* name, const at::Tensor& self, int64_t d,
                        const at::Tensor& index, const at::Tensor& source, at::Tensor& out,
                        uint32_t flags, bool& ran) {
    at::native::resize_output(out, self.sizes());
    const at::Tensor w = writable_output(out);
    if (!w.is_same(self)) w.copy_(self);
    // row copies cost a few launches of index arithmetic: worth it past ~1 MiB of table (the
    // scatter program's pass over the slabs), and needed past the scratchpad
    const bool big = w.numel() * w.element_size() > (int64_t{1} << 20);
    ran = index.numel() == 0 || (big && scatter_rows_along(name, w, d, index, source, flags)) ||
          scatter_into(name, w, d, index, source, flags) ||
          scatter_in_chunks(name, w, d, index, source, flags) ||
          scatter_into_long_vector(name, w, index, source, flags);
    if (ran) finish_output(out, w);
    return out;
}

// scatter / scatter_add with a src tensor: false when the card does not take the case.
// flags: SPYRE_INDEX_ACCUMULATE for scatter_add; a scatter's repeated target keeps the last
// write in index order, as the CPU's loop.
bool scatter_src(const char* name, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                 const at::Tensor& src, at::Tensor& out, uint32_t flags) {
    if (!(data_type(self) && index_type(index) &&
          (self.scalar_type() != at::kBool || !(flags & SPYRE_INDEX_ACCUMULATE)) &&
          src.scalar_type() == self.scalar_type() && out.scalar_type() == self.scalar_type() &&
          self.dim() >= 1 && index.dim() == self.dim() && src.dim() == self.dim()))
        return false;
    c10::DeviceGuard guard(self.device());
    const int64_t d = at::maybe_wrap_dim(dim, self.dim());
    bool corner = false;  // index covers only a corner of self in a dim other than d
    for (int64_t k = 0; k < self.dim(); ++k) {
        if (k != d && index.size(k) > self.size(k)) return false;
        corner |= k != d && index.size(k) < self.size(k);
    }
    // only the corner of src that index covers takes part
    at::Tensor s = src;
    for (int64_t k = 0; k < src.dim(); ++k)
        if (index.size(k) < src.size(k)) s = s.narrow(k, 0, index.size(k));
    bool ran = false;
    if (!corner) {
        scatter_out(name, self, d, index, s, out, flags, ran);
        return ran;
    }
    // Only that corner of out is written: the scatter runs on a dense copy of it (the scatter
    // programs take whole tables), which then goes back into out.
    at::native::resize_output(out, self.sizes());
    if (!out.is_same(self)) out.copy_(self);
    at::Tensor region = out;
    for (int64_t k = 0; k < self.dim(); ++k)
        if (k != d) region = region.narrow(k, 0, index.size(k));
    at::Tensor part = region.contiguous(), part_out = part;
    scatter_out(name, part, d, index, s, part_out, flags, ran);
    if (ran) region.copy_(part_out);
    return ran;
}

at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                            const at::Tensor& src, at::Tensor& out) {
    if (scatter_src("aten::scatter_add", self, dim, index, src, out, SPYRE_INDEX_ACCUMULATE))
        return out;
    return fallback_to_cpu<ATEN_OP2(scatter_add, out)>(self, dim, index, src, out);
}

at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                            const at::Tensor& src, at::Tensor& out) {
    if (scatter_src("aten::scatter", self, dim, index, src, out, 0)) return out;
    return fallback_to_cpu<ATEN_OP2(scatter, src_out)>(self, dim, index, src, out);
}

// scatter with a number (F.one_hot's zeros().scatter_(-1, idx, 1)): src is the number filled
// to index's shape on the card.
at::Tensor& scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                              const at::Scalar& value, at::Tensor& out) {
    if (self.is_privateuseone() && index.is_privateuseone()) {
        c10::DeviceGuard guard(self.device());
        const at::Tensor src = at::full(index.sizes(), value, self.options());
        if (scatter_src("aten::scatter", self, dim, index, src, out, 0)) return out;
    }
    return fallback_to_cpu<ATEN_OP2(scatter, value_out)>(self, dim, index, value, out);
}

at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                           const at::Tensor& source, at::Tensor& out) {
    if (data_type(self) && index_type(index) && index.dim() <= 1 && self.dim() >= 1 &&
        source.scalar_type() == self.scalar_type() && out.scalar_type() == self.scalar_type() &&
        source.dim() == self.dim()) {
        c10::DeviceGuard guard(self.device());
        const int64_t d = at::maybe_wrap_dim(dim, self.dim());
        bool ran = false;
        scatter_out("aten::index_copy", self, d, spread(index, self.dim(), d), source, out, 0, ran);
        if (ran) return out;
    }
    return fallback_to_cpu<ATEN_OP2(index_copy, out)>(self, dim, index, source, out);
}

// index_fill_: the positions `index` (1-D, negative ones from the end, as the CPU takes them)
// along dim set to value: value broadcast to the index's extent, scattered as index_copy does.
// value: a number, or a 0-dim tensor (on the card, or a number in host memory).
bool index_fill_into(at::Tensor& self, int64_t dim, const at::Tensor& index,
                     const at::Tensor& value) {
    if (!(data_type(self) && index_type(index) && index.dim() <= 1 && self.dim() >= 1 &&
          value.dim() == 0 && (value.is_privateuseone() || value.device().is_cpu())))
        return false;
    c10::DeviceGuard guard(self.device());
    const int64_t d = at::maybe_wrap_dim(dim, self.dim());
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
    shape[d] = index.numel();
    const at::Tensor source =
        value.to(self.device(), self.scalar_type()).expand(shape).contiguous();
    bool ran = false;
    scatter_out("aten::index_fill_", self, d, spread(index, self.dim(), d), source, self,
                SPYRE_INDEX_WRAP_NEGATIVE, ran);
    return ran;
}

at::Tensor& index_fill_scalar(at::Tensor& self, int64_t dim, const at::Tensor& index,
                              const at::Scalar& value) {
    if (index_fill_into(self, dim, index, at::scalar_tensor(value, self.options().device("cpu"))))
        return self;
    return fallback_to_cpu<ATEN_OP2(index_fill_, int_Scalar)>(self, dim, index, value);
}

at::Tensor& index_fill_tensor(at::Tensor& self, int64_t dim, const at::Tensor& index,
                              const at::Tensor& value) {
    if (index_fill_into(self, dim, index, value)) return self;
    return fallback_to_cpu<ATEN_OP2(index_fill_, int_Tensor)>(self, dim, index, value);
}

// table[idx[i]] += rows[i] for a table [V, D] of whole-stick rows too large for the scatter
// program (it keeps a table's slab in a core's scratchpad: an embedding gradient of a real
// vocabulary): the distinct indices' rows gathered (row copies), the rows of each index added
// to its gathered row in ascending order of position, as the CPU adds them (the rows sorted
// stably by index, then an index_add into the gathered rows: a table of at most n rows, in
// column chunks that fit), and the distinct rows written back (spyre_op_scatter_rows).
// false: not taken.
bool add_rows_by_sorting(const char* name, const at::Tensor& table, const at::Tensor& idx,
                         const at::Tensor& rows) {
    const int64_t n = idx.numel(), D = table.size(1), es = table.element_size();
    const int64_t per = 128 / es;
    constexpr int64_t kSlabBytes = int64_t{1} << 20;
    if (table.dim() != 2 || !is_stick_dense(table) || (D * es) % 128 || n == 0 ||
        n * per * es > kSlabBytes)
        return false;
    const at::Tensor keys = idx.reshape({-1}).to(at::kLong);
    const at::Tensor order = std::get<1>(at::sort(keys, /*stable=*/true, 0, false));
    const at::Tensor sorted = keys.index_select(0, order);
    at::Tensor first = at::ones({n}, keys.options().dtype(at::kBool));
    if (n > 1)
        first.narrow(0, 1, n - 1).copy_(sorted.narrow(0, 1, n - 1) != sorted.narrow(0, 0, n - 1));
    const at::Tensor segment = at::cumsum(first, 0, at::kLong).sub_(1).view({n, 1});
    const at::Tensor distinct = sorted.masked_select(first);
    const int64_t U = distinct.numel();
    const at::Tensor acc = table.index_select(0, distinct);
    const at::Tensor moved = rows.reshape({n, D}).index_select(0, order);
    const int64_t width = std::min(D, std::max(per, kSlabBytes / (U * es) / per * per));
    for (int64_t c0 = 0; c0 < D; c0 += width) {
        const int64_t w = std::min(width, D - c0);
        const at::Tensor part = acc.narrow(1, c0, w).contiguous();
        if (!scatter_into(name, part, 0, segment, moved.narrow(1, c0, w).contiguous(),
                          SPYRE_INDEX_ACCUMULATE))
            return false;
        if (!part.is_same(acc)) acc.narrow(1, c0, w).copy_(part);
    }
    const spyre_tensor ti = op_tensor(distinct), tr = op_tensor(acc), tt = op_tensor(table);
    return op_ran(name, spyre_op_scatter_rows(op_stream(table), &ti, &tr, &tt));
}

// out = self with alpha * source's slices added at index along dim (duplicates accumulate in
// ascending order of their position): index_copy's scatter with accumulation.
at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                          const at::Tensor& source, const at::Scalar& alpha, at::Tensor& out) {
    if (data_type(self) && index_type(index) && index.dim() <= 1 && self.dim() >= 1 &&
        self.scalar_type() != at::kBool && source.scalar_type() == self.scalar_type() &&
        out.scalar_type() == self.scalar_type() && source.dim() == self.dim() &&
        source.is_privateuseone() && !alpha.isComplex()) {
        c10::DeviceGuard guard(self.device());
        const int64_t d = at::maybe_wrap_dim(dim, self.dim());
        const at::Tensor src = alpha.equal(1) ? source : source * alpha;
        bool ran = false;
        scatter_out("aten::index_add", self, d, spread(index, self.dim(), d), src, out,
                    SPYRE_INDEX_ACCUMULATE, ran);
        if (ran) return out;
        // along dim 0 of a table too large for the scatter program (out holds self by now)
        if (d == 0 && self.size(0) > 0 && is_stick_dense(out) && src.size(0) == index.numel() &&
            add_rows_by_sorting("aten::index_add", out.view({out.size(0), -1}), index,
                                src.reshape({index.numel(), -1})))
            return out;
    }
    return fallback_to_cpu<ATEN_OP2(index_add, out)>(self, dim, index, source, alpha, out);
}

// self.index_reduce(dim, index, source, reduce, include_self): the scatter_reduce of source
// with the 1-D index spread over source's shape along dim (one target per source slice), the
// same reductions with the same include_self rule ("prod", "mean", "amax", "amin").
at::Tensor& index_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                             const at::Tensor& source, c10::string_view reduce, bool include_self,
                             at::Tensor& out) {
    // 0-dim self and source: as one-element vectors (the card's kernels take no 0-dim operand)
    if (self.dim() == 0 && source.dim() == 0 && index.numel() == 1 && (dim == 0 || dim == -1) &&
        data_type(self) && !out.is_alias_of(source) && !out.is_alias_of(index)) {
        const at::Tensor r = at::index_reduce(self.reshape({1}), 0, index.reshape({1}),
                                              source.reshape({1}), reduce, include_self);
        at::native::resize_output(out, {});
        out.copy_(r.reshape({}));
        return out;
    }
    if (data_type(self) && index_type(index) && index.dim() <= 1 && self.dim() >= 1 &&
        self.scalar_type() != at::kBool && source.scalar_type() == self.scalar_type() &&
        out.scalar_type() == self.scalar_type() && source.dim() == self.dim() &&
        source.is_privateuseone() && !out.is_alias_of(source) && !out.is_alias_of(index)) {
        const int64_t d = at::maybe_wrap_dim(dim, self.dim());
        bool same_slices = source.size(d) == index.numel();
        for (int64_t k = 0; k < self.dim(); ++k)
            same_slices &= k == d || source.size(k) == self.size(k);
        if (same_slices) {
            c10::DeviceGuard guard(self.device());
            const at::Tensor targets =
                spread(index.to(at::kLong), self.dim(), d).expand(source.sizes()).contiguous();
            const at::Tensor r = at::scatter_reduce(self, d, targets, source, reduce, include_self);
            at::native::resize_output(out, r.sizes());
            out.copy_(r);
            return out;
        }
    }
    return fallback_to_cpu<ATEN_OP2(index_reduce, out)>(self, dim, index, source, reduce,
                                                        include_self, out);
}

// One flat index over the adjacent dims first .. first + idx.size() - 1 of self (row-major) from
// their integer index tensors (broadcast together), negative positions wrapped. A position
// outside its dim must not land on another element: it becomes one outside the flat dim,
// which stops the gather or scatter (a device-side assert).
at::Tensor flat_index(const at::Tensor& self, const std::vector<at::Tensor>& idx, int64_t first) {
    const auto b = at::broadcast_tensors(idx);
    at::Tensor lin = at::zeros(b[0].sizes(), b[0].options().dtype(at::kLong));
    at::Tensor bad = at::zeros_like(lin);
    int64_t flat = 1;
    for (size_t j = 0; j < b.size(); ++j) {
        const int64_t size = self.size(first + int64_t(j));
        const at::Tensor i = b[j].to(at::kLong);
        lin = lin * size + i + i.lt(0).to(at::kLong) * size;
        bad = bad + i.lt(-size).to(at::kLong) + i.ge(size).to(at::kLong);
        flat *= size;
    }
    const at::Tensor off = bad.gt(0).to(at::kLong);
    return lin - lin * off + off * flat;
}

// self[.., idx, ..] with one integer index tensor at dim d (the others None): a gather along
// d with negative indices wrapped; the result has idx's shape in place of dim d. A boolean mask
// becomes the flat positions of its true elements (nonzero) over the dims it covers; several
// integer index tensors on adjacent dims (x[i, j]) one flat index over those dims.
at::Tensor& index_out(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                      at::Tensor& out) {
    int64_t d = -1, count = 0;
    for (size_t k = 0; k < indices.size(); ++k) {
        const std::optional<at::Tensor> t = indices.get(k);
        if (t && t->defined()) d = int64_t(k), ++count;
    }
    // several integer index tensors on adjacent dims: one flat index over those dims
    int64_t first = -1;
    for (size_t k = 0; k < indices.size() && first < 0; ++k)
        if (const auto t = indices.get(k); t && t->defined()) first = int64_t(k);
    if (count > 1 && d - first + 1 == count && d < self.dim() && data_type(self) &&
        out.scalar_type() == self.scalar_type()) {
        std::vector<at::Tensor> idx;
        for (int64_t k = first; k <= d; ++k)
            if (const auto t = indices.get(k); t && t->defined() && index_type(*t))
                idx.push_back(*t);
        if (int64_t(idx.size()) == count) {
            c10::DeviceGuard guard(self.device());
            c10::List<std::optional<at::Tensor>> one;
            for (int64_t i = 0; i < first; ++i) one.push_back(std::nullopt);
            one.push_back(flat_index(self, idx, first));
            return index_out(self.flatten(first, d), one, out);
        }
    }
    if (count == 1 && data_type(self) && out.scalar_type() == self.scalar_type()) {
        const at::Tensor idx = *indices.get(d);
        // a boolean mask over dims d .. d + k - 1: the flat positions of its true elements
        // (nonzero on the card) index those dims flattened into one
        const int64_t k = idx.dim();
        if (idx.is_privateuseone() && idx.scalar_type() == at::kBool && k >= 1 &&
            d + k <= self.dim() && idx.sizes() == self.sizes().slice(d, k)) {
            c10::DeviceGuard guard(self.device());
            const at::Tensor pos = at::nonzero(idx.reshape({-1})).squeeze(1);
            c10::List<std::optional<at::Tensor>> one;
            for (int64_t i = 0; i < d; ++i) one.push_back(std::nullopt);
            one.push_back(pos);
            return index_out(self.flatten(d, d + k - 1), one, out);
        }
        if (index_type(idx) && self.dim() >= 1 && d < self.dim() &&
            self.dim() - 1 + idx.dim() <= SPYRE_TENSOR_MAX_DIMS) {
            c10::DeviceGuard guard(self.device());
            std::vector<int64_t> shape(self.sizes().begin(), self.sizes().begin() + d);
            shape.insert(shape.end(), idx.sizes().begin(), idx.sizes().end());
            shape.insert(shape.end(), self.sizes().begin() + d + 1, self.sizes().end());
            at::native::resize_output(out, shape);
            if (out.numel() == 0) return out;
            std::vector<int64_t> flat(self.sizes().begin(), self.sizes().end());
            flat[d] = idx.numel();
            const at::Tensor w = writable_output(out);
            if (gather_into("aten::index", self, d, spread(idx, self.dim(), d), w.view(flat),
                            SPYRE_INDEX_WRAP_NEGATIVE)) {
                finish_output(out, w);
                return out;
            }
            if (self.dim() == 1 && ElementFetch::exact_for(self) &&
                idx.numel() <= ElementFetch::kMaxPositions) {  // beyond the scratchpad
                const at::Tensor pos = idx.to(at::kLong);
                out.copy_(ElementFetch(self)(at::where(pos < 0, pos + self.numel(), pos)));
                return out;
            }
        }
    }
    return fallback_to_cpu<ATEN_OP2(index, Tensor_out)>(self, indices, out);
}

// self[.., idx, ..] = values (accumulate: +=, duplicate indices summed in ascending order of
// their position) with one integer index tensor at dim d, or several on adjacent dims (their
// positions, negative ones wrapped, combined into one flat index on the card), or a boolean
// mask (nonzero). values broadcast to the indexed shape. A scatter along d of the flattened
// indices; other index patterns run on the CPU fallback.
at::Tensor& index_put_impl(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                           const at::Tensor& values, bool accumulate, bool unsafe) {
    int64_t first = -1, last = -1, count = 0;
    for (size_t k = 0; k < indices.size(); ++k) {
        const std::optional<at::Tensor> t = indices.get(k);
        if (!t || !t->defined()) continue;
        if (first < 0) first = int64_t(k);
        last = int64_t(k), ++count;
    }
    const bool on_card = data_type(self) && values.is_privateuseone() &&
                         values.scalar_type() == self.scalar_type() && count >= 1 &&
                         last - first + 1 == count && last < self.dim() &&
                         !(accumulate && self.scalar_type() == at::kBool);
    if (on_card) {
        c10::DeviceGuard guard(self.device());
        const int64_t d = first;
        const at::Tensor idx0 = *indices.get(d);
        if (count == 1 && idx0.is_privateuseone() && idx0.scalar_type() == at::kBool &&
            idx0.dim() >= 1 && d + idx0.dim() <= self.dim() &&
            idx0.sizes() == self.sizes().slice(d, idx0.dim()) && self.is_contiguous()) {
            // a mask over dims d .. d + k - 1: the flat positions of its true elements
            const at::Tensor pos = at::nonzero(idx0.reshape({-1})).squeeze(1);
            c10::List<std::optional<at::Tensor>> one;
            for (int64_t i = 0; i < d; ++i) one.push_back(std::nullopt);
            one.push_back(pos);
            at::Tensor flat = self.flatten(d, d + idx0.dim() - 1);
            index_put_impl(flat, one, values, accumulate, unsafe);
            return self;
        }
        bool ints = true;
        std::vector<at::Tensor> idx;
        for (int64_t k = first; k <= last; ++k) {
            idx.push_back(*indices.get(k));
            ints &= index_type(idx.back());
        }
        if (ints && (count == 1 || self.is_contiguous())) {
            at::Tensor target = self, lin = idx[0];
            if (count > 1) {
                lin = flat_index(self, idx, first);
                target = self.flatten(first, last);
            }
            std::vector<int64_t> shape(target.sizes().begin(), target.sizes().begin() + d);
            shape.insert(shape.end(), lin.sizes().begin(), lin.sizes().end());
            shape.insert(shape.end(), target.sizes().begin() + d + 1, target.sizes().end());
            if (at::infer_size(values.sizes(), shape) == at::IntArrayRef(shape) &&
                target.dim() - 1 + lin.dim() <= SPYRE_TENSOR_MAX_DIMS) {
                if (lin.numel() == 0 || c10::multiply_integers(shape) == 0) return self;
                std::vector<int64_t> flat(target.sizes().begin(), target.sizes().end());
                flat[d] = lin.numel();
                const at::Tensor rows = values.expand(shape).reshape(flat);
                const uint32_t flags =
                    SPYRE_INDEX_WRAP_NEGATIVE | (accumulate ? SPYRE_INDEX_ACCUMULATE : 0);
                bool ran = false;
                scatter_out(accumulate ? "aten::index_put_ (accumulate)" : "aten::index_put_",
                            target, d, spread(lin.reshape({-1}), target.dim(), d), rows, target,
                            flags, ran);
                if (ran) return self;
            }
        }
    }
    return fallback_to_cpu<ATEN_OP(_index_put_impl_)>(self, indices, values, accumulate, unsafe);
}

// self.masked_scatter_(mask, source): the positions of mask's true elements (broadcast to
// self; nonzero on the card, which synchronizes as on CUDA) take source's first elements in
// row-major order: an index_put_ of the flattened self.
at::Tensor& masked_scatter_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
    TORCH_CHECK(self.scalar_type() == source.scalar_type(),
                "masked_scatter_: expected self and source to have same dtypes but got",
                self.scalar_type(), " and ", source.scalar_type());
    TORCH_CHECK(mask.scalar_type() == at::kBool,
                "masked_scatter_ only supports boolean masks, but got mask with dtype ",
                mask.scalar_type());
    if (data_type(self) && mask.is_privateuseone() && source.is_privateuseone() &&
        self.is_contiguous()) {
        c10::DeviceGuard guard(self.device());
        const at::Tensor pos = at::nonzero(mask.expand(self.sizes()).reshape({-1})).squeeze(1);
        const int64_t n = pos.numel();
        TORCH_CHECK(source.numel() >= n,
                    "masked_scatter: expected source to have at least as many elements as "
                    "the ones in mask (",
                    n, "), got ", source.numel());
        if (n == 0) return self;
        at::Tensor flat = self.view({-1});
        c10::List<std::optional<at::Tensor>> one;
        one.push_back(pos);
        index_put_impl(flat, one, source.reshape({-1}).narrow(0, 0, n), false, false);
        return self;
    }
    return fallback_to_cpu<ATEN_OP(masked_scatter_)>(self, mask, source);
}

// grad_weight [V, D] = sum of the grad rows of each index (a scatter_add of rows; the row of
// padding_idx stays zero).
at::Tensor embedding_dense_backward(const at::Tensor& grad, const at::Tensor& indices,
                                    c10::SymInt num_weights, c10::SymInt padding_idx,
                                    bool scale_grad_by_freq) {
    const int64_t V = num_weights.expect_int(), pad = padding_idx.expect_int();
    if (!scale_grad_by_freq && data_type(grad) && is_float(grad.scalar_type()) &&
        index_type(indices) && grad.dim() >= 1 && V > 0) {
        c10::DeviceGuard guard(grad.device());
        const int64_t D = grad.size(-1);
        at::Tensor gw = at::zeros({V, D}, grad.options());
        const at::Tensor rows = grad.reshape({-1, D});
        if (rows.size(0) == 0 || D == 0 ||
            scatter_into("aten::embedding_dense_backward", gw, 0, indices.reshape({-1, 1}), rows,
                         SPYRE_INDEX_ACCUMULATE)) {
            if (pad >= 0 && pad < V) gw.select(0, pad).zero_();
            return gw;
        }
        if (add_rows_by_sorting("aten::embedding_dense_backward", gw, indices, rows)) {
            if (pad >= 0 && pad < V) gw.select(0, pad).zero_();
            return gw;
        }
    }
    return fallback_to_cpu<ATEN_OP(embedding_dense_backward)>(grad, indices, V, pad,
                                                              scale_grad_by_freq);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("gather.out", TORCH_FN(gather_out));
    m.impl("index_select", TORCH_FN(index_select));
    m.impl("scatter_add.out", TORCH_FN(scatter_add_out));
    m.impl("scatter.src_out", TORCH_FN(scatter_src_out));
    m.impl("scatter.value_out", TORCH_FN(scatter_value_out));
    m.impl("index_copy.out", TORCH_FN(index_copy_out));
    m.impl("index_fill_.int_Scalar", TORCH_FN(index_fill_scalar));
    m.impl("index_fill_.int_Tensor", TORCH_FN(index_fill_tensor));
    m.impl("index_add.out", TORCH_FN(index_add_out));
    m.impl("index_reduce.out", TORCH_FN(index_reduce_out));
    m.impl("index.Tensor_out", TORCH_FN(index_out));
    m.impl("embedding_dense_backward", TORCH_FN(embedding_dense_backward));
    m.impl("_index_put_impl_", TORCH_FN(index_put_impl));
    m.impl("masked_scatter_", TORCH_FN(masked_scatter_));
}

}  // namespace torch_spyre::aten

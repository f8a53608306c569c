#include "Copy.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <numeric>
#include <vector>

#include "../runtime/SpyreAllocator.h"
#include "../runtime/SpyreException.h"
#include "../runtime/SpyreHostAllocator.h"
#include "../runtime/SpyreStream.h"
#include "../runtime/SpyreTrace.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// Outer iterations of spyre_memcpy_3d calls before host staging is preferred.
constexpr int64_t kMaxStridedCalls = 256;

bool is_spyre(const at::Tensor& t) { return t.is_privateuseone(); }

enum Counter {
    kHtoD,
    kDtoH,
    kDtoD,
    kMemcpy3d,
    kStaged,
    kRmw,
    kThroughHost,
    kCast,
    kLayout,
    kNumCounters
};
constexpr const char* kCounterNames[kNumCounters] = {
    "htod",         "dtoh", "dtod",  "memcpy_3d", "host_staged", "read_modify_write",
    "through_host", "cast", "layout"};
std::array<std::atomic<uint64_t>, kNumCounters> g_counters{};

void count(Counter c) { g_counters[c].fetch_add(1, std::memory_order_relaxed); }

// One side of a copy: device memory (buffer + byte offset of element 0) or host memory.
struct Side {
    bool device = false;
    spyre_buffer_t buf = nullptr;
    uint64_t off = 0;
    char* host = nullptr;
};

Side side_of(const at::Tensor& t) {
    Side s;
    if (is_spyre(t)) {
        const DeviceSpan d = device_span(t);
        s.device = true;
        s.buf = d.buffer;
        s.off = d.offset;
    } else {
        s.host = static_cast<char*>(t.data_ptr());
    }
    return s;
}

Side advance(Side s, int64_t bytes) {
    if (s.device)
        s.off += static_cast<uint64_t>(bytes);
    else
        s.host += bytes;
    return s;
}

// The direction of a copy, as torch.profiler's device track names it.
const char* copy_kind(const Side& dst, const Side& src) {
    return dst.device ? (src.device ? "DtoD" : "HtoD") : "DtoH";
}

void linear(const Side& dst, const Side& src, uint64_t bytes, spyre_stream_t st) {
    if (bytes == 0) return;
    trace::CopyScope traced(st, copy_kind(dst, src), bytes);
    if (dst.device && src.device) {
        SPYRE_CHECK(spyre_memcpy_dtod_async(dst.buf, dst.off, src.buf, src.off, bytes, st));
        count(kDtoD);
    } else if (dst.device) {
        SPYRE_CHECK(spyre_memcpy_htod_async(dst.buf, dst.off, src.host, bytes, st));
        count(kHtoD);
    } else {
        SPYRE_CHECK(spyre_memcpy_dtoh_async(dst.host, src.buf, src.off, bytes, st));
        count(kDtoH);
    }
}

// A dimension of a copy: its size and the strides (in elements) of both sides.
struct Dim {
    int64_t size, dst, src;
};

// The dimensions of a copy of `sizes` elements, outermost first (ordered by the destination's
// strides), with adjacent dimensions merged where both sides allow it.
std::vector<Dim> plan(at::IntArrayRef sizes, at::IntArrayRef dst, at::IntArrayRef src) {
    std::vector<Dim> dims;
    for (size_t i = 0; i < sizes.size(); ++i)
        if (sizes[i] != 1) dims.push_back({sizes[i], dst[i], src[i]});
    std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) {
        return a.dst != b.dst ? a.dst > b.dst : a.src > b.src;
    });
    std::vector<Dim> out;
    for (const Dim& d : dims) {
        if (!out.empty() && out.back().dst == d.dst * d.size && out.back().src == d.src * d.size) {
            out.back() = {out.back().size * d.size, d.dst, d.src};
        } else {
            out.push_back(d);
        }
    }
    return out;
}

// Copies a planned layout with spyre_memcpy_3d calls (at most three dimensions each, looping
// over the others). False if the layout does not fit (innermost stride not 1 on both sides,
// rows or slices that overlap, too many calls); nothing has been queued then.
bool strided(const Side& dst, const Side& src, const std::vector<Dim>& dims, int64_t item,
             spyre_stream_t st, bool slices = true) {
    if (dims.empty()) {
        linear(dst, src, static_cast<uint64_t>(item), st);
        return true;
    }
    const Dim& in = dims.back();
    if (in.dst != 1 || in.src != 1) return false;
    const int64_t width = in.size * item;
    const size_t k = dims.size();
    if (k == 1) {
        linear(dst, src, static_cast<uint64_t>(width), st);
        return true;
    }
    const Dim& rows = dims[k - 2];
    if (rows.dst * item < width || rows.src * item < width) return false;
    int64_t depth = 1, dst_slice = 0, src_slice = 0;
    size_t outer = k - 2;
    if (k >= 3 && slices) {
        const Dim& sl = dims[k - 3];
        dst_slice = sl.dst * item;
        src_slice = sl.src * item;
        if (dst_slice < rows.dst * item * rows.size || src_slice < rows.src * item * rows.size)
            return false;
        depth = sl.size;
        outer = k - 3;
    }
    int64_t calls = 1;
    for (size_t i = 0; i < outer; ++i) {
        calls *= dims[i].size;
        if (calls > kMaxStridedCalls) return false;
    }
    std::vector<int64_t> index(outer, 0);
    for (int64_t c = 0; c < calls; ++c) {
        int64_t doff = 0, soff = 0;
        for (size_t i = 0; i < outer; ++i) {
            doff += index[i] * dims[i].dst;
            soff += index[i] * dims[i].src;
        }
        const Side d = advance(dst, doff * item), s = advance(src, soff * item);
        spyre_memcpy3d_params p{};
        if (s.device) {
            p.src_buffer = s.buf;
            p.src_offset = s.off;
        } else {
            p.src_host = s.host;
        }
        if (d.device) {
            p.dst_buffer = d.buf;
            p.dst_offset = d.off;
        } else {
            p.dst_host = d.host;
        }
        p.src_pitch = static_cast<uint64_t>(rows.src * item);
        p.dst_pitch = static_cast<uint64_t>(rows.dst * item);
        p.src_slice_pitch = static_cast<uint64_t>(src_slice);
        p.dst_slice_pitch = static_cast<uint64_t>(dst_slice);
        p.width = static_cast<uint64_t>(width);
        p.height = static_cast<uint64_t>(rows.size);
        p.depth = static_cast<uint64_t>(depth);
        trace::CopyScope traced(st, copy_kind(d, s), p.width * p.height * p.depth);
        SPYRE_CHECK(spyre_memcpy_3d_async(&p, st));
        count(kMemcpy3d);
        for (size_t i = outer; i-- > 0;) {
            if (++index[i] < dims[i].size) break;
            index[i] = 0;
        }
    }
    return true;
}

bool strided(const at::Tensor& dst, const at::Tensor& src, spyre_stream_t st) {
    return strided(side_of(dst), side_of(src), plan(dst.sizes(), dst.strides(), src.strides()),
                   dst.element_size(), st);
}

// A layout whose innermost dimension is strided on a side (a column of a matrix, every other
// element): rows of one element, which the copy engine moves too (DMA_COPY_2D takes any row
// width). For destinations whose elements are nowhere adjacent, where the cores' layout program
// (dense destinations only) cannot write; slower per byte than whole rows, so tried last.
bool element_rows(const at::Tensor& dst, const at::Tensor& src, spyre_stream_t st) {
    std::vector<Dim> dims = plan(dst.sizes(), dst.strides(), src.strides());
    if (dims.empty() || (dims.back().dst == 1 && dims.back().src == 1)) return false;
    dims.push_back({1, 1, 1});
    // slices of rows where their pitches nest on both sides, else one call per slice (a
    // transpose of a few long rows: a call per row)
    return strided(side_of(dst), side_of(src), dims, dst.element_size(), st) ||
           strided(side_of(dst), side_of(src), dims, dst.element_size(), st, false);
}

// Both are non-overlapping and dense and map indices to memory alike: one linear copy.
bool same_dense_layout(const at::Tensor& a, const at::Tensor& b) {
    if (!a.is_non_overlapping_and_dense() || !b.is_non_overlapping_and_dense()) return false;
    for (int64_t i = 0; i < a.dim(); ++i)
        if (a.size(i) > 1 && a.stride(i) != b.stride(i)) return false;
    return true;
}

// Elements from a tensor's first element to its last (strides are never negative).
int64_t span_elems(const at::Tensor& t) {
    int64_t n = 1;
    for (int64_t i = 0; i < t.dim(); ++i) n += (t.size(i) - 1) * t.stride(i);
    return n;
}

bool has_zero_stride(const at::Tensor& t) {
    for (int64_t i = 0; i < t.dim(); ++i)
        if (t.size(i) > 1 && t.stride(i) == 0) return true;
    return false;
}

// Strides of a dense tensor of t's sizes laid out in the order of t's strides.
std::vector<int64_t> dense_strides_like(const at::Tensor& t) {
    const int64_t n = t.dim();
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
    std::vector<int64_t> strides(static_cast<size_t>(n));
    int64_t s = 1;
    for (int64_t i = n; i-- > 0;) {
        strides[static_cast<size_t>(order[static_cast<size_t>(i)])] = s;
        s *= std::max<int64_t>(t.size(order[static_cast<size_t>(i)]), 1);
    }
    return strides;
}

spyre_stream_t stream_of(const at::Tensor& t) { return current_native_stream(t); }

void wait(const at::Tensor& t) { synchronize_stream(current_stream(t.device().index())); }

// The CPU memory `t` uses is pinned memory of card `device`: copies use it in place.
bool pinned_for(const at::Tensor& t, c10::DeviceIndex device) {
    return pinned_device(t.storage().data()) == device;
}

// After an asynchronous copy that used host tensor `host` in place.
void finish_direct(const at::Tensor& dev, const at::Tensor& host, bool non_blocking) {
    const c10::DeviceIndex idx = dev.device().index();
    if (!pinned_for(host, idx)) return;  // pageable: libspyre's copy was synchronous for it
    if (non_blocking)
        record_host_use(host.storage().data(), current_stream(idx));
    else
        wait(dev);
}

// The physical values of spyre tensor `src` (no stride-0 dimensions) on the host, same sizes
// and dtype, without src's conj/neg bits.
at::Tensor download(const at::Tensor& src) {
    spyre_stream_t st = stream_of(src);
    const auto opts = src.options().device(at::kCPU);
    const int64_t item = src.element_size();
    count(kStaged);
    if (src.is_non_overlapping_and_dense()) {
        at::Tensor stage = at::empty_strided(src.sizes(), src.strides(), opts);
        linear(side_of(stage), side_of(src), static_cast<uint64_t>(src.numel() * item), st);
        return stage;
    }
    at::Tensor stage = at::empty_strided(src.sizes(), dense_strides_like(src), opts);
    if (strided(stage, src, st)) return stage;
    // The whole byte range the view spans, then the view on the host.
    count(kRmw);
    at::Tensor buf = at::empty({span_elems(src)}, opts);
    linear(side_of(buf), side_of(src), static_cast<uint64_t>(buf.numel() * item), st);
    return buf.as_strided(src.sizes(), src.strides(), 0);
}

// The logical values of spyre tensor `src` on the host (any sizes, strides, bits).
at::Tensor to_host(const at::Tensor& src) {
    at::Tensor out = at::empty(src.sizes(), src.options().device(at::kCPU));
    copy_(out, src, false);
    return out;
}

void copy_h2d(const at::Tensor& dst, at::Tensor src, bool non_blocking) {
    c10::DeviceGuard guard(dst.device());
    spyre_stream_t st = stream_of(dst);
    const int64_t item = dst.element_size();
    // The values as dst's memory must hold them.
    if (src.scalar_type() != dst.scalar_type()) src = src.to(dst.scalar_type());
    if (dst.is_neg()) src = src.neg();
    if (dst.is_conj()) src = src.conj();
    src = src.resolve_conj().resolve_neg();

    bool direct = true;  // the copy reads src's own memory
    if (same_dense_layout(dst, src)) {
        linear(side_of(dst), side_of(src), static_cast<uint64_t>(dst.numel() * item), st);
    } else if (strided(dst, src, st)) {
    } else {
        direct = false;
        count(kStaged);
        at::Tensor stage = at::empty_strided(dst.sizes(), dense_strides_like(dst), src.options());
        stage.copy_(src);
        if (same_dense_layout(dst, stage)) {
            linear(side_of(dst), side_of(stage), static_cast<uint64_t>(dst.numel() * item), st);
        } else if (!strided(dst, stage, st)) {
            // A view whose innermost stride is not 1: read the byte range it spans, update the
            // view's elements on the host, write the range back (stream-ordered).
            count(kRmw);
            at::Tensor buf = at::empty({span_elems(dst)}, src.options());
            const uint64_t bytes = static_cast<uint64_t>(buf.numel() * item);
            linear(side_of(buf), side_of(dst), bytes, st);
            buf.as_strided(dst.sizes(), dst.strides(), 0).copy_(src);
            linear(side_of(dst), side_of(buf), bytes, st);
        }
    }
    if (direct && pinned_for(src, dst.device().index()) && non_blocking)
        record_host_use(src.storage().data(), current_stream(dst.device().index()));
    else if (!non_blocking)
        wait(dst);
}

void copy_d2h(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
    c10::DeviceGuard guard(src.device());
    if (has_zero_stride(src)) {
        // A broadcast source: fetch its distinct elements once and expand on the host.
        std::vector<int64_t> sizes(src.sizes().begin(), src.sizes().end());
        for (size_t i = 0; i < sizes.size(); ++i)
            if (src.stride(static_cast<int64_t>(i)) == 0) sizes[i] = 1;
        at::Tensor compact = src.as_strided(sizes, src.strides(), src.storage_offset());
        dst.copy_(to_host(compact).expand(src.sizes()));
        return;
    }
    const bool same_bits = src.is_conj() == dst.is_conj() && src.is_neg() == dst.is_neg();
    if (src.scalar_type() == dst.scalar_type() && same_bits) {
        spyre_stream_t st = stream_of(src);
        if (same_dense_layout(dst, src)) {
            linear(side_of(dst), side_of(src),
                   static_cast<uint64_t>(src.numel() * src.element_size()), st);
            finish_direct(src, dst, non_blocking);
            return;
        }
        if (strided(dst, src, st)) {
            finish_direct(src, dst, non_blocking);
            return;
        }
    }
    at::Tensor stage = download(src);
    if (src.is_conj()) stage = stage.conj();
    if (src.is_neg()) stage = stage._neg_view();
    dst.copy_(stage);  // on the host: dtype, layout and bits
}

// Whether two spyre tensors' byte ranges intersect.
bool ranges_overlap(const at::Tensor& a, const at::Tensor& b) {
    if (!a.storage().is_alias_of(b.storage())) return false;
    const int64_t ia = a.element_size(), ib = b.element_size();
    const int64_t a0 = a.storage_offset() * ia, a1 = a0 + span_elems(a) * ia;
    const int64_t b0 = b.storage_offset() * ib, b1 = b0 + span_elems(b) * ib;
    return a0 < b1 && b0 < a1;
}

// on_cores: the cores may make the source dense; temporary: the copy may go through a dense
// temporary on dst's card (both off for the halves of such copies, so nothing recurses).
void copy_d2d(const at::Tensor& dst, const at::Tensor& src, bool non_blocking, bool on_cores = true,
              bool temporary = true);
bool d2d_on_card(const at::Tensor& dst, const at::Tensor& src, bool non_blocking, bool on_cores,
                 bool temporary);

// dst's dims in the order of its strides, outermost first.
std::vector<int64_t> stride_order(const at::Tensor& dst) {
    std::vector<int64_t> order(static_cast<size_t>(dst.dim()));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return dst.stride(a) > dst.stride(b); });
    return order;
}

// How the cores convert between two dtypes exactly as torch does on the CPU, or why they do not.
struct CastRule {
    enum Kind { kNone, kConvert, kNonzero, kIntNonzero, kTruncate } kind = kNone;
    const char* why = "";  // for kNone: the reason, in the fallback's name
};

CastRule cast_rule(at::ScalarType from, at::ScalarType to) {
    const auto f = op_dtype(from), t = op_dtype(to);
    if (!f || !t) return {CastRule::kNone, "a dtype the cores do not compute"};
    // int64 and uint8 (and every integer pair) convert exactly in integers (VINT CVT): wrapping
    // between integer types, truncation toward zero from floats (NaN and values outside the type
    // are undefined in torch; the card gives 0 and saturates), int64 -> fp32 rounded once to
    // nearest even and then to fp16/bf16, as torch converts through float.
    const bool wide = *f == SPYRE_DTYPE_INT64 || *f == SPYRE_DTYPE_UINT8 ||
                      *t == SPYRE_DTYPE_INT64 || *t == SPYRE_DTYPE_UINT8;
    // bool from an integer: x != 0 exactly (VINT NE).
    if (to == at::kBool && wide) return {CastRule::kIntNonzero};
    if (wide) return {CastRule::kConvert};
    // bool: any nonzero value (NaN included) is true: where(x, 1, 0) (VSEL tests x != 0 in fp32,
    // exact for every int8/int32 and float value).
    if (to == at::kBool) return {CastRule::kNonzero};
    // Float destinations: the fp32 value (exact from fp16, bf16, int8, bool; int32 rounded to
    // nearest even, as torch converts through float) rounded once to nearest even (VUN COPY).
    if (is_float(to)) return {CastRule::kConvert};
    // Integer destinations. Torch truncates toward zero, the ISA rounds to nearest: the values
    // are truncated in fp32 first (kTruncateKernel), then converted exactly.
    if (is_float(from)) return {CastRule::kTruncate};
    if (to == at::kInt) return {CastRule::kConvert};                        // int8, bool: exact
    if (to == at::kChar && from == at::kBool) return {CastRule::kConvert};  // 0/1
    return {CastRule::kConvert};  // int32 -> int8: VINT CVT wraps, as torch
}

// trunc(x) in fp32 with the fused kernel's ops (exact, every step is): for a = |x| clamped to
// 2^23, a + 2^23 - 2^23 is a rounded to nearest (the sum's ulp is 1); one less where that is
// above a (the step (r - a) * 2^24 clamped to [0, 1]: r - a is exact and 0 or at least 2^-24);
// a above 2^23 is an integer and is added back; x's sign is restored as max(min(x, F), -F). NaN
// and values outside the integer type are undefined in torch.
constexpr const char* kTruncateKernel =
    "out f32\n"
    "%0 = load 0\n%1 = abs %0\n%2 = const 8388608\n%3 = min %1 %2\n%4 = add %3 %2\n"
    "%5 = sub %4 %2\n%6 = sub %5 %3\n%7 = relu %6\n%8 = const 16777216\n%9 = mul %7 %8\n"
    "%10 = const 1\n%11 = min %9 %10\n%12 = sub %5 %11\n%13 = sub %1 %3\n%14 = add %12 %13\n"
    "%15 = min %0 %14\n%16 = neg %14\n%17 = max %15 %16\nstore 0 %17\n";

const char* fused_type(at::ScalarType t) {
    return t == at::kFloat ? "f32" : t == at::kHalf ? "f16" : "bf16";
}

// dst = src converted to dst's dtype on src's card (one elementwise launch, preceded by the
// truncating fused kernel for float -> integer, by a spyre_op_copy for a source that is not
// dense, and followed by a copy into a destination that the cast cannot write in place). False
// if the op library does not take the case; nothing but temporaries has been written then.
bool cast_on_card(const at::Tensor& dst, const at::Tensor& src, const CastRule& rule,
                  bool non_blocking) {
    if (dst.dim() > SPYRE_TENSOR_MAX_DIMS || src.dim() > SPYRE_TENSOR_MAX_DIMS) return false;
    c10::DeviceGuard guard(src.device());
    // Both sides with dst's dims in the order of its strides: a dense dst (a transposed or
    // channels-last one too) is then row-major and written in place, and the source is made
    // dense in that order on the card (a transpose included) when it is not already.
    const std::vector<int64_t> order = stride_order(dst);
    const at::Tensor fs = src.permute(order), fd = dst.permute(order);
    const auto in = stick_dense(fs, "aten::_copy_from");
    if (!in) return false;
    const bool in_place =
        dst.device() == src.device() && is_stick_dense(fd) && !ranges_overlap(dst, src);
    const at::Tensor out = in_place ? fd : at::empty(fd.sizes(), fd.options().device(src.device()));
    spyre_tensor ti = op_tensor(*in);
    const spyre_tensor to = op_tensor(out);
    const spyre_stream_t st = op_stream(out);
    at::Tensor truncated;  // kTruncate: trunc(src) in fp32, converted exactly by the CAST
    if (rule.kind == CastRule::kTruncate) {
        truncated = at::empty(in->sizes(), in->options().dtype(at::kFloat));
        const std::string kernel = std::string("spyre.kernel 1\nin ") +
                                   fused_type(in->scalar_type()) + " full\n" + kTruncateKernel;
        const spyre_tensor tt = op_tensor(truncated);
        if (!op_ran("aten::_copy_from",
                    spyre_op_fused(st, kernel.c_str(), static_cast<uint64_t>(in->numel()), &ti, 1,
                                   &tt, 1)))
            return false;
        ti = tt;
    }
    const spyre_status status =
        rule.kind == CastRule::kNonzero ? spyre_op_where(st, &ti, nullptr, 1.0, nullptr, 0.0, &to)
        : rule.kind == CastRule::kIntNonzero
            ? spyre_op_binary_int(st, SPYRE_BINARY_NE, &ti, nullptr, 0, 1, &to)
            : spyre_op_unary(st, SPYRE_UNARY_CAST, &ti, &to);
    if (!op_ran("aten::_copy_from", status)) return false;
    count(kCast);
    // Into dst's layout or onto its card: a copy of one dtype (a cross-card one blocks, so the
    // temporary outlives it).
    if (!in_place) copy_d2d(fd, out, non_blocking && dst.device() == src.device());
    return true;
}

// t's elements as a type the op library moves unchanged (spyre_op_copy moves bytes): t itself
// when the library has its type, else a view of an equal-width type (a float64, complex64 or
// int16 tensor), a complex128 element as two int64. nullopt if there is none.
std::optional<at::Tensor> as_copyable(const at::Tensor& t) {
    if (op_dtype(t.scalar_type())) return t;
    if (t.is_conj() || t.is_neg()) return std::nullopt;
    switch (t.element_size()) {
        case 1:
            return t.view(at::kByte);
        case 2:
            return t.view(at::kHalf);
        case 4:
            return t.view(at::kInt);
        case 8:
            return t.view(at::kLong);
        case 16:
            if (t.scalar_type() == at::kComplexDouble) return at::view_as_real(t).view(at::kLong);
            return std::nullopt;
        default:
            return std::nullopt;
    }
}

// The inverse of as_copyable for a tensor of `type`.
at::Tensor from_copyable(const at::Tensor& bits, at::ScalarType type) {
    if (bits.scalar_type() == type) return bits;
    if (type == at::kComplexDouble) return at::view_as_complex(bits.view(at::kDouble));
    return bits.view(type);
}

// A layout the copy engine cannot express (a transpose, a broadcast, interleaved views of one
// buffer) made dense on src's card by the cores (spyre_op_copy), in dst's stride order: into
// dst itself where dst is dense in that order, on src's card and apart from src (the result is
// dst then), else into a temporary that the copy engine can then move. nullopt if the library
// does not take the layout; nothing has been written then.
std::optional<at::Tensor> dense_on_cores(const at::Tensor& dst_in, const at::Tensor& src_in) {
    const auto dst_bits = as_copyable(dst_in), src_bits = as_copyable(src_in);
    if (!dst_bits || !src_bits) return std::nullopt;
    const at::Tensor &dst = *dst_bits, &src = *src_bits;
    c10::DeviceGuard guard(src.device());
    const std::vector<int64_t> order = stride_order(dst);
    const at::Tensor fs = src.permute(order), fd = dst.permute(order);
    // The library takes 8 dims: merge the source's dims that are one run in memory (a 3-D
    // convolution's gradient taps have 9); size-1 dims drop out.
    std::vector<int64_t> sizes, strides;
    for (int64_t i = 0; i < fs.dim(); ++i) {
        if (fs.size(i) == 1) continue;
        if (!sizes.empty() && strides.back() == fs.stride(i) * fs.size(i)) {
            sizes.back() *= fs.size(i);
            strides.back() = fs.stride(i);
        } else {
            sizes.push_back(fs.size(i));
            strides.push_back(fs.stride(i));
        }
    }
    if (sizes.size() > SPYRE_TENSOR_MAX_DIMS) return std::nullopt;
    const bool in_place =
        dst.device() == src.device() && is_stick_dense(fd) && !ranges_overlap(dst, src);
    const at::Tensor out = in_place ? fd : at::empty(fs.sizes(), src.options());
    const at::Tensor ms = fs.as_strided(sizes, strides), mo = out.view(sizes);
    const spyre_tensor ts = op_tensor(ms), to = op_tensor(mo);
    if (!op_ran("aten::_copy_from", spyre_op_copy(op_stream(out), &ts, &to))) return std::nullopt;
    count(kLayout);
    if (in_place) return dst_in;
    std::vector<int64_t> back(order.size());  // the inverse permutation
    for (size_t i = 0; i < order.size(); ++i)
        back[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
    return from_copyable(out.permute(back), dst_in.scalar_type());
}

// src made dense by the cores (dense_on_cores), then moved into dst by the copy engine where it
// is not dst already; false if the cores do not take the layout.
bool copy_through_cores(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
    // the copy engine moves rows: a destination whose elements are not adjacent anywhere
    // (every stride past 1, as an interleaved view's) goes through the host in any case
    bool rows = dst.numel() <= 1;
    for (int64_t i = 0; i < dst.dim(); ++i) rows |= dst.size(i) > 1 && dst.stride(i) == 1;
    if (!rows) return false;
    const auto dense = dense_on_cores(dst, src);
    if (!dense) return false;
    // A copy to another card blocks, so the temporary outlives it; there a destination that is
    // not dense takes a temporary on its own card first.
    if (!dense->is_same(dst))
        copy_d2d(dst, *dense, non_blocking && dst.device() == src.device(), false,
                 dst.device() != src.device());
    return true;
}

// What is left (a destination without a unit stride that overlaps its source or takes a
// broadcast, a copy from another card into a destination that is not dense): through a dense
// temporary on dst's card, each half by the paths above; false (only the temporary written)
// if no card path makes the temporary.
bool through_temporary(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
    // dense in dst's stride order, on dst's card: the second half is then rows, not a transpose
    const at::Tensor tmp = at::empty_strided(dst.sizes(), dense_strides_like(dst), dst.options());
    // a copy from another card blocks, so src is read before the caller may reuse it
    if (!d2d_on_card(tmp, src, non_blocking && dst.device() == src.device(), true, false))
        return false;
    copy_d2d(dst, tmp, non_blocking, true, false);
    return true;
}

// The copy through the host that no card path took: device data downloaded and uploaded, CPU
// work as a fallback's (a warning once, an error under TORCH_SPYRE_STRICT=1).
void d2d_through_host(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
    note_cpu_work("aten::_copy_from (a device layout no card path copies)");
    count(kThroughHost);
    copy_h2d(dst, to_host(src), non_blocking);
}

// dst = src, one dtype, by a path on the cards; false (nothing written but temporaries) if none
// takes the layout.
bool d2d_on_card(const at::Tensor& dst, const at::Tensor& src, bool non_blocking, bool on_cores,
                 bool temporary) {
    if (dst.device() != src.device()) {
        if (same_dense_layout(dst, src)) {
            // libspyre reads the source through its card's own default stream: wait for the
            // work queued on the source's current stream first.
            wait(src);
            c10::DeviceGuard guard(dst.device());
            const DeviceSpan d = device_span(dst), s = device_span(src);
            const uint64_t bytes = static_cast<uint64_t>(dst.numel() * dst.element_size());
            trace::CopyScope traced(stream_of(dst), "DtoD", bytes);
            SPYRE_CHECK(spyre_memcpy_dtod_async(d.buffer, d.offset, s.buffer, s.offset, bytes,
                                                stream_of(dst)));
            count(kDtoD);
            if (!non_blocking) wait(dst);
            return true;
        }
        return (on_cores && copy_through_cores(dst, src, non_blocking)) ||
               (temporary && through_temporary(dst, src, non_blocking));
    }
    c10::DeviceGuard guard(dst.device());
    spyre_stream_t st = stream_of(dst);
    const bool apart = !has_zero_stride(src) && !ranges_overlap(dst, src);
    if (apart && same_dense_layout(dst, src)) {
        linear(side_of(dst), side_of(src), static_cast<uint64_t>(dst.numel() * dst.element_size()),
               st);
        return true;
    }
    if (apart && strided(dst, src, st)) return true;
    // Layouts no copy-engine copy of rows expresses (a transpose, a broadcast, interleaved views
    // of one buffer): by the cores, by the copy engine in one-element rows, through a temporary
    // on the card.
    return (on_cores && copy_through_cores(dst, src, non_blocking)) ||
           (apart && element_rows(dst, src, st)) ||
           (temporary && through_temporary(dst, src, non_blocking));
}

void copy_d2d(const at::Tensor& dst, const at::Tensor& src, bool non_blocking, bool on_cores,
              bool temporary) {
    const bool bits = src.is_conj() != dst.is_conj() || src.is_neg() != dst.is_neg();
    const bool convert = src.scalar_type() != dst.scalar_type() || bits;
    if (convert) {
        CastRule rule{CastRule::kNone, "conj/neg"};
        if (!bits) rule = cast_rule(src.scalar_type(), dst.scalar_type());
        // The cores convert the physical values; equal neg bits commute with every rule.
        if (rule.kind != CastRule::kNone && cast_on_card(dst, src, rule, non_blocking)) return;
        // This is CPU work.
        note_cpu_work(std::string("aten::_copy_from (") + c10::toString(src.scalar_type()) +
                      " -> " + c10::toString(dst.scalar_type()) + ", " +
                      (rule.kind == CastRule::kNone ? rule.why : "a layout the cards do not cast") +
                      ")");
        count(kThroughHost);
        copy_h2d(dst, to_host(src), non_blocking);
        return;
    }
    if (!d2d_on_card(dst, src, non_blocking, on_cores, temporary))
        d2d_through_host(dst, src, non_blocking);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
    copy_(dst, self, non_blocking);
    return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
    if (!dst.sizes().equals(self.sizes())) dst.resize_(self.sizes());
    copy_(dst, self, false);
    return dst;
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
    TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
                " elements cannot be converted to Scalar");
    return at::_local_scalar_dense(to_host(self));
}

}  // namespace

std::vector<std::pair<std::string, uint64_t>> copy_stats() {
    std::vector<std::pair<std::string, uint64_t>> out;
    for (int i = 0; i < kNumCounters; ++i) out.emplace_back(kCounterNames[i], g_counters[i].load());
    return out;
}

void reset_copy_stats() {
    for (auto& c : g_counters) c = 0;
}

spyre_stream_t current_native_stream(const at::Tensor& t) {
    return native_stream(current_stream(t.device().index()));
}

DeviceSpan device_span(const at::Tensor& t) {
    const DevicePtr p = lookup(t.storage().data());
    return {p.buffer, p.offset + static_cast<uint64_t>(t.storage_offset() * t.element_size())};
}

void copy_(const at::Tensor& dst, const at::Tensor& self, bool non_blocking) {
    TORCH_CHECK(dst.defined() && self.defined(), "copy_: undefined tensor");
    for (const at::Tensor* t : {&dst, &self})
        TORCH_CHECK(t->device().is_cpu() || is_spyre(*t), "torch_spyre copies between CPU and ",
                    "spyre tensors, not ", t->device());
    TORCH_CHECK(dst.layout() == at::kStrided && self.layout() == at::kStrided,
                "torch_spyre copies strided tensors only");
    const at::Tensor src = self.sizes().equals(dst.sizes()) ? self : self.expand(dst.sizes());
    if (dst.numel() == 0) return;
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, src);
    if (dst.is_same(src) ||
        (dst.is_alias_of(src) && dst.storage_offset() == src.storage_offset() &&
         dst.strides().equals(src.strides()) && dst.scalar_type() == src.scalar_type() &&
         dst.is_conj() == src.is_conj() && dst.is_neg() == src.is_neg()))
        return;
    if (is_spyre(dst) && is_spyre(src))
        copy_d2d(dst, src, non_blocking);
    else if (is_spyre(dst))
        copy_h2d(dst, src, non_blocking);
    else if (is_spyre(src))
        copy_d2h(dst, src, non_blocking);
    else
        dst.copy_(src, non_blocking);
}

// copy_ resolves the conjugate and negative bits of both sides itself. Without these, the math-bit
// fallbacks would materialise a conj/neg source by clone(), whose copy_ comes back to _copy_from
// with the bit still set: endless recursion (torch.fft.ifft of a real spyre tensor returns a
// conjugate view). CPU and CUDA never reach _copy_from, so core registers no such kernels.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
    m.impl("_copy_from", torch::CppFunction::makeFallthrough());
    m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
    m.impl("_copy_from", torch::CppFunction::makeFallthrough());
    m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_copy_from", TORCH_FN(copy_from));
    m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
    m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
}

}  // namespace torch_spyre::aten

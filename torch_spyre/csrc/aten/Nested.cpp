// Nested tensors on the card, as far as nn.TransformerEncoder's inference fast path needs them.
// With a key padding mask (and enable_nested_tensor, the default) the encoder packs its input
// into a nested tensor (`_nested_tensor_from_mask`), runs every layer's
// `_transformer_encoder_layer_fwd` on it and pads the result back (`to_padded_tensor`). PyTorch
// has CPU and CUDA kernels only, so on spyre the encoder failed outright: the CPU fallback
// cannot hand a CPU nested tensor back to the card.
//
// A spyre nested tensor here is PyTorch's NestedTensorImpl over a spyre buffer (dispatch key
// NestedTensorPrivateUse1): the rows of each sequence, packed. The layer runs densely on the
// padded form with the padding as a key padding mask (each sequence attends to its own tokens
// only, which is what the packed form means), and only the real tokens are packed back, so the
// padded positions (and a fully padded sequence's NaN) never leave the kernel. Packing and
// padding are one index_select / index_copy_ launch each; the sequence lengths are one host
// read of the mask (the packed size depends on the data, as on CUDA).
#include <ATen/ATen.h>
#include <ATen/NestedTensorImpl.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <vector>

namespace torch_spyre::aten {
namespace {

// Per sequence of a [N, L] keep-mask: its length, and whether its kept tokens come first.
struct Lengths {
    std::vector<int64_t> len;
    bool left_aligned = true;
};

void check_mask(const at::Tensor& t, const at::Tensor& mask, const char* op) {
    TORCH_CHECK(mask.scalar_type() == at::kBool, op,
                ": expected mask to be of ScalarType Bool, but got ", mask.scalar_type(),
                " instead.");
    TORCH_CHECK(mask.dim() == 2, op, ": expected a 2-D [N, L] mask, got ", mask.dim(), "-D");
    TORCH_CHECK(t.dim() == 3, op, ": expected a 3-D [N, L, D] tensor, got ", t.dim(), "-D");
    TORCH_CHECK(mask.size(0) == t.size(0) && mask.size(1) == t.size(1), op, ": mask of shape ",
                mask.sizes(), " does not match the tensor's first two dims ", t.sizes());
}

Lengths read_lengths(const at::Tensor& mask) {
    const at::Tensor m = mask.to(at::kCPU).contiguous();  // the one host read
    const int64_t n = m.size(0), l = m.size(1);
    const bool* p = m.const_data_ptr<bool>();
    Lengths out;
    out.len.resize(n);
    for (int64_t i = 0; i < n; i++) {
        const bool* row = p + i * l;
        const int64_t len = std::count(row, row + l, true);
        out.len[i] = len;
        out.left_aligned &= std::all_of(row, row + len, [](bool b) { return b; });
    }
    return out;
}

// The rows of a flattened [N * L, D] padded tensor that hold real tokens, in packed order.
at::Tensor token_rows(const std::vector<int64_t>& len, int64_t l, const at::Device& device) {
    std::vector<int64_t> rows;
    for (size_t i = 0; i < len.size(); i++)
        for (int64_t j = 0; j < len[i]; j++) rows.push_back(static_cast<int64_t>(i) * l + j);
    return at::tensor(rows, at::TensorOptions().dtype(at::kLong)).to(device);
}

// A nested tensor of N [len_i, D] components over a packed [sum(len), D] buffer.
at::Tensor make_nested(const at::Tensor& packed, const std::vector<int64_t>& len, int64_t d) {
    const int64_t n = static_cast<int64_t>(len.size());
    at::Tensor sizes = at::empty({n, 2}, at::TensorOptions().dtype(at::kLong));
    auto* s = sizes.mutable_data_ptr<int64_t>();
    for (int64_t i = 0; i < n; i++) s[2 * i] = len[i], s[2 * i + 1] = d;
    return at::detail::make_tensor<at::native::NestedTensorImpl>(packed.reshape({-1}), sizes);
}

// The padded rows of t [N, L, D] packed by len into a nested tensor.
at::Tensor pack(const at::Tensor& t, const std::vector<int64_t>& len) {
    const int64_t n = t.size(0), l = t.size(1), d = t.size(2);
    const at::Tensor packed = t.reshape({n * l, d}).index_select(0, token_rows(len, l, t.device()));
    return make_nested(packed, len, d);
}

// A nested tensor's components' sizes, each [len_i, D] with one D: the lengths and D (-1 when
// there are no components), or nullopt for any other nested shape.
std::optional<std::pair<std::vector<int64_t>, int64_t>> rows_of(const at::Tensor& nt) {
    const at::Tensor& sizes = at::native::get_nested_sizes(nt);
    if (sizes.dim() != 2 || sizes.size(1) != 2) return std::nullopt;
    const int64_t n = sizes.size(0);
    const auto* s = sizes.const_data_ptr<int64_t>();
    std::vector<int64_t> len(n);
    int64_t d = -1;
    for (int64_t i = 0; i < n; i++) {
        len[i] = s[2 * i];
        if (d >= 0 && s[2 * i + 1] != d) return std::nullopt;
        d = s[2 * i + 1];
    }
    return std::make_pair(std::move(len), d);
}

// The components of a nested tensor (dim 0), views of its storage.
std::vector<at::Tensor> nested_unbind(const at::Tensor& self, int64_t dim) {
    TORCH_CHECK(at::maybe_wrap_dim(dim, self.dim()) == 0,
                "spyre: a nested tensor unbinds along dim 0 only");
    const auto* impl = at::native::get_nested_tensor_impl(self);
    const at::Tensor storage = impl->get_unsafe_storage_as_tensor();
    const at::Tensor &sizes = impl->get_nested_sizes(), &strides = impl->get_nested_strides();
    const auto* offsets = impl->get_storage_offsets().const_data_ptr<int64_t>();
    std::vector<at::Tensor> parts;
    for (int64_t i = 0; i < sizes.size(0); i++) {
        const at::Tensor size = sizes.select(0, i).contiguous(),
                         stride = strides.select(0, i).contiguous();
        parts.push_back(storage.as_strided(
            at::IntArrayRef(size.const_data_ptr<int64_t>(), size.numel()),
            at::IntArrayRef(stride.const_data_ptr<int64_t>(), stride.numel()), offsets[i]));
    }
    return parts;
}

// The packed [sum(len), D] rows of a nested tensor of 2-D components (contiguous or not).
at::Tensor packed_rows(const at::Tensor& nt, int64_t d) {
    const auto* impl = at::native::get_nested_tensor_impl(nt);
    if (at::native::nested_tensor_impl_is_contiguous(impl)) return impl->get_buffer().view({-1, d});
    return at::cat(nested_unbind(nt, 0), 0);
}

bool nested_tensor_from_mask_left_aligned(const at::Tensor& t, const at::Tensor& mask) {
    check_mask(t, mask, "_nested_tensor_from_mask_left_aligned");
    return read_lengths(mask).left_aligned;
}

at::Tensor nested_tensor_from_mask(const at::Tensor& t, const at::Tensor& mask, bool mask_check) {
    check_mask(t, mask, "_nested_tensor_from_mask");
    TORCH_CHECK(t.device() == mask.device(), "_nested_tensor_from_mask: t on ", t.device(),
                ", mask on ", mask.device());
    // the CPU refuses it too (its stack of no components fails)
    TORCH_CHECK(t.size(0) > 0, "_nested_tensor_from_mask: an empty batch makes no nested tensor");
    c10::DeviceGuard guard(t.device());
    const Lengths lengths = read_lengths(mask);
    TORCH_CHECK(!mask_check || lengths.left_aligned,
                "Mask Tensor: non-left-aligned masks are not supported");
    return pack(t, lengths.len);
}

at::Tensor to_padded_tensor(const at::Tensor& self, double padding,
                            at::OptionalIntArrayRef output_size) {
    const auto rows = rows_of(self);
    TORCH_CHECK(rows,
                "spyre: to_padded_tensor takes nested tensors of 2-D components with one "
                "last dim (what nn.TransformerEncoder makes); got component sizes ",
                at::native::get_nested_sizes(self));
    const auto& [len, d] = *rows;
    const int64_t n = static_cast<int64_t>(len.size());
    if (n == 0) {
        const auto options = at::TensorOptions().dtype(self.scalar_type()).device(self.device());
        return at::full(output_size ? *output_size : at::IntArrayRef({0, 0, 0}), padding, options);
    }
    const int64_t longest = *std::max_element(len.begin(), len.end());
    std::vector<int64_t> shape{n, longest, d};
    if (output_size) {
        TORCH_CHECK(output_size->size() == 3,
                    "Length of output_size does not match NestedTensor dims. Broadcasting is not "
                    "supported.");
        TORCH_CHECK(
            (*output_size)[0] == n && (*output_size)[1] >= longest && (*output_size)[2] == d,
            "Value in output_size is less than NestedTensor padded size. Truncation is "
            "not supported.");
        shape.assign(output_size->begin(), output_size->end());
    }
    const at::Tensor buffer = packed_rows(self, d);
    c10::DeviceGuard guard(buffer.device());
    at::Tensor out = at::full(shape, padding, buffer.options());
    if (buffer.numel())
        out.view({n * shape[1], d}).index_copy_(0, token_rows(len, shape[1], out.device()), buffer);
    return out;
}

// The layer on a nested input: padded, run densely with the padding as a key padding mask,
// the real tokens packed back.
at::Tensor nested_transformer_encoder_layer_fwd(
    const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
    const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    bool use_gelu, bool norm_first, double eps, const at::Tensor& norm_weight_1,
    const at::Tensor& norm_bias_1, const at::Tensor& norm_weight_2, const at::Tensor& norm_bias_2,
    const at::Tensor& ffn_weight_1, const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2,
    const at::Tensor& ffn_bias_2, const std::optional<at::Tensor>& mask,
    std::optional<int64_t> mask_type) {
    TORCH_CHECK(!mask || !mask->defined(),
                "_transformer_encoder_layer_fwd: a nested input takes no mask (its padding is "
                "the mask)");
    const auto rows = rows_of(src);
    TORCH_CHECK(rows && (rows->second == embed_dim || rows->first.empty()),
                "_transformer_encoder_layer_fwd: expected a nested input of [length, ", embed_dim,
                "] components, got component sizes ", at::native::get_nested_sizes(src));
    const auto& [len, d] = *rows;
    c10::DeviceGuard guard(src.device());
    const int64_t n = static_cast<int64_t>(len.size());
    const int64_t l = n ? *std::max_element(len.begin(), len.end()) : 0;
    if (l == 0)  // no token at all: nothing to compute
        return make_nested(
            at::empty({0, embed_dim},
                      at::TensorOptions().dtype(src.scalar_type()).device(src.device())),
            len, embed_dim);
    const at::Tensor padded = to_padded_tensor(src, 0.0, std::nullopt);
    const auto dev = padded.device();
    const at::Tensor length =
        at::tensor(len, at::TensorOptions().dtype(at::kLong)).to(dev).view({n, 1});
    const at::Tensor padding =
        at::arange(l, at::TensorOptions().dtype(at::kLong).device(dev)).view({1, l}).ge(length);
    const at::Tensor out = at::_transformer_encoder_layer_fwd(
        padded, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
        norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1,
        ffn_bias_1, ffn_weight_2, ffn_bias_2, padding, /*mask_type=*/1);
    return pack(out, len);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_nested_tensor_from_mask", TORCH_FN(nested_tensor_from_mask));
    m.impl("_nested_tensor_from_mask_left_aligned", TORCH_FN(nested_tensor_from_mask_left_aligned));
}

TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
    m.impl("to_padded_tensor", TORCH_FN(to_padded_tensor));
    m.impl("unbind.int", TORCH_FN(nested_unbind));
    m.impl("_transformer_encoder_layer_fwd", TORCH_FN(nested_transformer_encoder_layer_fwd));
}

}  // namespace torch_spyre::aten

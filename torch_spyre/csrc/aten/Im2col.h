// The patches of a convolution on the card, shared by the convolutions (Convolution.cpp) and
// aten::im2col / aten::col2im (F.unfold / F.fold, Im2col.cpp):
// - im2col: the zero-padded input seen through a strided view as [N, groups, C/groups, k...,
//   out...] patches and made dense on the card (one spyre_op_copy);
// - fold: the inverse's sum: each kernel tap's slice of per-patch values added (one add_ per
//   tap; taps overlap when the stride is smaller than the kernel) onto the positions of the
//   padded input it was read from, held split by stride phase so that each tap's positions are
//   a unit-strided slice the copy engine writes on the card; then the phases interleaved back
//   (one spyre_op_copy) and the padding cut off. Nothing goes through the host.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace torch_spyre::aten {

// The shape of a convolution over an input [N, C, in...] with d = 1..3 spatial dims: groups of
// C/groups input and O/groups output channels, kernel k... and out... positions per dim.
struct ConvGeometry {
    int64_t d = 0, n = 0, c = 0, o = 0, groups = 1, cg = 0, og = 0, positions = 1, taps = 1;
    std::vector<int64_t> in_sp, kernel, out_sp, pads;  // pads: constant_pad_nd's order
    std::vector<int64_t> stride, padding, dilation;

    std::vector<int64_t> in_shape() const;   // [N, C, in...]
    std::vector<int64_t> out_shape() const;  // [N, O, out...]
    bool padded() const;
};

// The geometry, or nullopt for a case the card does not take (d outside 1..3, channels not
// divisible by groups, no input channels, a kernel wider than the padded input, bad strides).
std::optional<ConvGeometry> conv_geometry(at::IntArrayRef in_shape, int64_t out_channels,
                                          at::IntArrayRef kernel, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation,
                                          int64_t groups);

// [groups, N * positions, C/groups * taps]: the patches of input ([N, C, in...]) made dense.
at::Tensor im2col_rows(const at::Tensor& input, const ConvGeometry& g);

// [N, C, in...]: the values of every patch element, given as a tensor (any strides) with the
// dims [groups, N, out..., C/groups, k...], summed onto the input position each was read from.
at::Tensor fold_patches(const at::Tensor& patches, const ConvGeometry& g,
                        const at::TensorOptions& options);

// t made dense on the card: one spyre_op_copy of t's non-trivial dims when they are at most
// 8 (any strides; the copy engine's memcpy_3d needs unit inner strides and would go through
// the host otherwise), else contiguous().
at::Tensor dense(const at::Tensor& t);

// t [N, K, out...] as rows [groups, N * positions, K/groups] (made dense on the card).
at::Tensor channel_rows(const at::Tensor& t, const ConvGeometry& g);

// t [N, K, out...] as [groups, K/groups, N * positions] (made dense on the card).
at::Tensor channel_cols(const at::Tensor& t, const ConvGeometry& g);

}  // namespace torch_spyre::aten

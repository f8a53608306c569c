// Element reads that work for tables of any size: flat[pos] for int64 positions of any shape,
// read as the 128-byte row holding each position (index_select of whole-stick rows: the
// embedding's DMA row copies, which take any number of rows) and the element picked from that
// row (a gather whose table slab is one row). The gather and index programs keep a table's
// slab in a core's scratchpad, so a 1-D table of more than ~2 MB needs this path.
#pragma once

#include <ATen/ATen.h>

namespace torch_spyre::aten {

struct ElementFetch {
    at::Tensor rows;  // [sticks, per]: flat, zero-padded to whole rows
    int64_t per;

    explicit ElementFetch(const at::Tensor& flat) : per(128 / flat.element_size()) {
        const int64_t n = flat.numel();
        const int64_t pad = (per - n % per) % per;
        rows = (pad ? at::constant_pad_nd(flat, {0, pad}, 0) : flat.contiguous()).view({-1, per});
    }
    // Whole rows and no padding: a position past the end is past the last row too, and the row
    // copy refuses it (the launch fails, as the embedding's out-of-range index).
    static bool exact_for(const at::Tensor& flat) {
        return flat.is_contiguous() && (flat.numel() * flat.element_size()) % 128 == 0;
    }
    at::Tensor operator()(const at::Tensor& pos) const {
        const at::Tensor p = pos.reshape({-1});
        const at::Tensor row = rows.index_select(0, p.div(per, "floor"));
        return row.gather(1, p.remainder(per).unsqueeze(1)).view(pos.sizes());
    }
};

}  // namespace torch_spyre::aten

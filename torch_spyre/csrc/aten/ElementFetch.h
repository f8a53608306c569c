// Element reads that work for tables of any size: flat[pos] for int64 positions of any shape,
// read as the 128-byte row holding each position (index_select of whole-stick rows: the
// embedding's DMA row copies, which take any number of rows) and the element picked from that
// row (a gather whose table slab is one row). The gather and index programs keep a table's
// slab in a core's scratchpad, so a 1-D table of more than ~2 MB needs this path.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>

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
    // At most kMaxPositions positions (a caller with more takes another path): each position's
    // whole row is copied, 128 bytes a position (16 MiB a chunk), and the index program takes
    // the one-row gather of 262,144 rows but not of 1M in one launch.
    static constexpr int64_t kMaxPositions = int64_t{1} << 20;
    at::Tensor operator()(const at::Tensor& pos) const {
        constexpr int64_t kChunk = int64_t{1} << 17;
        const at::Tensor p = pos.reshape({-1});
        at::Tensor out = at::empty({p.numel()}, rows.options());
        for (int64_t at = 0; at < p.numel(); at += kChunk) {
            const at::Tensor c = p.narrow(0, at, std::min(kChunk, p.numel() - at));
            const at::Tensor row = rows.index_select(0, c.div(per, "floor"));
            out.narrow(0, at, c.numel())
                .copy_(row.gather(1, c.remainder(per).unsqueeze(1)).view(-1));
        }
        return out.view(pos.sizes());
    }
};

}  // namespace torch_spyre::aten

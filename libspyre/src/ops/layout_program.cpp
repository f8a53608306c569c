// SPDX-License-Identifier: MIT
#include "ops/layout_program.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <numeric>
#include <stdexcept>

#include "ops/sticks.hpp"
#include "spyre/isa.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops {
namespace {

using isa::Alu;
using isa::DType;
using Reg = ProgramBuilder::Reg;

constexpr uint64_t kSpan = 256ull << 20;  // a core's DDR span
uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

DType bits_type(uint32_t es) { return es == 1 ? DType::I8 : es == 2 ? DType::F16 : DType::F32; }

// ---- gathering rows from any address and stride into LX ----
//
// n rows of w bytes, row i at DDR a + i*S (a and S any, element aligned), land in LX with a
// uniform stride so that one vector instruction reads them all: row i at L + i*T.
//   span (strided = false): one LOAD of the bytes from the first row's stick to the last row's
//     end; T = S. Best when rows are close together (dense sources, S < w allowed).
//   strided: the rows fall into p = 128 / gcd(S mod 128, 128) classes with the same offset in
//     their stick (rows j, j+p, ...); one strided LOAD per class (DDR stride p*S, a multiple of
//     128) places them T apart with T = S (mod 128), so L + i*T - slack_i is stick aligned for
//     every row. Reads about w + 128 bytes per row, whatever S is.
struct Gather {
    bool strided = false;
    uint64_t S = 0, w_max = 0, p = 1, T = 0;
};

Gather make_gather(bool strided, uint64_t S, uint64_t w_max) {
    Gather g;
    g.strided = strided, g.S = S, g.w_max = w_max;
    if (!strided) {
        g.T = S;
        return g;
    }
    const uint64_t m = S % kStick;
    g.p = kStick / std::gcd(m, kStick);
    // rows must not overlap: a row's sticks span at most w + 127 bytes before its start plus
    // up to 127 bytes of slack of the next row
    g.T = m == 0 ? up128(w_max + kStick - 1) : up128(w_max + 2 * kStick - 2 - m) + m;
    return g;
}

// LX bytes of a gather of n rows.
uint64_t gather_bytes(const Gather& g, uint64_t n) {
    if (n == 0) return 0;
    if (!g.strided) return up128(kStick - 1 + (n - 1) * g.S + g.w_max);
    return up128((n - 1) * g.T + g.w_max + 2 * kStick);
}

// Registers shared by the programs: r3 src, r4 dst; r28..r31 scratch of the emitters.
class Emit {
  public:
    ProgramBuilder b;

    void dma(bool load, Reg lx, Reg ddr, Reg len, Reg desc = 0) {
        // the span follows every transfer (source and destination may lie far apart); an
        // empty transfer may name an unaligned address
        b.alu(Alu::AND, 31, ddr, 0, -static_cast<int64_t>(kStick));
        b.span(31);
        if (load)
            b.load(lx, ddr, len, desc);
        else
            b.store(lx, ddr, len, desc);
    }

    // Gathers n (register) rows of w (register) bytes starting at DDR address ra into LX at
    // stage (register, stick aligned); sets rl = LX address of row 0 (rows g.T apart). Uses
    // r15 and r22..r31.
    void gather(const Gather& g, Reg ra, Reg rn, Reg rw, Reg stage, Reg rl) {
        b.alu(Alu::AND, 28, ra, 0, kStick - 1);  // slack of row 0
        b.add(rl, stage, 28);
        if (!g.strided) {
            // len = n ? slack + (n-1)*S + w : 0
            b.addi(29, rn, -1);
            b.muli(29, 29, static_cast<int64_t>(g.S));
            b.add(29, 29, rw);
            b.add(29, 29, 28);
            b.alu(Alu::SLTU, 30, 0, rn);
            b.mul(29, 29, 30);
            b.sub(30, ra, 28);
            dma(true, stage, 30, 29);
            return;
        }
        // class j (r30): rows j, j+p, ..: count (n + p-1 - j) / p, the first at a + j*S
        b.set_regs(22,
                   {0, static_cast<int64_t>(g.p * g.S), static_cast<int64_t>(g.p * g.T), 1, 0, 0});
        b.loopi(static_cast<int64_t>(g.p), 30);
        {
            b.sub(22, rn, 30);
            b.addi(22, 22, static_cast<int64_t>(g.p - 1));
            b.alu(Alu::DIVU, 22, 22, 0, static_cast<int64_t>(g.p));
            b.muli(29, 30, static_cast<int64_t>(g.S));
            b.add(29, 29, ra);                       // a + j*S
            b.alu(Alu::AND, 28, 29, 0, kStick - 1);  // its slack
            b.sub(29, 29, 28);                       // its stick
            b.muli(15, 30, static_cast<int64_t>(g.T));
            b.add(15, 15, rl);
            b.sub(15, 15, 28);  // LX: L + j*T - slack, stick aligned
            b.add(28, 28, rw);  // len = slack + w
            dma(true, 15, 29, 28, 22);
        }
        b.endloop();
    }

    // Per-core constants: for core k, registers regs get vals[k]. A branch chain on r1.
    void per_core(const std::vector<Reg>& regs, const std::vector<std::vector<int64_t>>& vals) {
        ProgramBuilder::Label done = b.label();
        for (size_t k = 0; k < vals.size(); ++k) {
            ProgramBuilder::Label next = b.label();
            b.li(28, static_cast<int64_t>(k));
            b.br(isa::Cond::NE, 1, 28, next);
            for (size_t i = 0; i < regs.size(); ++i) b.li(regs[i], vals[k][i]);
            b.jmp(done);
            b.bind(next);
        }
        for (Reg r : regs) b.li(r, 0);  // cores beyond the table: nothing to do
        b.bind(done);
    }
};

void check_span(uint64_t extent, const char* what) {
    if (extent > kSpan)
        throw std::invalid_argument(std::string(what) +
                                    ": one step's source rows span more than a core's 256 MiB "
                                    "DDR window");
}

// ---- dense-destination copies: the stream program ----
//
// The destination is written in order as a stream of pieces; each core owns a range of items
// whose first byte is stick aligned. A piece lands in the output buffer after the carry (the
// bytes of the previous piece past its last whole stick); whole sticks are stored, the carry
// moves to the other buffer. So pieces of any size and alignment make one aligned stream.
struct Stream {
    CopyKind kind = CopyKind::ROWS;
    uint32_t es = 2;
    // outer dims, outermost first: sizes and source byte strides
    std::vector<uint64_t> on, os;
    // inner matrix: nr rows (source byte stride S) of nc contiguous elements (ROWS/ELEMENTS:
    // copied as they are; TRANSPOSE: written transposed, nc rows of nr)
    uint64_t nr = 1, S = 0, nc = 1;
    uint64_t outer() const {
        uint64_t n = 1;
        for (uint64_t x : on) n *= x;
        return n;
    }
    uint64_t piece_bytes() const { return nr * nc * es; }
    uint64_t total_bytes() const { return outer() * piece_bytes(); }
    // highest source byte offset touched + 1
    uint64_t src_extent() const {
        uint64_t e = (nr - 1) * S + nc * es;
        for (size_t k = 0; k < on.size(); ++k) e += (on[k] - 1) * os[k];
        return e;
    }
};

// How a stream is cut into items. ROWS: `block` rows per item, or (chunk > 0) one row in
// pieces of `chunk` elements when rows are too long for LX; TRANSPOSE: `block` source columns
// (destination rows) of all nr rows per item, gathered and transposed `chunk` source rows at a
// time (0 = all at once) into the item's output buffer.
struct Cut {
    uint64_t block = 1, chunk = 0;
};

Cut plan_cut(const LayoutPlan& p) { return {p.block, p.block2}; }

uint64_t items_per_outer(const Stream& s, const Cut& c) {
    if (s.kind == CopyKind::TRANSPOSE) return ceil_div(s.nc, c.block);
    if (c.chunk) return s.nr * ceil_div(s.nc, c.chunk);
    return ceil_div(s.nr, c.block);
}

// Destination offset of item i's first byte.
uint64_t item_offset(const Stream& s, const Cut& c, uint64_t i) {
    const uint64_t per = items_per_outer(s, c), j = i % per;
    uint64_t o = (i / per) * s.piece_bytes();
    if (s.kind == CopyKind::TRANSPOSE) return o + j * c.block * s.nr * s.es;
    if (c.chunk) {
        const uint64_t nch = ceil_div(s.nc, c.chunk);
        return o + (j / nch) * s.nc * s.es + (j % nch) * c.chunk * s.es;
    }
    return o + j * c.block * s.nc * s.es;
}

// LX: two stage buffers (gathers alternate between them), then two output buffers (items
// alternate).
struct StreamLayout {
    Gather g;
    uint64_t rows = 0, w = 0, piece = 0;  // the largest gather (rows x bytes) and item output
    uint64_t stage = 0, ob = 0, obuf = 0, total = 0;
};

StreamLayout stream_layout(const Stream& s, const Cut& c, bool strided) {
    StreamLayout l;
    if (s.kind == CopyKind::TRANSPOSE) {
        l.rows = c.chunk ? std::min(c.chunk, s.nr) : s.nr;
        l.w = std::min(c.block, s.nc) * s.es;
        l.piece = s.nr * l.w;
    } else if (c.chunk) {
        l.rows = 1, l.w = std::min(c.chunk, s.nc) * s.es;
        l.piece = l.w;
    } else {
        l.rows = std::min(c.block, s.nr), l.w = s.nc * s.es;
        l.piece = l.rows * l.w;
    }
    l.g = make_gather(strided, s.S, l.w);
    l.stage = gather_bytes(l.g, l.rows);
    l.ob = 2 * l.stage;
    l.obuf = up128(kStick + l.piece);
    l.total = l.ob + 2 * l.obuf;
    return l;
}

// Core k's items [first, last) and its destination offset: split points near k*I/P where the
// destination is stick aligned.
struct CoreRange {
    uint64_t first = 0, last = 0, dst = 0;
};

std::vector<CoreRange> stream_split(const Stream& s, const Cut& c, uint32_t cores) {
    const uint64_t items = s.outer() * items_per_outer(s, c);
    std::vector<uint64_t> cut(cores + 1, items);
    cut[0] = 0;
    for (uint32_t k = 1; k < cores; ++k) {
        uint64_t i = std::max(cut[k - 1], items * k / cores);
        const uint64_t limit = std::min(items, i + (1u << 20));
        while (i < limit && item_offset(s, c, i) % kStick) ++i;
        cut[k] = i < limit ? i : items;
    }
    std::vector<CoreRange> r(cores);
    for (uint32_t k = 0; k < cores; ++k)
        r[k] = {cut[k], cut[k + 1], cut[k] < items ? item_offset(s, c, cut[k]) : 0};
    return r;
}

// Registers: r2 stage parity offset, r5 item index, r6 items left, r7 destination address, r8
// carry bytes, r9 output parity offset, r10..r14 scratch, r16 source address of the item, r17
// gathered rows, r18 gathered row bytes, r19 item output bytes, r20 stage, r21 row 0 in LX,
// r22..r27 descriptors (r15, r28..r31: the gather's).
std::vector<uint8_t> build_stream(const Stream& s, const LayoutPlan& p) {
    const Cut cut = plan_cut(p);
    const bool tr = s.kind == CopyKind::TRANSPOSE;
    const StreamLayout l = stream_layout(s, cut, p.strided);
    const uint64_t per = items_per_outer(s, cut);
    const auto ranges = stream_split(s, cut, p.cores);
    check_span((l.rows - 1) * s.S + l.w + kStick, "copy");
    Emit e;
    ProgramBuilder& b = e.b;
    b.arg(3, 0), b.arg(4, 1);
    std::vector<std::vector<int64_t>> vals;
    for (const CoreRange& r : ranges)
        vals.push_back({static_cast<int64_t>(r.first), static_cast<int64_t>(r.last - r.first),
                        static_cast<int64_t>(r.dst)});
    e.per_core({5, 6, 7}, vals);
    b.add(7, 7, 4);
    b.li(2, 0);
    b.li(8, 0);
    b.li(9, 0);
    const int64_t T = static_cast<int64_t>(l.g.T);
    auto gather = [&](Reg ra) {
        b.mov(20, 2);
        e.gather(l.g, ra, 17, 18, 20, 21);
        b.alu(Alu::XOR, 2, 2, 0, static_cast<int64_t>(l.stage));
    };
    b.loop(6);
    {
        // item -> its place j in the outer piece, outer indices -> source offset
        b.alu(Alu::REMU, 10, 5, 0, static_cast<int64_t>(per));
        b.alu(Alu::DIVU, 11, 5, 0, static_cast<int64_t>(per));
        b.mov(16, 3);
        for (size_t k = s.on.size(); k-- > 0;) {
            b.alu(Alu::REMU, 12, 11, 0, static_cast<int64_t>(s.on[k]));
            b.alu(Alu::DIVU, 11, 11, 0, static_cast<int64_t>(s.on[k]));
            b.muli(12, 12, static_cast<int64_t>(s.os[k]));
            b.add(16, 16, 12);
        }
        b.addi(13, 9, static_cast<int64_t>(l.ob));
        b.add(13, 13, 8);  // the item's output, after the carry
        if (tr) {
            // columns [c0, c0 + cols) of all nr rows, c0 = j * block; nr/chunk sub-blocks of
            // rows, each gathered and transposed into its columns of the output rows
            b.muli(10, 10, static_cast<int64_t>(cut.block));
            b.li(12, static_cast<int64_t>(s.nc));
            b.sub(12, 12, 10);
            b.alu(Alu::MINU, 12, 12, 0, static_cast<int64_t>(cut.block));
            b.muli(18, 12, s.es);
            b.muli(10, 10, s.es);
            b.add(16, 16, 10);
            b.muli(19, 18, static_cast<int64_t>(s.nr));
            const uint64_t sub = l.rows, nsub = ceil_div(s.nr, sub);
            b.li(10, 0);  // r0
            b.loopi(static_cast<int64_t>(nsub));
            {
                b.li(17, static_cast<int64_t>(s.nr));
                b.sub(17, 17, 10);
                b.alu(Alu::MINU, 17, 17, 0, static_cast<int64_t>(sub));
                b.muli(12, 10, static_cast<int64_t>(s.S));
                b.add(12, 12, 16);
                gather(12);
                b.mov(22, 17);
                b.alu(Alu::DIVU, 23, 18, 0, s.es);
                b.li(24, static_cast<int64_t>(s.nr * s.es));
                b.li(25, T);
                b.muli(14, 10, s.es);
                b.add(14, 14, 13);
                b.vtrans(bits_type(s.es), bits_type(s.es), 14, 21, 22);
                b.addi(10, 10, static_cast<int64_t>(sub));
            }
            b.endloop();
        } else {
            if (cut.chunk) {
                // row j / chunks, elements [c0, c0 + n) of it, c0 = (j % chunks) * chunk
                const uint64_t nch = ceil_div(s.nc, cut.chunk);
                b.alu(Alu::DIVU, 12, 10, 0, static_cast<int64_t>(nch));
                b.muli(12, 12, static_cast<int64_t>(s.S));
                b.add(16, 16, 12);
                b.alu(Alu::REMU, 10, 10, 0, static_cast<int64_t>(nch));
                b.muli(10, 10, static_cast<int64_t>(cut.chunk));
                b.li(12, static_cast<int64_t>(s.nc));
                b.sub(12, 12, 10);
                b.alu(Alu::MINU, 12, 12, 0, static_cast<int64_t>(cut.chunk));
                b.muli(18, 12, s.es);
                b.muli(10, 10, s.es);
                b.add(16, 16, 10);
                b.li(17, 1);
                b.mov(19, 18);
            } else {
                // rows [r0, r0 + n), r0 = j * block
                b.muli(10, 10, static_cast<int64_t>(cut.block));
                b.li(17, static_cast<int64_t>(s.nr));
                b.sub(17, 17, 10);
                b.alu(Alu::MINU, 17, 17, 0, static_cast<int64_t>(cut.block));
                b.li(18, static_cast<int64_t>(s.nc * s.es));
                b.muli(10, 10, static_cast<int64_t>(s.S));
                b.add(16, 16, 10);
                b.muli(19, 17, static_cast<int64_t>(s.nc * s.es));
            }
            gather(16);
            // the rows, contiguous in the output
            b.mov(22, 17);
            b.mov(23, 18);
            b.mov(24, 18);
            b.li(25, T);
            b.vun(isa::VUn::COPY, DType::I8, DType::I8, 13, 21, 22);
        }
        // store the whole sticks, carry the rest to the other buffer
        b.add(14, 8, 19);                                           // bytes in the buffer
        b.alu(Alu::AND, 15, 14, 0, -static_cast<int64_t>(kStick));  // whole sticks
        b.addi(12, 9, static_cast<int64_t>(l.ob));
        e.dma(false, 12, 7, 15);
        b.add(7, 7, 15);
        b.sub(8, 14, 15);
        b.add(12, 12, 15);  // carry source
        b.alu(Alu::XOR, 9, 9, 0, static_cast<int64_t>(l.obuf));
        b.addi(13, 9, static_cast<int64_t>(l.ob));
        b.set_regs(22, {1});
        b.mov(23, 8);
        b.mov(24, 8);
        b.mov(25, 8);
        b.vun(isa::VUn::COPY, DType::I8, DType::I8, 13, 12, 22);
        b.addi(5, 5, 1);
    }
    b.endloop();
    b.addi(12, 9, static_cast<int64_t>(l.ob));
    e.dma(false, 12, 7, 8);
    b.halt();
    return b.finish();
}

// ---- collapsing a strided copy ----

struct Dims {
    std::vector<uint64_t> n, st;  // sizes, element strides
};

Dims collapse(const CopyShape& s) {
    Dims d;
    for (uint32_t i = 0; i < s.ndim; ++i) {
        if (s.sizes[i] == 1) continue;
        if (!d.n.empty() && d.st.back() == s.strides[i] * s.sizes[i]) {
            d.n.back() *= s.sizes[i];
            d.st.back() = s.strides[i];
        } else {
            d.n.push_back(s.sizes[i]);
            d.st.push_back(s.strides[i]);
        }
    }
    if (d.n.empty()) d.n.push_back(1), d.st.push_back(1);
    return d;
}

Stream copy_stream(const CopyShape& s) {
    const Dims d = collapse(s);
    Stream st;
    st.es = s.es;
    const size_t L = d.n.size() - 1;
    size_t outer_end = 0;
    if (d.st[L] == 1) {  // rows of contiguous elements
        st.kind = CopyKind::ROWS;
        st.nc = d.n[L];
        if (L >= 1) {
            st.nr = d.n[L - 1], st.S = d.st[L - 1] * s.es;
            outer_end = L - 1;
        } else {
            st.nr = 1, st.S = 0;
            outer_end = 0;
        }
    } else if (L >= 1 && d.st[L - 1] == 1) {  // the last two dims swapped: tiles transposed
        st.kind = CopyKind::TRANSPOSE;
        st.nr = d.n[L], st.S = d.st[L] * s.es;
        st.nc = d.n[L - 1];
        outer_end = L - 1;
    } else {  // single elements
        st.kind = CopyKind::ELEMENTS;
        st.nc = 1;
        st.nr = d.n[L], st.S = d.st[L] * s.es;
        outer_end = L;
    }
    for (size_t k = 0; k < outer_end; ++k) st.on.push_back(d.n[k]), st.os.push_back(d.st[k] * s.es);
    return st;
}

// ---- pad ----

PadShape normalized(PadShape s) {
    if (s.dst_rows == 0) s.dst_rows = s.rows;
    // batches that continue the rows of the previous one are one taller matrix
    if (s.batch > 1 && s.src_bs == s.rows * s.src_ld && s.dst_rows == s.rows &&
        s.dst_bs == s.rows * s.dst_ld) {
        s.rows *= s.batch, s.dst_rows = s.rows, s.batch = 1;
    }
    if (s.batch == 1) s.src_bs = 0, s.dst_bs = 0;
    return s;
}

struct PadLayout {
    Gather g;
    uint64_t ob = 0, region = 0, total = 0;
};

PadLayout pad_layout(const PadShape& s, uint64_t block, bool strided) {
    PadLayout l;
    l.g = make_gather(strided, s.src_ld, s.cols * s.es);
    l.ob = gather_bytes(l.g, block);
    l.region = l.ob + block * s.dst_ld;
    l.total = 2 * l.region;
    return l;
}

// Registers: r5 item, r6 items, r9 parity offset, r10..r15 scratch, r16 source address, r17
// valid rows, r18 row bytes, r19 block rows, r20 stage, r21 row 0 in LX, r22.. descriptors.
std::vector<uint8_t> build_pad_normalized(const PadShape& s, const LayoutPlan& p) {
    const uint64_t rb = p.block, nb = ceil_div(s.dst_rows, rb), items = s.batch * nb;
    const PadLayout l = pad_layout(s, rb, p.strided);
    const uint64_t w = s.cols * s.es;
    check_span((rb - 1) * s.src_ld + w + kStick, "pad");
    Emit e;
    ProgramBuilder& b = e.b;
    b.arg(3, 0), b.arg(4, 1);
    std::vector<std::vector<int64_t>> vals;
    for (uint32_t k = 0; k < p.cores; ++k) {
        const uint64_t f = items * k / p.cores, t = items * (k + 1) / p.cores;
        vals.push_back({static_cast<int64_t>(f), static_cast<int64_t>(t - f)});
    }
    e.per_core({5, 6}, vals);
    b.li(9, 0);
    b.li(18, static_cast<int64_t>(w));
    b.loop(6);
    {
        b.alu(Alu::REMU, 10, 5, 0, static_cast<int64_t>(nb));
        b.alu(Alu::DIVU, 11, 5, 0, static_cast<int64_t>(nb));  // batch
        b.muli(10, 10, static_cast<int64_t>(rb));              // first row r0
        b.li(19, static_cast<int64_t>(s.dst_rows));
        b.sub(19, 19, 10);
        b.alu(Alu::MINU, 19, 19, 0, static_cast<int64_t>(rb));  // rows of the block
        b.alu(Alu::MINU, 12, 10, 0, static_cast<int64_t>(s.rows));
        b.li(17, static_cast<int64_t>(s.rows));
        b.sub(17, 17, 12);
        b.alu(Alu::MINU, 17, 17, 19);  // source rows in it
        b.muli(16, 11, static_cast<int64_t>(s.src_bs));
        b.muli(12, 10, static_cast<int64_t>(s.src_ld));
        b.add(16, 16, 12);
        b.add(16, 16, 3);
        b.addi(20, 9, 0);
        e.gather(l.g, 16, 17, 18, 20, 21);
        // rows into stick rows (padding columns are never written: zero since the job started)
        b.addi(13, 9, static_cast<int64_t>(l.ob));
        b.mov(22, 17);
        b.li(23, static_cast<int64_t>(w));
        b.li(24, static_cast<int64_t>(s.dst_ld));
        b.li(25, static_cast<int64_t>(l.g.T));
        b.vun(isa::VUn::COPY, DType::I8, DType::I8, 13, 21, 22);
        // padding rows: zero what an earlier block may have left there
        b.sub(22, 19, 17);
        b.muli(14, 17, static_cast<int64_t>(s.dst_ld));
        b.add(14, 14, 13);
        b.vun(isa::VUn::SET, DType::I8, DType::I8, 14, 0, 22, 0.0f);
        // the block's rows, padded, in one transfer
        b.muli(14, 11, static_cast<int64_t>(s.dst_bs));
        b.muli(15, 10, static_cast<int64_t>(s.dst_ld));
        b.add(14, 14, 15);
        b.add(14, 14, 4);
        b.muli(15, 19, static_cast<int64_t>(s.dst_ld));
        e.dma(false, 13, 14, 15);
        b.alu(Alu::XOR, 9, 9, 0, static_cast<int64_t>(l.region));
        b.addi(5, 5, 1);
    }
    b.endloop();
    b.halt();
    return b.finish();
}

uint64_t max_block(const std::function<uint64_t(uint64_t)>& lx, uint64_t limit, uint64_t budget,
                   uint64_t unit = 1) {
    // lx grows with the block: the largest multiple of unit <= limit that fits
    uint64_t lo = 0, hi = limit / unit + 1;
    while (hi - lo > 1) {
        const uint64_t mid = (lo + hi) / 2;
        if (lx(mid * unit) <= budget)
            lo = mid;
        else
            hi = mid;
    }
    return lo * unit;
}

// ---- transpose into stick rows: 2D tiles, strided stores ----
//
// A tile is `block2` source rows (a multiple of a stick of the destination's elements) by
// `block` source columns; transposed in LX into rows of stride OBS, stored with one strided STORE
// (one destination row segment per source column).
struct TileLayout {
    Gather g;
    uint64_t obs = 0, ob = 0, region = 0, total = 0;
};

TileLayout tile_layout(const TransposeShape& s, uint64_t cb, uint64_t rbk, bool strided) {
    TileLayout l;
    l.g = make_gather(strided, s.src_ld, cb * s.es);
    l.obs = up128(rbk * s.es);
    l.ob = gather_bytes(l.g, rbk);
    l.region = l.ob + cb * l.obs;
    l.total = 2 * l.region;
    return l;
}

TransposeShape dense_defaults(TransposeShape s) {
    if (s.src_ld == 0) s.src_ld = s.cols * s.es;
    if (s.src_bs == 0 && s.batch > 1) s.src_bs = s.rows * s.src_ld;
    if (s.dst_ld == 0) s.dst_ld = s.rows * s.es;
    if (s.dst_bs == 0 && s.batch > 1) s.dst_bs = s.cols * s.dst_ld;
    return s;
}

// Registers: r5 item, r6 items, r9 parity offset, r10..r15 scratch, r16 source address, r17
// tile rows, r18 tile row bytes, r19 tile columns, r20 stage, r21 row 0 in LX, r22.. descriptors.
std::vector<uint8_t> build_tiles(const TransposeShape& s, const LayoutPlan& p) {
    const uint64_t cb = p.block, rbk = p.block2;
    const uint64_t ncb = ceil_div(s.cols, cb), nrb = ceil_div(s.rows, rbk);
    const uint64_t items = s.batch * ncb * nrb;
    const TileLayout l = tile_layout(s, cb, rbk, p.strided);
    check_span((rbk - 1) * s.src_ld + cb * s.es + kStick, "transpose");
    check_span((cb - 1) * s.dst_ld + l.obs, "transpose");
    Emit e;
    ProgramBuilder& b = e.b;
    b.arg(3, 0), b.arg(4, 1);
    std::vector<std::vector<int64_t>> vals;
    for (uint32_t k = 0; k < p.cores; ++k) {
        const uint64_t f = items * k / p.cores, t = items * (k + 1) / p.cores;
        vals.push_back({static_cast<int64_t>(f), static_cast<int64_t>(t - f)});
    }
    e.per_core({5, 6}, vals);
    b.li(9, 0);
    const DType t = bits_type(s.es);
    b.loop(6);
    {
        b.alu(Alu::REMU, 10, 5, 0, static_cast<int64_t>(nrb));
        b.muli(10, 10, static_cast<int64_t>(rbk));  // r0
        b.alu(Alu::DIVU, 11, 5, 0, static_cast<int64_t>(nrb));
        b.alu(Alu::REMU, 12, 11, 0, static_cast<int64_t>(ncb));
        b.muli(12, 12, static_cast<int64_t>(cb));                // c0
        b.alu(Alu::DIVU, 11, 11, 0, static_cast<int64_t>(ncb));  // batch
        b.li(17, static_cast<int64_t>(s.rows));
        b.sub(17, 17, 10);
        b.alu(Alu::MINU, 17, 17, 0, static_cast<int64_t>(rbk));
        b.li(19, static_cast<int64_t>(s.cols));
        b.sub(19, 19, 12);
        b.alu(Alu::MINU, 19, 19, 0, static_cast<int64_t>(cb));
        b.muli(18, 19, s.es);
        b.muli(16, 11, static_cast<int64_t>(s.src_bs));
        b.muli(13, 10, static_cast<int64_t>(s.src_ld));
        b.add(16, 16, 13);
        b.muli(13, 12, s.es);
        b.add(16, 16, 13);
        b.add(16, 16, 3);
        b.addi(20, 9, 0);
        e.gather(l.g, 16, 17, 18, 20, 21);
        b.addi(13, 9, static_cast<int64_t>(l.ob));
        b.mov(22, 17);
        b.mov(23, 19);
        b.li(24, static_cast<int64_t>(l.obs));
        b.li(25, static_cast<int64_t>(l.g.T));
        b.vtrans(t, t, 13, 21, 22);
        // zero the rest of each row's last stick (an earlier, taller tile may have left data)
        b.muli(15, 17, s.es);
        b.addi(14, 15, kStick - 1);
        b.alu(Alu::AND, 14, 14, 0, -static_cast<int64_t>(kStick));  // row bytes stored
        b.mov(22, 19);
        b.sub(23, 14, 15);
        b.li(24, static_cast<int64_t>(l.obs));
        b.add(15, 15, 13);
        b.vun(isa::VUn::SET, DType::I8, DType::I8, 15, 0, 22, 0.0f);
        // destination rows c0 .. c0 + cols, elements r0 ..
        b.muli(15, 11, static_cast<int64_t>(s.dst_bs));
        b.muli(10, 10, s.es);
        b.add(15, 15, 10);
        b.muli(12, 12, static_cast<int64_t>(s.dst_ld));
        b.add(15, 15, 12);
        b.add(15, 15, 4);
        b.mov(22, 19);
        b.li(23, static_cast<int64_t>(s.dst_ld));
        b.li(24, static_cast<int64_t>(l.obs));
        b.set_regs(25, {1, 0, 0});
        e.dma(false, 13, 15, 14, 22);
        b.alu(Alu::XOR, 9, 9, 0, static_cast<int64_t>(l.region));
        b.addi(5, 5, 1);
    }
    b.endloop();
    b.halt();
    return b.finish();
}

// ---- planning ----

struct Candidate {
    uint32_t cores;
    bool strided;
    uint64_t block, block2;
    double est = 0;  // rough cycles, to rank shapes before pricing
};

// DDR bytes a gather of n rows of w bytes reads (about: the stick offsets are not known).
double gather_ddr(bool strided, uint64_t S, uint64_t n, uint64_t w) {
    if (n == 0) return 0;
    if (!strided) return double(S) * double(n - 1) + double(w) + 64;
    return double(n) * double(up128(w + 64));
}

// Rough cycles of a plan shape on `cores` cores: DDR bytes at the shared rate, or the issue of
// the steps' instructions (ops per step), whichever is slower.
double estimate(double ddr_bytes, uint64_t steps, uint64_t ops, uint32_t cores) {
    return std::max(ddr_bytes / (204.8e9 / 1.5e9), double(steps) * double(ops) * 3 / cores);
}

std::vector<uint32_t> core_counts(uint32_t max_cores, uint64_t items) {
    std::vector<uint32_t> c;
    for (uint32_t k = 1; k <= max_cores; k *= 2) c.push_back(k);
    c.push_back(max_cores);
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    std::vector<uint32_t> out;
    for (uint32_t k : c)
        if (k == 1 || k <= items) out.push_back(k);
    return out;
}

// Block sizes worth pricing: a core's share in 1, 2 or 4 steps and the largest that fits.
std::vector<uint64_t> block_sizes(uint64_t bmax, uint64_t total, uint32_t cores, uint64_t unit) {
    std::vector<uint64_t> v;
    const uint64_t share = ceil_div(total, cores);
    for (uint64_t k : {1, 2, 4}) v.push_back(ceil_div(share, k));
    v.push_back(bmax);
    std::vector<uint64_t> out;
    for (uint64_t x : v) {
        x = std::min(bmax, ceil_div(x, unit) * unit);
        if (x >= unit) out.push_back(x);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

// Which gathers are worth pricing for rows of w bytes at stride S: DDR traffic decides (a span
// reads the gaps between rows, a strided gather about a stick per row more than w).
std::vector<bool> gathers_worth(uint64_t S, uint64_t w, uint64_t rows) {
    if (rows <= 1) return {false};
    const double span = double(S) * double(rows - 1) + double(w);
    const double strided = double(rows) * double(up128(w + 64));
    if (span <= 0.9 * strided) return {false};
    if (strided <= 0.9 * span) return {true};
    return {false, true};
}

// Prices every distinct shape (gather, block sizes) on the most cores, then the three fastest on
// every core count: the cycle model decides, at a few dozen timing-only runs.
LayoutPlan best_of(std::vector<Candidate> cands, const std::vector<uint32_t>& cores,
                   const std::function<LayoutPlan(const Candidate&)>& price) {
    auto same_shape = [](const Candidate& a, const Candidate& b) {
        return a.strided == b.strided && a.block == b.block && a.block2 == b.block2;
    };
    std::vector<Candidate> shapes;
    for (const Candidate& c : cands)
        if (std::none_of(shapes.begin(), shapes.end(),
                         [&](const Candidate& x) { return same_shape(x, c); }))
            shapes.push_back(c);
    LayoutPlan best{};
    auto consider = [&](Candidate c) -> uint64_t {
        LayoutPlan p;
        try {
            p = price(c);
        } catch (const std::invalid_argument&) {
            return 0;  // e.g. a gather that spans more than a core's DDR window
        }
        if (!best.cycles || p.cycles < best.cycles ||
            (p.cycles == best.cycles && p.cores < best.cores))
            best = p;
        return p.cycles;
    };
    std::stable_sort(shapes.begin(), shapes.end(),
                     [](const Candidate& a, const Candidate& b) { return a.est < b.est; });
    if (shapes.size() > 8) shapes.resize(8);
    std::vector<std::pair<uint64_t, Candidate>> ranked;
    for (Candidate c : shapes) {
        c.cores = cores.back();
        if (const uint64_t cy = consider(c)) ranked.push_back({cy, c});
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    for (size_t i = 0; i < ranked.size() && i < 3; ++i)
        for (uint32_t k : cores)
            if (k != cores.back()) {
                Candidate c = ranked[i].second;
                c.cores = k;
                consider(c);
            }
    if (!best.cycles) throw std::invalid_argument("layout: no plan fits");
    return best;
}

LayoutPlan priced(const Pricer& pricer, const std::vector<uint8_t>& image, LayoutPlan p,
                  uint64_t src_bytes, uint64_t dst_bytes) {
    const uint64_t src = 0, dst = up128(src_bytes);
    const spyre_engine_result r =
        pricer.price(image, p.cores, {src, dst}, dst + up128(std::max<uint64_t>(dst_bytes, 1)));
    p.cycles = r.total_cycles;
    p.ddr_bytes = r.ddr_read_bytes + r.ddr_write_bytes;
    return p;
}

uint64_t copy_items(const Stream& st, const Cut& c) { return st.outer() * items_per_outer(st, c); }

// Rows (ROWS, ELEMENTS) or columns (TRANSPOSE) an item can take at most.
uint64_t copy_block_limit(const Stream& st) {
    return st.kind == CopyKind::TRANSPOSE ? st.nc : st.nr;
}

uint64_t copy_max_block(const Stream& st, bool strided, uint64_t budget) {
    return max_block([&](uint64_t blk) { return stream_layout(st, {blk, 0}, strided).total; },
                     copy_block_limit(st), budget);
}

// The longest row piece (elements, whole sticks) that fits.
uint64_t copy_max_chunk(const Stream& st, uint64_t budget) {
    const uint64_t unit = std::max<uint64_t>(1, kStick / st.es);
    return max_block([&](uint64_t ch) { return stream_layout(st, {1, ch}, false).total; },
                     std::max(st.nc, unit), budget, unit);
}

// A transpose's source rows per gather with `block` columns per item.
uint64_t copy_max_sub(const Stream& st, uint64_t block, bool strided, uint64_t budget) {
    return max_block([&](uint64_t r) { return stream_layout(st, {block, r}, strided).total; },
                     st.nr, budget);
}

}  // namespace

std::string layout_plan_name(const LayoutPlan& p) {
    char buf[128];
    const char* g = p.strided ? ", strided gather" : "";
    const auto u = [](uint64_t x) { return static_cast<unsigned long long>(x); };
    if (p.tiles)
        std::snprintf(buf, sizeof buf, "%u cores, tiles %llu x %llu%s", p.cores, u(p.block2),
                      u(p.block), g);
    else if (p.columns && p.block2)
        std::snprintf(buf, sizeof buf, "%u cores, %llu dst rows per step, %llu src rows per load%s",
                      p.cores, u(p.block), u(p.block2), g);
    else if (p.columns)
        std::snprintf(buf, sizeof buf, "%u cores, %llu dst rows per step%s", p.cores, u(p.block),
                      g);
    else if (p.block2)
        std::snprintf(buf, sizeof buf, "%u cores, row pieces of %llu", p.cores, u(p.block2));
    else
        std::snprintf(buf, sizeof buf, "%u cores, block %llu%s", p.cores, u(p.block), g);
    return buf;
}

// ---- pad ----

void pad_validate(const PadShape& s0) {
    const PadShape s = normalized(s0);
    auto bad = [](const std::string& why) { throw std::invalid_argument("pad: " + why); };
    if (s.es != 1 && s.es != 2 && s.es != 4) bad("element size must be 1, 2 or 4");
    if (s.rows == 0 || s.cols == 0 || s.batch == 0) bad("empty matrix");
    if (s.dst_ld % kStick || s.dst_ld < s.cols * s.es)
        bad("dst_ld must be a multiple of 128 >= a row");
    if (s.dst_rows < s.rows) bad("dst_rows < rows");
    if (s.src_ld % s.es || s.src_bs % s.es) bad("source strides must be element aligned");
    if (s.batch > 1 && (s.dst_bs % kStick || s.dst_bs < s.dst_rows * s.dst_ld))
        bad("dst_bs must be a multiple of 128 >= dst_rows * dst_ld");
}

LayoutPlan pad_make_plan(const PadShape& s0, uint32_t cores, uint64_t lx_budget, bool strided,
                         uint64_t block) {
    pad_validate(s0);
    const PadShape s = normalized(s0);
    const uint64_t bmax = max_block([&](uint64_t rb) { return pad_layout(s, rb, strided).total; },
                                    s.dst_rows, lx_budget);
    if (bmax == 0) throw std::invalid_argument("pad: a row does not fit LX");
    LayoutPlan p;
    p.cores = cores;
    p.strided = strided;
    p.block = std::min(bmax, block ? block : ceil_div(ceil_div(s.dst_rows * s.batch, cores), 3));
    p.block = std::max<uint64_t>(p.block, 1);
    p.lx_bytes = pad_layout(s, p.block, strided).total;
    return p;
}

std::vector<uint8_t> build_pad(const PadShape& s0, const LayoutPlan& p) {
    pad_validate(s0);
    const PadShape s = normalized(s0);
    if (p.cores == 0 || p.block == 0 || p.block > s.dst_rows)
        throw std::invalid_argument("pad: plan does not suit the shape");
    return build_pad_normalized(s, p);
}

LayoutPlan price_pad(const Pricer& pricer, const PadShape& s0, LayoutPlan p) {
    const PadShape s = normalized(s0);
    const uint64_t src = (s.batch - 1) * s.src_bs + (s.rows - 1) * s.src_ld + s.cols * s.es;
    const uint64_t dst = (s.batch - 1) * s.dst_bs + s.dst_rows * s.dst_ld;
    return priced(pricer, build_pad(s0, p), p, src, dst);
}

LayoutPlan plan_pad(const Pricer& pricer, const PadShape& s0, uint32_t max_cores) {
    pad_validate(s0);
    const PadShape s = normalized(s0);
    max_cores = std::max<uint32_t>(1, std::min(max_cores, pricer.config().num_cores));
    std::vector<Candidate> cands;
    const uint64_t rows_total = s.dst_rows * s.batch;
    const auto cores = core_counts(max_cores, rows_total);
    for (bool strided : gathers_worth(s.src_ld, s.cols * s.es, s.rows)) {
        const uint64_t bmax =
            max_block([&](uint64_t rb) { return pad_layout(s, rb, strided).total; }, s.dst_rows,
                      pricer.lx_budget());
        if (bmax == 0) continue;
        for (uint32_t c : cores)
            for (uint64_t blk : block_sizes(bmax, rows_total, c, 1)) {
                // the engine records at most 2M timed operations (a few per block)
                const uint64_t ops = strided ? make_gather(true, s.src_ld, 1).p + 6 : 6;
                const uint64_t steps = ceil_div(s.dst_rows, blk) * s.batch;
                if (steps * ops > 1800000) continue;
                const double ddr =
                    double(steps) * gather_ddr(strided, s.src_ld, blk, s.cols * s.es) +
                    double(rows_total) * double(s.dst_ld);
                cands.push_back({c, strided, blk, 0, estimate(ddr, steps, ops * 4, c)});
            }
    }
    return best_of(cands, cores, [&](const Candidate& c) {
        LayoutPlan p = pad_make_plan(s0, c.cores, pricer.lx_budget(), c.strided, c.block);
        return price_pad(pricer, s0, p);
    });
}

// ---- strided copies ----

CopyKind copy_kind(const CopyShape& s) { return copy_stream(s).kind; }

void copy_validate(const CopyShape& s) {
    auto bad = [](const std::string& why) { throw std::invalid_argument("copy: " + why); };
    if (s.es != 1 && s.es != 2 && s.es != 4) bad("element size must be 1, 2 or 4");
    if (s.ndim > 8) bad("more than 8 dims");
    for (uint32_t i = 0; i < s.ndim; ++i)
        if (s.sizes[i] == 0) bad("empty tensor");
}

LayoutPlan copy_make_plan(const CopyShape& s, uint32_t cores, uint64_t lx_budget, bool strided,
                          uint64_t block, uint64_t chunk) {
    copy_validate(s);
    const Stream st = copy_stream(s);
    LayoutPlan p;
    p.cores = cores;
    p.strided = strided;
    const uint64_t limit = copy_block_limit(st);
    if (st.kind == CopyKind::TRANSPOSE) {
        // columns per item: a few sticks of source row; rows per gather: as many as fit
        if (!block) block = std::min(st.nc, std::max<uint64_t>(4 * kStick / st.es, 1));
        p.block = std::min(block, st.nc);
        uint64_t sub = copy_max_sub(st, p.block, strided, lx_budget);
        // tall matrices: fewer destination rows per step until a step fits
        while (sub == 0 && p.block > 1) {
            p.block = std::max<uint64_t>(1, p.block / 2);
            sub = copy_max_sub(st, p.block, strided, lx_budget);
        }
        if (sub == 0)
            throw std::invalid_argument(
                "copy: the destination rows of one transposed step (" + std::to_string(st.nr) +
                " elements each) do not fit LX; transpose to stick rows, then unpad");
        p.block2 = chunk ? std::min(chunk, sub) : sub;
        if (p.block2 >= st.nr) p.block2 = 0;  // all rows in one gather
        p.columns = true;
        p.lx_bytes = stream_layout(st, plan_cut(p), strided).total;
        return p;
    }
    const uint64_t bmax = copy_max_block(st, strided, lx_budget);
    if (st.kind == CopyKind::ROWS && (chunk || bmax == 0)) {
        // rows too long for LX (or asked for): pieces of one row
        const uint64_t cmax = copy_max_chunk(st, lx_budget);
        if (cmax == 0) throw std::invalid_argument("copy: no row piece fits LX");
        const uint64_t unit = std::max<uint64_t>(1, kStick / st.es);
        if (!chunk) chunk = ceil_div(ceil_div(st.nc * st.nr * st.outer(), cores), 3);
        p.block = 1, p.strided = false;
        p.block2 = std::min(cmax, std::max(unit, ceil_div(chunk, unit) * unit));
        p.lx_bytes = stream_layout(st, {1, p.block2}, false).total;
        return p;
    }
    if (bmax == 0) throw std::invalid_argument("copy: a row does not fit LX");
    p.block = std::max<uint64_t>(
        1, std::min(bmax, block ? block : ceil_div(ceil_div(limit * st.outer(), cores), 3)));
    p.lx_bytes = stream_layout(st, {p.block, 0}, strided).total;
    return p;
}

std::vector<uint8_t> build_copy(const CopyShape& s, const LayoutPlan& p) {
    copy_validate(s);
    const Stream st = copy_stream(s);
    if (p.cores == 0 || p.block == 0 || p.block > copy_block_limit(st) ||
        (p.block2 && st.kind == CopyKind::ELEMENTS) ||
        (p.block2 && st.kind == CopyKind::ROWS && p.block != 1))
        throw std::invalid_argument("copy: plan does not suit the shape");
    return build_stream(st, p);
}

LayoutPlan price_copy(const Pricer& pricer, const CopyShape& s, LayoutPlan p) {
    const Stream st = copy_stream(s);
    return priced(pricer, build_copy(s, p), p, st.src_extent(), st.total_bytes());
}

LayoutPlan plan_copy(const Pricer& pricer, const CopyShape& s, uint32_t max_cores) {
    copy_validate(s);
    const Stream st = copy_stream(s);
    max_cores = std::max<uint32_t>(1, std::min(max_cores, pricer.config().num_cores));
    const uint64_t budget = pricer.lx_budget(), limit = copy_block_limit(st);
    // items of the finest cut: single rows, or stick-sized pieces of them
    const uint64_t finest =
        copy_items(st, {1, 0}) * (st.kind == CopyKind::ROWS ? ceil_div(st.nc * st.es, kStick) : 1);
    const auto cores = core_counts(max_cores, finest);
    std::vector<Candidate> cands;
    auto add = [&](bool strided, uint64_t block, uint64_t block2, uint64_t ops) {
        // the engine records at most 2M timed operations per job
        const uint64_t items = copy_items(st, {block, block2});
        if (items * ops > 1800000) return;
        double ddr = double(st.total_bytes());
        if (st.kind == CopyKind::TRANSPOSE) {
            const uint64_t sub = block2 ? block2 : st.nr;
            ddr += double(items) * double(ceil_div(st.nr, sub)) *
                   gather_ddr(strided, st.S, sub, std::min(block, st.nc) * st.es);
        } else if (block2) {
            ddr += double(items) * gather_ddr(false, 0, 1, block2 * st.es);
        } else {
            ddr += double(items) * gather_ddr(strided, st.S, std::min(block, st.nr), st.nc * st.es);
        }
        cands.push_back(
            {cores.back(), strided, block, block2, estimate(ddr, items, ops * 4, cores.back())});
    };
    if (st.kind == CopyKind::TRANSPOSE) {
        const uint64_t unit = std::max<uint64_t>(1, kStick / st.es);
        for (uint64_t k : {1, 2, 4, 8, 16}) {
            const uint64_t blk = std::min(st.nc, k * unit);
            for (bool strided : gathers_worth(st.S, blk * st.es, st.nr)) {
                const uint64_t sub = copy_max_sub(st, blk, strided, budget);
                if (sub == 0) continue;
                const uint64_t ops = (strided ? make_gather(true, st.S, 1).p + 4 : 4) *
                                         ceil_div(st.nr, std::min(sub, st.nr)) +
                                     8;
                add(strided, blk, sub >= st.nr ? 0 : sub, ops);
                if (sub > 256 && st.nr > 256) add(strided, blk, 256, ops);
            }
            if (blk == st.nc) break;
        }
        // tall matrices: narrower steps (more DDR per byte, but they fit)
        for (uint64_t blk = unit / 2; cands.empty() && blk >= 1; blk /= 2)
            for (bool strided : {false, true}) {
                const uint64_t sub = copy_max_sub(st, std::min(blk, st.nc), strided, budget);
                if (sub)
                    add(strided, std::min(blk, st.nc), sub >= st.nr ? 0 : sub,
                        (make_gather(true, st.S, 1).p + 4) * ceil_div(st.nr, sub) + 8);
            }
    } else {
        // whole rows per item
        const uint64_t bmax[2] = {copy_max_block(st, false, budget),
                                  copy_max_block(st, true, budget)};
        for (uint32_t c : cores)
            for (uint64_t blk : block_sizes(std::max(bmax[0], bmax[1]), st.outer() * limit, c, 1))
                for (bool strided : gathers_worth(st.S, st.nc * st.es, std::min(blk, st.nr)))
                    if (blk <= bmax[strided])
                        add(strided, blk, 0, strided ? make_gather(true, st.S, 1).p + 8 : 8);
        // long rows in pieces: when rows do not fit or are too few to share among the cores
        if (st.kind == CopyKind::ROWS && (bmax[0] == 0 || st.outer() * st.nr < 4 * max_cores)) {
            const uint64_t cmax = copy_max_chunk(st, budget);
            const uint64_t unit = std::max<uint64_t>(1, kStick / st.es);
            for (uint32_t c : cores)
                for (uint64_t ch : block_sizes(cmax, st.outer() * st.nr * st.nc, c, unit))
                    add(false, 1, ch, 8);
        }
    }
    if (cands.empty()) (void)copy_make_plan(s, 1, budget, false);  // throws the reason
    return best_of(cands, cores, [&](const Candidate& c) {
        return price_copy(pricer, s,
                          copy_make_plan(s, c.cores, budget, c.strided, c.block, c.block2));
    });
}

// ---- unpad ----

CopyShape unpad_as_copy(const UnpadShape& s) {
    CopyShape c;
    c.es = s.es;
    c.ndim = 3;
    c.sizes[0] = s.batch, c.sizes[1] = s.rows, c.sizes[2] = s.cols;
    c.strides[0] = s.src_bs / s.es, c.strides[1] = s.src_ld / s.es, c.strides[2] = 1;
    return c;
}

void unpad_validate(const UnpadShape& s) {
    auto bad = [](const std::string& why) { throw std::invalid_argument("unpad: " + why); };
    if (s.es != 1 && s.es != 2 && s.es != 4) bad("element size must be 1, 2 or 4");
    if (s.rows == 0 || s.cols == 0 || s.batch == 0) bad("empty matrix");
    if (s.src_ld % kStick || s.src_ld < s.cols * s.es)
        bad("src_ld must be a multiple of 128 >= a row");
    if (s.batch > 1 && (s.src_bs % kStick || s.src_bs < s.rows * s.src_ld))
        bad("src_bs must be a multiple of 128 >= rows * src_ld");
}

LayoutPlan plan_unpad(const Pricer& pricer, const UnpadShape& s, uint32_t max_cores) {
    unpad_validate(s);
    return plan_copy(pricer, unpad_as_copy(s), max_cores);
}

std::vector<uint8_t> build_unpad(const UnpadShape& s, const LayoutPlan& p) {
    unpad_validate(s);
    return build_copy(unpad_as_copy(s), p);
}

// ---- transpose ----

bool transpose_to_stick_rows(const TransposeShape& s0) {
    const TransposeShape s = dense_defaults(s0);
    const bool dense = s.dst_ld == s.rows * s.es && (s.batch == 1 || s.dst_bs == s.cols * s.dst_ld);
    return s.dst_ld % kStick == 0 && (s.batch == 1 || s.dst_bs % kStick == 0) &&
           !(dense && s.rows * s.es % kStick != 0);
}

CopyShape transpose_as_copy(const TransposeShape& s0) {
    const TransposeShape s = dense_defaults(s0);
    CopyShape c;
    c.es = s.es;
    c.ndim = 3;
    c.sizes[0] = s.batch, c.sizes[1] = s.cols, c.sizes[2] = s.rows;
    c.strides[0] = s.src_bs / s.es, c.strides[1] = 1, c.strides[2] = s.src_ld / s.es;
    return c;
}

void transpose_validate(const TransposeShape& s0) {
    const TransposeShape s = dense_defaults(s0);
    auto bad = [](const std::string& why) { throw std::invalid_argument("transpose: " + why); };
    if (s.es != 1 && s.es != 2 && s.es != 4) bad("element size must be 1, 2 or 4");
    if (s.rows == 0 || s.cols == 0 || s.batch == 0) bad("empty matrix");
    if (s.src_ld % s.es || s.src_bs % s.es) bad("source strides must be element aligned");
    const bool dense = s.dst_ld == s.rows * s.es && (s.batch == 1 || s.dst_bs == s.cols * s.dst_ld);
    if (!dense && !transpose_to_stick_rows(s))
        bad("the destination must be dense or stick rows (dst_ld, dst_bs multiples of 128)");
    if (transpose_to_stick_rows(s) &&
        (s.dst_ld < s.rows * s.es || (s.batch > 1 && s.dst_bs < s.cols * s.dst_ld)))
        bad("destination rows overlap");
}

LayoutPlan transpose_make_plan(const TransposeShape& s0, uint32_t cores, uint64_t lx_budget,
                               bool strided, uint64_t block, uint64_t block2) {
    transpose_validate(s0);
    const TransposeShape s = dense_defaults(s0);
    if (!transpose_to_stick_rows(s)) {
        return copy_make_plan(transpose_as_copy(s), cores, lx_budget, strided, block, block2);
    }
    const uint64_t unit = kStick / s.es;  // tile rows: whole sticks of the destination rows
    LayoutPlan p;
    p.cores = cores;
    p.strided = strided;
    p.tiles = true;
    p.block2 = block2 ? block2 : std::min(ceil_div(s.rows, unit) * unit, 4 * unit);
    p.block = block ? block : std::min<uint64_t>(s.cols, 4 * unit);
    p.block2 = std::max(unit, p.block2 / unit * unit);
    p.block = std::min(p.block, s.cols);
    while (tile_layout(s, p.block, p.block2, strided).total > lx_budget && p.block > 1)
        p.block = std::max<uint64_t>(1, p.block / 2);
    while (tile_layout(s, p.block, p.block2, strided).total > lx_budget && p.block2 > unit)
        p.block2 = std::max(unit, p.block2 / 2 / unit * unit);
    p.lx_bytes = tile_layout(s, p.block, p.block2, strided).total;
    if (p.lx_bytes > lx_budget) throw std::invalid_argument("transpose: no tile fits LX");
    return p;
}

std::vector<uint8_t> build_transpose(const TransposeShape& s0, const LayoutPlan& p) {
    transpose_validate(s0);
    const TransposeShape s = dense_defaults(s0);
    if (!transpose_to_stick_rows(s)) return build_copy(transpose_as_copy(s), p);
    if (p.cores == 0 || p.block == 0 || p.block2 == 0 || p.block2 % (kStick / s.es))
        throw std::invalid_argument("transpose: plan does not suit the shape");
    return build_tiles(s, p);
}

LayoutPlan price_transpose(const Pricer& pricer, const TransposeShape& s0, LayoutPlan p) {
    const TransposeShape s = dense_defaults(s0);
    if (!transpose_to_stick_rows(s)) return price_copy(pricer, transpose_as_copy(s), p);
    const uint64_t src = (s.batch - 1) * s.src_bs + (s.rows - 1) * s.src_ld + s.cols * s.es;
    const uint64_t dst = (s.batch - 1) * s.dst_bs + (s.cols - 1) * s.dst_ld + up128(s.rows * s.es);
    return priced(pricer, build_tiles(s, p), p, src, dst);
}

LayoutPlan plan_transpose(const Pricer& pricer, const TransposeShape& s0, uint32_t max_cores) {
    transpose_validate(s0);
    const TransposeShape s = dense_defaults(s0);
    if (!transpose_to_stick_rows(s)) return plan_copy(pricer, transpose_as_copy(s), max_cores);
    max_cores = std::max<uint32_t>(1, std::min(max_cores, pricer.config().num_cores));
    const uint64_t unit = kStick / s.es;
    const uint64_t max_items = s.batch * ceil_div(s.cols, 1) * ceil_div(s.rows, unit);
    const auto cores = core_counts(max_cores, max_items);
    std::vector<Candidate> cands;
    for (uint64_t rbk_sticks : {1, 2, 4, 8})
        for (uint64_t cb_bytes : {128, 256, 512, 1024}) {
            const uint64_t rbk = rbk_sticks * unit, cb = std::min(s.cols, cb_bytes / s.es);
            if (rbk_sticks > 1 && rbk / 2 >= s.rows) continue;  // taller than the matrix
            for (bool strided : gathers_worth(s.src_ld, cb * s.es, std::min(rbk, s.rows))) {
                if (tile_layout(s, cb, rbk, strided).total > pricer.lx_budget()) continue;
                const uint64_t items = s.batch * ceil_div(s.cols, cb) * ceil_div(s.rows, rbk);
                const uint64_t ops = strided ? make_gather(true, s.src_ld, 1).p + 8 : 8;
                if (items * ops > 1800000) continue;
                const double ddr =
                    double(items) *
                    (gather_ddr(strided, s.src_ld, std::min(rbk, s.rows), cb * s.es) +
                     double(cb) * double(up128(std::min(rbk, s.rows) * s.es)));
                cands.push_back(
                    {cores.back(), strided, cb, rbk, estimate(ddr, items, ops * 4, cores.back())});
            }
        }
    if (cands.empty()) throw std::invalid_argument("transpose: no tile fits LX");
    return best_of(cands, cores, [&](const Candidate& c) {
        return price_transpose(
            pricer, s,
            transpose_make_plan(s, c.cores, pricer.lx_budget(), c.strided, c.block, c.block2));
    });
}

}  // namespace spyre::ops

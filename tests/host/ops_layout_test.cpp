// SPDX-License-Identifier: MIT
// The op library's layout programs on the engine, bit for bit: pad (any source offset and row
// stride -> zero-padded stick rows), unpad, batched transposes (dense and stick-row
// destinations) and strided copies / permutes of up to 8 dims, over odd shapes, 1, 2 and 4 byte
// elements (random bits: NaN payloads must survive), 1 and 32 cores and both ways of gathering
// rows. Every byte of device memory outside the destination must be left as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "ops/layout_program.hpp"
#include "ops/pricing.hpp"
#include "ops_test_util.hpp"

namespace spyre::ops {
namespace {

using namespace test;

constexpr uint8_t kSentinel = 0x5A;
const uint64_t kLxBudget = [] {
    spyre_engine_config c;
    spyre_engine_config_default(&c);
    return spyre_engine_lx_usable(&c);
}();  // the default card's usable LX

struct Mem {
    std::vector<uint8_t> bytes, before;
    uint64_t src = 0, dst = 0, dst_end = 0;
};

// Source bytes random at [src, src + src_bytes), the rest a sentinel; the destination at dst.
Mem make_mem(uint64_t src_off, uint64_t src_bytes, uint64_t dst_bytes, uint32_t seed) {
    Mem m;
    m.src = src_off;
    m.dst = up128(src_off + src_bytes) + 256;
    m.dst_end = m.dst + dst_bytes;
    m.bytes.assign(up128(m.dst_end) + 256, kSentinel);
    std::mt19937 rng(seed);
    for (uint64_t i = 0; i < src_bytes; ++i) m.bytes[src_off + i] = static_cast<uint8_t>(rng());
    m.before = m.bytes;
    return m;
}

void run(const std::vector<uint8_t>& image, const LayoutPlan& p, Mem& m) {
    const RunResult r = run_image(image, p.cores, {m.src, m.dst}, m.bytes);
    ASSERT_EQ(r.error, 0) << r.message;
}

// Bytes outside [dst, dst_end) unchanged.
void expect_outside_untouched(const Mem& m) {
    for (uint64_t i = 0; i < m.bytes.size(); ++i)
        if (i < m.dst || i >= m.dst_end) {
            ASSERT_EQ(m.bytes[i], m.before[i]) << "byte " << i << " outside the destination";
        }
}

// ---- pad ----

void check_pad(const PadShape& s, uint64_t src_off, uint32_t cores, bool strided,
               uint64_t block = 0, uint32_t seed = 1) {
    SCOPED_TRACE(testing::Message()
                 << "pad " << s.batch << "x" << s.rows << "x" << s.cols << " es " << s.es
                 << " src_ld " << s.src_ld << " off " << src_off << " dst_ld " << s.dst_ld
                 << " dst_rows " << s.dst_rows << " cores " << cores << " strided " << strided
                 << " block " << block);
    const LayoutPlan p = pad_make_plan(s, cores, kLxBudget, strided, block);
    const uint64_t dst_rows = s.dst_rows ? s.dst_rows : s.rows;
    const uint64_t src_bytes = (s.batch - 1) * s.src_bs + (s.rows - 1) * s.src_ld + s.cols * s.es;
    const uint64_t dst_bs = s.batch > 1 ? s.dst_bs : dst_rows * s.dst_ld;
    Mem m = make_mem(src_off, src_bytes, (s.batch - 1) * dst_bs + dst_rows * s.dst_ld, seed);
    // the gaps between destination batches must stay as they were: not part of the output
    run(build_pad(s, p), p, m);
    if (::testing::Test::HasFatalFailure()) return;
    for (uint64_t b = 0; b < s.batch; ++b)
        for (uint64_t r = 0; r < dst_rows; ++r)
            for (uint64_t c = 0; c < s.dst_ld; ++c) {
                const uint8_t got = m.bytes[m.dst + b * dst_bs + r * s.dst_ld + c];
                const uint8_t want = r < s.rows && c < s.cols * s.es
                                         ? m.before[m.src + b * s.src_bs + r * s.src_ld + c]
                                         : 0;
                ASSERT_EQ(got, want) << "batch " << b << " row " << r << " byte " << c;
            }
    for (uint64_t i = 0; i < m.bytes.size(); ++i) {
        const bool in_dst =
            i >= m.dst && i < m.dst_end && (i - m.dst) % dst_bs < dst_rows * s.dst_ld;
        if (!in_dst) {
            ASSERT_EQ(m.bytes[i], m.before[i]) << "byte " << i;
        }
    }
}

PadShape pad_shape(uint64_t rows, uint64_t cols, uint32_t es, uint64_t src_ld = 0,
                   uint64_t dst_rows = 0) {
    PadShape s;
    s.rows = rows, s.cols = cols, s.es = es;
    s.src_ld = src_ld ? src_ld : cols * es;
    s.dst_ld = up128(cols * es);
    s.dst_rows = dst_rows;
    return s;
}

TEST(OpsLayout, PadDenseOddShapes) {
    const std::pair<uint64_t, uint64_t> shapes[] = {{1, 1},      {7, 3},       {65, 63},
                                                    {100, 4095}, {1000, 1000}, {3, 64}};
    for (auto [R, C] : shapes)
        for (uint32_t es : {1u, 2u, 4u})
            for (uint32_t cores : {1u, 32u})
                for (bool strided : {false, true}) {
                    check_pad(pad_shape(R, C, es), 0, cores, strided);
                    if (HasFatalFailure()) return;
                }
}

// Rows that start anywhere: a column slice of a wider matrix, an offset start, rows that
// overlap (stride < row) or repeat (stride 0), extra zero rows and wider stick rows.
TEST(OpsLayout, PadAnyOffsetAndStride) {
    struct C {
        uint64_t rows, cols;
        uint32_t es;
        uint64_t src_ld, off, dst_rows, extra_sticks;
    };
    const C cases[] = {{33, 17, 2, 2 * 1001, 6, 0, 0},    {129, 100, 4, 4 * 333, 12, 140, 1},
                       {10, 1000, 2, 2 * 4097, 2, 16, 2}, {64, 5, 1, 7, 1, 0, 0},
                       {50, 40, 2, 2 * 30, 4, 0, 0},      {9, 31, 4, 0, 20, 12, 0},
                       {300, 3, 2, 2 * 3, 126, 301, 0},   {5, 4095, 2, 2 * 4095, 2, 8, 0}};
    for (const C& c : cases)
        for (uint32_t cores : {1u, 32u})
            for (bool strided : {false, true}) {
                PadShape s = pad_shape(c.rows, c.cols, c.es, c.src_ld, c.dst_rows);
                s.src_ld = c.src_ld;
                s.dst_ld += c.extra_sticks * 128;
                check_pad(s, c.off, cores, strided);
                check_pad(s, c.off, cores, strided, 3);  // many blocks per core
                if (HasFatalFailure()) return;
            }
}

TEST(OpsLayout, PadBatches) {
    PadShape s = pad_shape(37, 77, 2);
    s.batch = 5;
    s.src_bs = 40 * s.src_ld + 6;  // batches apart, unaligned
    s.dst_rows = 40;
    s.dst_bs = 41 * s.dst_ld;  // a gap row between batches: not written
    for (uint32_t cores : {1u, 3u, 32u})
        for (bool strided : {false, true}) {
            check_pad(s, 2, cores, strided);
            check_pad(s, 2, cores, strided, 7);
        }
    // contiguous batches fold into one matrix
    s = pad_shape(37, 77, 4);
    s.batch = 3, s.src_bs = 37 * s.src_ld, s.dst_bs = 37 * s.dst_ld;
    check_pad(s, 0, 32, false);
}

// ---- unpad ----

void check_unpad(const UnpadShape& s, uint32_t cores, bool strided, uint64_t block = 0) {
    SCOPED_TRACE(testing::Message() << "unpad " << s.batch << "x" << s.rows << "x" << s.cols
                                    << " es " << s.es << " src_ld " << s.src_ld << " cores "
                                    << cores << " strided " << strided << " block " << block);
    const CopyShape cs = unpad_as_copy(s);
    const LayoutPlan p = copy_make_plan(cs, cores, kLxBudget, strided, block);
    const uint64_t bs = s.batch > 1 ? s.src_bs : s.rows * s.src_ld;
    const uint64_t w = s.cols * s.es;
    Mem m = make_mem(0, (s.batch - 1) * bs + s.rows * s.src_ld, s.batch * s.rows * w, 3);
    run(build_unpad(s, p), p, m);
    if (::testing::Test::HasFatalFailure()) return;
    for (uint64_t b = 0; b < s.batch; ++b)
        for (uint64_t r = 0; r < s.rows; ++r)
            ASSERT_EQ(0, std::memcmp(&m.bytes[m.dst + (b * s.rows + r) * w],
                                     &m.before[m.src + b * bs + r * s.src_ld], w))
                << "batch " << b << " row " << r;
    expect_outside_untouched(m);
}

TEST(OpsLayout, UnpadOddShapes) {
    const std::pair<uint64_t, uint64_t> shapes[] = {{1, 1},       {7, 3},  {65, 63},   {100, 4095},
                                                    {1000, 1000}, {3, 64}, {1, 100000}};
    for (auto [R, C] : shapes)
        for (uint32_t es : {1u, 2u, 4u})
            for (uint32_t cores : {1u, 32u})
                for (bool strided : {false, true}) {
                    UnpadShape s;
                    s.rows = R, s.cols = C, s.es = es, s.src_ld = up128(C * es);
                    if (R * s.src_ld > (64u << 20)) continue;
                    check_unpad(s, cores, strided);
                    if (R > 1) check_unpad(s, cores, strided, 5);
                    if (HasFatalFailure()) return;
                }
    UnpadShape s;
    s.rows = 45, s.cols = 99, s.es = 2, s.src_ld = 384, s.batch = 4, s.src_bs = 50 * 384;
    for (uint32_t cores : {1u, 6u, 32u}) check_unpad(s, cores, false, 4);
}

// pad then unpad gives the source back (the matmul operand round trip)
TEST(OpsLayout, PadUnpadRoundTrip) {
    PadShape ps = pad_shape(123, 1000, 2);
    Pricer pricer(default_engine_config());
    const LayoutPlan pp = plan_pad(pricer, ps, 32);
    Mem m = make_mem(0, 123 * 2000, 123 * 2048, 9);
    run(build_pad(ps, pp), pp, m);
    UnpadShape us;
    us.rows = 123, us.cols = 1000, us.es = 2, us.src_ld = 2048;
    const LayoutPlan up = plan_unpad(pricer, us, 32);
    std::vector<uint8_t> back(up128(123 * 2048) + up128(123 * 2000), 0);
    std::memcpy(back.data(), &m.bytes[m.dst], 123 * 2048);
    const RunResult r = run_image(build_unpad(us, up), up.cores, {0, up128(123 * 2048)}, back);
    ASSERT_EQ(r.error, 0) << r.message;
    EXPECT_EQ(0, std::memcmp(&back[up128(123 * 2048)], &m.before[0], 123 * 2000));
}

// ---- transpose ----

void check_transpose(const TransposeShape& s, uint32_t cores, bool strided, uint64_t block = 0,
                     uint64_t block2 = 0) {
    SCOPED_TRACE(testing::Message()
                 << "transpose " << s.batch << "x" << s.rows << "x" << s.cols << " es " << s.es
                 << " src_ld " << s.src_ld << " dst_ld " << s.dst_ld << " cores " << cores
                 << " strided " << strided << " block " << block << "/" << block2);
    const LayoutPlan p = transpose_make_plan(s, cores, kLxBudget, strided, block, block2);
    SCOPED_TRACE(layout_plan_name(p));
    const uint64_t es = s.es;
    const uint64_t sld = s.src_ld ? s.src_ld : s.cols * es;
    const uint64_t sbs = s.src_bs ? s.src_bs : s.rows * sld;
    const uint64_t dld = s.dst_ld ? s.dst_ld : s.rows * es;
    const uint64_t dbs = s.dst_bs ? s.dst_bs : s.cols * dld;
    const bool sticks = transpose_to_stick_rows(s);
    Mem m = make_mem(
        0, (s.batch - 1) * sbs + (s.rows - 1) * sld + s.cols * es,
        (s.batch - 1) * dbs + (s.cols - 1) * dld + (sticks ? up128(s.rows * es) : s.rows * es), 4);
    run(build_transpose(s, p), p, m);
    if (::testing::Test::HasFatalFailure()) return;
    for (uint64_t b = 0; b < s.batch; ++b)
        for (uint64_t c = 0; c < s.cols; ++c) {
            const uint8_t* row = &m.bytes[m.dst + b * dbs + c * dld];
            for (uint64_t r = 0; r < s.rows; ++r)
                ASSERT_EQ(
                    0, std::memcmp(row + r * es, &m.before[m.src + b * sbs + r * sld + c * es], es))
                    << "batch " << b << " dst row " << c << " element " << r;
            if (sticks) {  // zero up to the end of the row's last stick
                for (uint64_t x = s.rows * es; x < up128(s.rows * es); ++x)
                    ASSERT_EQ(row[x], 0) << "padding byte " << x << " of dst row " << c;
            }
        }
    for (uint64_t i = 0; i < m.bytes.size(); ++i) {
        const uint64_t o = i - m.dst;
        const uint64_t row_bytes = sticks ? up128(s.rows * es) : s.rows * es;
        const bool in_dst =
            i >= m.dst && i < m.dst_end && o % dbs < s.cols * dld && (o % dbs) % dld < row_bytes;
        if (!in_dst) {
            ASSERT_EQ(m.bytes[i], m.before[i]) << "byte " << i;
        }
    }
}

TEST(OpsLayout, TransposeDenseOddShapes) {
    struct C {
        uint64_t b, r, c;
    };
    const C shapes[] = {{1, 1, 1},     {3, 7, 5},  {2, 65, 63}, {1, 1000, 129},
                        {4, 63, 1000}, {5, 1, 77}, {2, 77, 1},  {16, 100, 64}};
    for (const C& x : shapes)
        for (uint32_t es : {1u, 2u, 4u})
            for (uint32_t cores : {1u, 32u})
                for (bool strided : {false, true}) {
                    TransposeShape s;
                    s.batch = x.b, s.rows = x.r, s.cols = x.c, s.es = es;
                    check_transpose(s, cores, strided);
                    if (HasFatalFailure()) return;
                }
    TransposeShape s;
    s.batch = 3, s.rows = 200, s.cols = 150, s.es = 2;
    check_transpose(s, 4, false, 7);  // 7 source columns per step
    check_transpose(s, 4, true, 33);
}

// Dense destinations of tall matrices: each step gathers the source rows in several loads.
TEST(OpsLayout, TransposeDenseTall) {
    TransposeShape s;
    s.batch = 2, s.rows = 3001, s.cols = 70, s.es = 2;
    for (uint32_t cores : {1u, 32u}) {
        const CopyShape c = transpose_as_copy(s);
        for (bool strided : {false, true}) {
            SCOPED_TRACE(strided);
            const LayoutPlan p = copy_make_plan(c, cores, kLxBudget, strided, 64, 256);
            ASSERT_EQ(p.block2, 256u);
            check_transpose(s, cores, strided, 64);
        }
    }
    s.batch = 1, s.rows = 2000, s.cols = 33, s.es = 4;
    check_transpose(s, 5, true);
    // too tall for a stick of destination rows per step: narrower steps
    s.batch = 1, s.rows = 20001, s.cols = 5, s.es = 2;
    Pricer pricer(default_engine_config());
    const LayoutPlan p = plan_transpose(pricer, s, 32);
    EXPECT_LT(p.block, 64u) << layout_plan_name(p);
    check_transpose(s, 32, false);
    check_transpose(s, 32, true);
}

// Destinations in stick rows (a K^T for the matmul), and dense ones whose rows are whole sticks.
TEST(OpsLayout, TransposeToStickRows) {
    struct C {
        uint64_t b, r, c;
        uint32_t es;
        uint64_t extra;
    };
    const C shapes[] = {{1, 1, 1, 2, 0},      {3, 7, 5, 4, 1},     {2, 65, 63, 2, 0},
                        {1, 1000, 129, 1, 0}, {2, 63, 1000, 2, 2}, {2, 128, 300, 2, 0},
                        {1, 4096, 70, 2, 0},  {3, 96, 33, 4, 0}};
    for (const C& x : shapes)
        for (uint32_t cores : {1u, 32u})
            for (bool strided : {false, true}) {
                TransposeShape s;
                s.batch = x.b, s.rows = x.r, s.cols = x.c, s.es = x.es;
                s.dst_ld = up128(x.r * x.es) + x.extra * 128;
                s.dst_bs = (x.c + 1) * s.dst_ld;  // a gap row between batches
                ASSERT_TRUE(transpose_to_stick_rows(s));
                check_transpose(s, cores, strided);
                check_transpose(s, cores, strided, 3, 128 / x.es);
                if (HasFatalFailure()) return;
            }
}

// A source with a row stride wider than its rows (a slice) and an unaligned one.
TEST(OpsLayout, TransposeStridedSource) {
    for (uint64_t extra : {2ull, 128ull, 1000ull})
        for (uint32_t cores : {1u, 32u})
            for (bool strided : {false, true}) {
                TransposeShape s;
                s.batch = 2, s.rows = 77, s.cols = 45, s.es = 2;
                s.src_ld = 45 * 2 + extra, s.src_bs = 80 * s.src_ld;
                check_transpose(s, cores, strided);
                s.dst_ld = 256, s.dst_bs = 45 * 256;
                check_transpose(s, cores, strided);
            }
}

// ---- strided copies ----

void check_copy(const CopyShape& s, uint64_t src_off, uint32_t cores, bool strided,
                uint64_t block = 0, uint64_t chunk = 0) {
    std::ostringstream desc;
    for (uint32_t d = 0; d < s.ndim; ++d) desc << s.sizes[d] << ":" << s.strides[d] << " ";
    SCOPED_TRACE(testing::Message()
                 << "copy " << desc.str() << "es " << s.es << " kind " << int(copy_kind(s))
                 << " cores " << cores << " strided " << strided << " block " << block);
    const LayoutPlan p = copy_make_plan(s, cores, kLxBudget, strided, block, chunk);
    uint64_t n = 1, extent = 1;
    for (uint32_t d = 0; d < s.ndim; ++d)
        n *= s.sizes[d], extent += (s.sizes[d] - 1) * s.strides[d];
    Mem m = make_mem(src_off, extent * s.es, n * s.es, 6);
    run(build_copy(s, p), p, m);
    if (::testing::Test::HasFatalFailure()) return;
    std::vector<uint64_t> idx(s.ndim, 0);
    for (uint64_t i = 0; i < n; ++i) {
        uint64_t off = 0;
        for (uint32_t d = 0; d < s.ndim; ++d) off += idx[d] * s.strides[d];
        ASSERT_EQ(0, std::memcmp(&m.bytes[m.dst + i * s.es], &m.before[m.src + off * s.es], s.es))
            << "element " << i;
        for (int d = static_cast<int>(s.ndim) - 1; d >= 0; --d) {
            if (++idx[d] < s.sizes[d]) break;
            idx[d] = 0;
        }
    }
    expect_outside_untouched(m);
}

CopyShape permuted(const std::vector<uint64_t>& sizes, const std::vector<int>& perm, uint32_t es) {
    // the dense tensor `sizes`, viewed through perm (dest dim d = source dim perm[d])
    std::vector<uint64_t> st(sizes.size(), 1);
    for (int d = static_cast<int>(sizes.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * sizes[d + 1];
    CopyShape c;
    c.ndim = static_cast<uint32_t>(sizes.size());
    c.es = es;
    for (uint32_t d = 0; d < c.ndim; ++d) c.sizes[d] = sizes[perm[d]], c.strides[d] = st[perm[d]];
    return c;
}

TEST(OpsLayout, PermutesOfUpToEightDims) {
    std::mt19937 rng(11);
    int kinds[3] = {};
    for (int t = 0; t < 60; ++t) {
        const int nd = 1 + static_cast<int>(rng() % 8);
        std::vector<uint64_t> sizes(nd);
        uint64_t n = 1;
        for (auto& x : sizes) {
            x = 1 + rng() % (nd <= 3 ? 40 : nd <= 5 ? 7 : 3);
            n *= x;
        }
        std::vector<int> perm(nd);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        const uint32_t es = 1u << (rng() % 3);
        const CopyShape c = permuted(sizes, perm, es);
        kinds[int(copy_kind(c))]++;
        check_copy(c, 0, t % 2 ? 32 : 1, t % 3 == 0);
        if (HasFatalFailure()) return;
    }
    EXPECT_GT(kinds[int(CopyKind::ROWS)], 5);
    EXPECT_GT(kinds[int(CopyKind::TRANSPOSE)], 5);
    EXPECT_GT(kinds[int(CopyKind::ELEMENTS)], 5);
}

// Rows longer than LX are copied in pieces (and short ones too when asked).
TEST(OpsLayout, LongRowsInPieces) {
    CopyShape c;
    c.ndim = 2, c.es = 2;
    c.sizes[0] = 3, c.strides[0] = 900007, c.sizes[1] = 900001, c.strides[1] = 1;
    EXPECT_EQ(copy_kind(c), CopyKind::ROWS);
    for (uint32_t cores : {1u, 32u}) {
        const LayoutPlan p = copy_make_plan(c, cores, kLxBudget, false);
        EXPECT_GT(p.block2, 0u) << layout_plan_name(p);
        check_copy(c, 6, cores, false);
    }
    c.sizes[0] = 70, c.strides[0] = 1001, c.sizes[1] = 1000;
    const LayoutPlan p = copy_make_plan(c, 7, kLxBudget, false, 0, 192);
    ASSERT_EQ(p.block2, 192u);
    check_copy(c, 2, 7, false, 0, 192);
}

TEST(OpsLayout, StridedViewsToContiguous) {
    // x[:, 1::3] of a [40, 100] fp16, from an unaligned start
    CopyShape c;
    c.ndim = 2, c.es = 2;
    c.sizes[0] = 40, c.strides[0] = 100, c.sizes[1] = 33, c.strides[1] = 3;
    for (uint32_t cores : {1u, 32u})
        for (bool strided : {false, true}) check_copy(c, 2, cores, strided);
    // a broadcast (stride 0) dim, a slice of rows, the attention [B, S, H, D] -> [B, H, S, D]
    c.ndim = 3, c.es = 4;
    c.sizes[0] = 5, c.strides[0] = 0, c.sizes[1] = 17, c.strides[1] = 31, c.sizes[2] = 29,
    c.strides[2] = 1;
    for (uint32_t cores : {1u, 32u}) check_copy(c, 8, cores, false), check_copy(c, 8, cores, true);
    const CopyShape a = permuted({2, 100, 4, 64}, {0, 2, 1, 3}, 2);
    EXPECT_EQ(copy_kind(a), CopyKind::ROWS);
    for (uint32_t cores : {1u, 32u}) check_copy(a, 0, cores, false);
    const CopyShape k = permuted({2, 4, 100, 64}, {0, 1, 3, 2}, 2);  // K^T per head
    EXPECT_EQ(copy_kind(k), CopyKind::TRANSPOSE);
    for (uint32_t cores : {1u, 32u}) check_copy(k, 0, cores, false), check_copy(k, 0, cores, true);
    // a 0-dim tensor and a single element
    c.ndim = 0;
    check_copy(c, 12, 1, false);
}

// ---- planner ----

TEST(OpsLayout, PlansPriceLikeTheRealRun) {
    Pricer pricer(default_engine_config());
    PadShape ps = pad_shape(300, 4095, 2);
    LayoutPlan p = plan_pad(pricer, ps, 32);
    Mem m = make_mem(0, 300 * 8190, 300 * 8192, 1);
    RunResult r = run_image(build_pad(ps, p), p.cores, {m.src, m.dst}, m.bytes);
    ASSERT_EQ(r.error, 0) << r.message;
    EXPECT_EQ(r.stats.total_cycles, p.cycles) << layout_plan_name(p);
    TransposeShape ts;
    ts.batch = 4, ts.rows = 333, ts.cols = 64, ts.es = 2;
    p = plan_transpose(pricer, ts, 32);
    m = make_mem(0, 4 * 333 * 128, 4 * 333 * 128, 2);
    r = run_image(build_transpose(ts, p), p.cores, {m.src, m.dst}, m.bytes);
    ASSERT_EQ(r.error, 0) << r.message;
    EXPECT_EQ(r.stats.total_cycles, p.cycles) << layout_plan_name(p);
    // no fixed alternative beats the plan
    for (uint32_t c : {1u, 32u})
        for (bool st : {false, true}) {
            const LayoutPlan q =
                price_transpose(pricer, ts, transpose_make_plan(ts, c, kLxBudget, st));
            EXPECT_LE(p.cycles, q.cycles) << layout_plan_name(q);
        }
}

TEST(OpsLayout, SourceAndDestinationFarApart) {
    PadShape s = pad_shape(1000, 1000, 2);
    const LayoutPlan p = pad_make_plan(s, 32, kLxBudget, false);
    std::vector<uint8_t> none;
    const uint64_t gib = 1ull << 30;
    const RunResult r = run_image(build_pad(s, p), 32, {gib + 2, 3 * gib}, none, true, 4 * gib);
    EXPECT_EQ(r.error, 0) << r.message;
    EXPECT_EQ(r.stats.ddr_write_bytes, 1000u * 2048);
}

TEST(OpsLayout, RejectsWhatItCannotDo) {
    PadShape s = pad_shape(10, 10, 2);
    s.dst_ld = 100;
    EXPECT_THROW(pad_validate(s), std::invalid_argument);
    s = pad_shape(10, 10, 3);
    EXPECT_THROW(pad_validate(s), std::invalid_argument);
    TransposeShape t;
    t.rows = 10, t.cols = 10, t.es = 2, t.dst_ld = 30;
    EXPECT_THROW(transpose_validate(t), std::invalid_argument);
    // a dense transpose whose every tile needs all of a very tall matrix
    t = {};
    t.rows = 1000001, t.cols = 3, t.es = 2;
    EXPECT_THROW((void)transpose_make_plan(t, 1, kLxBudget, false), std::invalid_argument);
    UnpadShape u;
    u.rows = 4, u.cols = 4, u.es = 2, u.src_ld = 100;
    EXPECT_THROW(unpad_validate(u), std::invalid_argument);
}

}  // namespace
}  // namespace spyre::ops

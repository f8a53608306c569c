// SPDX-License-Identifier: MIT
// The op library's gather and scatter by indices (spyre_op_gather, spyre_op_scatter) against a
// host reference: every element type, int64 and int32 indices, every dim of a rank-3 tensor with
// odd sizes, full and broadcast index shapes, negative indices with WRAP_NEGATIVE, duplicate
// indices accumulating in order, one and many cores, operands larger than a scratchpad (tiles
// along N), and bad indices failing the launch.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops_api_util.hpp"

namespace {

using namespace spyre::ops_api_test;

constexpr spyre_dtype kAll[] = {SPYRE_DTYPE_FLOAT32, SPYRE_DTYPE_FLOAT16, SPYRE_DTYPE_BFLOAT16,
                                SPYRE_DTYPE_INT8,    SPYRE_DTYPE_INT32,   SPYRE_DTYPE_INT64,
                                SPYRE_DTYPE_UINT8};

size_t tsize(spyre_dtype t) {
    switch (t) {
        case SPYRE_DTYPE_INT8:
        case SPYRE_DTYPE_UINT8:
            return 1;
        case SPYRE_DTYPE_FLOAT16:
        case SPYRE_DTYPE_BFLOAT16:
            return 2;
        case SPYRE_DTYPE_INT64:
            return 8;
        default:
            return 4;
    }
}

// Element i as a double (integers exact up to 2^53, enough for the values used here).
double value(spyre_dtype t, const std::vector<uint8_t>& b, size_t i) {
    switch (t) {
        case SPYRE_DTYPE_FLOAT32:
        case SPYRE_DTYPE_FLOAT16:
        case SPYRE_DTYPE_BFLOAT16:
            return get(t, b, i);
        case SPYRE_DTYPE_INT8:
            return static_cast<int8_t>(b[i]);
        case SPYRE_DTYPE_UINT8:
            return b[i];
        case SPYRE_DTYPE_INT32: {
            int32_t v;
            std::memcpy(&v, &b[4 * i], 4);
            return v;
        }
        default: {
            int64_t v;
            std::memcpy(&v, &b[8 * i], 8);
            return double(v);
        }
    }
}

// Stores v rounded (floats: through fp32, as the vector unit) or wrapped (integers).
void store(spyre_dtype t, std::vector<uint8_t>& b, size_t i, double v) {
    switch (t) {
        case SPYRE_DTYPE_FLOAT32:
        case SPYRE_DTYPE_FLOAT16:
        case SPYRE_DTYPE_BFLOAT16:
            return put(t, b, i, float(v));
        default: {
            const int64_t x = int64_t(v);
            std::memcpy(&b[tsize(t) * i], &x, tsize(t));  // little endian: the low bytes wrap
        }
    }
}

// A device buffer of n elements of t with its host copy.
struct Buf {
    spyre_dtype t;
    size_t n;
    std::vector<uint8_t> host;
    spyre_buffer_t buf = nullptr;
    Buf(spyre_device_t dev, spyre_dtype dt, size_t count) : t(dt), n(count) {
        host.resize(std::max<size_t>(n, 1) * tsize(t));
        EXPECT_EQ(SPYRE_SUCCESS, spyre_malloc(dev, host.size(), &buf));
    }
    ~Buf() { spyre_free(buf); }
    void random(uint32_t seed) {
        std::mt19937 rng(seed);
        for (size_t i = 0; i < n; ++i)
            store(t, host, i, int(rng() % 200) - 100 + 0.25 * (rng() % 4));
        upload();
    }
    void upload() { ASSERT_EQ(SPYRE_SUCCESS, spyre_memcpy_htod(buf, 0, host.data(), host.size())); }
    void fetch() { ASSERT_EQ(SPYRE_SUCCESS, spyre_memcpy_dtoh(host.data(), buf, 0, host.size())); }
    spyre_tensor tensor(std::vector<int64_t> shape) const {
        spyre_tensor s{};
        s.buffer = buf, s.dtype = t, s.ndim = uint32_t(shape.size());
        int64_t st = 1;
        for (size_t d = shape.size(); d-- > 0;)
            s.shape[d] = shape[d], s.strides[d] = st, st *= shape[d];
        return s;
    }
};

// Linear position of `pos` in a dense tensor of `shape`, dims of size 1 broadcast.
size_t at(const std::vector<int64_t>& shape, const std::vector<int64_t>& pos) {
    size_t i = 0;
    for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + (shape[d] == 1 ? 0 : pos[d]);
    return i;
}

// Calls f(pos) for every position of `shape` in row-major order.
template <class F>
void each(const std::vector<int64_t>& shape, F f) {
    int64_t total = 1;
    for (int64_t s : shape) total *= s;
    std::vector<int64_t> pos(shape.size());
    for (int64_t k = 0; k < total; ++k) {
        int64_t r = k;
        for (size_t d = shape.size(); d-- > 0;) pos[d] = r % shape[d], r /= shape[d];
        f(pos);
    }
}

struct Case {
    std::vector<int64_t> table, rows, index;
    int dim;
};

std::vector<int64_t> index_values(const Buf& ix) {
    std::vector<int64_t> v(ix.n);
    for (size_t i = 0; i < ix.n; ++i) v[i] = int64_t(value(ix.t, ix.host, i));
    return v;
}

void fill_index(Buf& ix, int64_t V, uint32_t seed, bool negative) {
    std::mt19937 rng(seed);
    for (size_t i = 0; i < ix.n; ++i) {
        int64_t v = rng() % V;
        if (negative && rng() % 2) v -= V;
        store(ix.t, ix.host, i, double(v));
    }
    ix.upload();
}

std::vector<Case> cases() {
    // table [3, 7, 5]; every dim, index full (torch.gather) or broadcast (index_select)
    return {{{3, 7, 5}, {4, 7, 5}, {4, 7, 5}, 0},   {{3, 7, 5}, {4, 7, 5}, {4, 1, 1}, 0},
            {{3, 7, 5}, {3, 9, 5}, {3, 9, 5}, 1},   {{3, 7, 5}, {3, 9, 5}, {1, 9, 1}, 1},
            {{3, 7, 5}, {3, 7, 11}, {3, 7, 11}, 2}, {{3, 7, 5}, {3, 7, 11}, {1, 1, 11}, 2},
            {{3, 7, 5}, {3, 7, 2}, {3, 7, 2}, 2},   {{13}, {29}, {29}, 0}};
}

TEST_F(Ops, GatherEveryTypeDimAndIndexShape) {
    for (spyre_dtype t : kAll)
        for (spyre_dtype it : {SPYRE_DTYPE_INT64, SPYRE_DTYPE_INT32})
            for (const Case& c : cases())
                for (bool wrap : {false, true}) {
                    SCOPED_TRACE(::testing::Message()
                                 << "type " << t << " index " << it << " dim " << c.dim << " wrap "
                                 << wrap << " index dims " << c.index.size() << " " << c.index[0]);
                    size_t nt = 1, nr = 1, ni = 1;
                    for (auto s : c.table) nt *= s;
                    for (auto s : c.rows) nr *= s;
                    for (auto s : c.index) ni *= s;
                    Buf tab(dev, t, nt), out(dev, t, nr), ix(dev, it, ni);
                    tab.random(nt + t);
                    fill_index(ix, c.table[c.dim], ni, wrap);
                    const spyre_tensor tt = tab.tensor(c.table), to = out.tensor(c.rows),
                                       ti = ix.tensor(c.index);
                    ASSERT_SPYRE(spyre_op_gather(nullptr, &tt, c.dim, &ti, &to,
                                                 wrap ? SPYRE_INDEX_WRAP_NEGATIVE : 0));
                    ASSERT_SPYRE(spyre_device_synchronize(dev));
                    out.fetch();
                    const auto iv = index_values(ix);
                    const int64_t V = c.table[c.dim];
                    each(c.rows, [&](const std::vector<int64_t>& p) {
                        int64_t v = iv[at(c.index, p)];
                        if (v < 0) v += V;
                        auto q = p;
                        q[c.dim] = v;
                        const size_t o = at(c.rows, p), s = at(c.table, q);
                        ASSERT_EQ(0, std::memcmp(&out.host[o * tsize(t)], &tab.host[s * tsize(t)],
                                                 tsize(t)))
                            << o;
                    });
                }
}

TEST_F(Ops, ScatterAddsDuplicatesInOrderAndCopies) {
    for (spyre_dtype t : kAll)
        for (const Case& c : cases())
            for (bool acc : {true, false}) {
                SCOPED_TRACE(::testing::Message() << "type " << t << " dim " << c.dim << " acc "
                                                  << acc << " index " << c.index[0]);
                size_t nt = 1, nr = 1, ni = 1;
                for (auto s : c.table) nt *= s;
                for (auto s : c.rows) nr *= s;
                for (auto s : c.index) ni *= s;
                Buf tab(dev, t, nt), src(dev, t, nr), ix(dev, SPYRE_DTYPE_INT64, ni);
                tab.random(nt + t), src.random(nr + 7 * t);
                const int64_t V = c.table[c.dim];
                if (acc) {
                    fill_index(ix, V, ni + 1, false);  // with duplicates
                } else {
                    // index_copy: each target once per slab (a permutation prefix when N <= V)
                    for (size_t i = 0; i < ni; ++i) store(ix.t, ix.host, i, double(i % V));
                    ix.upload();
                }
                std::vector<uint8_t> want = tab.host;
                const auto iv = index_values(ix);
                each(c.rows, [&](const std::vector<int64_t>& p) {
                    auto q = p;
                    q[c.dim] = iv[at(c.index, p)];
                    const size_t d = at(c.table, q), s = at(c.rows, p);
                    if (acc)
                        store(t, want, d, value(t, want, d) + value(t, src.host, s));
                    else
                        std::memcpy(&want[d * tsize(t)], &src.host[s * tsize(t)], tsize(t));
                });  // a repeated target keeps the last write in (n, i) order, as on the card
                const spyre_tensor tt = tab.tensor(c.table), ts = src.tensor(c.rows),
                                   ti = ix.tensor(c.index);
                ASSERT_SPYRE(spyre_op_scatter(nullptr, &tt, c.dim, &ti, &ts,
                                              acc ? SPYRE_INDEX_ACCUMULATE : 0));
                ASSERT_SPYRE(spyre_device_synchronize(dev));
                tab.fetch();
                for (size_t i = 0; i < nt; ++i)
                    ASSERT_EQ(0,
                              std::memcmp(&tab.host[i * tsize(t)], &want[i * tsize(t)], tsize(t)))
                        << i << ": " << value(t, tab.host, i) << " vs " << value(t, want, i);
            }
}

TEST_F(Ops, IndexSplitsSlabsOverCores) {
    // 64 slabs of 32 fp32 (one stick each): whole-stick slabs may go to many cores
    Buf tab(dev, SPYRE_DTYPE_FLOAT32, 64 * 32), out(dev, SPYRE_DTYPE_FLOAT32, 64 * 32),
        ix(dev, SPYRE_DTYPE_INT64, 64 * 32);
    tab.random(1);
    fill_index(ix, 32, 2, false);
    const spyre_tensor tt = tab.tensor({64, 32}), to = out.tensor({64, 32}),
                       ti = ix.tensor({64, 32});
    ASSERT_SPYRE(spyre_op_gather(nullptr, &tt, 1, &ti, &to, 0));
    spyre_op_info info;
    ASSERT_SPYRE(spyre_op_get_last_info(&info));
    EXPECT_GT(info.cores, 1u);
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    out.fetch();
    const auto iv = index_values(ix);
    for (size_t i = 0; i < 64 * 32; ++i)
        ASSERT_EQ(value(SPYRE_DTYPE_FLOAT32, out.host, i),
                  value(SPYRE_DTYPE_FLOAT32, tab.host, (i / 32) * 32 + iv[i]))
            << i;
    // scatter_add over the same: every slab on its own core, duplicates summed
    Buf acc(dev, SPYRE_DTYPE_FLOAT32, 64 * 32);
    for (size_t i = 0; i < 64 * 32; ++i) store(acc.t, acc.host, i, 0);
    acc.upload();
    const spyre_tensor ta = acc.tensor({64, 32});
    ASSERT_SPYRE(spyre_op_scatter(nullptr, &ta, 1, &ti, &tt, SPYRE_INDEX_ACCUMULATE));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    acc.fetch();
    std::vector<float> want(64 * 32, 0.0f);
    for (size_t i = 0; i < 64 * 32; ++i)
        want[(i / 32) * 32 + iv[i]] += float(value(SPYRE_DTYPE_FLOAT32, tab.host, i));
    for (size_t i = 0; i < 64 * 32; ++i)
        ASSERT_EQ(float(value(SPYRE_DTYPE_FLOAT32, acc.host, i)), want[i]) << i;
}

TEST_F(Ops, IndexTilesOperandsLargerThanTheScratchpad) {
    // [20001, 16] fp32 gathered along dim 0 by a full int64 index: table 1.28 MB, index 2.56 MB
    // (more than a core's 2 MB with the rows): the index and rows pass in tiles, spread over the
    // cores although O = 1, and a last partial tile (20001 is odd) in a second launch
    constexpr int64_t V = 20001, I = 16;
    Buf tab(dev, SPYRE_DTYPE_FLOAT32, V * I), out(dev, SPYRE_DTYPE_FLOAT32, V * I),
        ix(dev, SPYRE_DTYPE_INT64, V * I);
    tab.random(5);
    fill_index(ix, V, 6, false);
    const spyre_tensor tt = tab.tensor({V, I}), to = out.tensor({V, I}), ti = ix.tensor({V, I});
    ASSERT_SPYRE(spyre_op_gather(nullptr, &tt, 0, &ti, &to, 0));
    spyre_op_info info;
    ASSERT_SPYRE(spyre_op_get_last_info(&info));
    EXPECT_GT(info.cores, 1u) << info.plan;
    EXPECT_EQ(info.launches, 2u) << info.plan;
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    out.fetch();
    const auto iv = index_values(ix);
    for (int64_t i = 0; i < V * I; ++i)
        ASSERT_EQ(value(out.t, out.host, i), value(tab.t, tab.host, iv[i] * I + i % I)) << i;
    // scatter_add of the same into zeros: one core per slab, its tiles in order (duplicates add
    // in (n, i) order: the sums equal a sequential host loop's bit for bit)
    Buf acc(dev, SPYRE_DTYPE_FLOAT32, V * I);
    for (int64_t i = 0; i < V * I; ++i) store(acc.t, acc.host, i, 0);
    acc.upload();
    const spyre_tensor ta = acc.tensor({V, I});
    ASSERT_SPYRE(spyre_op_scatter(nullptr, &ta, 0, &ti, &tt, SPYRE_INDEX_ACCUMULATE));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    acc.fetch();
    std::vector<float> want(V * I, 0.0f);
    for (int64_t i = 0; i < V * I; ++i) want[iv[i] * I + i % I] += float(value(tab.t, tab.host, i));
    for (int64_t i = 0; i < V * I; ++i) ASSERT_EQ(float(value(acc.t, acc.host, i)), want[i]) << i;
    // a table slab that cannot fit is refused with NOT_SUPPORTED, not a fault
    Buf big(dev, SPYRE_DTYPE_FLOAT32, 600000), few(dev, SPYRE_DTYPE_FLOAT32, 4),
        fi(dev, SPYRE_DTYPE_INT64, 4);
    const spyre_tensor tb = big.tensor({600000}), tf = few.tensor({4}), tfi = fi.tensor({4});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED, spyre_op_gather(nullptr, &tb, 0, &tfi, &tf, 0));
}

// More work than one launch may do (the engine's budget of 2^21 timed operations per job):
// split into launches over the slabs (a scatter_add along the last dim of 8192 rows of 130,
// odd so the split points keep every operand on a stick) or, with one slab, over the tiles in
// ascending order (2.5 million positions into 64 targets); the sums equal a sequential host
// loop's bit for bit, so repeated targets still add in the order of their positions.
TEST_F(Ops, IndexSplitsWorkBeyondOneLaunchsBudget) {
    struct Big {
        int64_t O, V, N;
    } bigs[] = {{8192, 130, 130}, {1, 64, 2500000}};
    for (const Big& k : bigs) {
        SCOPED_TRACE(std::to_string(k.O) + " x " + std::to_string(k.N));
        Buf acc(dev, SPYRE_DTYPE_FLOAT32, k.O * k.V), src(dev, SPYRE_DTYPE_FLOAT32, k.O * k.N),
            ix(dev, SPYRE_DTYPE_INT64, k.O * k.N);
        for (int64_t i = 0; i < k.O * k.V; ++i) store(acc.t, acc.host, i, 0);
        acc.upload();
        src.random(7);
        fill_index(ix, k.V, 8, false);
        const spyre_tensor ta = k.O > 1 ? acc.tensor({k.O, k.V}) : acc.tensor({k.V}),
                           ts = k.O > 1 ? src.tensor({k.O, k.N}) : src.tensor({k.N}),
                           ti = k.O > 1 ? ix.tensor({k.O, k.N}) : ix.tensor({k.N});
        const int32_t dim = k.O > 1 ? 1 : 0;
        ASSERT_SPYRE(spyre_op_scatter(nullptr, &ta, dim, &ti, &ts, SPYRE_INDEX_ACCUMULATE));
        spyre_op_info info;
        ASSERT_SPYRE(spyre_op_get_last_info(&info));
        EXPECT_GT(info.launches, 1u) << info.plan;
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        acc.fetch();
        const auto iv = index_values(ix);
        std::vector<float> want(k.O * k.V, 0.0f);
        for (int64_t o = 0; o < k.O; ++o)
            for (int64_t n = 0; n < k.N; ++n)
                want[o * k.V + iv[o * k.N + n]] += float(value(src.t, src.host, o * k.N + n));
        for (int64_t i = 0; i < k.O * k.V; ++i)
            ASSERT_EQ(float(value(acc.t, acc.host, i)), want[i]) << i;
    }
}

TEST_F(Ops, IndexOutOfRangeFailsTheLaunch) {
    Buf tab(dev, SPYRE_DTYPE_FLOAT32, 35), out(dev, SPYRE_DTYPE_FLOAT32, 20),
        ix(dev, SPYRE_DTYPE_INT64, 4);
    tab.random(3);
    const spyre_tensor tt = tab.tensor({7, 5}), to = out.tensor({4, 5}), ti = ix.tensor({4, 1});
    for (int64_t bad : {int64_t(7), int64_t(-1), int64_t(-8), int64_t(1) << 40}) {
        for (uint32_t flags : {0u, uint32_t(SPYRE_INDEX_WRAP_NEGATIVE)}) {
            if (flags && bad == -1) continue;  // -1 is valid with WRAP_NEGATIVE
            SCOPED_TRACE(::testing::Message() << "bad " << bad << " flags " << flags);
            for (size_t i = 0; i < 4; ++i) store(ix.t, ix.host, i, i == 2 ? double(bad) : 1.0);
            ix.upload();
            ASSERT_SPYRE(spyre_op_gather(nullptr, &tt, 0, &ti, &to, flags));
            EXPECT_NE(SPYRE_SUCCESS, spyre_device_synchronize(dev));
            ASSERT_SPYRE(
                spyre_op_scatter(nullptr, &tt, 0, &ti, &to, SPYRE_INDEX_ACCUMULATE | flags));
            EXPECT_NE(SPYRE_SUCCESS, spyre_device_synchronize(dev));
        }
    }
    // the card works afterwards
    for (size_t i = 0; i < 4; ++i) store(ix.t, ix.host, i, 6.0);
    ix.upload();
    ASSERT_SPYRE(spyre_op_gather(nullptr, &tt, 0, &ti, &to, 0));
    ASSERT_SPYRE(spyre_device_synchronize(dev));
    out.fetch();
    for (size_t i = 0; i < 20; ++i)
        ASSERT_EQ(value(out.t, out.host, i), value(tab.t, tab.host, 30 + i % 5));
}

TEST_F(Ops, IndexRefusesBadArguments) {
    Buf tab(dev, SPYRE_DTYPE_FLOAT32, 35), out(dev, SPYRE_DTYPE_FLOAT32, 20),
        ix(dev, SPYRE_DTYPE_INT64, 20), fx(dev, SPYRE_DTYPE_FLOAT32, 4);
    const spyre_tensor tt = tab.tensor({7, 5}), to = out.tensor({4, 5}), ti = ix.tensor({4, 5}),
                       tf = fx.tensor({4, 1});
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_gather(nullptr, &tt, 0, &tf, &to, 0));
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_gather(nullptr, &tt, 2, &ti, &to, 0));
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_gather(nullptr, &tt, 1, &ti, &to, 0));
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT,
              spyre_op_gather(nullptr, &tt, 0, &ti, &to, SPYRE_INDEX_ACCUMULATE));
    const spyre_tensor tp = ix.tensor({4, 2});  // 2 is neither 5 nor 1
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_op_gather(nullptr, &tt, 0, &tp, &to, 0));
    spyre_tensor odd = out.tensor({4, 5});
    odd.offset = 4;  // the written tensor must start on a stick
    odd.shape[0] = 3;
    const spyre_tensor ti3 = ix.tensor({3, 5});
    EXPECT_EQ(SPYRE_ERROR_NOT_SUPPORTED, spyre_op_gather(nullptr, &tt, 0, &ti3, &odd, 0));
}

}  // namespace

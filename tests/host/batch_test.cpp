// SPDX-License-Identifier: MIT
// Submission batching (spyre_stream_begin_batch, libspyre.md "Submission batching") on both
// backends (the guest `ops` row runs this binary through spyre.ko): op-library launches and device
// copies queued between spyre_stream_begin_batch and spyre_stream_end_batch are one submission and
// compute what they compute unbatched; every call that queues other work or waits for the
// stream queues the held work first; nesting, bounds and misuse.

#include <string>
#include <vector>

#include "ops_api_util.hpp"
#include "spyre/program_builder.hpp"

constexpr size_t BatchStream_kMaxHeld = 256;  // libspyre/src/batch.hpp kMaxHeld

namespace spyre::ops_api_test {
namespace {

uint64_t submissions(spyre_device_t dev) {
    spyre_runtime_stats rs{};
    EXPECT_EQ(SPYRE_SUCCESS, spyre_device_get_runtime_stats(dev, &rs));
    return rs.jobs_submitted;
}

// A program that halts at once, or (faulting) first reads an argument no launch passes.
spyre_program_t load_program(spyre_device_t dev, bool faulting) {
    ProgramBuilder b;
    if (faulting) b.arg(4, 5);
    b.halt();
    const std::vector<uint8_t> img = b.finish();
    spyre_program_t prog = nullptr;
    EXPECT_EQ(SPYRE_SUCCESS, spyre_program_load(dev, img.data(), img.size(), &prog))
        << spyre_last_error();
    return prog;
}

// A compiled graph's shape of work: pointwise ops, a row reduction, a matmul and a copy, each
// reading the one before.
struct Chain {
    static constexpr int64_t M = 32, K = 64;
    spyre_device_t dev;
    DevArray x, w, a, b, c, d, out;
    explicit Chain(spyre_device_t dv)
        : dev(dv),
          x(dv, SPYRE_DTYPE_FLOAT16, M * K, 1),
          w(dv, SPYRE_DTYPE_FLOAT16, K * K, 2),
          a(dv, SPYRE_DTYPE_FLOAT16, M * K, 3),
          b(dv, SPYRE_DTYPE_FLOAT16, M * K, 4),
          c(dv, SPYRE_DTYPE_FLOAT16, M * K, 5),
          d(dv, SPYRE_DTYPE_FLOAT16, M * K, 6),
          out(dv, SPYRE_DTYPE_FLOAT16, M * K, 7) {}
    // a = x * x; b = softmax(a); c = b w; d = c + x; out = d (a copy): 4 launches and a copy
    void queue(spyre_stream_t s) {
        auto t = [](const DevArray& v) { return view(v, {M, K}, {K, 1}); };
        const spyre_tensor tx = t(x), tw = view(w, {K, K}, {K, 1}), ta = t(a), tb = t(b), tc = t(c),
                           td = t(d);
        ASSERT_SPYRE(spyre_op_binary(s, SPYRE_BINARY_MUL, &tx, &tx, 0.0, 1.0, &ta));
        ASSERT_SPYRE(spyre_op_softmax(s, &ta, 0, &tb));
        ASSERT_SPYRE(spyre_op_matmul(s, &tb, &tw, &tc));
        ASSERT_SPYRE(spyre_op_binary(s, SPYRE_BINARY_ADD, &tc, &tx, 0.0, 1.0, &td));
        ASSERT_SPYRE(spyre_memcpy_dtod_async(out.buf, 0, d.buf, 0, out.host.size(), s));
    }
    void clear() {
        for (DevArray* v : {&a, &b, &c, &d, &out})
            ASSERT_SPYRE(spyre_memset(v->buf, 0, 0, v->host.size()));
    }
    std::vector<uint8_t> result() {
        out.fetch();
        return out.host;
    }
};

class Batch : public Ops {
  protected:
    spyre_stream_t s = nullptr;
    void SetUp() override {
        Ops::SetUp();
        ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    }
    void TearDown() override {
        spyre_stream_destroy(s);
        Ops::TearDown();
    }
    // The chain run unbatched: its output (and the plans warm, so a batch plans nothing).
    std::vector<uint8_t> direct(Chain& ch) {
        ch.queue(s);
        EXPECT_EQ(SPYRE_SUCCESS, spyre_stream_synchronize(s)) << spyre_last_error();
        std::vector<uint8_t> r = ch.result();
        ch.clear();
        return r;
    }
    uint64_t modeled_cycles(spyre_event_t e0, spyre_event_t e1) {
        spyre_event_timing t{};
        EXPECT_EQ(SPYRE_SUCCESS, spyre_event_elapsed(e0, e1, &t)) << spyre_last_error();
        return t.modeled_cycles;
    }
};

TEST_F(Batch, HeldWorkIsOneSubmissionWithTheSameResultAndModeledTime) {
    Chain ch(dev);
    spyre_event_t e0, e1;
    ASSERT_SPYRE(spyre_event_create(dev, &e0));
    ASSERT_SPYRE(spyre_event_create(dev, &e1));
    const std::vector<uint8_t> want = direct(ch);
    ASSERT_SPYRE(spyre_event_record(e0, s));
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    const uint64_t j_direct = submissions(dev);
    ch.queue(s);
    const uint64_t direct_jobs = submissions(dev) - j_direct;
    ASSERT_SPYRE(spyre_event_record(e1, s));
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    const uint64_t direct_cycles = modeled_cycles(e0, e1);
    EXPECT_EQ(ch.result(), want);
    ch.clear();
    EXPECT_GE(direct_jobs, 1u);
    if (sim) EXPECT_EQ(direct_jobs, 5u) << "one work item per launch and copy";

    for (int round = 0; round < 2; ++round) {
        ASSERT_SPYRE(spyre_event_record(e0, s));
        ASSERT_SPYRE(spyre_stream_synchronize(s));
        const uint64_t j0 = submissions(dev);
        ASSERT_SPYRE(spyre_stream_begin_batch(s));
        ch.queue(s);
        EXPECT_EQ(submissions(dev) - j0, 0u) << "held until the batch ends";
        ASSERT_SPYRE(spyre_stream_end_batch(s));
        EXPECT_EQ(submissions(dev) - j0, 1u) << "round " << round;
        ASSERT_SPYRE(spyre_event_record(e1, s));
        ASSERT_SPYRE(spyre_stream_synchronize(s));
        EXPECT_EQ(ch.result(), want) << "round " << round;
        // on the simulator each launch is still its own job on the card
        if (sim) EXPECT_EQ(modeled_cycles(e0, e1), direct_cycles) << "round " << round;
        ch.clear();
    }
    spyre_event_destroy(e0);
    spyre_event_destroy(e1);
}

TEST_F(Batch, AnythingThatWaitsOrQueuesOtherWorkQueuesTheHeldWorkFirst) {
    Chain ch(dev);
    const std::vector<uint8_t> want = direct(ch);
    const size_t bytes = ch.out.host.size();
    std::vector<uint8_t> got(bytes);

    // a copy to the host on the stream (asynchronous, then the stream synchronized)
    ASSERT_SPYRE(spyre_stream_begin_batch(s));
    ch.queue(s);
    ASSERT_SPYRE(spyre_memcpy_dtoh_async(got.data(), ch.out.buf, 0, bytes, s));
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    EXPECT_EQ(got, want) << "a copy to the host";
    ASSERT_SPYRE(spyre_stream_end_batch(s));
    ch.clear();

    // stream synchronize, device synchronize, an event, a query: each sees the held work done
    using Wait = void (*)(spyre_device_t, spyre_stream_t);
    const std::vector<std::pair<const char*, Wait>> waits = {
        {"stream synchronize",
         [](spyre_device_t, spyre_stream_t st) { ASSERT_SPYRE(spyre_stream_synchronize(st)); }},
        {"device synchronize",
         [](spyre_device_t d, spyre_stream_t) { ASSERT_SPYRE(spyre_device_synchronize(d)); }},
        {"event record and synchronize",
         [](spyre_device_t d, spyre_stream_t st) {
             spyre_event_t e;
             ASSERT_SPYRE(spyre_event_create(d, &e));
             ASSERT_SPYRE(spyre_event_record(e, st));
             ASSERT_SPYRE(spyre_event_synchronize(e));
             spyre_event_destroy(e);
         }},
        {"query until done",
         [](spyre_device_t, spyre_stream_t st) {
             spyre_status q;
             while ((q = spyre_stream_query(st)) == SPYRE_ERROR_NOT_READY) {
             }
             ASSERT_SPYRE(q);
         }},
    };
    for (const auto& [what, wait] : waits) {
        ASSERT_SPYRE(spyre_stream_begin_batch(s));
        ch.queue(s);
        wait(dev, s);
        // read on the default stream: only right if the held work has run
        EXPECT_EQ(ch.result(), want) << what;
        ASSERT_SPYRE(spyre_stream_end_batch(s));
        ch.clear();
    }

    // fills between launches, in order, held (spyre.ko: pattern blocks in a staging slot)
    const uint64_t j0 = submissions(dev);
    ASSERT_SPYRE(spyre_stream_begin_batch(s));
    const uint16_t two = 0x4000, three = 0x4200;
    ASSERT_SPYRE(spyre_fill_async(ch.d.buf, 0, &three, 2, bytes / 2, s));
    ch.queue(s);
    ASSERT_SPYRE(spyre_fill_async(ch.out.buf, 2, &two, 2, bytes / 2 - 1, s));
    ASSERT_SPYRE(spyre_stream_end_batch(s));
    EXPECT_EQ(submissions(dev) - j0, 1u) << "the fills were held";
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    ch.out.fetch();
    EXPECT_EQ(std::vector<uint8_t>(ch.out.host.begin(), ch.out.host.begin() + 2),
              std::vector<uint8_t>(want.begin(), want.begin() + 2))
        << "the chain overwrote the first fill and the second left its first element";
    for (size_t i = 1; i < bytes / 2; ++i) ASSERT_EQ(ch.out.at(i), 2.0f) << i;
    ch.clear();

    // a capture begun inside a batch runs the held work first and captures only its own
    ASSERT_SPYRE(spyre_stream_begin_batch(s));
    ch.queue(s);
    ASSERT_SPYRE(spyre_stream_begin_capture(s));
    ASSERT_SPYRE(spyre_memcpy_dtod_async(ch.a.buf, 0, ch.out.buf, 0, bytes, s));
    spyre_graph_t g = nullptr;
    ASSERT_SPYRE(spyre_stream_end_capture(s, &g));
    spyre_graph_info info{};
    ASSERT_SPYRE(spyre_graph_get_info(g, &info));
    EXPECT_EQ(info.operations, 1u);
    ASSERT_SPYRE(spyre_stream_end_batch(s));
    ASSERT_SPYRE(spyre_graph_launch(g, s));
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    ch.a.fetch();
    EXPECT_EQ(ch.a.host, want) << "the captured copy read the batch's output";
    spyre_graph_destroy(g);
}

// A graph launched on a batching stream joins the batch (a compiled-call replayer copies its new
// inputs, then replays): the copy and the graph are one submission, compute what they compute
// apart, and the graph's launches stay linked as captured (the same card jobs and modeled time
// as the graph launched alone).
TEST_F(Batch, AGraphLaunchedInABatchJoinsItsSubmission) {
    Chain ch(dev);
    const std::vector<uint8_t> want = direct(ch);
    const size_t xbytes = ch.x.host.size();
    DevArray saved(dev, SPYRE_DTYPE_FLOAT16, Chain::M * Chain::K, 1);  // x's values
    ASSERT_SPYRE(spyre_stream_begin_capture(s));
    ch.queue(s);
    spyre_graph_t g = nullptr;
    ASSERT_SPYRE(spyre_stream_end_capture(s, &g));
    spyre_event_t e0, e1;
    ASSERT_SPYRE(spyre_event_create(dev, &e0));
    ASSERT_SPYRE(spyre_event_create(dev, &e1));
    auto card_jobs = [&] {  // of the whole card: every stream synchronized first
        EXPECT_EQ(SPYRE_SUCCESS, spyre_device_synchronize(dev));
        spyre_telemetry t{};
        EXPECT_EQ(SPYRE_SUCCESS, spyre_device_get_telemetry(dev, &t));
        return t.jobs_completed;
    };
    // the graph alone
    ASSERT_SPYRE(spyre_event_record(e0, s));
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    uint64_t j0 = submissions(dev), c0 = card_jobs();
    ASSERT_SPYRE(spyre_graph_launch(g, s));
    ASSERT_SPYRE(spyre_event_record(e1, s));
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    const uint64_t alone_cycles = modeled_cycles(e0, e1), alone_jobs = card_jobs() - c0;
    EXPECT_EQ(submissions(dev) - j0, 1u);
    EXPECT_EQ(ch.result(), want);
    ch.clear();
    for (int round = 0; round < 2; ++round) {
        ASSERT_SPYRE(spyre_memset(ch.x.buf, 0, 0, xbytes));  // x is restored inside the batch
        ASSERT_SPYRE(spyre_event_record(e0, s));
        ASSERT_SPYRE(spyre_stream_synchronize(s));
        j0 = submissions(dev), c0 = card_jobs();
        ASSERT_SPYRE(spyre_stream_begin_batch(s));
        ASSERT_SPYRE(spyre_memcpy_dtod_async(ch.x.buf, 0, saved.buf, 0, xbytes, s));
        ASSERT_SPYRE(spyre_graph_launch(g, s));
        EXPECT_EQ(submissions(dev) - j0, 0u) << "held until the batch ends";
        ASSERT_SPYRE(spyre_stream_end_batch(s));
        EXPECT_EQ(submissions(dev) - j0, 1u) << "round " << round;
        ASSERT_SPYRE(spyre_event_record(e1, s));
        ASSERT_SPYRE(spyre_stream_synchronize(s));
        const uint64_t jobs = card_jobs() - c0;
        EXPECT_EQ(ch.result(), want) << "round " << round;
        // on the simulator the copy is one more job and the graph's launches are linked as
        // when launched alone (spyre.ko: the batch's commands share its jobs)
        if (sim) {
            EXPECT_EQ(jobs, alone_jobs + 1) << "round " << round;
            EXPECT_GE(modeled_cycles(e0, e1), alone_cycles) << "round " << round;
        }
        ch.clear();
    }
    // a graph that does not fit beside the held work: what is held goes first, then the graph
    ASSERT_SPYRE(spyre_stream_begin_batch(s));
    for (size_t i = 0; i + 2 < BatchStream_kMaxHeld; ++i)
        ASSERT_SPYRE(spyre_memcpy_dtod_async(ch.x.buf, 0, saved.buf, 0, xbytes, s));
    j0 = submissions(dev);
    ASSERT_SPYRE(spyre_graph_launch(g, s));
    ASSERT_SPYRE(spyre_stream_end_batch(s));
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    if (sim)  // spyre.ko: the copies may take several SUBMITs (DRM_SPYRE_MAX_CMDS)
        EXPECT_EQ(submissions(dev) - j0, 2u) << "the held copies, then the batch with the graph";
    else
        EXPECT_GE(submissions(dev) - j0, 2u);
    EXPECT_EQ(ch.result(), want);
    spyre_graph_destroy(g);
    spyre_event_destroy(e0);
    spyre_event_destroy(e1);
}

// Fills of every pattern size between launches and copies, at odd offsets and sizes: smaller
// than a pattern block (4 KiB), several blocks with a tail, a pattern used twice; the batch is
// one submission and every byte is what the same work queued unbatched writes.
TEST_F(Batch, FillsOfEveryPatternSizeAreHeldInOneSubmission) {
    Chain ch(dev);
    const std::vector<uint8_t> want = direct(ch);
    constexpr uint64_t kBytes = 256 * 1024;
    DevArray raw(dev, SPYRE_DTYPE_FLOAT16, kBytes / 2, 9),
        copy(dev, SPYRE_DTYPE_FLOAT16, kBytes / 2, 10);
    std::vector<uint8_t> expect = raw.host, expect_copy = copy.host;
    struct F {
        uint64_t offset;
        uint32_t psize;
        uint64_t count;
        uint64_t pattern;
    };
    const F fills[] = {
        {3, 1, 5, 0xa5},                                      // smaller than a block
        {17, 2, 3 * 4096 / 2 + 7, 0x1234},                    // several blocks and a tail
        {12345, 4, 1001, 0xdeadbeef},                         // odd offset, not block-aligned
        {20011, 8, 2 * 4096 / 8 + 3, 0x0102030405060708ull},  // two blocks and a tail
        {40003, 1, 9000, 0x5c},                               // 1-byte, several blocks
        {60001, 4, 7, 0xdeadbeef},                            // a pattern used before, smaller
        {61001, 8, 1, 0xfedcba9876543210ull},                 // one element
        {65601, 4, 40003, 0x3f800000},  // over 64 KiB: 4 KiB blocks and a tail on spyre.ko
    };
    auto apply = [](std::vector<uint8_t>& v, const F& f) {
        for (uint64_t i = 0; i < f.count * f.psize; ++i)
            v[f.offset + i] = static_cast<uint8_t>(f.pattern >> (8 * (i % f.psize)));
    };
    const uint64_t j0 = submissions(dev);
    ASSERT_SPYRE(spyre_stream_begin_batch(s));
    for (size_t i = 0; i < std::size(fills); ++i) {
        const F& f = fills[i];
        ASSERT_SPYRE(spyre_fill_async(raw.buf, f.offset, &f.pattern, f.psize, f.count, s));
        apply(expect, f);
        if (i == 2) ch.queue(s);  // launches and a copy between the fills
        if (i == 3) {             // a copy that reads what the fills wrote
            ASSERT_SPYRE(spyre_memcpy_dtod_async(copy.buf, 101, raw.buf, 0, 30000, s));
            std::copy(expect.begin(), expect.begin() + 30000, expect_copy.begin() + 101);
        }
    }
    EXPECT_EQ(submissions(dev) - j0, 0u) << "held until the batch ends";
    ASSERT_SPYRE(spyre_stream_end_batch(s));
    EXPECT_EQ(submissions(dev) - j0, 1u) << "launches, fills and copies are one submission";
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    raw.fetch(), copy.fetch();
    for (uint64_t i = 0; i < kBytes; ++i) ASSERT_EQ(raw.host[i], expect[i]) << "byte " << i;
    for (uint64_t i = 0; i < kBytes; ++i) ASSERT_EQ(copy.host[i], expect_copy[i]) << "byte " << i;
    EXPECT_EQ(ch.result(), want);

    // the fills up to 64 KiB alone, queued one by one and held: the same modeled cycles (on
    // spyre.ko a held fill that small copies a block of its whole size, as one queued alone)
    spyre_event_t e0, e1;
    ASSERT_SPYRE(spyre_event_create(dev, &e0));
    ASSERT_SPYRE(spyre_event_create(dev, &e1));
    uint64_t cycles[2] = {};
    for (int batched = 0; batched < 2; ++batched) {
        ASSERT_SPYRE(spyre_event_record(e0, s));
        ASSERT_SPYRE(spyre_stream_synchronize(s));
        if (batched) ASSERT_SPYRE(spyre_stream_begin_batch(s));
        for (const F& f : fills)
            if (f.count * f.psize <= 64 * 1024)
                ASSERT_SPYRE(spyre_fill_async(raw.buf, f.offset, &f.pattern, f.psize, f.count, s));
        if (batched) ASSERT_SPYRE(spyre_stream_end_batch(s));
        ASSERT_SPYRE(spyre_event_record(e1, s));
        ASSERT_SPYRE(spyre_stream_synchronize(s));
        cycles[batched] = modeled_cycles(e0, e1);
    }
    EXPECT_EQ(cycles[1], cycles[0]) << "held fills, modeled cycles";
    spyre_event_destroy(e0);
    spyre_event_destroy(e1);

    // many fills: bounded (kMaxHeld nodes a submission), each right
    const uint64_t j1 = submissions(dev);
    ASSERT_SPYRE(spyre_stream_begin_batch(s));
    for (uint64_t i = 0; i < 300; ++i) {
        const F f{i * 211, static_cast<uint32_t>(1u << (i % 4)), uint64_t{211} >> (i % 4),
                  0x0101010101010101ull * (i + 1)};
        ASSERT_SPYRE(spyre_fill_async(raw.buf, f.offset, &f.pattern, f.psize, f.count, s));
        apply(expect, f);
    }
    ASSERT_SPYRE(spyre_stream_end_batch(s));
    EXPECT_EQ(submissions(dev) - j1, 2u) << "a full batch of 256 and the rest";
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    raw.fetch();
    for (uint64_t i = 0; i < kBytes; ++i) ASSERT_EQ(raw.host[i], expect[i]) << "byte " << i;
}

TEST_F(Batch, NestingBoundsAndMisuse) {
    Chain ch(dev);
    const std::vector<uint8_t> want = direct(ch);

    // nested: the outermost end queues
    const uint64_t j0 = submissions(dev);
    ASSERT_SPYRE(spyre_stream_begin_batch(s));
    ASSERT_SPYRE(spyre_stream_begin_batch(s));
    ch.queue(s);
    ASSERT_SPYRE(spyre_stream_end_batch(s));
    EXPECT_EQ(submissions(dev) - j0, 0u) << "an inner end queues nothing";
    ASSERT_SPYRE(spyre_stream_end_batch(s));
    EXPECT_EQ(submissions(dev) - j0, 1u);
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    EXPECT_EQ(ch.result(), want);

    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_stream_end_batch(s));
    EXPECT_NE(std::string(spyre_last_error()).find("not batching"), std::string::npos)
        << spyre_last_error();
    EXPECT_EQ(SPYRE_ERROR_INVALID_ARGUMENT, spyre_stream_begin_batch(nullptr));
    EXPECT_NE(std::string(spyre_last_error()).find("default stream cannot batch"),
              std::string::npos)
        << spyre_last_error();

    // many launches: queued a bounded number at a time, in order
    spyre_program_t nop = load_program(dev, false);
    spyre_launch_params p{};
    p.num_cores = 1;
    const uint64_t j1 = submissions(dev);
    ASSERT_SPYRE(spyre_stream_begin_batch(s));
    for (int i = 0; i < 600; ++i) ASSERT_SPYRE(spyre_launch_async(nop, &p, s));
    EXPECT_EQ(submissions(dev) - j1, 2u) << "two full batches of 256 queued";
    ch.queue(s);
    ASSERT_SPYRE(spyre_stream_end_batch(s));
    EXPECT_EQ(submissions(dev) - j1, 3u);
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    EXPECT_EQ(ch.result(), want);

    // a stream destroyed while it batches queues the held work first
    ch.clear();
    spyre_stream_t t;
    ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &t));
    ASSERT_SPYRE(spyre_stream_begin_batch(t));
    ch.queue(t);
    ASSERT_SPYRE(spyre_stream_destroy(t));
    EXPECT_EQ(ch.result(), want) << "destroyed while batching";
    spyre_program_free(nop);
}

// A launch that faults inside a batch is reported as asynchronous work is, at the next
// synchronize, naming its label; the work after it still runs.
TEST_F(Batch, FaultingHeldLaunchIsNamedAtTheSynchronize) {
    Chain ch(dev);
    const std::vector<uint8_t> want = direct(ch);
    spyre_program_t bad = load_program(dev, true);
    spyre_launch_params p{};
    p.num_cores = 2;
    ASSERT_SPYRE(spyre_stream_begin_batch(s));
    ASSERT_SPYRE(spyre_push_launch_label("the-bad-part"));
    ASSERT_SPYRE(spyre_launch_async(bad, &p, s));
    ASSERT_SPYRE(spyre_pop_launch_label());
    ch.queue(s);
    ASSERT_SPYRE(spyre_stream_end_batch(s));
    EXPECT_NE(SPYRE_SUCCESS, spyre_stream_synchronize(s));
    const std::string err = spyre_last_error();
    EXPECT_NE(err.find("launched by the-bad-part"), std::string::npos) << err;
    EXPECT_EQ(SPYRE_SUCCESS, spyre_stream_synchronize(s)) << "reported once";
    EXPECT_EQ(ch.result(), want) << "the work after the fault ran";

    // fills held with a faulting launch run, and what holds their pattern (spyre.ko: a staging
    // slot) is freed with the failed job: more such batches than the card has slots (8)
    const size_t n = ch.out.host.size() / 2;
    for (int i = 0; i < 12; ++i) {
        const uint16_t v = static_cast<uint16_t>(0x3c00 + 0x400 * (i % 4));  // 1, 2, 4, 8
        ASSERT_SPYRE(spyre_stream_begin_batch(s));
        ASSERT_SPYRE(spyre_launch_async(bad, &p, s));
        ASSERT_SPYRE(spyre_fill_async(ch.out.buf, 2, &v, 2, n - 1, s));
        ASSERT_SPYRE(spyre_stream_end_batch(s));
        EXPECT_NE(SPYRE_SUCCESS, spyre_stream_synchronize(s)) << i;
        ch.out.fetch();
        for (size_t k = 1; k < n; ++k) ASSERT_EQ(ch.out.at(k), float(1 << (i % 4))) << i;
    }
    spyre_program_free(bad);
}

bool has_semaphores(spyre_device_t dev) {
    spyre_device_info info{};
    EXPECT_EQ(SPYRE_SUCCESS, spyre_device_get_info(dev, &info));
    return info.caps & SPYRE_DEVICE_CAP_SEMAPHORE;
}

uint64_t sem_at(spyre_buffer_t sem, uint64_t offset) {
    uint64_t v = 0;
    EXPECT_EQ(SPYRE_SUCCESS, spyre_memcpy_dtoh(&v, sem, offset, sizeof v)) << spyre_last_error();
    return v;
}

// Semaphore waits and writes are held in order with the launches and copies: a batch of a wait,
// the chain and a write is one submission (spyre.ko: one SUBMIT), the wait holds the chain until
// a write queued on another stream after the batch ended, and the chain computes what it does
// unbatched. The batching stream is a HIGH priority one (spyre.ko: a ring of its own; a
// SEM_WAIT holds its ring).
TEST_F(Batch, SemaphoreWaitsAndWritesAreHeldInOrderInOneSubmission) {
    if (!has_semaphores(dev)) GTEST_SKIP() << "no SPYRE_DEVICE_CAP_SEMAPHORE";
    Chain ch(dev);
    const std::vector<uint8_t> want = direct(ch);
    const size_t xbytes = ch.x.host.size();
    spyre_stream_t hs = nullptr;
    ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_HIGH, &hs));
    spyre_buffer_t sem = nullptr, xsave = nullptr;
    ASSERT_SPYRE(spyre_malloc(dev, 64, &sem));
    ASSERT_SPYRE(spyre_malloc(dev, xbytes, &xsave));
    ASSERT_SPYRE(spyre_memcpy_dtod_async(xsave, 0, ch.x.buf, 0, xbytes, nullptr));

    for (uint64_t round = 1; round <= 2; ++round) {
        ASSERT_SPYRE(spyre_memset(sem, 0, 0, 64));
        ASSERT_SPYRE(spyre_memset(ch.x.buf, 0, 0, xbytes));  // the chain's input comes later
        ASSERT_SPYRE(spyre_device_synchronize(dev));
        const uint64_t j0 = submissions(dev);
        ASSERT_SPYRE(spyre_stream_begin_batch(hs));
        ASSERT_SPYRE(spyre_stream_wait_value(hs, sem, 0, round, SPYRE_SEMAPHORE_WAIT_MAX_US));
        ch.queue(hs);
        ASSERT_SPYRE(spyre_stream_write_value(hs, sem, 16, 10 + round));
        EXPECT_EQ(submissions(dev) - j0, 0u) << "held until the batch ends";
        ASSERT_SPYRE(spyre_stream_end_batch(hs));
        EXPECT_EQ(submissions(dev) - j0, 1u) << "a wait, 4 launches, a copy and a write as one";
        EXPECT_EQ(spyre_stream_query(hs), SPYRE_ERROR_NOT_READY) << "the held wait holds it";
        // released by a write of another stream, queued after the batch ended, behind the input
        ASSERT_SPYRE(spyre_memcpy_dtod_async(ch.x.buf, 0, xsave, 0, xbytes, s));
        ASSERT_SPYRE(spyre_stream_write_value(s, sem, 0, round));
        ASSERT_SPYRE(spyre_stream_synchronize(hs));
        ASSERT_SPYRE(spyre_stream_synchronize(s));
        EXPECT_EQ(ch.result(), want) << "round " << round << ": the chain ran before its input";
        EXPECT_EQ(sem_at(sem, 16), 10 + round) << "the held write ran";
        ch.clear();
        ASSERT_SPYRE(spyre_memcpy_dtod_async(ch.x.buf, 0, xsave, 0, xbytes, nullptr));
    }
    spyre_stream_destroy(hs);
    spyre_free(sem);
    spyre_free(xsave);
}

// A held wait that times out (after a held write and launches: not the job's first command)
// fails the stream with SPYRE_ERROR_TIMEOUT and the message of an unbatched wait; the stream
// keeps working.
TEST_F(Batch, HeldSemaphoreWaitThatTimesOutIsReportedAsATimeout) {
    if (!has_semaphores(dev)) GTEST_SKIP() << "no SPYRE_DEVICE_CAP_SEMAPHORE";
    Chain ch(dev);
    const std::vector<uint8_t> want = direct(ch);
    spyre_stream_t hs = nullptr;
    ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_HIGH, &hs));
    spyre_buffer_t sem = nullptr;
    ASSERT_SPYRE(spyre_malloc(dev, 64, &sem));
    ASSERT_SPYRE(spyre_memset(sem, 0, 0, 64));
    ASSERT_SPYRE(spyre_stream_begin_batch(hs));
    ASSERT_SPYRE(spyre_stream_write_value(hs, sem, 32, 3));
    ch.queue(hs);
    ASSERT_SPYRE(spyre_stream_wait_value(hs, sem, 32, 9, 2000));
    ASSERT_SPYRE(spyre_stream_end_batch(hs));
    EXPECT_EQ(SPYRE_ERROR_TIMEOUT, spyre_stream_synchronize(hs));
    const std::string err = spyre_last_error();
    for (const char* part :
         {"semaphore wait on", "timed out after 2000 us", "offset 32", "holds 3", "a value >= 9"})
        EXPECT_NE(err.find(part), std::string::npos) << part << " in: " << err;
    EXPECT_EQ(ch.result(), want) << "the work before the wait ran";
    ch.clear();
    // the stream keeps working, batched too
    ASSERT_SPYRE(spyre_stream_begin_batch(hs));
    ASSERT_SPYRE(spyre_stream_wait_value(hs, sem, 32, 3, 0));
    ch.queue(hs);
    ASSERT_SPYRE(spyre_stream_end_batch(hs));
    ASSERT_SPYRE(spyre_stream_synchronize(hs));
    EXPECT_EQ(ch.result(), want);
    spyre_stream_destroy(hs);
    spyre_free(sem);
}

}  // namespace
}  // namespace spyre::ops_api_test

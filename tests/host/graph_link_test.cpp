// SPDX-License-Identifier: MIT
// Linked launches on the simulator: a captured graph's consecutive launches replay as one engine
// job (libspyre.md "Linked launches"). The same bytes as unlinked (SPYRE_GRAPH_LINK=0) and as
// the work run directly, fewer jobs, the modeled time of one launch overhead per job, and a
// fault inside a linked run naming its launch. A labeled launch that faults is named on every
// path of both backends: alone, batched with other launches, replayed in a graph.
#include <string>

#include "ops_api_util.hpp"
#include "spyre/program_builder.hpp"

namespace spyre::ops_api_test {
namespace {

struct Work {
    static constexpr int64_t M = 64, K = 128;
    spyre_device_t dev;
    DevArray x, w1, w2, y, z, u, v, out;
    explicit Work(spyre_device_t d)
        : dev(d),
          x(d, SPYRE_DTYPE_FLOAT16, M * K, 1),
          w1(d, SPYRE_DTYPE_FLOAT16, K * K, 2),
          w2(d, SPYRE_DTYPE_FLOAT16, K * K, 3),
          y(d, SPYRE_DTYPE_FLOAT16, M * K, 4),
          z(d, SPYRE_DTYPE_FLOAT16, M * K, 5),
          u(d, SPYRE_DTYPE_FLOAT16, M * K, 6),
          v(d, SPYRE_DTYPE_FLOAT16, M * K, 7),
          out(d, SPYRE_DTYPE_FLOAT16, M * K, 8) {}
    // y = x w1; z = rms_norm(y); u = softmax(z); v = u w2^T; out = v + x
    void queue(spyre_stream_t s) {
        auto t = [](const DevArray& a) { return view(a, {M, K}, {K, 1}); };
        auto sq = [](const DevArray& a) { return view(a, {K, K}, {K, 1}); };
        const spyre_tensor tx = t(x), tw1 = sq(w1), tw2 = sq(w2), ty = t(y), tz = t(z), tu = t(u),
                           tv = t(v), to = t(out);
        ASSERT_SPYRE(spyre_op_matmul(s, &tx, &tw1, &ty));
        ASSERT_SPYRE(spyre_op_rms_norm(s, &ty, nullptr, 1e-5f, &tz));
        ASSERT_SPYRE(spyre_op_softmax(s, &tz, 0, &tu));
        ASSERT_SPYRE(spyre_op_linear(s, &tu, &tw2, nullptr, SPYRE_ACTIVATION_NONE, &tv));
        ASSERT_SPYRE(spyre_op_binary(s, SPYRE_BINARY_ADD, &tv, &tx, 0.0, 1.0, &to));
    }
};

struct Captured {
    spyre_graph_t g = nullptr;
    spyre_graph_info info{};
    uint64_t jobs = 0;  // card jobs of a replay
};

uint64_t card_jobs(spyre_device_t dev) {
    spyre_telemetry t{};
    EXPECT_EQ(SPYRE_SUCCESS, spyre_device_get_telemetry(dev, &t));
    return t.jobs_completed;
}

Captured capture(Work& w, spyre_stream_t s, bool linked) {
    Captured c;
    EXPECT_EQ(SPYRE_SUCCESS, spyre_stream_begin_capture(s));
    w.queue(s);
    if (!linked) setenv("SPYRE_GRAPH_LINK", "0", 1);
    EXPECT_EQ(SPYRE_SUCCESS, spyre_stream_end_capture(s, &c.g)) << spyre_last_error();
    unsetenv("SPYRE_GRAPH_LINK");
    EXPECT_EQ(SPYRE_SUCCESS, spyre_graph_get_info(c.g, &c.info));
    return c;
}

// Replays c's graph on s (out cleared first): the output bytes, the modeled cycles and (in c)
// the card jobs of the replay.
std::vector<uint8_t> replay(Work& w, spyre_stream_t s, Captured& c, uint64_t* cycles) {
    const spyre_graph_t g = c.g;
    EXPECT_EQ(SPYRE_SUCCESS, spyre_memset(w.out.buf, 0, 0, w.out.host.size()));
    const uint64_t j0 = card_jobs(w.dev);
    spyre_event_t e0, e1;
    EXPECT_EQ(SPYRE_SUCCESS, spyre_event_create(w.dev, &e0));
    EXPECT_EQ(SPYRE_SUCCESS, spyre_event_create(w.dev, &e1));
    EXPECT_EQ(SPYRE_SUCCESS, spyre_event_record(e0, s));
    EXPECT_EQ(SPYRE_SUCCESS, spyre_graph_launch(g, s));
    EXPECT_EQ(SPYRE_SUCCESS, spyre_event_record(e1, s));
    EXPECT_EQ(SPYRE_SUCCESS, spyre_stream_synchronize(s)) << spyre_last_error();
    spyre_event_timing t{};
    EXPECT_EQ(SPYRE_SUCCESS, spyre_event_elapsed(e0, e1, &t));
    *cycles = t.modeled_cycles;
    c.jobs = card_jobs(w.dev) - j0;
    spyre_event_destroy(e0);
    spyre_event_destroy(e1);
    w.out.fetch();
    return w.out.host;
}

TEST_F(Ops, GraphLinksConsecutiveLaunches) {
    if (!sim) GTEST_SKIP() << "linked launches are the simulator's";
    Work w(dev);
    spyre_stream_t s;
    ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    w.queue(s);
    ASSERT_SPYRE(spyre_stream_synchronize(s));
    w.out.fetch();
    const std::vector<uint8_t> direct = w.out.host;

    Captured lnk = capture(w, s, true), sep = capture(w, s, false);
    ASSERT_NE(lnk.g, nullptr);
    ASSERT_NE(sep.g, nullptr);
    EXPECT_EQ(lnk.info.launches, sep.info.launches);
    EXPECT_GE(lnk.info.launches, 5u);
    uint64_t cyc_lnk = 0, cyc_sep = 0;
    EXPECT_EQ(replay(w, s, lnk, &cyc_lnk), direct);
    EXPECT_EQ(replay(w, s, sep, &cyc_sep), direct);
    // unlinked, every launch, copy and fill is a job; linked, a run of launches is one
    const uint64_t others = lnk.info.operations - lnk.info.launches;  // copies and fills
    EXPECT_EQ(sep.jobs, sep.info.operations);
    EXPECT_LT(lnk.jobs, sep.jobs);
    EXPECT_GE(lnk.jobs, others + 1);
    // every launch but the first of a linked job saves the launch overhead and pays a barrier
    // and a scratchpad clear instead (engine.h, spyre_engine_run_linked)
    const uint64_t runs = lnk.jobs - others, saved = lnk.info.launches - runs;
    EXPECT_LT(cyc_lnk, cyc_sep);
    EXPECT_LE(cyc_sep - cyc_lnk, saved * (500 - 16)) << cyc_sep << " vs " << cyc_lnk;
    spyre_graph_destroy(lnk.g);
    spyre_graph_destroy(sep.g);
    spyre_stream_destroy(s);
}

// A program that stops at its first instruction: it reads an argument the launch does not pass.
spyre_program_t load_bad_program(spyre_device_t dev) {
    ProgramBuilder b;
    b.arg(4, 5);  // no such argument
    b.halt();
    const std::vector<uint8_t> img = b.finish();
    spyre_program_t bad = nullptr;
    EXPECT_EQ(SPYRE_SUCCESS, spyre_program_load(dev, img.data(), img.size(), &bad));
    return bad;
}

void launch_labeled(spyre_program_t prog, spyre_stream_t s, const char* label) {
    spyre_launch_params p{};
    p.num_cores = 2;
    if (label) ASSERT_SPYRE(spyre_push_launch_label(label));
    ASSERT_SPYRE(spyre_launch_async(prog, &p, s));
    if (label) ASSERT_SPYRE(spyre_pop_launch_label());
}

// The stream's next synchronize reports the bad launch by its label.
void expect_named(spyre_stream_t s, const char* how) {
    EXPECT_NE(SPYRE_SUCCESS, spyre_stream_synchronize(s)) << how;
    const std::string err = spyre_last_error();
    EXPECT_NE(err.find("launched by the-bad-part"), std::string::npos) << how << ": " << err;
    EXPECT_NE(err.find("BAD_ARG"), std::string::npos) << how << ": " << err;
    EXPECT_EQ(SPYRE_SUCCESS, spyre_stream_synchronize(s)) << how << ": reported once";
}

TEST_F(Ops, FaultingLaunchIsNamedByItsLabelAloneBatchedAndReplayed) {
    Work w(dev);
    spyre_program_t bad = load_bad_program(dev);
    ProgramBuilder gb;
    gb.halt();
    const std::vector<uint8_t> good_img = gb.finish();
    spyre_program_t good;
    ASSERT_SPYRE(spyre_program_load(dev, good_img.data(), good_img.size(), &good));
    spyre_stream_t s;
    ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));

    launch_labeled(bad, s, "the-bad-part");
    expect_named(s, "alone");

    // behind other launches in flight: on spyre.ko one job of several LAUNCH commands
    for (int i = 0; i < 6; ++i) launch_labeled(good, s, i == 3 ? "a-good-part" : nullptr);
    launch_labeled(bad, s, "the-bad-part");
    for (int i = 0; i < 6; ++i) launch_labeled(good, s, nullptr);
    expect_named(s, "batched");

    for (const bool linked : {false, true}) {
        ASSERT_SPYRE(spyre_stream_begin_capture(s));
        w.queue(s);
        launch_labeled(bad, s, "the-bad-part");
        launch_labeled(good, s, "a-good-part");
        w.queue(s);
        if (!linked) setenv("SPYRE_GRAPH_LINK", "0", 1);
        spyre_graph_t g;
        ASSERT_SPYRE(spyre_stream_end_capture(s, &g));
        unsetenv("SPYRE_GRAPH_LINK");
        ASSERT_SPYRE(spyre_graph_launch(g, s));
        expect_named(s, linked ? "replayed, linked where the backend links" : "replayed");
        spyre_graph_destroy(g);
    }
    spyre_stream_destroy(s);
    spyre_program_free(good);
    spyre_program_free(bad);
}

TEST_F(Ops, GraphLinkedRunFaultNamesItsLaunch) {
    if (!sim) GTEST_SKIP() << "linked launches are the simulator's";
    Work w(dev);
    ProgramBuilder b;
    b.arg(4, 5);  // no such argument
    b.halt();
    const std::vector<uint8_t> img = b.finish();
    spyre_program_t bad;
    ASSERT_SPYRE(spyre_program_load(dev, img.data(), img.size(), &bad));
    spyre_stream_t s;
    ASSERT_SPYRE(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &s));
    ASSERT_SPYRE(spyre_stream_begin_capture(s));
    const spyre_tensor tx = view(w.x, {64, 128}, {128, 1}), tw = view(w.w1, {128, 128}, {128, 1}),
                       ty = view(w.y, {64, 128}, {128, 1});
    ASSERT_SPYRE(spyre_op_matmul(s, &tx, &tw, &ty));
    spyre_launch_params p{};
    p.num_cores = 2;
    ASSERT_SPYRE(spyre_push_launch_label("the-bad-part"));
    ASSERT_SPYRE(spyre_launch_async(bad, &p, s));
    ASSERT_SPYRE(spyre_pop_launch_label());
    ASSERT_SPYRE(spyre_op_matmul(s, &tx, &tw, &ty));
    spyre_graph_t g;
    ASSERT_SPYRE(spyre_stream_end_capture(s, &g));
    ASSERT_SPYRE(spyre_graph_launch(g, s));
    EXPECT_NE(SPYRE_SUCCESS, spyre_stream_synchronize(s));
    const std::string err = spyre_last_error();
    EXPECT_NE(err.find("launched by the-bad-part"), std::string::npos) << err;
    EXPECT_NE(err.find("BAD_ARG"), std::string::npos) << err;
    spyre_graph_destroy(g);
    spyre_stream_destroy(s);
    spyre_program_free(bad);
}

}  // namespace
}  // namespace spyre::ops_api_test

// spyre-bench: wall-clock figures of libspyre's runtime, each against a baseline measured in
// the same run (Documentation/libspyre.md "Benchmark"). Kernel backend (in the VM) or
// simulator (SPYRE_BACKEND=sim). Usage: spyre-bench [device-index]
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "spyre/ops.h"
#include "spyre/program_builder.hpp"
#include "spyre/programs/matmul.hpp"
#include "spyre/spyre.h"
#include "spyre_accel.h"

namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Median of `reps` timings of fn(), in seconds.
double time_it(int reps, const std::function<void()>& fn) {
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        double t0 = now_s();
        fn();
        t.push_back(now_s() - t0);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

void check(spyre_status s, const char* what) {
    if (s != SPYRE_SUCCESS) {
        std::fprintf(stderr, "spyre-bench: %s: %s\n", what, spyre_last_error());
        std::exit(1);
    }
}

}  // namespace

int main(int argc, char** argv) {
    int index = argc > 1 ? std::atoi(argv[1]) : 0;
    spyre_device_t dev;
    check(spyre_device_open(index, &dev), "open");
    spyre_device_info info;
    check(spyre_device_get_info(dev, &info), "info");
    const bool kernel = info.backend == SPYRE_BACKEND_KERNEL;
    std::printf("spyre-bench on %s (%s backend, %u rings)\n", info.name,
                spyre_backend_string(static_cast<spyre_backend>(info.backend)), info.num_rings);

    // ---- 1. round trips: the baselines and libspyre's calls interleaved in R rounds of N/R
    // calls each (a load change on a shared host hits all of them), median per-call time ----
    const int N = kernel ? 300 : 2000, R = 6;
    int fd = kernel ? open(info.accel_path, O_RDWR | O_CLOEXEC) : -1;
    drm_spyre_mem_info mi{};
    drm_spyre_query q{};
    q.param = DRM_SPYRE_QUERY_MEM_INFO;
    q.size = sizeof mi;
    q.data = reinterpret_cast<uintptr_t>(&mi);
    // A raw 8-byte COPY job (host BO -> device BO) + JOB_WAIT: what spyre_memcpy_htod from
    // pinned memory does, without libspyre.
    drm_spyre_bo_create hb{}, db{};
    hb.size = db.size = 4096;
    hb.flags = DRM_SPYRE_BO_HOST;
    db.flags = DRM_SPYRE_BO_DEVICE;
    if (kernel) {
        ioctl(fd, DRM_IOCTL_SPYRE_BO_CREATE, &hb);
        ioctl(fd, DRM_IOCTL_SPYRE_BO_CREATE, &db);
    }
    auto raw_job = [&](uint32_t op) {
        drm_spyre_cmd c{};
        c.op = op;
        if (op == DRM_SPYRE_CMD_COPY)
            c.src_handle = hb.handle, c.dst_handle = db.handle, c.size = 8;
        drm_spyre_submit s{};
        s.cmds = reinterpret_cast<uintptr_t>(&c);
        s.cmd_count = 1;
        s.cmd_size = sizeof c;
        ioctl(fd, DRM_IOCTL_SPYRE_SUBMIT, &s);
        drm_spyre_job_wait w{};
        w.job_id = s.job_id;
        w.timeout_ns = INT64_MAX;
        ioctl(fd, DRM_IOCTL_SPYRE_JOB_WAIT, &w);
    };
    spyre::ProgramBuilder nb;
    nb.halt();
    auto null_img = nb.finish();
    spyre_program_t null_prog;
    check(spyre_program_load(dev, null_img.data(), null_img.size(), &null_prog), "load");
    spyre_launch_params np{};
    np.num_cores = 1;
    spyre_buffer_t small;
    check(spyre_malloc(dev, 256, &small), "malloc");
    void* pin8;
    check(spyre_host_alloc(dev, 4096, &pin8), "host_alloc");
    uint64_t f;
    std::vector<std::function<void()>> calls = {
        [&] {
            if (kernel)
                ioctl(fd, DRM_IOCTL_SPYRE_QUERY, &q);
            else
                spyre_mem_get_info(dev, &f, nullptr);
        },
        [&] { raw_job(DRM_SPYRE_CMD_NOP); },
        [&] { raw_job(DRM_SPYRE_CMD_COPY); },
        [&] { spyre_memcpy_htod(small, 0, pin8, 8); },
        [&] { spyre_launch(null_prog, &np, nullptr); },
        [&] { spyre_memset(small, 0, 7, 8); },
    };
    std::vector<std::vector<double>> per(calls.size());
    for (int r = 0; r < R; ++r)
        for (size_t k = 0; k < calls.size(); ++k) {
            if (!kernel && (k == 1 || k == 2)) continue;
            per[k].push_back(time_it(1,
                                     [&] {
                                         for (int i = 0; i < N / R; ++i) calls[k]();
                                     }) /
                             (N / R));
        }
    auto median = [](std::vector<double> v) {
        if (v.empty()) return 0.0;
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    double bare = median(per[0]), raw_nop = median(per[1]), raw_copy = median(per[2]);
    double pinned_copy = median(per[3]), null_launch = median(per[4]), null_fill = median(per[5]);
    if (fd >= 0) close(fd);
    std::printf("\n[round trip, per call, %d calls]\n", N);
    std::printf("  %-36s %9.2f us\n",
                kernel ? "bare ioctl (QUERY mem info)" : "bare call (spyre_mem_get_info)",
                bare * 1e6);
    if (kernel) {
        std::printf("  raw NOP job (SUBMIT + JOB_WAIT)      %9.1f us  = %.1fx bare ioctl\n",
                    raw_nop * 1e6, raw_nop / bare);
        std::printf("  raw 8-byte COPY job (SUBMIT + WAIT)  %9.1f us  = %.1fx bare ioctl\n",
                    raw_copy * 1e6, raw_copy / bare);
    }
    std::printf("  spyre_memcpy_htod 8 B from pinned    %9.1f us  = %.1fx bare ioctl",
                pinned_copy * 1e6, pinned_copy / bare);
    if (kernel) std::printf(" = %.2fx the raw COPY job", pinned_copy / raw_copy);
    std::printf("\n");
    std::printf("  spyre_launch of a null program       %9.1f us  = %.1fx bare ioctl\n",
                null_launch * 1e6, null_launch / bare);
    std::printf("  spyre_memset of 8 bytes              %9.1f us  = %.1fx bare ioctl\n",
                null_fill * 1e6, null_fill / bare);

    // ---- 2. 1000 null launches: async vs sync ----
    const int L = 1000;
    spyre_stream_t s;
    check(spyre_stream_create(dev, 0, &s), "stream");
    double sync_t = time_it(1, [&] {
        for (int i = 0; i < L; ++i) check(spyre_launch(null_prog, &np, nullptr), "launch");
    });
    double submit_t = 0;
    double async_t = time_it(1, [&] {
        double t0 = now_s();
        for (int i = 0; i < L; ++i) check(spyre_launch_async(null_prog, &np, s), "launch_async");
        submit_t = now_s() - t0;
        check(spyre_stream_synchronize(s), "sync");
    });
    std::printf("\n[%d null launches]\n", L);
    std::printf("  synchronous spyre_launch            %8.1f ms\n", sync_t * 1e3);
    std::printf(
        "  spyre_launch_async + synchronize    %8.1f ms  = %.1fx faster (submission "
        "alone %.1f ms = %.1fx)\n",
        async_t * 1e3, sync_t / async_t, submit_t * 1e3, sync_t / submit_t);

    // ---- 3. copy bandwidth vs memcpy ----
    std::printf("\n[host <-> device copy bandwidth, GB/s (median of 5)]\n");
    std::printf("  %8s %9s %9s %9s %9s %9s\n", "size", "memcpy", "htod", "dtoh", "htod-pin",
                "dtoh-pin");
    for (uint64_t mib : {1, 4, 16, 64}) {
        const uint64_t n = mib << 20;
        std::vector<char> a(n, 1), b(n, 2);
        spyre_buffer_t buf;
        check(spyre_malloc(dev, n, &buf), "malloc");
        void* pin;
        check(spyre_host_alloc(dev, n, &pin), "host_alloc");
        std::memset(pin, 3, n);
        auto gbs = [&](double t) { return n / t / 1e9; };
        double tm = time_it(5, [&] { std::memcpy(b.data(), a.data(), n); });
        double th = time_it(5, [&] { check(spyre_memcpy_htod(buf, 0, a.data(), n), "htod"); });
        double td = time_it(5, [&] { check(spyre_memcpy_dtoh(b.data(), buf, 0, n), "dtoh"); });
        double tph = time_it(5, [&] { check(spyre_memcpy_htod(buf, 0, pin, n), "htod"); });
        double tpd = time_it(5, [&] { check(spyre_memcpy_dtoh(pin, buf, 0, n), "dtoh"); });
        std::printf(
            "  %5llu MiB %9.2f %9.2f %9.2f %9.2f %9.2f   (htod %.0f%%, dtoh %.0f%% of "
            "memcpy)\n",
            (unsigned long long)mib, gbs(tm), gbs(th), gbs(td), gbs(tph), gbs(tpd), 100 * tm / th,
            100 * tm / td);
        spyre_free(buf);
        spyre_host_free(dev, pin);
    }

    // ---- 3b. a strided device-to-device copy: one COPY_2D descriptor vs one COPY per row ----
    {
        const uint64_t rows = 4096, width = 200, spitch = 256;
        spyre_buffer_t s2, d2;
        check(spyre_malloc(dev, rows * spitch, &s2), "malloc");
        check(spyre_malloc(dev, rows * width, &d2), "malloc");
        spyre_memcpy3d_params p{};
        p.src_buffer = s2, p.src_pitch = spitch;
        p.dst_buffer = d2, p.dst_pitch = width;
        p.width = width, p.height = rows, p.depth = 1;
        auto strided = [&] { check(spyre_memcpy_3d(&p), "memcpy_3d"); };
        const double t2d = time_it(5, strided);
        setenv("SPYRE_COPY_2D", "0", 1);
        const double trows = time_it(5, strided);
        unsetenv("SPYRE_COPY_2D");
        std::printf("\n[strided device->device copy, %llu rows of %llu B, pitch %llu -> packed]\n",
                    (unsigned long long)rows, (unsigned long long)width,
                    (unsigned long long)spitch);
        std::printf("  one COPY_2D per slice (default) %9.1f us\n", t2d * 1e6);
        std::printf("  one COPY per row (SPYRE_COPY_2D=0) %7.1f us  = %.1fx\n", trows * 1e6,
                    trows / t2d);
        spyre_free(s2);
        spyre_free(d2);
    }

    // ---- 4. overlap: a launch on one stream, a copy on another ----
    const uint32_t M = kernel ? 128 : 256;
    auto mm = spyre::programs::build_matmul_program(M, M, M, 32);
    spyre_program_t mmp;
    check(spyre_program_load(dev, mm.data(), mm.size(), &mmp), "load matmul");
    spyre_buffer_t A, B, C;
    check(spyre_malloc(dev, M * M * 2, &A), "A");
    check(spyre_malloc(dev, M * M * 2, &B), "B");
    check(spyre_malloc(dev, M * M * 2, &C), "C");
    spyre_memset(A, 0, 0, M * M * 2);
    spyre_memset(B, 0, 0, M * M * 2);
    spyre_launch_params mp{};
    mp.num_args = 3;
    spyre_buffer_device_address(A, &mp.args[0]);
    spyre_buffer_device_address(B, &mp.args[1]);
    spyre_buffer_device_address(C, &mp.args[2]);
    spyre_buffer_t mb[] = {A, B, C};
    mp.buffers = mb;
    mp.num_buffers = 3;
    const uint64_t cn = 32 << 20;
    spyre_buffer_t cb;
    check(spyre_malloc(dev, cn, &cb), "copy buffer");
    void* cpin;
    check(spyre_host_alloc(dev, cn, &cpin), "pin");
    spyre_stream_t s2;
    check(spyre_stream_create(dev, 0, &s2), "stream 2");
    const int K = 4;
    int KL = 1;  // launches: calibrated below so that they take about as long as the copies
    auto launches = [&] {
        for (int i = 0; i < KL; ++i) check(spyre_launch_async(mmp, &mp, s), "launch");
    };
    auto copies = [&] {
        for (int i = 0; i < K; ++i) check(spyre_memcpy_htod_async(cb, 0, cpin, cn, s2), "copy");
    };
    double tc = time_it(3, [&] {
        copies();
        check(spyre_stream_synchronize(s2), "sync");
    });
    double tl1 = time_it(3, [&] {
        launches();
        check(spyre_stream_synchronize(s), "sync");
    });
    KL = std::clamp(static_cast<int>(tc / tl1 + 0.5), 1, 500);
    // The four cases interleaved, 5 rounds, medians: load changes on a shared host hit all.
    std::vector<double> vl, vc, vb, v1;
    for (int r = 0; r < 5; ++r) {
        vl.push_back(time_it(1, [&] {
            launches();
            check(spyre_stream_synchronize(s), "sync");
        }));
        vc.push_back(time_it(1, [&] {
            copies();
            check(spyre_stream_synchronize(s2), "sync");
        }));
        vb.push_back(time_it(1, [&] {
            launches();
            copies();
            check(spyre_stream_synchronize(s), "sync");
            check(spyre_stream_synchronize(s2), "sync");
        }));
        v1.push_back(time_it(1, [&] {  // the same work on one stream: serialised
            launches();
            for (int i = 0; i < K; ++i) check(spyre_memcpy_htod_async(cb, 0, cpin, cn, s), "copy");
            check(spyre_stream_synchronize(s), "sync");
        }));
    }
    auto med = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    double tl = med(vl), tb = med(vb), t1 = med(v1);
    tc = med(vc);
    std::printf(
        "\n[overlap: %d x %ux%ux%u matmul launches on stream 1, %d x 32 MiB pinned htod "
        "on stream 2]\n",
        KL, M, M, M, K);
    std::printf("  launches alone %.1f ms, copies alone %.1f ms, sum %.1f ms\n", tl * 1e3, tc * 1e3,
                (tl + tc) * 1e3);
    std::printf(
        "  both on two streams %.1f ms (overlap hides %.0f%% of the shorter), same work "
        "on one stream %.1f ms\n",
        tb * 1e3, 100 * (tl + tc - tb) / std::min(tl, tc), t1 * 1e3);

    // ---- 5. fill: DMA replication of a host pattern (spyre_memset) vs a fill program ----
    // The program: each core fills 16 KiB of its scratchpad with the pattern (LXST loop), then
    // STOREs it over its slice of the buffer (128-byte aligned, a multiple of 16 KiB x cores).
    auto fill_program = [] {
        spyre::ProgramBuilder b;
        b.arg(3, 0), b.arg(4, 1), b.arg(5, 2);  // dst, bytes per core, pattern
        b.mul(6, 1, 4);
        b.add(3, 3, 6);  // this core's slice
        b.li(7, 0);
        b.loopi(16384 / 8);
        b.lxst(7, 5, 0);
        b.addi(7, 7, 8);
        b.endloop();
        b.li(9, 16384), b.li(10, 0);
        b.alu(spyre::isa::Alu::DIVU, 11, 4, 9);  // slice / 16 KiB stores
        b.loop(11);
        b.store(10, 3, 9);
        b.add(3, 3, 9);
        b.endloop();
        b.halt();
        return b.finish();
    }();
    spyre_program_t fp;
    check(spyre_program_load(dev, fill_program.data(), fill_program.size(), &fp), "fill program");
    std::printf(
        "\n[fill: spyre_memset (pattern DMA-replicated from a staging slot) vs a fill "
        "program on 32 cores]\n");
    for (uint64_t kib : {512, 16384}) {
        const uint64_t n = kib << 10;
        spyre_buffer_t fb;
        check(spyre_malloc(dev, n, &fb), "fill buffer");
        spyre_launch_params fpp{};
        fpp.num_cores = 32;
        fpp.num_args = 3;
        spyre_buffer_device_address(fb, &fpp.args[0]);
        fpp.args[1] = n / 32;
        fpp.args[2] = 0x0101010101010101ull;
        fpp.buffers = &fb;
        fpp.num_buffers = 1;
        setenv("SPYRE_FILL_DMA_ONLY", "1", 1);
        double tdma = time_it(5, [&] { check(spyre_memset(fb, 0, 1, n), "memset"); });
        unsetenv("SPYRE_FILL_DMA_ONLY");
        double tprog = time_it(5, [&] { check(spyre_launch(fp, &fpp, nullptr), "fill launch"); });
        double tlib = time_it(5, [&] { check(spyre_memset(fb, 0, 1, n), "memset"); });
        std::vector<uint8_t> back(n);
        check(spyre_memcpy_dtoh(back.data(), fb, 0, n), "check");
        bool ok = std::all_of(back.begin(), back.end(), [](uint8_t v) { return v == 1; });
        std::printf(
            "  %6llu KiB: DMA fill %.2f ms, fill program %.2f ms (%s faster, %.1fx); "
            "spyre_memset %.2f ms%s\n",
            (unsigned long long)kib, tdma * 1e3, tprog * 1e3, tdma < tprog ? "DMA" : "program",
            std::max(tdma, tprog) / std::min(tdma, tprog), tlib * 1e3,
            ok ? "" : "  [result WRONG]");
        spyre_free(fb);
    }

    // ---- 5b. fills held in a submission batch (spyre_stream_begin_batch): four fills of a
    // 4-byte pattern at offsets 0, 4, 8 and 12 queued one by one and held in one batch, on a
    // created stream: submissions, modeled cycles (event to event) and the time until they
    // are done. ----
    {
        spyre_stream_t fs;
        check(spyre_stream_create(dev, SPYRE_STREAM_PRIORITY_NORMAL, &fs), "stream");
        spyre_event_t e0, e1;
        check(spyre_event_create(dev, &e0), "event");
        check(spyre_event_create(dev, &e1), "event");
        const float v = 1.5f;
        std::printf("\n[4 fills of a 4-byte pattern: queued one by one vs held in a batch]\n");
        for (uint64_t n : {4096ull, (64ull << 10) + 12, 1ull << 20, 4ull << 20}) {
            spyre_buffer_t fb;
            check(spyre_malloc(dev, n + 16, &fb), "fill buffer");
            uint64_t jobs[2] = {}, cycles[2] = {};
            double t[2] = {};
            for (int batched = 0; batched < 2; ++batched) {
                t[batched] = time_it(5, [&] {
                    spyre_runtime_stats r0{}, r1{};
                    check(spyre_device_get_runtime_stats(dev, &r0), "stats");
                    check(spyre_event_record(e0, fs), "record");
                    if (batched) check(spyre_stream_begin_batch(fs), "begin batch");
                    for (uint64_t k = 0; k < 4; ++k)
                        check(spyre_fill_async(fb, 4 * k, &v, 4, n / 4, fs), "fill");
                    if (batched) check(spyre_stream_end_batch(fs), "end batch");
                    check(spyre_device_get_runtime_stats(dev, &r1), "stats");
                    check(spyre_event_record(e1, fs), "record");
                    check(spyre_stream_synchronize(fs), "synchronize");
                    spyre_event_timing et{};
                    check(spyre_event_elapsed(e0, e1, &et), "elapsed");
                    jobs[batched] = r1.jobs_submitted - r0.jobs_submitted;
                    cycles[batched] = et.modeled_cycles;
                });
            }
            std::printf(
                "  %8llu bytes: %llu -> %llu submissions, modeled cycles %llu -> %llu, "
                "%.2f -> %.2f ms\n",
                (unsigned long long)n, (unsigned long long)jobs[0], (unsigned long long)jobs[1],
                (unsigned long long)cycles[0], (unsigned long long)cycles[1], t[0] * 1e3,
                t[1] * 1e3);
            spyre_free(fb);
        }
        spyre_event_destroy(e0);
        spyre_event_destroy(e1);
        spyre_stream_destroy(fs);
    }

    // ---- 6. what the calling thread pays to queue one small op: the stream is held by a host
    // function until the calls are timed, so that no device work (on the simulator: no program
    // run on the host's cores) runs alongside them. On the kernel backend the SUBMIT ioctl comes
    // after the hold, in batches, so it is not in these figures (section 1 has it). ----
    {
        struct Hold {
            std::mutex mu;
            std::condition_variable cv;
            bool released = false;
        } hold;
        auto held = [&](const std::function<void()>& call) {
            constexpr int kCalls = 500, kRounds = 9;
            std::vector<double> per_call;
            for (int r = 0; r < kRounds; ++r) {
                hold.released = false;
                check(spyre_launch_host_func(
                          s,
                          [](void* h) {
                              auto* hp = static_cast<Hold*>(h);
                              std::unique_lock lock(hp->mu);
                              hp->cv.wait(lock, [&] { return hp->released; });
                          },
                          &hold),
                      "hold");
                const double t0 = now_s();
                for (int i = 0; i < kCalls; ++i) call();
                per_call.push_back((now_s() - t0) / kCalls);
                {
                    std::lock_guard lock(hold.mu);
                    hold.released = true;
                }
                hold.cv.notify_all();
                check(spyre_stream_synchronize(s), "sync");
            }
            std::sort(per_call.begin(), per_call.end());
            return per_call[per_call.size() / 2];
        };
        const int64_t shape[2] = {8, 64};
        spyre_buffer_t xb, ob;
        check(spyre_malloc(dev, 8 * 64 * 4, &xb), "malloc x");
        check(spyre_malloc(dev, 8 * 64 * 4, &ob), "malloc out");
        spyre_tensor x, o;
        check(spyre_tensor_init(&x, xb, 0, SPYRE_DTYPE_FLOAT32, 2, shape), "tensor x");
        check(spyre_tensor_init(&o, ob, 0, SPYRE_DTYPE_FLOAT32, 2, shape), "tensor out");
        check(spyre_op_binary(s, SPYRE_BINARY_ADD, &x, &x, 0.0, 1.0, &o), "add");  // plans it
        check(spyre_op_unary(s, SPYRE_UNARY_RELU, &x, &o), "relu");
        check(spyre_stream_synchronize(s), "sync");
        const double t_null = held([&] { check(spyre_launch_async(null_prog, &np, s), "launch"); });
        const double t_add =
            held([&] { check(spyre_op_binary(s, SPYRE_BINARY_ADD, &x, &x, 0.0, 1.0, &o), "add"); });
        const double t_relu =
            held([&] { check(spyre_op_unary(s, SPYRE_UNARY_RELU, &x, &o), "relu"); });
        std::printf(
            "\n[queueing cost on the calling thread, per call, stream held (median of 9 x "
            "500)]\n");
        std::printf("  spyre_launch_async of a null program %7.2f us\n", t_null * 1e6);
        std::printf("  spyre_op_binary ADD [8,64] fp32      %7.2f us  (op library: %.2f us)\n",
                    t_add * 1e6, (t_add - t_null) * 1e6);
        std::printf("  spyre_op_unary RELU [8,64] fp32      %7.2f us  (op library: %.2f us)\n",
                    t_relu * 1e6, (t_relu - t_null) * 1e6);
        spyre_free(xb);
        spyre_free(ob);
    }

    spyre_runtime_stats rs;
    spyre_device_get_runtime_stats(dev, &rs);
    std::printf("\n[runtime] jobs %llu, busy retries %llu, back-pressure waits %llu\n",
                (unsigned long long)rs.jobs_submitted, (unsigned long long)rs.busy_retries,
                (unsigned long long)rs.backpressure_waits);
    spyre_stream_destroy(s);
    spyre_stream_destroy(s2);
    spyre_device_close(dev);
    return 0;
}

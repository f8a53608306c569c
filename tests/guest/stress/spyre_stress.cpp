// SPDX-License-Identifier: MIT
// Mixed-job workload for the spyre driver's stress, hot-unplug and reload tests (run in the VM).
//
//   spyre_stress [--dev PATH]... [--procs N] [--jobs N] [--until-gone] [--seconds S] [--seed S]
//
// Each of N processes opens a card (the --dev paths round-robin, default every /dev/accel
// node) and runs jobs, each on the next of the card's rings: copies host -> device -> host,
// 32-core vector-add launches and launches that fault (a store outside the job's memory
// windows). Every result is verified: copied bytes, the sum against a CPU reference, the fault
// reported as ERR_PROGRAM / DDR_WINDOW with the target left unchanged. Prints one line per
// process and a summary "N passed, N failed" (one test per process).
//
// --until-gone (hot-unplug): run until the card goes away. Losing the card (ENODEV from an
// ioctl or open, a job ABORTED or TIMEOUT, SIGBUS from a BO mapping whose card is gone) ends a
// process successfully; a wrong result or any other error is a failure; so is still running
// after --seconds.
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xf86drm.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch_util.hpp"
#include "spyre_accel.h"

namespace {

constexpr uint32_t kCores = 32;
constexpr int64_t kPerCore = 64;  // fp16 elements per core: one stick
constexpr size_t kVecBytes = kCores * kPerCore * 2;
constexpr size_t kCopyBytes = 64 * 1024;
constexpr uint32_t kEngineErrDdrWindow = 11;  // isa.md "Errors"

// The card went away (hot-unplug): a successful end for --until-gone.
struct CardGone : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Options {
    std::vector<std::string> devs;
    int procs = 1;
    long jobs = 100;
    bool until_gone = false;
    int seconds = 600;
    uint32_t seed = 1;
};

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

bool gone_errno(int e) { return e == ENODEV || e == ENXIO || e == EIO; }

class Card {
  public:
    explicit Card(const std::string& path) : path_(path) {
        fd_ = open(path.c_str(), O_RDWR | O_CLOEXEC);
        if (fd_ < 0) {
            if (errno == ENOENT || gone_errno(errno)) throw CardGone("open " + path);
            fail("open " + path + ": " + strerror(errno));
        }
        drm_spyre_device_info info{};
        query(DRM_SPYRE_QUERY_DEVICE_INFO, &info, sizeof info);
        rings_ = info.num_rings;
        if (info.num_cores < kCores) fail(path + " has fewer than 32 cores");
    }
    ~Card() {
        for (auto& m : maps_) munmap(m.first, m.second);
        close(fd_);
    }
    Card(const Card&) = delete;
    Card& operator=(const Card&) = delete;

    uint32_t rings() const { return rings_; }

    void ioctl_or_throw(unsigned long req, void* arg, const char* what) {
        if (drmIoctl(fd_, req, arg) == 0) return;
        if (gone_errno(errno)) throw CardGone(what);
        fail(std::string(what) + ": " + strerror(errno));
    }

    void query(uint32_t param, void* data, uint32_t size) {
        drm_spyre_query q{};
        q.param = param, q.size = size, q.data = reinterpret_cast<uintptr_t>(data);
        ioctl_or_throw(DRM_IOCTL_SPYRE_QUERY, &q, "QUERY");
    }

    struct Bo {
        uint32_t handle;
        uint64_t dev_addr;
        uint8_t* map;
    };

    Bo bo(uint64_t size, uint32_t flags) {
        drm_spyre_bo_create c{};
        c.size = size, c.flags = flags;
        ioctl_or_throw(DRM_IOCTL_SPYRE_BO_CREATE, &c, "BO_CREATE");
        drm_spyre_bo_info i{};
        i.handle = c.handle;
        ioctl_or_throw(DRM_IOCTL_SPYRE_BO_INFO, &i, "BO_INFO");
        void* p = mmap(nullptr, i.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, i.mmap_offset);
        if (p == MAP_FAILED) {
            if (gone_errno(errno)) throw CardGone("mmap");
            fail(std::string("mmap: ") + strerror(errno));
        }
        maps_.emplace_back(p, i.size);
        return Bo{c.handle, i.dev_addr, static_cast<uint8_t*>(p)};
    }

    // Submits cmds on ring, waits; returns the job's drm_spyre_job_wait.
    drm_spyre_job_wait run(std::vector<drm_spyre_cmd>& cmds, uint32_t ring) {
        drm_spyre_submit s{};
        s.cmds = reinterpret_cast<uintptr_t>(cmds.data());
        s.cmd_count = static_cast<uint32_t>(cmds.size());
        s.cmd_size = sizeof(drm_spyre_cmd);
        s.sync_size = sizeof(drm_spyre_sync);
        s.ring = ring;
        ioctl_or_throw(DRM_IOCTL_SPYRE_SUBMIT, &s, "SUBMIT");
        drm_spyre_job_wait w{};
        w.job_id = s.job_id;
        w.timeout_ns = now_ns() + 120'000'000'000LL;
        ioctl_or_throw(DRM_IOCTL_SPYRE_JOB_WAIT, &w, "JOB_WAIT");
        if (w.status == DRM_SPYRE_JOB_ABORTED || w.status == DRM_SPYRE_JOB_TIMEOUT)
            throw CardGone("job status " + std::to_string(w.status));
        return w;
    }

    static int64_t now_ns() {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
    }

  private:
    std::string path_;
    int fd_ = -1;
    uint32_t rings_ = 1;
    std::vector<std::pair<void*, size_t>> maps_;
};

drm_spyre_cmd copy_cmd(uint32_t src, uint32_t dst, uint64_t size) {
    drm_spyre_cmd c{};
    c.op = DRM_SPYRE_CMD_COPY, c.src_handle = src, c.dst_handle = dst, c.size = size;
    return c;
}

// One process's workload on one card.
class Worker {
  public:
    Worker(Card& card, uint32_t seed)
        : card_(card),
          rng_(seed),
          host_src_(card.bo(kCopyBytes, DRM_SPYRE_BO_HOST)),
          host_dst_(card.bo(kCopyBytes, DRM_SPYRE_BO_HOST)),
          dev_buf_(card.bo(kCopyBytes, DRM_SPYRE_BO_DEVICE)),
          x_(card.bo(kVecBytes, DRM_SPYRE_BO_DEVICE)),
          y_(card.bo(kVecBytes, DRM_SPYRE_BO_DEVICE)),
          z_(card.bo(kVecBytes, DRM_SPYRE_BO_DEVICE)),
          victim_(card.bo(4096, DRM_SPYRE_BO_DEVICE)) {
        auto add = spyre_test::build_add_program(kPerCore);
        auto fault = build_store_outside();
        add_prog_ = card.bo(add.size(), DRM_SPYRE_BO_DEVICE);
        memcpy(add_prog_.map, add.data(), add.size());
        add_size_ = add.size();
        fault_prog_ = card.bo(fault.size(), DRM_SPYRE_BO_DEVICE);
        memcpy(fault_prog_.map, fault.data(), fault.size());
        fault_size_ = fault.size();
    }

    void job(long i) {
        const uint32_t ring = static_cast<uint32_t>(i) % card_.rings();
        switch (i % 3) {
            case 0:
                copy_job(ring);
                break;
            case 1:
                add_job(ring);
                break;
            default:
                fault_job(ring);
                break;
        }
    }

  private:
    // Core 0 stores one stick to argument 0, which no launch window covers.
    static std::vector<uint8_t> build_store_outside() {
        spyre::ProgramBuilder b;
        auto done = b.label();
        b.br(spyre::isa::Cond::NE, 1, 0, done);
        b.arg(3, 0), b.li(7, 128), b.li(8, 0);
        b.store(8, 3, 7);
        b.bind(done);
        b.halt();
        return b.finish();
    }

    void copy_job(uint32_t ring) {
        for (size_t k = 0; k < kCopyBytes; k += 4) {
            uint32_t v = static_cast<uint32_t>(rng_());
            memcpy(host_src_.map + k, &v, 4);
        }
        memset(host_dst_.map, 0, kCopyBytes);
        std::vector<drm_spyre_cmd> cmds{copy_cmd(host_src_.handle, dev_buf_.handle, kCopyBytes),
                                        copy_cmd(dev_buf_.handle, host_dst_.handle, kCopyBytes)};
        auto w = card_.run(cmds, ring);
        if (w.status != DRM_SPYRE_JOB_OK) fail("copy job status " + std::to_string(w.status));
        if (memcmp(host_src_.map, host_dst_.map, kCopyBytes) != 0) fail("copy: data differs");
    }

    void add_job(uint32_t ring) {
        auto xs = spyre_test::random_f16(kCores * kPerCore, static_cast<uint32_t>(rng_()));
        auto ys = spyre_test::random_f16(kCores * kPerCore, static_cast<uint32_t>(rng_()));
        memcpy(x_.map, xs.data(), kVecBytes);
        memcpy(y_.map, ys.data(), kVecBytes);
        memset(z_.map, 0, kVecBytes);
        uint32_t bos[3] = {x_.handle, y_.handle, z_.handle};
        drm_spyre_launch l{};
        l.num_cores = kCores, l.num_args = 3;
        l.args[0] = x_.dev_addr, l.args[1] = y_.dev_addr, l.args[2] = z_.dev_addr;
        l.bo_handles = reinterpret_cast<uintptr_t>(bos), l.bo_count = 3;
        std::vector<drm_spyre_cmd> cmds{launch_cmd(add_prog_, add_size_, l)};
        auto w = card_.run(cmds, ring);
        if (w.status != DRM_SPYRE_JOB_OK)
            fail("add launch status " + std::to_string(w.status) + " hw " +
                 std::to_string(w.hw_status) + "/" + std::to_string(w.hw_detail));
        auto ref = spyre_test::add_ref(xs, ys);
        if (memcmp(z_.map, ref.data(), kVecBytes) != 0) fail("add: result differs from reference");
    }

    void fault_job(uint32_t ring) {
        memset(victim_.map, 0x5a, 128);
        drm_spyre_launch l{};
        l.num_cores = kCores, l.num_args = 1;
        l.args[0] = victim_.dev_addr;
        std::vector<drm_spyre_cmd> cmds{launch_cmd(fault_prog_, fault_size_, l)};
        auto w = card_.run(cmds, ring);
        if (w.status != DRM_SPYRE_JOB_DEVICE_ERROR || w.hw_status != 8 /* ERR_PROGRAM */ ||
            w.hw_detail != kEngineErrDdrWindow)
            fail("fault launch: status " + std::to_string(w.status) + " hw " +
                 std::to_string(w.hw_status) + "/" + std::to_string(w.hw_detail) +
                 ", expected a DDR_WINDOW program error");
        for (int k = 0; k < 128; ++k)
            if (victim_.map[k] != 0x5a) fail("fault launch: the store reached an unlisted BO");
    }

    static drm_spyre_cmd launch_cmd(const Card::Bo& prog, size_t size, drm_spyre_launch& l) {
        drm_spyre_cmd c{};
        c.op = DRM_SPYRE_CMD_LAUNCH, c.src_handle = prog.handle, c.size = size;
        c.ext = reinterpret_cast<uintptr_t>(&l), c.ext_size = sizeof l;
        return c;
    }

    Card& card_;
    std::mt19937 rng_;
    Card::Bo host_src_, host_dst_, dev_buf_, x_, y_, z_, victim_;
    Card::Bo add_prog_{}, fault_prog_{};
    size_t add_size_ = 0, fault_size_ = 0;
};

sigjmp_buf g_mapping_gone;

// A BO mapping of a removed card faults with SIGBUS (the driver zapped it): the card is gone.
void on_sigbus(int) { siglongjmp(g_mapping_gone, 1); }

// Returns the process exit status: 0 ok, 1 failed.
int run_process(const Options& o, int p) {
    const std::string& dev = o.devs[p % o.devs.size()];
    static long done = 0;  // static: survives the siglongjmp below
    if (o.until_gone) {
        if (sigsetjmp(g_mapping_gone, 1)) {
            printf(
                "process %d (%s): ok, %ld jobs verified, then the card went away (SIGBUS on "
                "a BO mapping)\n",
                p, dev.c_str(), done);
            return 0;
        }
        signal(SIGBUS, on_sigbus);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.seconds);
    try {
        Card card(dev);
        Worker w(card, o.seed * 1000003u + p);
        for (long i = 0; o.until_gone || i < o.jobs; ++i) {
            if (std::chrono::steady_clock::now() > deadline)
                fail("still running after " + std::to_string(o.seconds) + " s");
            w.job(i + p);
            ++done;
        }
    } catch (const CardGone& e) {
        if (!o.until_gone) {
            printf("process %d (%s): FAIL after %ld jobs: card lost (%s)\n", p, dev.c_str(), done,
                   e.what());
            return 1;
        }
        printf("process %d (%s): ok, %ld jobs verified, then the card went away (%s)\n", p,
               dev.c_str(), done, e.what());
        return 0;
    } catch (const std::exception& e) {
        printf("process %d (%s): FAIL after %ld jobs: %s\n", p, dev.c_str(), done, e.what());
        return 1;
    }
    if (o.until_gone) {
        printf("process %d (%s): FAIL: the card never went away\n", p, dev.c_str());
        return 1;
    }
    printf("process %d (%s): ok, %ld jobs verified\n", p, dev.c_str(), done);
    return 0;
}

std::vector<std::string> accel_nodes() {
    std::vector<std::string> v;
    if (DIR* d = opendir("/dev/accel")) {
        while (dirent* e = readdir(d))
            if (strncmp(e->d_name, "accel", 5) == 0)
                v.push_back(std::string("/dev/accel/") + e->d_name);
        closedir(d);
    }
    std::sort(v.begin(), v.end());
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s needs a value\n", a.c_str());
                exit(2);
            }
            return argv[++i];
        };
        if (a == "--dev")
            o.devs.push_back(val());
        else if (a == "--procs")
            o.procs = std::stoi(val());
        else if (a == "--jobs")
            o.jobs = std::stol(val());
        else if (a == "--seconds")
            o.seconds = std::stoi(val());
        else if (a == "--seed")
            o.seed = static_cast<uint32_t>(std::stoul(val()));
        else if (a == "--until-gone")
            o.until_gone = true;
        else {
            fprintf(stderr,
                    "usage: %s [--dev PATH]... [--procs N] [--jobs N] [--until-gone] "
                    "[--seconds S] [--seed S]\n",
                    argv[0]);
            return 2;
        }
    }
    if (o.devs.empty()) o.devs = accel_nodes();
    if (o.devs.empty()) {
        fprintf(stderr, "spyre_stress: no /dev/accel node (modprobe spyre?)\n");
        return 2;
    }
    setvbuf(stdout, nullptr, _IOLBF, 0);
    std::vector<pid_t> pids;
    for (int p = 0; p < o.procs; ++p) {
        pid_t pid = fork();
        if (pid == 0) _exit(run_process(o, p));
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        pids.push_back(pid);
    }
    int passed = 0, failed = 0;
    for (pid_t pid : pids) {
        int st = 0;
        waitpid(pid, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            ++passed;
        } else {
            ++failed;
            if (WIFSIGNALED(st)) printf("a process died of signal %d\n", WTERMSIG(st));
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

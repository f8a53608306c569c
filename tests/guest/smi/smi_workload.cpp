// Workload of the spyre-smi guest test (smi_guest_test.py) and the demo: holds device memory
// and keeps cores of a card busy with vector adds until told to stop.
//
//   smi_workload CARD MIB [SECONDS [CORES]]
//
// Allocates MIB MiB of device memory (written once), prints "ready PID" and then runs
// launches on cores 0..CORES-1 (default: every core) back to back until a line (or EOF)
// arrives on stdin or SECONDS (default 600) pass.
// Prints "launches N" at the end. Exits 1 with libspyre's message on any failure.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "launch_util.hpp"
#include "spyre/spyre.h"

namespace {

void check(spyre_status st, const char* what) {
    if (st == SPYRE_SUCCESS) return;
    std::fprintf(stderr, "smi_workload: %s: %s\n", what, spyre_last_error());
    std::exit(1);
}

bool stdin_has_input() {
    pollfd p{0, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: smi_workload CARD MIB [SECONDS [CORES]]\n");
        return 2;
    }
    const int card = std::atoi(argv[1]);
    const uint64_t hold = std::strtoull(argv[2], nullptr, 0) << 20;
    const double seconds = argc > 3 ? std::atof(argv[3]) : 600;
    spyre_device_t dev = nullptr;
    check(spyre_device_open(card, &dev), "open");
    spyre_device_info info;
    check(spyre_device_get_info(dev, &info), "info");
    const uint32_t cores = argc > 4 ? static_cast<uint32_t>(std::atoi(argv[4])) : info.num_cores;
    if (cores < 1 || cores > info.num_cores) {
        std::fprintf(stderr, "smi_workload: CORES must be 1..%u\n", info.num_cores);
        return 2;
    }

    spyre_buffer_t held = nullptr;
    if (hold) {
        check(spyre_malloc(dev, hold, &held), "malloc");
        check(spyre_memset(held, 0, 0x5a, hold), "memset");
    }
    // z = x + y, 64 Ki fp16 elements per core: long enough that the modeled engine time is a
    // visible share of the wall time.
    constexpr int64_t per_core = 64 * 1024;
    const uint64_t bytes = per_core * 2 * cores;
    spyre_buffer_t x, y, z;
    check(spyre_malloc(dev, bytes, &x), "malloc x");
    check(spyre_malloc(dev, bytes, &y), "malloc y");
    check(spyre_malloc(dev, bytes, &z), "malloc z");
    auto img = spyre_test::build_add_program(per_core);
    spyre_program_t prog;
    check(spyre_program_load(dev, img.data(), img.size(), &prog), "program load");
    spyre_buffer_t bufs[] = {x, y, z};
    spyre_launch_params lp{};
    lp.num_cores = cores;
    lp.num_args = 3;
    for (int i = 0; i < 3; ++i) check(spyre_buffer_device_address(bufs[i], &lp.args[i]), "address");
    lp.buffers = bufs;
    lp.num_buffers = 3;

    std::printf("ready %d\n", static_cast<int>(::getpid()));
    std::fflush(stdout);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    uint64_t launches = 0;
    while (!stdin_has_input() && std::chrono::steady_clock::now() < end) {
        check(spyre_launch(prog, &lp, nullptr), "launch");
        ++launches;
    }
    std::printf("launches %llu\n", static_cast<unsigned long long>(launches));
    spyre_program_free(prog);
    for (auto* b : {x, y, z, held}) spyre_free(b);
    spyre_device_close(dev);
    return 0;
}

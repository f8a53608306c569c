// SPDX-License-Identifier: MIT
// One process runs op-library work on a card across its hot-unplug and re-plug
// (tests/guest/failure/hotplug.sh drives QEMU): the op fails with a clear status when the card
// goes, closing every handle releases the lost card (no driver file stays open), and once the
// card is back the same process opens it again and the same op, with the plan and program the
// library had cached, computes the right answer on it.
//
//   ops_replug PCI_ADDRESS [SECONDS]
//
// Prints progress lines; exits 0 on success, 1 with a reason otherwise.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../accel_files.hpp"
#include "spyre/numerics.hpp"
#include "spyre/ops.h"
#include "spyre/spyre.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kElems = 4096;

[[noreturn]] void die(const std::string& why) {
    std::printf("ops_replug: FAIL: %s\n", why.c_str());
    std::exit(1);
}

// The index of the card at `pci`, or -1 if it is not there now.
int find_card(const std::string& pci) {
    int n = 0;
    if (spyre_get_device_count(&n) != SPYRE_SUCCESS) return -1;
    for (int i = 0; i < n; ++i) {
        spyre_device_t d = nullptr;
        if (spyre_device_open(i, &d) != SPYRE_SUCCESS) continue;
        spyre_device_info info{};
        const bool match =
            spyre_device_get_info(d, &info) == SPYRE_SUCCESS && pci == info.pci_address;
        spyre_device_close(d);
        if (match) return i;
    }
    return -1;
}

// relu over kElems fp16 values on the card, checked; the status of the first failing call.
spyre_status relu_round_trip(spyre_device_t dev, uint32_t seed) {
    std::vector<uint16_t> x(kElems), y(kElems);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-4, 4);
    for (auto& v : x) v = spyre::num::f32_to_f16(dist(rng));
    spyre_buffer_t bx = nullptr, by = nullptr;
    spyre_status st = spyre_malloc(dev, kElems * 2, &bx);
    if (st == SPYRE_SUCCESS) st = spyre_malloc(dev, kElems * 2, &by);
    if (st == SPYRE_SUCCESS) st = spyre_memcpy_htod(bx, 0, x.data(), kElems * 2);
    spyre_tensor tx{}, ty{};
    if (st == SPYRE_SUCCESS) st = spyre_tensor_init(&tx, bx, 0, SPYRE_DTYPE_FLOAT16, 1, &kElems);
    if (st == SPYRE_SUCCESS) st = spyre_tensor_init(&ty, by, 0, SPYRE_DTYPE_FLOAT16, 1, &kElems);
    if (st == SPYRE_SUCCESS) st = spyre_op_unary(nullptr, SPYRE_UNARY_RELU, &tx, &ty);
    if (st == SPYRE_SUCCESS) st = spyre_device_synchronize(dev);
    if (st == SPYRE_SUCCESS) st = spyre_memcpy_dtoh(y.data(), by, 0, kElems * 2);
    if (st == SPYRE_SUCCESS)
        for (int64_t i = 0; i < kElems; ++i)
            if (spyre::num::f16_to_f32(y[i]) != std::max(spyre::num::f16_to_f32(x[i]), 0.0f))
                die("wrong relu result at element " + std::to_string(i));
    spyre_free(bx);
    spyre_free(by);
    return st;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) die("usage: ops_replug PCI_ADDRESS [SECONDS]");
    const std::string pci = argv[1];
    const auto deadline = Clock::now() + std::chrono::seconds(argc > 2 ? std::atoi(argv[2]) : 180);

    const int index = find_card(pci);
    if (index < 0) die("no card at " + pci);
    spyre_device_t dev = nullptr;
    if (spyre_device_open(index, &dev) != SPYRE_SUCCESS) die(spyre_last_error());
    int rounds = 0;
    spyre_status st = SPYRE_SUCCESS;
    while ((st = relu_round_trip(dev, rounds)) == SPYRE_SUCCESS) {
        if (++rounds == 1) {
            // hotplug.sh unplugs the card only after this line: the first op plans and loads
            // its program, which under TCG with the stress load can take seconds
            std::printf("ops_replug: first op verified\n");
            std::fflush(stdout);
        }
        if (Clock::now() > deadline) die("the card never went away");
    }
    std::printf("ops_replug: %d ops verified, then %s: %s\n", rounds, spyre_status_string(st),
                spyre_last_error());
    if (st != SPYRE_ERROR_DEVICE_LOST && st != SPYRE_ERROR_DEVICE_ERROR)
        die("the unplug surfaced as an unexpected status");
    if (rounds == 0) die("no op ran before the unplug");

    spyre_device_close(dev);
    if (const int n = spyre_test::open_accel_files(); n != 0)
        die(std::to_string(n) + " driver file(s) still open after closing the lost card");
    std::printf("ops_replug: the lost card is released\n");

    int again = -1;
    while ((again = find_card(pci)) < 0) {
        if (Clock::now() > deadline) die("the card did not come back");
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (spyre_device_open(again, &dev) != SPYRE_SUCCESS) die(spyre_last_error());
    for (int i = 0; i < 3; ++i)
        if (relu_round_trip(dev, 1000 + i) != SPYRE_SUCCESS)
            die(std::string("op after re-plug: ") + spyre_last_error());
    spyre_device_close(dev);
    std::printf("ops_replug: ok: the card is back as index %d and ops run on it\n", again);
    return 0;
}

#include "smi_collect.hpp"

#include <unistd.h>

#include <algorithm>

namespace spyre_smi {

namespace {

template <typename T>
T sized() {
    T v{};
    v.size = sizeof(T);
    return v;
}

// A spyre_mgmt_get_processes-style list (entries sized by element 0, *count says how many
// there are): asks again with more room when the first answer did not fit.
template <typename T>
bool get_list(spyre_device_t dev, spyre_status (*get)(spyre_device_t, T*, uint32_t, uint32_t*),
              std::vector<T>& out) {
    uint32_t n = 0;
    std::vector<T> v(16);
    for (int attempt = 0; attempt < 3; ++attempt) {
        v[0].size = sizeof(T);
        if (get(dev, v.data(), static_cast<uint32_t>(v.size()), &n) != SPYRE_SUCCESS) return false;
        if (n <= v.size()) break;
        v.resize(n + 16);
    }
    v.resize(std::min<size_t>(n, v.size()));
    out = std::move(v);
    return true;
}

// Keeps the first failure's message as the card's error.
void note(CardReport& c) {
    if (c.error.empty()) c.error = spyre_last_error();
}

}  // namespace

Collector::~Collector() {
    for (auto& [i, dev] : open_) spyre_device_close(dev);
}

Report Collector::collect() {
    Report r;
    r.libspyre_version = spyre_get_version_string();
    r.attached = attached_;
    for (int i : cards_) r.cards.push_back(collect_card(i));
    return r;
}

CardReport Collector::collect_card(int index) {
    CardReport c;
    c.index = index;
    spyre_device_t dev = open_.contains(index) ? open_[index] : nullptr;
    if (!dev) {
        if (spyre_device_open(index, &dev) != SPYRE_SUCCESS) {
            c.error = spyre_last_error();
            return c;
        }
        open_[index] = dev;
    }
    spyre_device_info info;
    if (spyre_device_get_info(dev, &info) == SPYRE_SUCCESS)
        c.info = info;
    else
        note(c);
    spyre_mem_stats mem;
    if (spyre_device_get_mem_stats(dev, &mem) == SPYRE_SUCCESS)
        c.mem = mem;
    else
        note(c);
    spyre_telemetry t;
    spyre_status st = spyre_device_get_telemetry(dev, &t);
    if (st == SPYRE_SUCCESS)
        c.telemetry = t;
    else if (st != SPYRE_ERROR_NOT_SUPPORTED)
        note(c);
    auto id = sized<spyre_mgmt_identity>();
    if (spyre_mgmt_get_identity(dev, &id) == SPYRE_SUCCESS)
        c.identity = id;
    else
        note(c);
    auto status = sized<spyre_mgmt_status>();
    if (spyre_mgmt_get_status(dev, &status) == SPYRE_SUCCESS)
        c.status = status;
    else
        note(c);
    auto counters = sized<spyre_mgmt_counters>();
    if (spyre_mgmt_get_counters(dev, &counters) == SPYRE_SUCCESS) {
        c.counters = counters;
        if (auto prev = previous_.find(index); prev != previous_.end()) {
            auto u = sized<spyre_mgmt_utilization>();
            if (spyre_mgmt_get_utilization(&prev->second, &counters, &u) == SPYRE_SUCCESS)
                c.util = u;
        }
        previous_[index] = counters;
    } else {
        note(c);
    }
    std::vector<spyre_mgmt_process> procs;
    if (get_list(dev, spyre_mgmt_get_processes, procs)) {
        // spyre-smi's own file is not a workload (on the simulator the card lives in this
        // process, so its single client is kept).
        const bool sim = c.info && c.info->backend == SPYRE_BACKEND_SIM;
        for (const auto& p : procs)
            if (sim || p.pid != ::getpid()) c.processes.push_back(p);
    } else {
        note(c);
    }
    if (!get_list(dev, spyre_mgmt_get_peers, c.peers)) note(c);
    return c;
}

}  // namespace spyre_smi

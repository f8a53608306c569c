// spyre-smi: status of the Spyre cards of this machine, built only on libspyre's public C API.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "smi_report.hpp"
#include "spyre/spyre.h"

namespace {

constexpr int kExitError = 1;
constexpr int kExitNoDevice = 2;

spyre_smi::CardReport collect_card(int index) {
    spyre_smi::CardReport c;
    c.index = index;
    spyre_device_t dev = nullptr;
    if (spyre_device_open(index, &dev) != SPYRE_SUCCESS) {
        c.error = spyre_last_error();
        return c;
    }
    spyre_device_info info;
    if (spyre_device_get_info(dev, &info) == SPYRE_SUCCESS)
        c.info = info;
    else
        c.error = spyre_last_error();
    spyre_mem_stats mem;
    if (spyre_device_get_mem_stats(dev, &mem) == SPYRE_SUCCESS)
        c.mem = mem;
    else if (c.error.empty())
        c.error = spyre_last_error();
    spyre_telemetry t;
    spyre_status st = spyre_device_get_telemetry(dev, &t);
    if (st == SPYRE_SUCCESS)
        c.telemetry = t;
    else if (st != SPYRE_ERROR_NOT_SUPPORTED && c.error.empty())
        c.error = spyre_last_error();
    spyre_device_close(dev);
    return c;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"spyre-smi: status of the Spyre accelerator cards of this machine"};
    app.set_version_flag("--version",
                         std::string("spyre-smi (libspyre ") + spyre_get_version_string() + ")");
    bool list = false, query = false, json = false;
    int id = -1;
    app.add_flag("-L,--list", list, "List the cards, one line each");
    app.add_option("-i,--id", id, "Only show card N")->check(CLI::NonNegativeNumber);
    app.add_flag("-q,--query", query, "Detailed report of every card, with telemetry counters");
    app.add_flag("--json", json, "Machine-readable output (JSON)");
    CLI11_PARSE(app, argc, argv);

    int count = 0;
    if (spyre_get_device_count(&count) != SPYRE_SUCCESS || count == 0) {
        std::fprintf(stderr,
                     "No Spyre card found. Is the spyre driver loaded? Try: modprobe spyre\n"
                     "(libspyre: %s)\n",
                     spyre_last_error());
        return kExitNoDevice;
    }
    if (id >= count) {
        std::fprintf(stderr, "No Spyre card with index %d: %d card%s found (valid: 0..%d)\n", id,
                     count, count == 1 ? "" : "s", count - 1);
        return kExitNoDevice;
    }

    spyre_smi::Report report;
    report.libspyre_version = spyre_get_version_string();
    report.attached = count;
    bool failed = false;
    for (int i = 0; i < count; ++i) {
        if (id >= 0 && i != id) continue;
        report.cards.push_back(collect_card(i));
        failed |= !report.cards.back().info.has_value();
    }

    if (json)
        std::cout << spyre_smi::to_json(report).dump(2) << "\n";
    else if (list)
        std::cout << spyre_smi::format_list(report);
    else if (query)
        std::cout << spyre_smi::format_query(report);
    else
        std::cout << spyre_smi::format_table(report);
    return failed ? kExitError : 0;
}

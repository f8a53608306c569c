// spyre-smi: status and management of the Spyre cards of this machine, built only on
// libspyre's public C API (spyre.h, its "Management" calls in particular).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <thread>

#include "smi_collect.hpp"
#include "smi_csv.hpp"
#include "smi_exporter.hpp"
#include "smi_prometheus.hpp"
#include "smi_report.hpp"
#include "smi_views.hpp"
#include "spyre/spyre.h"

namespace {

constexpr int kExitError = 1;
constexpr int kExitNoDevice = 2;
constexpr int kExitPermission = 3;
constexpr int kExitBusy = 4;

bool any_card_failed(const spyre_smi::Report& r) {
    for (const auto& c : r.cards)
        if (!c.info) return true;
    return false;
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

int exit_code(spyre_status st) {
    switch (st) {
        case SPYRE_SUCCESS:
            return 0;
        case SPYRE_ERROR_NO_DEVICE:
            return kExitNoDevice;
        case SPYRE_ERROR_PERMISSION:
            return kExitPermission;
        case SPYRE_ERROR_BUSY:
            return kExitBusy;
        default:
            return kExitError;
    }
}

int run_reset(int index, int count, bool force) {
    if (index < 0 && count > 1) {
        std::fprintf(stderr, "spyre-smi reset: %d cards found: name the one to reset with -i N\n",
                     count);
        return kExitError;
    }
    if (index < 0) index = 0;
    spyre_status st = spyre_mgmt_reset(index, force ? SPYRE_MGMT_RESET_FORCE : 0);
    if (st != SPYRE_SUCCESS) {
        std::fprintf(stderr, "spyre-smi reset: %s\n", spyre_last_error());
        return exit_code(st);
    }
    // Report the card as it came back.
    spyre_smi::Collector col({index}, count);
    auto r = col.collect();
    const auto& c = r.cards.front();
    std::printf("spyre%d: reset done, health %s\n", index,
                c.status ? spyre_health_string(static_cast<spyre_health>(c.status->health))
                         : c.error.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"spyre-smi: status and management of the Spyre accelerator cards of this machine"};
    app.set_version_flag("--version",
                         std::string("spyre-smi (libspyre ") + spyre_get_version_string() + ")");
    app.fallthrough();
    bool list = false, details = false, json = false, csv = false, noheader = false;
    int id = -1;
    double loop = 0, window_ms = 500;
    long count = 0;
    std::string query;
    app.add_option("-i,--id", id, "Only card N")->check(CLI::NonNegativeNumber);
    app.add_flag("-L,--list", list, "List the cards, one line each");
    app.add_flag("-q,--details", details, "Detailed report of every card");
    app.add_flag("--json", json, "Machine-readable output (Documentation/spyre-smi.schema.json)");
    app.add_flag("--csv", csv, "CSV output, one line per card");
    app.add_option("--query", query,
                   "Fields of the CSV output, e.g. index,memory.used (implies --csv)");
    app.add_flag("--noheader", noheader, "CSV without its header line");
    app.add_option("-l,--loop", loop, "Repeat every SEC seconds")->check(CLI::PositiveNumber);
    app.add_option("-c,--count", count, "Stop after N reports (with -l, dmon)")
        ->check(CLI::PositiveNumber);
    app.add_option("--window", window_ms, "Utilisation window of a single report, ms")
        ->check(CLI::Range(10.0, 60000.0));

    auto* dmon = app.add_subcommand("dmon", "One line per card every interval");
    double delay = 1;
    dmon->add_option("-d,--delay", delay, "Interval in seconds")->check(CLI::PositiveNumber);
    auto* topo = app.add_subcommand("topo", "How the cards connect to each other");
    bool matrix = false;  // nvidia-smi's spelling; the matrix is the only view
    topo->add_flag("-m,--matrix", matrix, "The card-to-card matrix (the default)");
    auto* reset = app.add_subcommand("reset", "Reset a card (root; refuses while it is in use)");
    bool force = false;
    reset->add_flag("-f,--force", force, "Reset even while other processes use the card");
    auto* exporter = app.add_subcommand("exporter", "Serve Prometheus metrics on 127.0.0.1");
    int port = 9400;
    long max_requests = 0;
    exporter->add_option("-p,--port", port, "TCP port (0: any free port)")
        ->check(CLI::Range(0, 65535));
    exporter->add_option("--max-requests", max_requests, "Exit after N requests (0: never)")
        ->check(CLI::NonNegativeNumber);
    app.require_subcommand(0, 1);
    CLI11_PARSE(app, argc, argv);

    std::vector<std::string> fields = spyre_smi::csv_default_fields();
    if (!query.empty()) {
        csv = true;
        try {
            fields = spyre_smi::parse_csv_query(query);
        } catch (const std::invalid_argument& e) {
            std::fprintf(stderr, "spyre-smi: %s\n", e.what());
            return kExitError;
        }
    }
    if (list + details + json + csv > 1) {
        std::fprintf(stderr, "spyre-smi: choose one of -L, -q, --json and --csv\n");
        return kExitError;
    }

    int n = 0;
    if (spyre_get_device_count(&n) != SPYRE_SUCCESS || n == 0) {
        std::fprintf(stderr,
                     "No Spyre card found. Is the spyre driver loaded? Try: modprobe spyre\n"
                     "(libspyre: %s)\n",
                     spyre_last_error());
        return kExitNoDevice;
    }
    if (id >= n) {
        std::fprintf(stderr, "No Spyre card with index %d: %d card%s found (valid: 0..%d)\n", id, n,
                     n == 1 ? "" : "s", n - 1);
        return kExitNoDevice;
    }
    if (reset->parsed()) return run_reset(id, n, force);

    std::vector<int> cards;
    for (int i = 0; i < n; ++i)
        if (id < 0 || i == id) cards.push_back(i);
    spyre_smi::Collector col(cards, n);

    if (exporter->parsed())
        return spyre_smi::serve_metrics(
            port, max_requests, [&] { return spyre_smi::format_prometheus(col.collect()); });
    if (topo->parsed()) {
        auto r = col.collect();
        std::cout << spyre_smi::format_topo(r);
        return any_card_failed(r) ? kExitError : 0;
    }
    if (dmon->parsed()) {
        col.collect();  // the first sample: rates start with the next line
        std::cout << spyre_smi::dmon_header() << std::flush;
        for (long i = 0; count == 0 || i < count; ++i) {
            sleep_s(delay);
            std::cout << spyre_smi::dmon_lines(col.collect()) << std::flush;
        }
        return 0;
    }

    // A single report carries the utilisation of a short window before it; a loop the
    // utilisation since the previous report.
    col.collect();
    sleep_s(loop > 0 ? 0 : window_ms / 1000.0);
    bool failed = false;
    for (long i = 0;; ++i) {
        if (loop > 0) sleep_s(i == 0 ? std::min(loop, window_ms / 1000.0) : loop);
        auto r = col.collect();
        failed |= any_card_failed(r);
        if (json)
            std::cout << (loop > 0 ? spyre_smi::to_json(r).dump() : spyre_smi::to_json(r).dump(2))
                      << "\n";
        else if (csv)
            std::cout << spyre_smi::format_csv(r, fields, !noheader && i == 0);
        else if (list)
            std::cout << spyre_smi::format_list(r);
        else if (details)
            std::cout << spyre_smi::format_query(r);
        else
            std::cout << spyre_smi::format_table(r);
        std::cout << std::flush;
        if (loop <= 0 || (count > 0 && i + 1 >= count)) break;
        if (!json && !csv) std::cout << "\n";
    }
    return failed ? kExitError : 0;
}

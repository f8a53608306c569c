// spyre-smi's data model and its renderings (table, list, detailed query, JSON). Rendering is
// pure so that tests/host can check it without a card.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "spyre/spyre.h"

namespace spyre_smi {

// Version of the --json document (Documentation/spyre-smi.schema.json): the major number
// changes when a field is removed or changes meaning, the minor one when fields are added.
inline constexpr const char* kJsonSchemaVersion = "1.1";

struct CardReport {
    int index = 0;
    std::optional<spyre_device_info> info;        // empty if the card could not be opened
    std::optional<spyre_mem_stats> mem;           // empty if the memory query failed
    std::optional<spyre_telemetry> telemetry;     // empty without telemetry
    std::optional<spyre_mgmt_identity> identity;  // management API (spyre.h "Management")
    std::optional<spyre_mgmt_status> status;      // health, sensors, memory
    std::optional<spyre_mgmt_counters> counters;  // cumulative counters, latest sample
    std::optional<spyre_mgmt_utilization> util;   // between the last two samples
    std::vector<spyre_mgmt_process> processes;    // clients (spyre-smi itself left out)
    std::vector<spyre_mgmt_peer> peers;           // the other cards as this card sees them
    std::string error;                            // why something above is missing
};

struct Report {
    std::string libspyre_version;
    int attached = 0;  // cards on the machine (cards may hold fewer with -i)
    std::vector<CardReport> cards;
};

// The default view: a header with driver, library and hardware versions, one row per card
// (health, utilisation, memory, sensors), then the processes using the cards.
std::string format_table(const Report& r);
// -L: one line per card.
std::string format_list(const Report& r);
// -q: every property and counter of every card.
std::string format_query(const Report& r);
// --json (Documentation/spyre-smi.schema.json).
nlohmann::json to_json(const Report& r);

// The PCI path between two cards, as `topo` names it: "PIX" (below one switch or bridge: at
// most 3 bridges on the path), "PXB" (across several switches below a shared one), "PHB"
// (through the root complex), "N/A" (unknown).
std::string link_type(const spyre_mgmt_peer& p);

// "1024 MiB" style with integer MiB (rounded down), as the table uses.
std::string mib(uint64_t bytes);
// "12.5 MB/s" style rate with decimal units.
std::string rate_text(double bytes_per_s);

}  // namespace spyre_smi

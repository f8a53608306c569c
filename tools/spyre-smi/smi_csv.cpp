#include "smi_csv.hpp"

#include <format>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>

namespace spyre_smi {

namespace {

using Value = std::optional<std::string>;
using Getter = std::function<Value(const CardReport&)>;

Value num(double v) { return std::format("{:.2f}", v); }
Value u64(uint64_t v) { return std::to_string(v); }

// A cumulative counter of the group `bit`.
Getter counter(uint32_t bit, uint64_t spyre_mgmt_counters::* field) {
    return [=](const CardReport& c) -> Value {
        if (!c.counters || !(c.counters->valid & bit)) return {};
        return u64((*c.counters).*field);
    };
}

// A rate of the group `bit` over the interval, in MB/s.
Getter megabytes(uint32_t bit, double spyre_mgmt_utilization::* field) {
    return [=](const CardReport& c) -> Value {
        if (!c.util || !(c.util->valid & bit)) return {};
        return num((*c.util).*field / 1e6);
    };
}

// Field getters by name; the order and help text live in csv_fields().
const std::map<std::string, Getter>& getters() {
    static const std::map<std::string, Getter> g = {
        {"index", [](const CardReport& c) -> Value { return std::to_string(c.index); }},
        {"name",
         [](const CardReport& c) -> Value { return c.info ? Value(c.info->name) : Value(); }},
        {"pci.address",
         [](const CardReport& c) -> Value {
             return c.info ? Value(c.info->pci_address) : Value();
         }},
        {"serial",
         [](const CardReport& c) -> Value {
             if (!c.identity || !(c.identity->valid & SPYRE_MGMT_HAS_SERIAL)) return {};
             return c.identity->serial;
         }},
        {"backend",
         [](const CardReport& c) -> Value {
             return c.identity ? Value(c.identity->backend) : Value();
         }},
        {"driver.version",
         [](const CardReport& c) -> Value {
             return c.identity ? Value(c.identity->driver_version) : Value();
         }},
        {"hw.version",
         [](const CardReport& c) -> Value {
             return c.identity ? Value(c.identity->hw_version) : Value();
         }},
        {"library.version",
         [](const CardReport& c) -> Value {
             return c.identity ? Value(c.identity->library_version) : Value();
         }},
        {"health",
         [](const CardReport& c) -> Value {
             if (!c.status) return {};
             return spyre_health_string(static_cast<spyre_health>(c.status->health));
         }},
        {"temperature",
         [](const CardReport& c) -> Value {
             if (!c.status || !(c.status->valid & SPYRE_MGMT_HAS_TEMPERATURE)) return {};
             return num(c.status->temperature_mc / 1000.0);
         }},
        {"power.draw",
         [](const CardReport& c) -> Value {
             if (!c.status || !(c.status->valid & SPYRE_MGMT_HAS_POWER)) return {};
             return num(c.status->power_mw / 1000.0);
         }},
        {"power.limit",
         [](const CardReport& c) -> Value {
             if (!c.status || !(c.status->valid & SPYRE_MGMT_HAS_POWER)) return {};
             return num(c.status->power_cap_mw / 1000.0);
         }},
        {"utilization.engine",
         [](const CardReport& c) -> Value {
             if (!c.util || !(c.util->valid & SPYRE_MGMT_HAS_ENGINE_BUSY)) return {};
             return num(c.util->engine_percent);
         }},
        {"utilization.cores",
         [](const CardReport& c) -> Value {
             if (!c.util || !(c.util->valid & SPYRE_MGMT_HAS_CORE_BUSY)) return {};
             std::string v;
             for (uint32_t k = 0; k < c.util->num_cores; ++k)
                 v += std::format("{}{:.2f}", k ? " " : "", c.util->core_percent[k]);
             return v;
         }},
        {"memory.total",
         [](const CardReport& c) -> Value {
             return c.status ? u64(c.status->mem_total_bytes >> 20) : Value();
         }},
        {"memory.used",
         [](const CardReport& c) -> Value {
             return c.status ? u64(c.status->mem_used_bytes >> 20) : Value();
         }},
        {"memory.free",
         [](const CardReport& c) -> Value {
             return c.status ? u64(c.status->mem_free_bytes >> 20) : Value();
         }},
        {"ddr.read",
         megabytes(SPYRE_MGMT_HAS_DDR_BYTES, &spyre_mgmt_utilization::ddr_read_bytes_per_s)},
        {"ddr.write",
         megabytes(SPYRE_MGMT_HAS_DDR_BYTES, &spyre_mgmt_utilization::ddr_write_bytes_per_s)},
        {"pcie.h2d",
         megabytes(SPYRE_MGMT_HAS_PCIE_BYTES, &spyre_mgmt_utilization::pcie_h2d_bytes_per_s)},
        {"pcie.d2h",
         megabytes(SPYRE_MGMT_HAS_PCIE_BYTES, &spyre_mgmt_utilization::pcie_d2h_bytes_per_s)},
        {"pcie.link",
         [](const CardReport& c) -> Value {
             if (!c.identity || !(c.identity->valid & SPYRE_MGMT_HAS_PCIE_LINK)) return {};
             return std::format("{} x{}", c.identity->pcie_link_speed, c.identity->pcie_link_width);
         }},
        {"errors.cmd", counter(SPYRE_MGMT_HAS_ERRORS, &spyre_mgmt_counters::cmd_errors)},
        {"errors.jobs", counter(SPYRE_MGMT_HAS_ERRORS, &spyre_mgmt_counters::jobs_failed)},
        {"errors.launch", counter(SPYRE_MGMT_HAS_ERRORS, &spyre_mgmt_counters::launch_errors)},
        {"errors.timeout", counter(SPYRE_MGMT_HAS_RECOVERY, &spyre_mgmt_counters::jobs_timed_out)},
        {"resets.ring", counter(SPYRE_MGMT_HAS_RECOVERY, &spyre_mgmt_counters::ring_resets)},
        {"resets.card", counter(SPYRE_MGMT_HAS_RECOVERY, &spyre_mgmt_counters::card_resets)},
        {"resets.device", counter(SPYRE_MGMT_HAS_ERRORS, &spyre_mgmt_counters::device_resets)},
        {"processes",
         [](const CardReport& c) -> Value { return std::to_string(c.processes.size()); }},
    };
    return g;
}

std::string quote(const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
}

}  // namespace

const std::vector<CsvField>& csv_fields() {
    static const std::vector<CsvField> f = {
        {"index", "", "card index (spyre_device_open order)"},
        {"name", "", "card name, e.g. spyre0"},
        {"pci.address", "", "PCI address"},
        {"serial", "", "serial number (N/A: the card has none)"},
        {"backend", "", "libspyre backend: kernel or sim"},
        {"driver.version", "", "driver version"},
        {"hw.version", "", "hardware interface version"},
        {"library.version", "", "libspyre version"},
        {"health", "", "ok, resetting, wedged or unknown"},
        {"temperature", "C", "board temperature"},
        {"power.draw", "W", "board power draw"},
        {"power.limit", "W", "board power limit"},
        {"utilization.engine", "%", "compute engine busy (modeled time) over the interval"},
        {"utilization.cores", "%",
         "busy (modeled time) of each core over the interval, core 0 first, separated by spaces"},
        {"memory.total", "MiB", "device memory"},
        {"memory.used", "MiB", "device memory in buffers of all processes"},
        {"memory.free", "MiB", "device memory not in use"},
        {"ddr.read", "MB/s", "device memory read by the cores over the interval"},
        {"ddr.write", "MB/s", "device memory written by the cores over the interval"},
        {"pcie.h2d", "MB/s", "DMA host to device over the interval"},
        {"pcie.d2h", "MB/s", "DMA device to host over the interval"},
        {"pcie.link", "", "current PCIe link, e.g. 2.5 GT/s x1"},
        {"errors.cmd", "", "commands the card failed, since power on"},
        {"errors.jobs", "", "jobs with a failed command"},
        {"errors.launch", "", "launches that stopped with a program fault"},
        {"errors.timeout", "", "jobs that timed out (driver, since load)"},
        {"resets.ring", "", "hung rings stopped by the driver"},
        {"resets.card", "", "card resets by the driver (recovery, PCI resets)"},
        {"resets.device", "", "resets the card counted since power on"},
        {"processes", "", "processes using the card (other than spyre-smi)"},
    };
    return f;
}

const std::vector<std::string>& csv_default_fields() {
    static const std::vector<std::string> f = {
        "index",       "name",         "pci.address", "health",    "utilization.engine",
        "memory.used", "memory.total", "temperature", "power.draw"};
    return f;
}

std::vector<std::string> parse_csv_query(const std::string& list) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos <= list.size()) {
        size_t comma = list.find(',', pos);
        std::string name =
            list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        while (!name.empty() && name.front() == ' ') name.erase(0, 1);
        while (!name.empty() && name.back() == ' ') name.pop_back();
        if (!getters().contains(name)) {
            std::string valid;
            for (const auto& f : csv_fields())
                valid += std::string(valid.empty() ? "" : ",") + f.name;
            throw std::invalid_argument(
                std::format("unknown field \"{}\" in --query (valid fields: {})", name, valid));
        }
        out.push_back(name);
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return out;
}

std::string format_csv(const Report& r, const std::vector<std::string>& fields, bool header) {
    std::string out;
    if (header) {
        for (size_t i = 0; i < fields.size(); ++i) {
            std::string unit;
            for (const auto& f : csv_fields())
                if (fields[i] == f.name && *f.unit) unit = std::format(" [{}]", f.unit);
            out += (i ? ", " : "") + fields[i] + unit;
        }
        out += "\n";
    }
    for (const auto& c : r.cards) {
        for (size_t i = 0; i < fields.size(); ++i) {
            Value v = getters().at(fields[i])(c);
            out += (i ? ", " : "") + (v ? quote(*v) : std::string("N/A"));
        }
        out += "\n";
    }
    return out;
}

}  // namespace spyre_smi

#include "smi_prometheus.hpp"

#include <format>
#include <utility>
#include <vector>

namespace spyre_smi {

namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// One metric family: HELP and TYPE once, then its samples.
struct Family {
    std::string name, type, help;
    std::vector<std::pair<Labels, std::string>> samples;
    void add(Labels l, std::string v) { samples.emplace_back(std::move(l), std::move(v)); }
};

std::string value(double v) { return std::format("{}", v); }
std::string value(uint64_t v) { return std::to_string(v); }

std::string render(const std::vector<Family>& fams) {
    std::string out;
    for (const auto& f : fams) {
        if (f.samples.empty()) continue;
        out += std::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
        for (const auto& [labels, v] : f.samples) {
            out += f.name;
            if (!labels.empty()) {
                out += "{";
                for (size_t i = 0; i < labels.size(); ++i)
                    out += std::format("{}{}=\"{}\"", i ? "," : "", labels[i].first,
                                       prometheus_escape(labels[i].second));
                out += "}";
            }
            out += " " + v + "\n";
        }
    }
    return out;
}

}  // namespace

std::string prometheus_escape(const std::string& s) {
    std::string o;
    for (char ch : s) {
        if (ch == '\\')
            o += "\\\\";
        else if (ch == '"')
            o += "\\\"";
        else if (ch == '\n')
            o += "\\n";
        else
            o += ch;
    }
    return o;
}

std::string format_prometheus(const Report& r) {
    std::vector<Family> f = {
        {"spyre_up", "gauge", "1 if the card could be queried, 0 if not.", {}},
        {"spyre_info", "gauge", "Identity of the card (always 1).", {}},
        {"spyre_health_state",
         "gauge",
         "1 for the card's current health state, 0 for the others.",
         {}},
        {"spyre_temperature_celsius", "gauge", "Board temperature.", {}},
        {"spyre_power_watts", "gauge", "Board power draw.", {}},
        {"spyre_power_limit_watts", "gauge", "Board power limit.", {}},
        {"spyre_memory_total_bytes", "gauge", "Device memory.", {}},
        {"spyre_memory_used_bytes", "gauge", "Device memory in buffers of all processes.", {}},
        {"spyre_host_pinned_bytes", "gauge", "Pinned host memory of all processes.", {}},
        {"spyre_engine_busy_seconds_total",
         "counter",
         "Modeled busy time of the compute engine since power on.",
         {}},
        {"spyre_core_busy_seconds_total",
         "counter",
         "Modeled busy time per core since the card came up.",
         {}},
        {"spyre_ddr_bytes_total", "counter", "Device memory traffic of the compute cores.", {}},
        {"spyre_pcie_bytes_total", "counter", "DMA bytes between host and device.", {}},
        {"spyre_p2p_bytes_total",
         "counter",
         "Bytes this card's copies read from (read) or wrote into (write) peer cards.",
         {}},
        {"spyre_errors_total", "counter", "Failures by kind (cmd, job, launch, timeout).", {}},
        {"spyre_resets_total",
         "counter",
         "Resets by kind (ring and card: driver recovery; device: the card's own count).",
         {}},
        {"spyre_process_device_memory_bytes", "gauge", "Device memory held by a process.", {}},
        {"spyre_process_host_memory_bytes", "gauge", "Pinned host memory held by a process.", {}},
        {"spyre_process_compute_busy_seconds_total",
         "counter",
         "Modeled compute time of a process's launches.",
         {}},
    };
    auto fam = [&](const char* name) -> Family& {
        for (auto& x : f)
            if (x.name == name) return x;
        return f.front();  // unreachable: every name is in the list
    };
    for (const auto& c : r.cards) {
        const std::string card = std::to_string(c.index);
        fam("spyre_up").add({{"card", card}}, c.status && c.counters ? "1" : "0");
        if (c.identity) {
            const auto& id = *c.identity;
            fam("spyre_info")
                .add({{"card", card},
                      {"name", id.name},
                      {"pci_address", id.pci_address},
                      {"serial", id.serial},
                      {"backend", id.backend},
                      {"driver_version", id.driver_version},
                      {"hw_version", id.hw_version},
                      {"library_version", id.library_version}},
                     "1");
        }
        if (c.status) {
            const auto& s = *c.status;
            for (auto h : {SPYRE_HEALTH_OK, SPYRE_HEALTH_RESETTING, SPYRE_HEALTH_WEDGED,
                           SPYRE_HEALTH_UNKNOWN})
                fam("spyre_health_state")
                    .add({{"card", card}, {"state", spyre_health_string(h)}},
                         s.health == static_cast<uint32_t>(h) ? "1" : "0");
            if (s.valid & SPYRE_MGMT_HAS_TEMPERATURE)
                fam("spyre_temperature_celsius")
                    .add({{"card", card}}, value(s.temperature_mc / 1000.0));
            if (s.valid & SPYRE_MGMT_HAS_POWER) {
                fam("spyre_power_watts").add({{"card", card}}, value(s.power_mw / 1000.0));
                fam("spyre_power_limit_watts")
                    .add({{"card", card}}, value(s.power_cap_mw / 1000.0));
            }
            fam("spyre_memory_total_bytes").add({{"card", card}}, value(s.mem_total_bytes));
            fam("spyre_memory_used_bytes").add({{"card", card}}, value(s.mem_used_bytes));
            fam("spyre_host_pinned_bytes").add({{"card", card}}, value(s.host_pinned_bytes));
        }
        if (c.counters) {
            const auto& k = *c.counters;
            if (k.valid & SPYRE_MGMT_HAS_ENGINE_BUSY)
                fam("spyre_engine_busy_seconds_total")
                    .add({{"card", card}}, value(k.engine_busy_ns / 1e9));
            if (k.valid & SPYRE_MGMT_HAS_CORE_BUSY)
                for (uint32_t i = 0; i < k.num_cores; ++i)
                    fam("spyre_core_busy_seconds_total")
                        .add({{"card", card}, {"core", std::to_string(i)}},
                             value(k.core_busy_ns[i] / 1e9));
            if (k.valid & SPYRE_MGMT_HAS_DDR_BYTES) {
                fam("spyre_ddr_bytes_total")
                    .add({{"card", card}, {"direction", "read"}}, value(k.ddr_read_bytes));
                fam("spyre_ddr_bytes_total")
                    .add({{"card", card}, {"direction", "write"}}, value(k.ddr_write_bytes));
            }
            if (k.valid & SPYRE_MGMT_HAS_PCIE_BYTES) {
                fam("spyre_pcie_bytes_total")
                    .add({{"card", card}, {"direction", "h2d"}}, value(k.pcie_h2d_bytes));
                fam("spyre_pcie_bytes_total")
                    .add({{"card", card}, {"direction", "d2h"}}, value(k.pcie_d2h_bytes));
            }
            if (k.valid & SPYRE_MGMT_HAS_P2P_BYTES) {
                fam("spyre_p2p_bytes_total")
                    .add({{"card", card}, {"direction", "read"}}, value(k.p2p_read_bytes));
                fam("spyre_p2p_bytes_total")
                    .add({{"card", card}, {"direction", "write"}}, value(k.p2p_write_bytes));
            }
            if (k.valid & SPYRE_MGMT_HAS_ERRORS) {
                fam("spyre_errors_total")
                    .add({{"card", card}, {"kind", "cmd"}}, value(k.cmd_errors));
                fam("spyre_errors_total")
                    .add({{"card", card}, {"kind", "job"}}, value(k.jobs_failed));
                fam("spyre_errors_total")
                    .add({{"card", card}, {"kind", "launch"}}, value(k.launch_errors));
                fam("spyre_resets_total")
                    .add({{"card", card}, {"kind", "device"}}, value(k.device_resets));
            }
            if (k.valid & SPYRE_MGMT_HAS_RECOVERY) {
                fam("spyre_errors_total")
                    .add({{"card", card}, {"kind", "timeout"}}, value(k.jobs_timed_out));
                fam("spyre_resets_total")
                    .add({{"card", card}, {"kind", "ring"}}, value(k.ring_resets));
                fam("spyre_resets_total")
                    .add({{"card", card}, {"kind", "card"}}, value(k.card_resets));
            }
        }
        for (const auto& p : c.processes) {
            Labels l = {{"card", card}, {"pid", std::to_string(p.pid)}, {"command", p.command}};
            fam("spyre_process_device_memory_bytes").add(l, value(p.device_memory_bytes));
            fam("spyre_process_host_memory_bytes").add(l, value(p.host_memory_bytes));
            if (p.valid & SPYRE_MGMT_HAS_ENGINE_BUSY)
                fam("spyre_process_compute_busy_seconds_total")
                    .add(l, value(p.compute_busy_ns / 1e9));
        }
    }
    return render(f);
}

}  // namespace spyre_smi

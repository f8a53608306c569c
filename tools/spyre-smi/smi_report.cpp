#include "smi_report.hpp"

#include <algorithm>
#include <format>
#include <sstream>

#include "smi_table.hpp"

namespace spyre_smi {

namespace {

std::string hw_version(const spyre_device_info& i) {
    return std::format("{}.{}", i.hw_version_major, i.hw_version_minor);
}

const spyre_device_info* first_info(const Report& r) {
    for (const auto& c : r.cards)
        if (c.info) return &*c.info;
    return nullptr;
}

bool has(const std::optional<spyre_mgmt_status>& s, uint32_t bit) { return s && (s->valid & bit); }

std::string temp_text(const CardReport& c) {
    if (!has(c.status, SPYRE_MGMT_HAS_TEMPERATURE)) return "N/A";
    return std::format("{} C", c.status->temperature_mc / 1000);
}

std::string power_text(const CardReport& c) {
    if (!has(c.status, SPYRE_MGMT_HAS_POWER)) return "N/A";
    return std::format("{:.1f} W / {:.0f} W", c.status->power_mw / 1000.0,
                       c.status->power_cap_mw / 1000.0);
}

std::string memory_text(const CardReport& c) {
    if (!c.status) return "N/A";
    return std::format("{} / {}", mib(c.status->mem_used_bytes), mib(c.status->mem_total_bytes));
}

std::string health_text(const CardReport& c) {
    if (!c.status) return "N/A";
    return spyre_health_string(static_cast<spyre_health>(c.status->health));
}

std::string util_text(const CardReport& c) {
    if (!c.util || !(c.util->valid & SPYRE_MGMT_HAS_ENGINE_BUSY)) return "N/A";
    return std::format("{:.2f} %", c.util->engine_percent);
}

}  // namespace

std::string link_type(const spyre_mgmt_peer& p) {
    if (p.distance == 0) return "N/A";
    if (!(p.flags & SPYRE_MGMT_PEER_SHARED_BRIDGE)) return "PHB";
    // One switch is three bridges on the path: the card's downstream port, the switch's
    // upstream port, the peer's downstream port.
    return p.distance <= 3 ? "PIX" : "PXB";
}

std::string mib(uint64_t bytes) { return std::format("{} MiB", bytes >> 20); }

std::string rate_text(double bytes_per_s) {
    if (bytes_per_s >= 1e9) return std::format("{:.1f} GB/s", bytes_per_s / 1e9);
    if (bytes_per_s >= 1e6) return std::format("{:.1f} MB/s", bytes_per_s / 1e6);
    if (bytes_per_s >= 1e3) return std::format("{:.1f} kB/s", bytes_per_s / 1e3);
    return std::format("{:.0f} B/s", bytes_per_s);
}

std::string format_table(const Report& r) {
    std::string out;
    const spyre_device_info* fi = first_info(r);
    out += std::format("spyre-smi    Driver: {}    libspyre: {}    Hardware: {}\n",
                       fi ? std::format("{} {}", fi->driver_name, fi->driver_version) : "N/A",
                       r.libspyre_version, fi ? hw_version(*fi) : "N/A");
    std::vector<std::vector<std::string>> rows;
    for (const auto& c : r.cards) {
        if (!c.info) {
            rows.push_back({std::to_string(c.index), std::format("spyre{}", c.index), "ERR", "ERR",
                            "ERR", "ERR", "ERR", "ERR"});
            continue;
        }
        rows.push_back({std::to_string(c.index), c.info->name, c.info->pci_address, health_text(c),
                        util_text(c), memory_text(c), temp_text(c), power_text(c)});
    }
    using enum Align;
    out += render_table({"Idx", "Name", "PCI address", "Health", "Util", "Memory used / total",
                         "Temp", "Power / Cap"},
                        {kRight, kLeft, kLeft, kLeft, kRight, kRight, kRight, kRight}, rows);
    for (const auto& c : r.cards)
        if (!c.error.empty()) out += std::format("spyre{}: {}\n", c.index, c.error);

    std::vector<std::vector<std::string>> procs;
    for (const auto& c : r.cards)
        for (const auto& p : c.processes)
            procs.push_back({std::to_string(c.index), std::to_string(p.pid), p.command,
                             mib(p.device_memory_bytes), mib(p.host_memory_bytes),
                             (p.valid & SPYRE_MGMT_HAS_ENGINE_BUSY)
                                 ? duration_text(p.compute_busy_ns)
                                 : "N/A"});
    out += "Processes:\n";
    if (procs.empty()) {
        out += "  No processes are using the cards.\n";
        return out;
    }
    out += render_table({"Card", "PID", "Command", "Device memory", "Host memory", "Compute time"},
                        {kRight, kRight, kLeft, kRight, kRight, kRight}, procs);
    return out;
}

std::string format_list(const Report& r) {
    std::string out;
    for (const auto& c : r.cards) {
        if (!c.info) {
            out += std::format("Card {}: spyre{} (error: {})\n", c.index, c.index, c.error);
            continue;
        }
        const auto& i = *c.info;
        out += std::format("Card {}: {} (PCI {}, {}, hardware {}, {})\n", c.index, i.name,
                           i.pci_address, i.accel_path, hw_version(i), mib(i.devmem_total));
    }
    return out;
}

std::string format_query(const Report& r) {
    std::ostringstream o;
    auto kv = [&](int indent, const std::string& k, const std::string& v) {
        size_t col = 30 - static_cast<size_t>(indent);
        o << std::string(indent, ' ') << k << std::string(k.size() < col ? col - k.size() : 1, ' ')
          << ": " << v << "\n";
    };
    const spyre_device_info* fi = first_info(r);
    o << "==============================  spyre-smi query  ==============================\n";
    kv(0, "libspyre version", r.libspyre_version);
    kv(0, "Driver", fi ? std::format("{} {}", fi->driver_name, fi->driver_version) : "N/A");
    kv(0, "Attached cards",
       std::to_string(r.attached ? r.attached : static_cast<int>(r.cards.size())));
    for (const auto& c : r.cards) {
        o << "\n";
        if (!c.info) {
            o << std::format("Card {}: spyre{}\n", c.index, c.index);
            kv(4, "Error", c.error);
            continue;
        }
        const auto& i = *c.info;
        o << std::format("Card {}: {}\n", c.index, i.name);
        kv(4, "PCI address", i.pci_address);
        kv(4, "PCI ID",
           std::format("{:04x}:{:04x} rev {:02x}", i.pci_vendor, i.pci_device, i.pci_revision));
        kv(4, "Accel node", i.accel_path);
        kv(4, "Driver",
           std::format("{} {}{}", i.driver_name, i.driver_version,
                       (i.driver_date[0] && std::string_view(i.driver_date) != "0")
                           ? std::format(" ({})", i.driver_date)
                           : ""));
        kv(4, "Hardware version", hw_version(i));
        if (c.identity) {
            const auto& id = *c.identity;
            kv(4, "Serial number", (id.valid & SPYRE_MGMT_HAS_SERIAL) ? id.serial : "N/A");
            kv(4, "Backend", id.backend);
            kv(4, "PCIe link",
               (id.valid & SPYRE_MGMT_HAS_PCIE_LINK)
                   ? std::format("{} x{}", id.pcie_link_speed, id.pcie_link_width)
                   : "N/A");
            kv(4, "NUMA node", id.numa_node >= 0 ? std::to_string(id.numa_node) : "N/A");
        }
        kv(4, "Health", health_text(c));
        kv(4, "Cores", std::to_string(i.num_cores));
        kv(4, "Command rings", std::to_string(i.num_rings));
        kv(4, "Scratchpad (LX) per core", std::format("{} KiB", i.lx_bytes >> 10));
        kv(4, "Stick size", std::format("{} B", i.stick_bytes));
        kv(4, "Clock", std::format("{} MHz", i.clock_mhz));
        kv(4, "Largest buffer", mib(i.max_buffer_bytes));
        o << "    Memory\n";
        if (c.mem) {
            kv(8, "Total", mib(c.mem->devmem_total));
            kv(8, "Used", mib(c.mem->devmem_used));
            kv(8, "Free",
               mib(c.mem->devmem_total - std::min(c.mem->devmem_used, c.mem->devmem_total)));
            kv(8, "Largest free block", mib(c.mem->devmem_largest_free));
            kv(8, "Pinned host memory", mib(c.mem->host_buffer_bytes));
        } else {
            kv(8, "Status", "N/A");
        }
        o << "    Sensors\n";
        kv(8, "Temperature",
           has(c.status, SPYRE_MGMT_HAS_TEMPERATURE)
               ? std::format("{:.1f} C", c.status->temperature_mc / 1000.0)
               : "N/A");
        kv(8, "Power draw",
           has(c.status, SPYRE_MGMT_HAS_POWER)
               ? std::format("{:.2f} W", c.status->power_mw / 1000.0)
               : "N/A");
        kv(8, "Power cap",
           has(c.status, SPYRE_MGMT_HAS_POWER)
               ? std::format("{:.2f} W", c.status->power_cap_mw / 1000.0)
               : "N/A");
        o << "    Utilization\n";
        if (c.util) {
            const auto& u = *c.util;
            kv(8, "Interval", std::format("{:.3f} s", u.interval_ns / 1e9));
            kv(8, "Compute engine", util_text(c));
            if (u.valid & SPYRE_MGMT_HAS_CORE_BUSY) {
                // Eight cores a line, so that 32 cores stay readable.
                for (uint32_t first = 0; first < u.num_cores; first += 8) {
                    const uint32_t last = std::min(first + 8, u.num_cores) - 1;
                    std::string cores;
                    for (uint32_t k = first; k <= last; ++k)
                        cores += std::format("{}{:.2f}", k > first ? " " : "", u.core_percent[k]);
                    kv(8, std::format("Cores {}-{} (%)", first, last), cores);
                }
            } else {
                kv(8, "Per core (%)", "N/A");
            }
            auto rate_or_na = [&](uint32_t bit, double v) {
                return (u.valid & bit) ? rate_text(v) : std::string("N/A");
            };
            kv(8, "DDR read", rate_or_na(SPYRE_MGMT_HAS_DDR_BYTES, u.ddr_read_bytes_per_s));
            kv(8, "DDR write", rate_or_na(SPYRE_MGMT_HAS_DDR_BYTES, u.ddr_write_bytes_per_s));
            kv(8, "PCIe host->device",
               rate_or_na(SPYRE_MGMT_HAS_PCIE_BYTES, u.pcie_h2d_bytes_per_s));
            kv(8, "PCIe device->host",
               rate_or_na(SPYRE_MGMT_HAS_PCIE_BYTES, u.pcie_d2h_bytes_per_s));
            kv(8, "P2P read from peers",
               rate_or_na(SPYRE_MGMT_HAS_P2P_BYTES, u.p2p_read_bytes_per_s));
            kv(8, "P2P written to peers",
               rate_or_na(SPYRE_MGMT_HAS_P2P_BYTES, u.p2p_write_bytes_per_s));
        } else {
            kv(8, "Status", "N/A");
        }
        o << "    Errors and resets\n";
        if (c.counters && (c.counters->valid & SPYRE_MGMT_HAS_ERRORS)) {
            const auto& k = *c.counters;
            kv(8, "Command errors", std::to_string(k.cmd_errors));
            kv(8, "Jobs failed", std::to_string(k.jobs_failed));
            kv(8, "Launch errors", std::to_string(k.launch_errors));
            kv(8, "Resets (card's count)", std::to_string(k.device_resets));
            bool rec = k.valid & SPYRE_MGMT_HAS_RECOVERY;
            kv(8, "Jobs timed out", rec ? std::to_string(k.jobs_timed_out) : "N/A");
            kv(8, "Ring resets (driver)", rec ? std::to_string(k.ring_resets) : "N/A");
            kv(8, "Full resets (driver)", rec ? std::to_string(k.card_resets) : "N/A");
        } else {
            kv(8, "Status", "N/A");
        }
        o << "    Telemetry\n";
        if (c.telemetry) {
            const auto& t = *c.telemetry;
            kv(8, "Jobs submitted", std::to_string(t.jobs_submitted));
            kv(8, "Jobs completed", std::to_string(t.jobs_completed));
            kv(8, "Commands completed", std::to_string(t.cmds_completed));
            kv(8, "DMA host->device", std::format("{} B", t.h2d_bytes));
            kv(8, "DMA device->host", std::format("{} B", t.d2h_bytes));
            kv(8, "DMA device->device", std::format("{} B", t.d2d_bytes));
            const bool p2p = c.info && (c.info->caps & SPYRE_DEVICE_CAP_P2P);
            kv(8, "P2P read from peers", p2p ? std::format("{} B", t.p2p_read_bytes) : "N/A");
            kv(8, "P2P written to peers", p2p ? std::format("{} B", t.p2p_write_bytes) : "N/A");
            kv(8, "Launches", std::to_string(t.launches));
            kv(8, "Engine cycles", std::to_string(t.engine_cycles));
            kv(8, "Engine MACs", std::to_string(t.engine_macs));
            kv(8, "Engine DDR read", std::format("{} B", t.engine_ddr_read_bytes));
            kv(8, "Engine DDR written", std::format("{} B", t.engine_ddr_write_bytes));
        } else {
            kv(8, "Status", "N/A");
        }
        o << "    Peers\n";
        if (c.peers.empty()) kv(8, "Status", "none");
        for (const auto& p : c.peers)
            kv(8, std::format("spyre{}", p.index),
               std::format("{}, {}{}", (p.flags & SPYRE_MGMT_PEER_P2P) ? "P2P" : "through host",
                           link_type(p),
                           p.distance ? std::format(" ({} PCI bridge{})", p.distance,
                                                    p.distance == 1 ? "" : "s")
                                      : ""));
        o << "    Processes\n";
        if (c.processes.empty()) kv(8, "Status", "none");
        for (const auto& p : c.processes)
            kv(8, std::format("{} ({})", p.pid, p.command),
               std::format("device {}, host {}, compute {}", mib(p.device_memory_bytes),
                           mib(p.host_memory_bytes),
                           (p.valid & SPYRE_MGMT_HAS_ENGINE_BUSY) ? duration_text(p.compute_busy_ns)
                                                                  : "N/A"));
        if (!c.error.empty()) kv(4, "Note", c.error);
    }
    return o.str();
}

nlohmann::json to_json(const Report& r) {
    using nlohmann::json;
    auto opt = [](bool ok, auto v) { return ok ? json(v) : json(); };
    json j;
    j["schema_version"] = kJsonSchemaVersion;
    j["libspyre_version"] = r.libspyre_version;
    const spyre_device_info* fi = first_info(r);
    j["driver"] = fi ? json{{"name", fi->driver_name}, {"version", fi->driver_version}} : json();
    j["devices"] = json::array();
    for (const auto& c : r.cards) {
        json d;
        d["index"] = c.index;
        d["error"] = c.error.empty() ? json() : json(c.error);
        if (c.info) {
            const auto& i = *c.info;
            d["name"] = i.name;
            d["pci_address"] = i.pci_address;
            d["pci_id"] = std::format("{:04x}:{:04x}", i.pci_vendor, i.pci_device);
            d["pci_revision"] = i.pci_revision;
            d["accel_path"] = i.accel_path;
            d["driver_version"] = i.driver_version;
            d["hw_version"] = hw_version(i);
            d["num_cores"] = i.num_cores;
            d["num_rings"] = i.num_rings;
            d["lx_bytes"] = i.lx_bytes;
            d["stick_bytes"] = i.stick_bytes;
            d["clock_mhz"] = i.clock_mhz;
            d["max_buffer_bytes"] = i.max_buffer_bytes;
            d["caps"] = i.caps;
        }
        if (c.identity) {
            const auto& id = *c.identity;
            d["serial"] = opt(id.valid & SPYRE_MGMT_HAS_SERIAL, id.serial);
            d["backend"] = id.backend;
            d["pcie_link"] =
                (id.valid & SPYRE_MGMT_HAS_PCIE_LINK)
                    ? json{{"speed", id.pcie_link_speed}, {"width", id.pcie_link_width}}
                    : json();
            d["numa_node"] = opt(id.numa_node >= 0, id.numa_node);
        }
        d["health"] = c.status ? json(health_text(c)) : json();
        if (c.status) {
            const auto& s = *c.status;
            d["sensors"] = {
                {"temperature_c",
                 opt(s.valid & SPYRE_MGMT_HAS_TEMPERATURE, s.temperature_mc / 1000.0)},
                {"power_w", opt(s.valid & SPYRE_MGMT_HAS_POWER, s.power_mw / 1000.0)},
                {"power_cap_w", opt(s.valid & SPYRE_MGMT_HAS_POWER, s.power_cap_mw / 1000.0)}};
        } else {
            d["sensors"] = json();
        }
        if (c.mem) {
            const auto& m = *c.mem;
            d["memory"] = {{"total_bytes", m.devmem_total},
                           {"used_bytes", m.devmem_used},
                           {"free_bytes", m.devmem_total - std::min(m.devmem_used, m.devmem_total)},
                           {"largest_free_bytes", m.devmem_largest_free},
                           {"host_pinned_bytes", m.host_buffer_bytes}};
        } else {
            d["memory"] = json();
        }
        if (c.util) {
            const auto& u = *c.util;
            json cores = json::array();
            for (uint32_t k = 0; k < u.num_cores; ++k) cores.push_back(u.core_percent[k]);
            const bool ddr = u.valid & SPYRE_MGMT_HAS_DDR_BYTES;
            const bool pcie = u.valid & SPYRE_MGMT_HAS_PCIE_BYTES;
            d["utilization"] = {
                {"interval_s", u.interval_ns / 1e9},
                {"engine_percent", opt(u.valid & SPYRE_MGMT_HAS_ENGINE_BUSY, u.engine_percent)},
                {"core_percent", opt(u.valid & SPYRE_MGMT_HAS_CORE_BUSY, cores)},
                {"ddr_read_bytes_per_s", opt(ddr, u.ddr_read_bytes_per_s)},
                {"ddr_write_bytes_per_s", opt(ddr, u.ddr_write_bytes_per_s)},
                {"pcie_h2d_bytes_per_s", opt(pcie, u.pcie_h2d_bytes_per_s)},
                {"pcie_d2h_bytes_per_s", opt(pcie, u.pcie_d2h_bytes_per_s)},
                {"p2p_read_bytes_per_s",
                 opt(u.valid & SPYRE_MGMT_HAS_P2P_BYTES, u.p2p_read_bytes_per_s)},
                {"p2p_write_bytes_per_s",
                 opt(u.valid & SPYRE_MGMT_HAS_P2P_BYTES, u.p2p_write_bytes_per_s)}};
        } else {
            d["utilization"] = json();
        }
        if (c.counters) {
            const auto& k = *c.counters;
            const bool err = k.valid & SPYRE_MGMT_HAS_ERRORS;
            const bool rec = k.valid & SPYRE_MGMT_HAS_RECOVERY;
            d["errors"] = {{"cmd_errors", opt(err, k.cmd_errors)},
                           {"jobs_failed", opt(err, k.jobs_failed)},
                           {"launch_errors", opt(err, k.launch_errors)},
                           {"jobs_timed_out", opt(rec, k.jobs_timed_out)}};
            d["resets"] = {{"device", opt(err, k.device_resets)},
                           {"ring", opt(rec, k.ring_resets)},
                           {"card", opt(rec, k.card_resets)}};
        } else {
            d["errors"] = json();
            d["resets"] = json();
        }
        if (c.telemetry) {
            const auto& t = *c.telemetry;
            d["telemetry"] = {{"jobs_submitted", t.jobs_submitted},
                              {"jobs_completed", t.jobs_completed},
                              {"jobs_failed", t.jobs_failed},
                              {"cmds_completed", t.cmds_completed},
                              {"cmd_errors", t.cmd_errors},
                              {"resets", t.resets},
                              {"h2d_bytes", t.h2d_bytes},
                              {"d2h_bytes", t.d2h_bytes},
                              {"d2d_bytes", t.d2d_bytes},
                              {"launches", t.launches},
                              {"launch_errors", t.launch_errors},
                              {"engine_cycles", t.engine_cycles},
                              {"engine_instructions", t.engine_instructions},
                              {"engine_macs", t.engine_macs},
                              {"engine_ddr_read_bytes", t.engine_ddr_read_bytes},
                              {"engine_ddr_write_bytes", t.engine_ddr_write_bytes},
                              {"engine_ring_bytes", t.engine_ring_bytes},
                              {"p2p_read_bytes", t.p2p_read_bytes},
                              {"p2p_write_bytes", t.p2p_write_bytes}};
        } else {
            d["telemetry"] = json();
        }
        d["processes"] = json::array();
        for (const auto& p : c.processes)
            d["processes"].push_back(
                {{"pid", p.pid},
                 {"command", p.command},
                 {"device_memory_bytes", p.device_memory_bytes},
                 {"host_memory_bytes", p.host_memory_bytes},
                 {"compute_busy_ns", opt(p.valid & SPYRE_MGMT_HAS_ENGINE_BUSY, p.compute_busy_ns)},
                 {"dma_busy_ns", opt(p.valid & SPYRE_MGMT_HAS_DMA_BUSY, p.dma_busy_ns)}});
        d["peers"] = json::array();
        for (const auto& p : c.peers)
            d["peers"].push_back({{"index", p.index},
                                  {"p2p", (p.flags & SPYRE_MGMT_PEER_P2P) != 0},
                                  {"link", link_type(p)},
                                  {"pci_bridges", opt(p.distance != 0, p.distance)}});
        j["devices"].push_back(std::move(d));
    }
    return j;
}

}  // namespace spyre_smi

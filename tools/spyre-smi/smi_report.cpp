#include "smi_report.hpp"

#include <algorithm>
#include <format>
#include <sstream>

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

std::string temp_text(const CardReport& c) {
    if (!c.telemetry) return "N/A";
    return std::format("{} C", c.telemetry->temp_mc / 1000);
}

std::string power_text(const CardReport& c) {
    if (!c.telemetry) return "N/A";
    return std::format("{:.1f} W / {:.0f} W", c.telemetry->power_mw / 1000.0,
                       c.telemetry->power_cap_mw / 1000.0);
}

std::string memory_text(const CardReport& c) {
    if (!c.mem) return "N/A";
    return std::format("{} / {}", mib(c.mem->devmem_used), mib(c.mem->devmem_total));
}

enum class Align { kLeft, kRight };

// A boxed table whose column widths follow the content.
std::string render_table(const std::vector<std::string>& head, const std::vector<Align>& align,
                         const std::vector<std::vector<std::string>>& rows) {
    std::vector<size_t> w(head.size());
    for (size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
    for (const auto& row : rows)
        for (size_t i = 0; i < row.size() && i < w.size(); ++i)
            w[i] = std::max(w[i], row[i].size());
    std::string rule = "+";
    for (size_t x : w) rule += std::string(x + 2, '-') + "+";
    rule += "\n";
    auto line = [&](const std::vector<std::string>& cells) {
        std::string s = "|";
        for (size_t i = 0; i < w.size(); ++i) {
            const std::string& cell = i < cells.size() ? cells[i] : std::string();
            std::string pad(w[i] - cell.size(), ' ');
            s += " " + (align[i] == Align::kRight ? pad + cell : cell + pad) + " |";
        }
        return s + "\n";
    };
    std::string out = rule + line(head) + rule;
    for (const auto& row : rows) out += line(row);
    return out + rule;
}

}  // namespace

std::string mib(uint64_t bytes) { return std::format("{} MiB", bytes >> 20); }

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
                            "ERR", "ERR"});
            continue;
        }
        rows.push_back({std::to_string(c.index), c.info->name, c.info->pci_address, memory_text(c),
                        temp_text(c), power_text(c)});
    }
    out += render_table(
        {"Idx", "Name", "PCI address", "Memory used / total", "Temp", "Power / Cap"},
        {Align::kRight, Align::kLeft, Align::kLeft, Align::kRight, Align::kRight, Align::kRight},
        rows);
    for (const auto& c : r.cards)
        if (!c.error.empty()) out += std::format("spyre{}: {}\n", c.index, c.error);
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
        o << "    Telemetry\n";
        if (c.telemetry) {
            const auto& t = *c.telemetry;
            kv(8, "Temperature", std::format("{:.1f} C", t.temp_mc / 1000.0));
            kv(8, "Power draw", std::format("{:.2f} W", t.power_mw / 1000.0));
            kv(8, "Power cap", std::format("{:.2f} W", t.power_cap_mw / 1000.0));
            kv(8, "Jobs submitted", std::to_string(t.jobs_submitted));
            kv(8, "Jobs completed", std::to_string(t.jobs_completed));
            kv(8, "Jobs failed", std::to_string(t.jobs_failed));
            kv(8, "Commands completed", std::to_string(t.cmds_completed));
            kv(8, "Command errors", std::to_string(t.cmd_errors));
            kv(8, "Resets", std::to_string(t.resets));
            kv(8, "DMA host->device", std::format("{} B", t.h2d_bytes));
            kv(8, "DMA device->host", std::format("{} B", t.d2h_bytes));
            kv(8, "DMA device->device", std::format("{} B", t.d2d_bytes));
            kv(8, "Launches", std::to_string(t.launches));
            kv(8, "Launch errors", std::to_string(t.launch_errors));
            kv(8, "Engine cycles", std::to_string(t.engine_cycles));
            kv(8, "Engine MACs", std::to_string(t.engine_macs));
            kv(8, "Engine DDR read", std::format("{} B", t.engine_ddr_read_bytes));
            kv(8, "Engine DDR written", std::format("{} B", t.engine_ddr_write_bytes));
        } else {
            kv(8, "Status", "N/A");
        }
        if (!c.error.empty()) kv(4, "Note", c.error);
    }
    return o.str();
}

nlohmann::json to_json(const Report& r) {
    using nlohmann::json;
    json j;
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
        if (c.telemetry) {
            const auto& t = *c.telemetry;
            d["telemetry"] = {{"temperature_c", t.temp_mc / 1000.0},
                              {"power_w", t.power_mw / 1000.0},
                              {"power_cap_w", t.power_cap_mw / 1000.0},
                              {"jobs_submitted", t.jobs_submitted},
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
                              {"engine_ring_bytes", t.engine_ring_bytes}};
        } else {
            d["telemetry"] = json();
        }
        j["devices"].push_back(std::move(d));
    }
    return j;
}

}  // namespace spyre_smi

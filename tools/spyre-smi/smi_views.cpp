#include "smi_views.hpp"

#include <algorithm>
#include <format>
#include <vector>

#include "smi_table.hpp"

namespace spyre_smi {

namespace {

std::string fixed(bool ok, double v) { return ok ? std::format("{:.2f}", v) : "-"; }

// Cores with modeled busy time in the interval.
std::string busy_cores(const spyre_mgmt_utilization& u) {
    if (!(u.valid & SPYRE_MGMT_HAS_CORE_BUSY)) return "-";
    uint32_t n = 0;
    for (uint32_t k = 0; k < u.num_cores; ++k) n += u.core_percent[k] > 0;
    return std::to_string(n);
}

}  // namespace

std::string dmon_header() {
    std::string h = std::format(
        "# {:>3} {:<9} {:>7} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} {:>5}\n"
        "# {:>3} {:<9} {:>7} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} {:>5}\n",
        "idx", "health", "util", "cores", "mem", "ddr_rd", "ddr_wr", "h2d", "d2h", "temp", "power",
        "procs", "", "", "%", "busy", "MiB", "MB/s", "MB/s", "MB/s", "MB/s", "C", "W", "");
    // The units line has no unit for the last column: no trailing blanks.
    while (h.size() > 1 && h[h.size() - 2] == ' ') h.erase(h.size() - 2, 1);
    return h;
}

std::string dmon_lines(const Report& r) {
    std::string out;
    for (const auto& c : r.cards) {
        if (!c.status) {
            out += std::format("  {:>3} {}\n", c.index, c.error.empty() ? "N/A" : c.error);
            continue;
        }
        const auto& s = *c.status;
        const uint32_t uv = c.util ? c.util->valid : 0;
        const spyre_mgmt_utilization u = c.util ? *c.util : spyre_mgmt_utilization{};
        out += std::format(
            "  {:>3} {:<9} {:>7} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} {:>5}\n", c.index,
            spyre_health_string(static_cast<spyre_health>(s.health)),
            fixed(uv & SPYRE_MGMT_HAS_ENGINE_BUSY, u.engine_percent), busy_cores(u),
            s.mem_used_bytes >> 20,
            fixed(uv & SPYRE_MGMT_HAS_DDR_BYTES, u.ddr_read_bytes_per_s / 1e6),
            fixed(uv & SPYRE_MGMT_HAS_DDR_BYTES, u.ddr_write_bytes_per_s / 1e6),
            fixed(uv & SPYRE_MGMT_HAS_PCIE_BYTES, u.pcie_h2d_bytes_per_s / 1e6),
            fixed(uv & SPYRE_MGMT_HAS_PCIE_BYTES, u.pcie_d2h_bytes_per_s / 1e6),
            (s.valid & SPYRE_MGMT_HAS_TEMPERATURE) ? std::to_string(s.temperature_mc / 1000) : "-",
            (s.valid & SPYRE_MGMT_HAS_POWER) ? std::format("{:.1f}", s.power_mw / 1000.0) : "-",
            c.processes.size());
    }
    return out;
}

std::string format_topo(const Report& r) {
    std::vector<std::string> head = {""};
    for (const auto& c : r.cards) head.push_back(std::format("spyre{}", c.index));
    head.insert(head.end(), {"PCI address", "PCIe link", "NUMA node"});
    std::vector<Align> align(head.size(), Align::kLeft);
    std::vector<std::vector<std::string>> rows;
    for (const auto& a : r.cards) {
        std::vector<std::string> row = {std::format("spyre{}", a.index)};
        for (const auto& b : r.cards) {
            if (a.index == b.index) {
                row.push_back("X");
                continue;
            }
            auto p = std::find_if(a.peers.begin(), a.peers.end(),
                                  [&](const spyre_mgmt_peer& q) { return q.index == b.index; });
            if (p == a.peers.end()) {
                row.push_back("N/A");
                continue;
            }
            row.push_back(std::format("{} {}", (p->flags & SPYRE_MGMT_PEER_P2P) ? "P2P" : "HOST",
                                      link_type(*p)));
        }
        const auto* id = a.identity ? &*a.identity : nullptr;
        row.push_back(id ? id->pci_address : "N/A");
        row.push_back(id && (id->valid & SPYRE_MGMT_HAS_PCIE_LINK)
                          ? std::format("{} x{}", id->pcie_link_speed, id->pcie_link_width)
                          : "N/A");
        row.push_back(id && id->numa_node >= 0 ? std::to_string(id->numa_node) : "N/A");
        rows.push_back(std::move(row));
    }
    return render_table(head, align, rows) +
           "Legend:\n"
           "  X     the card itself\n"
           "  P2P   copies between the two cards go card to card (hw 1.6 peer-to-peer DMA\n"
           "        through the driver's dma-bufs): spyre_memcpy_peer and the collectives\n"
           "        whose transport is p2p; spyre_memcpy_dtod goes through host memory\n"
           "  HOST  copies between the two cards go through host memory (a card without\n"
           "        peer-to-peer DMA: older than hw 1.6, or p2p off)\n"
           "  PIX   the cards sit below one PCIe switch (or bridge): no root complex\n"
           "  PXB   the path crosses several switches below a shared one\n"
           "  PHB   the path crosses the root complex (each card on a root port of its own)\n"
           "  N/A   the path is not known (the simulator: one modeled peer link per pair)\n";
}

}  // namespace spyre_smi

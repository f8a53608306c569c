// spyre-smi rendering: table, list, query report, JSON, CSV, dmon, topo and the Prometheus
// exposition, from a synthetic report.
#include "smi_report.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "smi_csv.hpp"
#include "smi_prometheus.hpp"
#include "smi_views.hpp"

namespace {

using spyre_smi::CardReport;
using spyre_smi::Report;

CardReport card(int index, const char* pci) {
    CardReport c;
    c.index = index;
    spyre_device_info i{};
    i.index = index;
    snprintf(i.name, sizeof(i.name), "spyre%d", index);
    snprintf(i.accel_path, sizeof(i.accel_path), "/dev/accel/accel%d", index);
    snprintf(i.pci_address, sizeof(i.pci_address), "%s", pci);
    snprintf(i.driver_name, sizeof(i.driver_name), "spyre");
    snprintf(i.driver_version, sizeof(i.driver_version), "1.0.0");
    i.pci_vendor = 0x1234;
    i.pci_device = 0x5350;
    i.hw_version_major = 1;
    i.num_cores = 32;
    i.num_rings = 4;
    i.lx_bytes = 2 << 20;
    i.stick_bytes = 128;
    i.clock_mhz = 1500;
    i.devmem_total = 1ull << 30;
    c.info = i;
    spyre_mem_stats m{};
    m.devmem_total = 1ull << 30;
    m.devmem_used = 300ull << 20;
    m.devmem_largest_free = 700ull << 20;
    c.mem = m;
    spyre_telemetry t{};
    t.temp_mc = 45500;
    t.power_mw = 12300;
    t.power_cap_mw = 75000;
    t.jobs_submitted = 7;
    t.h2d_bytes = 4096;
    c.telemetry = t;
    spyre_mgmt_identity id{};
    id.size = sizeof id;
    snprintf(id.name, sizeof id.name, "spyre%d", index);
    snprintf(id.pci_address, sizeof id.pci_address, "%s", pci);
    snprintf(id.backend, sizeof id.backend, "kernel");
    snprintf(id.driver_version, sizeof id.driver_version, "1.0.0");
    snprintf(id.hw_version, sizeof id.hw_version, "1.0");
    snprintf(id.library_version, sizeof id.library_version, "0.6.0");
    snprintf(id.pcie_link_speed, sizeof id.pcie_link_speed, "2.5 GT/s");
    id.pcie_link_width = 1;
    id.valid = SPYRE_MGMT_HAS_PCIE_LINK;
    id.numa_node = -1;
    c.identity = id;
    spyre_mgmt_status s{};
    s.size = sizeof s;
    s.valid = SPYRE_MGMT_HAS_TEMPERATURE | SPYRE_MGMT_HAS_POWER;
    s.health = SPYRE_HEALTH_OK;
    s.temperature_mc = 45500;
    s.power_mw = 12300;
    s.power_cap_mw = 75000;
    s.mem_total_bytes = 1ull << 30;
    s.mem_used_bytes = 300ull << 20;
    s.mem_free_bytes = (1ull << 30) - (300ull << 20);
    c.status = s;
    spyre_mgmt_counters k{};
    k.size = sizeof k;
    k.valid = SPYRE_MGMT_HAS_ENGINE_BUSY | SPYRE_MGMT_HAS_ERRORS | SPYRE_MGMT_HAS_RECOVERY |
              SPYRE_MGMT_HAS_DDR_BYTES | SPYRE_MGMT_HAS_PCIE_BYTES;
    k.engine_busy_ns = 2500000000;
    k.cmd_errors = 3;
    k.ring_resets = 2;
    k.pcie_h2d_bytes = 4096;
    c.counters = k;
    spyre_mgmt_utilization u{};
    u.size = sizeof u;
    u.valid = SPYRE_MGMT_HAS_ENGINE_BUSY | SPYRE_MGMT_HAS_DDR_BYTES | SPYRE_MGMT_HAS_PCIE_BYTES;
    u.interval_ns = 500000000;
    u.engine_percent = 12.25;
    u.ddr_read_bytes_per_s = 2.5e6;
    c.util = u;
    return c;
}

spyre_mgmt_process process(int pid, const char* command, uint64_t device_bytes) {
    spyre_mgmt_process p{};
    p.size = sizeof p;
    p.pid = pid;
    snprintf(p.command, sizeof p.command, "%s", command);
    p.device_memory_bytes = device_bytes;
    p.valid = SPYRE_MGMT_HAS_ENGINE_BUSY;
    p.compute_busy_ns = 1700;
    return p;
}

std::vector<std::string> lines(const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

Report two_cards() {
    Report r;
    r.libspyre_version = "0.1.0";
    r.cards.push_back(card(0, "0000:00:03.0"));
    r.cards.push_back(card(1, "0000:00:04.0"));
    return r;
}

TEST(SmiTable, HeaderAndOneRowPerCard) {
    std::string t = spyre_smi::format_table(two_cards());
    auto ls = lines(t);
    ASSERT_GE(ls.size(), 7u) << t;
    EXPECT_NE(ls[0].find("Driver: spyre 1.0.0"), std::string::npos) << t;
    EXPECT_NE(ls[0].find("libspyre: 0.1.0"), std::string::npos) << t;
    EXPECT_NE(ls[0].find("Hardware: 1.0"), std::string::npos) << t;
    int rows = 0;
    size_t width = ls[1].size();
    for (size_t i = 1; i < ls.size() && ls[i] != "Processes:"; ++i) {  // the card table
        EXPECT_EQ(ls[i].size(), width) << "ragged table line: " << ls[i];
        if (ls[i].find("| spyre") != std::string::npos) ++rows;
    }
    EXPECT_EQ(rows, 2) << t;
    EXPECT_NE(t.find("0000:00:04.0"), std::string::npos);
    EXPECT_NE(t.find("300 MiB / 1024 MiB"), std::string::npos) << t;
    EXPECT_NE(t.find("45 C"), std::string::npos) << t;
    EXPECT_NE(t.find("12.3 W / 75 W"), std::string::npos) << t;
    EXPECT_NE(t.find("| ok "), std::string::npos) << t;
    EXPECT_NE(t.find("12.25 %"), std::string::npos) << t;
    EXPECT_NE(t.find("No processes are using the cards."), std::string::npos) << t;
}

TEST(SmiTable, ProcessTable) {
    Report r = two_cards();
    r.cards[1].processes.push_back(process(4242, "llama-serve", 64ull << 20));
    std::string t = spyre_smi::format_table(r);
    auto at = t.find("Processes:");
    ASSERT_NE(at, std::string::npos) << t;
    std::string procs = t.substr(at);
    EXPECT_NE(procs.find("| Card |  PID | Command     | Device memory |"), std::string::npos)
        << procs;
    EXPECT_NE(procs.find("|    1 | 4242 | llama-serve |        64 MiB |"), std::string::npos)
        << procs;
    EXPECT_NE(procs.find("1.7 us"), std::string::npos) << procs;
}

TEST(SmiTable, MissingTelemetryAndBrokenCard) {
    Report r = two_cards();
    r.cards[0].status->valid = 0;  // no sensors
    r.cards[1].info.reset();
    r.cards[1].mem.reset();
    r.cards[1].error = "spyre_device_open: permission denied";
    std::string t = spyre_smi::format_table(r);
    EXPECT_NE(t.find("N/A"), std::string::npos) << t;
    EXPECT_NE(t.find("ERR"), std::string::npos) << t;
    EXPECT_NE(t.find("spyre1: spyre_device_open: permission denied"), std::string::npos) << t;
}

TEST(SmiList, OneLinePerCard) {
    auto ls = lines(spyre_smi::format_list(two_cards()));
    ASSERT_EQ(ls.size(), 2u);
    EXPECT_EQ(ls[0],
              "Card 0: spyre0 (PCI 0000:00:03.0, /dev/accel/accel0, hardware 1.0, 1024 MiB)");
}

TEST(SmiQuery, ContainsCountersAndProperties) {
    std::string q = spyre_smi::format_query(two_cards());
    for (const char* s : {"Card 1: spyre1",
                          "Cores",
                          "32",
                          "Clock",
                          "1500 MHz",
                          "Jobs submitted",
                          "Temperature",
                          "45.5 C",
                          "Largest free block",
                          "700 MiB",
                          "DMA host->device",
                          "4096 B",
                          "1234:5350",
                          "Serial number             : N/A",
                          "PCIe link",
                          "2.5 GT/s x1",
                          "Health",
                          "Command errors",
                          "Ring resets (driver)",
                          "Per core (%)",
                          "DDR read",
                          "2.5 MB/s"})
        EXPECT_NE(q.find(s), std::string::npos) << "missing \"" << s << "\" in\n" << q;
}

TEST(SmiJson, ParsesBackWithAllFields) {
    Report r = two_cards();
    r.cards[1].telemetry.reset();
    auto text = spyre_smi::to_json(r).dump(2);
    auto j = nlohmann::json::parse(text);
    EXPECT_EQ(j["libspyre_version"], "0.1.0");
    EXPECT_EQ(j["driver"]["name"], "spyre");
    ASSERT_EQ(j["devices"].size(), 2u);
    const auto& d0 = j["devices"][0];
    EXPECT_EQ(d0["name"], "spyre0");
    EXPECT_EQ(d0["pci_address"], "0000:00:03.0");
    EXPECT_EQ(d0["memory"]["total_bytes"], 1ull << 30);
    EXPECT_EQ(d0["memory"]["free_bytes"], (1ull << 30) - (300ull << 20));
    EXPECT_DOUBLE_EQ(d0["sensors"]["temperature_c"].get<double>(), 45.5);
    EXPECT_EQ(j["schema_version"], "1.1");
    EXPECT_EQ(d0["health"], "ok");
    EXPECT_TRUE(d0["serial"].is_null());
    EXPECT_EQ(d0["pcie_link"]["width"], 1);
    EXPECT_DOUBLE_EQ(d0["utilization"]["engine_percent"].get<double>(), 12.25);
    EXPECT_TRUE(d0["utilization"]["core_percent"].is_null());  // no per-core counters
    EXPECT_EQ(d0["errors"]["cmd_errors"], 3);
    EXPECT_EQ(d0["resets"]["ring"], 2);
    EXPECT_TRUE(d0["error"].is_null());
    EXPECT_TRUE(j["devices"][1]["telemetry"].is_null());
}

TEST(SmiCsv, SelectedFieldsWithUnitsAndNotAvailable) {
    Report r = two_cards();
    r.cards[1].status->valid = 0;
    auto fields = spyre_smi::parse_csv_query("index, memory.used,temperature,serial,name");
    std::string csv = spyre_smi::format_csv(r, fields, true);
    EXPECT_EQ(csv,
              "index, memory.used [MiB], temperature [C], serial, name\n"
              "0, 300, 45.50, N/A, spyre0\n"
              "1, 300, N/A, N/A, spyre1\n");
    EXPECT_EQ(spyre_smi::format_csv(r, {"index"}, false), "0\n1\n");
    EXPECT_THROW(spyre_smi::parse_csv_query("index,bogus"), std::invalid_argument);
    EXPECT_THROW(spyre_smi::parse_csv_query(""), std::invalid_argument);
    // Every documented field renders.
    std::vector<std::string> all;
    for (const auto& f : spyre_smi::csv_fields()) all.push_back(f.name);
    EXPECT_EQ(spyre_smi::parse_csv_query("index,pcie.link,resets.device"),
              (std::vector<std::string>{"index", "pcie.link", "resets.device"}));
    EXPECT_NO_THROW(spyre_smi::format_csv(r, all, true));
}

TEST(SmiCsv, QuotesTextWithCommas) {
    Report r = two_cards();
    snprintf(r.cards[0].info->name, sizeof r.cards[0].info->name, "a,\"b\"");
    EXPECT_EQ(spyre_smi::format_csv(r, {"name"}, false), "\"a,\"\"b\"\"\"\nspyre1\n");
}

TEST(SmiDmon, OneLinePerCardUnderTheHeader) {
    Report r = two_cards();
    r.cards[1].util.reset();
    std::string h = spyre_smi::dmon_header(), l = spyre_smi::dmon_lines(r);
    auto hs = lines(h), ls = lines(l);
    ASSERT_EQ(hs.size(), 2u);
    ASSERT_EQ(ls.size(), 2u);
    EXPECT_EQ(hs[0].size(), ls[0].size()) << h << l;  // columns line up
    EXPECT_NE(ls[0].find("12.25"), std::string::npos) << l;
    EXPECT_NE(ls[0].find(" 300 "), std::string::npos) << l;
    EXPECT_NE(ls[1].find("     - "), std::string::npos) << l;  // no utilisation yet
}

// Ten cores, two of them busy: -q wraps eight cores a line, --json lists every core, the CSV
// field joins them, dmon counts the busy ones; a card without per-core counters shows none.
TEST(SmiCores, PerCoreUtilisationInEveryView) {
    Report r = two_cards();
    auto& u = *r.cards[0].util;
    u.valid |= SPYRE_MGMT_HAS_CORE_BUSY;
    u.num_cores = 10;
    u.core_percent[0] = 12.5;
    u.core_percent[9] = 3.25;
    std::string q = spyre_smi::format_query(r);
    EXPECT_NE(q.find("Cores 0-7 (%)         : 12.50 0.00 0.00 0.00 0.00 0.00 0.00 0.00\n"),
              std::string::npos)
        << q;
    EXPECT_NE(q.find("Cores 8-9 (%)         : 0.00 3.25\n"), std::string::npos) << q;
    EXPECT_NE(q.find("Per core (%)          : N/A"), std::string::npos) << q;  // card 1
    auto j = spyre_smi::to_json(r);
    ASSERT_EQ(j["devices"][0]["utilization"]["core_percent"].size(), 10u);
    EXPECT_DOUBLE_EQ(j["devices"][0]["utilization"]["core_percent"][9].get<double>(), 3.25);
    EXPECT_EQ(spyre_smi::format_csv(r, {"index", "utilization.cores"}, false),
              "0, 12.50 0.00 0.00 0.00 0.00 0.00 0.00 0.00 0.00 3.25\n1, N/A\n");
    auto ls = lines(spyre_smi::dmon_lines(r));
    ASSERT_EQ(ls.size(), 2u);
    auto column = [](const std::string& line, size_t n) {
        std::istringstream in(line);
        std::string w;
        for (size_t i = 0; i <= n; ++i) in >> w;
        return w;
    };
    EXPECT_EQ(column(ls[0], 3), "2") << ls[0];  // cores 0 and 9 busy
    EXPECT_EQ(column(ls[1], 3), "-") << ls[1];
    EXPECT_EQ(column(lines(spyre_smi::dmon_header())[0], 4), "cores");
}

spyre_mgmt_peer peer(int index, uint32_t flags, uint32_t distance) {
    spyre_mgmt_peer p{};
    p.size = sizeof p;
    p.index = index;
    p.flags = flags;
    p.distance = distance;
    return p;
}

TEST(SmiTopo, MatrixOfCards) {
    // As the VMs have them: each card on a root port of its own (3 bridges, no shared one).
    Report r = two_cards();
    r.cards[0].peers = {peer(1, SPYRE_MGMT_PEER_P2P, 3)};
    r.cards[1].peers = {peer(0, SPYRE_MGMT_PEER_P2P, 3)};
    std::string t = spyre_smi::format_topo(r);
    EXPECT_NE(t.find("| spyre0 | X       | P2P PHB | 0000:00:03.0 | 2.5 GT/s x1 | N/A       |"),
              std::string::npos)
        << t;
    EXPECT_NE(t.find("| spyre1 | P2P PHB | X       |"), std::string::npos) << t;
    // Below one switch (3 bridges: down, up, down): PIX; across two switches below a shared
    // one: PXB; without P2P: HOST.
    r.cards[0].peers = {peer(1, SPYRE_MGMT_PEER_SHARED_BRIDGE, 3)};
    r.cards[1].peers = {peer(0, SPYRE_MGMT_PEER_P2P | SPYRE_MGMT_PEER_SHARED_BRIDGE, 5)};
    t = spyre_smi::format_topo(r);
    EXPECT_NE(t.find("| spyre0 | X       | HOST PIX |"), std::string::npos) << t;
    EXPECT_NE(t.find("| spyre1 | P2P PXB | X        |"), std::string::npos) << t;
    // A peer the card did not report (it came after the query), and an unknown path.
    r.cards[0].peers.clear();
    r.cards[1].peers = {peer(0, SPYRE_MGMT_PEER_P2P, 0)};
    t = spyre_smi::format_topo(r);
    EXPECT_NE(t.find("| spyre0 | X       | N/A    |"), std::string::npos) << t;
    EXPECT_NE(t.find("| spyre1 | P2P N/A | X      |"), std::string::npos) << t;
}

TEST(SmiPeers, QueryJsonAndPrometheusShowPeersAndTheirTraffic) {
    Report r = two_cards();
    for (auto& c : r.cards) {
        c.info->caps |= SPYRE_DEVICE_CAP_P2P;
        c.telemetry = spyre_telemetry{};
        c.telemetry->p2p_read_bytes = 1234;
        c.telemetry->p2p_write_bytes = 5678;
        c.counters->valid |= SPYRE_MGMT_HAS_P2P_BYTES;
        c.counters->p2p_read_bytes = 1234;
        c.counters->p2p_write_bytes = 5678;
        c.util->valid |= SPYRE_MGMT_HAS_P2P_BYTES;
        c.util->p2p_write_bytes_per_s = 2.5e9;
    }
    r.cards[0].peers = {peer(1, SPYRE_MGMT_PEER_P2P, 3)};
    const std::string q = spyre_smi::format_query(r);
    EXPECT_NE(q.find("P2P written to peers"), std::string::npos) << q;
    EXPECT_NE(q.find("P2P written to peers  : 2.5 GB/s"), std::string::npos) << q;
    EXPECT_NE(q.find("5678 B"), std::string::npos) << q;
    EXPECT_NE(q.find("spyre1 "), std::string::npos) << q;
    EXPECT_NE(q.find("P2P, PHB (3 PCI bridges)"), std::string::npos) << q;

    const auto j = spyre_smi::to_json(r);
    EXPECT_EQ(j["schema_version"], "1.1");
    const auto& d0 = j["devices"][0];
    ASSERT_EQ(d0["peers"].size(), 1u) << d0.dump();
    EXPECT_EQ(d0["peers"][0]["index"], 1);
    EXPECT_EQ(d0["peers"][0]["p2p"], true);
    EXPECT_EQ(d0["peers"][0]["link"], "PHB");
    EXPECT_EQ(d0["peers"][0]["pci_bridges"], 3);
    EXPECT_EQ(d0["telemetry"]["p2p_write_bytes"], 5678);
    EXPECT_EQ(d0["utilization"]["p2p_write_bytes_per_s"], 2.5e9);
    EXPECT_TRUE(j["devices"][1]["peers"].empty());

    const std::string m = spyre_smi::format_prometheus(r);
    EXPECT_NE(m.find("spyre_p2p_bytes_total{card=\"1\",direction=\"write\"} 5678\n"),
              std::string::npos)
        << m;
    // A card without the counters has no sample of the family.
    r.cards[1].counters->valid &= ~SPYRE_MGMT_HAS_P2P_BYTES;
    EXPECT_EQ(spyre_smi::format_prometheus(r).find("spyre_p2p_bytes_total{card=\"1\""),
              std::string::npos);
}

TEST(SmiPrometheus, FamiliesOnceAndEscapedLabels) {
    Report r = two_cards();
    r.cards[0].processes.push_back(process(7, "we\"ird\\name\n", 1 << 20));
    std::string m = spyre_smi::format_prometheus(r);
    // One TYPE line per family even with two cards.
    size_t types = 0;
    for (size_t at = m.find("# TYPE spyre_memory_used_bytes "); at != std::string::npos;
         at = m.find("# TYPE spyre_memory_used_bytes ", at + 1))
        ++types;
    EXPECT_EQ(types, 1u) << m;
    EXPECT_NE(m.find("spyre_memory_used_bytes{card=\"1\"} 314572800\n"), std::string::npos) << m;
    EXPECT_NE(m.find("spyre_engine_busy_seconds_total{card=\"0\"} 2.5\n"), std::string::npos) << m;
    EXPECT_NE(m.find("spyre_health_state{card=\"0\",state=\"ok\"} 1\n"), std::string::npos) << m;
    EXPECT_NE(m.find("spyre_health_state{card=\"0\",state=\"wedged\"} 0\n"), std::string::npos);
    EXPECT_NE(m.find("command=\"we\\\"ird\\\\name\\n\""), std::string::npos) << m;
    EXPECT_NE(m.find("spyre_resets_total{card=\"0\",kind=\"ring\"} 2\n"), std::string::npos) << m;
    EXPECT_EQ(m.back(), '\n');
    EXPECT_EQ(spyre_smi::prometheus_escape("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

TEST(SmiMib, RoundsDown) {
    EXPECT_EQ(spyre_smi::mib(0), "0 MiB");
    EXPECT_EQ(spyre_smi::mib((1ull << 20) - 1), "0 MiB");
    EXPECT_EQ(spyre_smi::mib(1ull << 30), "1024 MiB");
}

}  // namespace

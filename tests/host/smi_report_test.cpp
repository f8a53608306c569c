// spyre-smi rendering: table, list, query report and JSON, from a synthetic report.
#include "smi_report.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

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
    return c;
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
    for (size_t i = 1; i < ls.size(); ++i) {
        EXPECT_EQ(ls[i].size(), width) << "ragged table line: " << ls[i];
        if (ls[i].find("| spyre") != std::string::npos) ++rows;
    }
    EXPECT_EQ(rows, 2) << t;
    EXPECT_NE(t.find("0000:00:04.0"), std::string::npos);
    EXPECT_NE(t.find("300 MiB / 1024 MiB"), std::string::npos) << t;
    EXPECT_NE(t.find("45 C"), std::string::npos) << t;
    EXPECT_NE(t.find("12.3 W / 75 W"), std::string::npos) << t;
}

TEST(SmiTable, MissingTelemetryAndBrokenCard) {
    Report r = two_cards();
    r.cards[0].telemetry.reset();
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
    for (const char* s :
         {"Card 1: spyre1", "Cores", "32", "Clock", "1500 MHz", "Jobs submitted", "Temperature",
          "45.5 C", "Largest free block", "700 MiB", "DMA host->device", "4096 B", "1234:5350"})
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
    EXPECT_DOUBLE_EQ(d0["telemetry"]["temperature_c"].get<double>(), 45.5);
    EXPECT_TRUE(d0["error"].is_null());
    EXPECT_TRUE(j["devices"][1]["telemetry"].is_null());
}

TEST(SmiMib, RoundsDown) {
    EXPECT_EQ(spyre_smi::mib(0), "0 MiB");
    EXPECT_EQ(spyre_smi::mib((1ull << 20) - 1), "0 MiB");
    EXPECT_EQ(spyre_smi::mib(1ull << 30), "1024 MiB");
}

}  // namespace

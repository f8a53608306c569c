// spyre-smi's dmon (one line per card per interval) and topo (how the cards connect) views.
#pragma once

#include <string>

#include "smi_report.hpp"

namespace spyre_smi {

// The two comment lines naming the dmon columns and their units.
std::string dmon_header();
// One dmon line per card of the report.
std::string dmon_lines(const Report& r);

// The card-to-card matrix with PCI address, PCIe link and NUMA node, and its legend.
std::string format_topo(const Report& r);

}  // namespace spyre_smi

// The Prometheus text exposition format (version 0.0.4) of a report: what `spyre-smi exporter`
// serves on /metrics. Counters are the cards' cumulative counters (Prometheus derives rates).
#pragma once

#include <string>

#include "smi_report.hpp"

namespace spyre_smi {

std::string format_prometheus(const Report& r);

// A label value escaped for the exposition format (backslash, double quote, newline).
std::string prometheus_escape(const std::string& s);

}  // namespace spyre_smi

// Text helpers shared by spyre-smi's views: boxed tables and durations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spyre_smi {

enum class Align { kLeft, kRight };

// A boxed table whose column widths follow the content.
std::string render_table(const std::vector<std::string>& head, const std::vector<Align>& align,
                         const std::vector<std::vector<std::string>>& rows);

// "850 ns", "1.7 us", "70.6 ms", "3.20 s".
std::string duration_text(uint64_t ns);

}  // namespace spyre_smi

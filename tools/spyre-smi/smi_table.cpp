#include "smi_table.hpp"

#include <algorithm>
#include <format>

namespace spyre_smi {

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

std::string duration_text(uint64_t ns) {
    if (ns < 1000) return std::format("{} ns", ns);
    if (ns < 1000000) return std::format("{:.1f} us", ns / 1e3);
    if (ns < 1000000000) return std::format("{:.1f} ms", ns / 1e6);
    return std::format("{:.2f} s", ns / 1e9);
}

}  // namespace spyre_smi

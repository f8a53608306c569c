// Gathers spyre-smi's reports through libspyre's public API (the management calls of spyre.h).
// Keeps the cards open and the previous counter sample of each, so that every report after
// the first carries the utilisation since the one before.
#pragma once

#include <map>
#include <vector>

#include "smi_report.hpp"

namespace spyre_smi {

class Collector {
  public:
    Collector(std::vector<int> cards, int attached)
        : cards_(std::move(cards)), attached_(attached) {}
    ~Collector();
    Collector(const Collector&) = delete;
    Collector& operator=(const Collector&) = delete;

    // One report of the selected cards. spyre-smi's own use of the cards is left out of the
    // process lists.
    Report collect();

  private:
    CardReport collect_card(int index);
    std::vector<int> cards_;
    int attached_;
    std::map<int, spyre_device_t> open_;
    std::map<int, spyre_mgmt_counters> previous_;
};

}  // namespace spyre_smi

// The clients of a card as the driver's DRM fdinfo shows them (Documentation/driver.md
// "Observability", Documentation/gpu/drm-usage-stats.rst): parsing one fdinfo text, and
// scanning /proc for the accel files of one card.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spyre {

struct FdinfoClient {
    int pid = 0;
    std::string command;  // /proc/<pid>/comm
    uint64_t client_id = 0;
    std::string pdev;                            // drm-pdev: PCI address of the card
    uint64_t device_bytes = 0, host_bytes = 0;   // drm-total-device, drm-total-memory
    std::optional<uint64_t> compute_ns, dma_ns;  // drm-engine-compute, drm-engine-dma
};

// "1044 KiB" -> 1069056: a drm-usage-stats size (no unit, KiB, MiB, GiB); nullopt if malformed.
std::optional<uint64_t> parse_drm_size(std::string_view text);

// A spyre client from one fdinfo text; nullopt for files of other drivers or without a client
// id (pid and command are left for the caller).
std::optional<FdinfoClient> parse_fdinfo(std::string_view text);

// Every spyre client of the card at PCI address `pdev`, one per (pid, client id), sorted by
// pid. proc_root is "/proc" (a directory of the same layout in tests). Processes whose fd
// directory cannot be read (other users', unless root) are skipped.
std::vector<FdinfoClient> scan_clients(const std::string& proc_root, const std::string& pdev);

}  // namespace spyre

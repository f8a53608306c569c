// The management API (spyre.h "Management"): identity, health, sensors, counters, utilisation,
// per-process usage and reset of a card. Kernel backend: sysfs, hwmon and fdinfo of the spyre
// driver plus QUERY; simulator backend: what the simulated card models.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <format>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "c_boundary.hpp"
#include "enumerate.hpp"
#include "fdinfo.hpp"
#include "raii.hpp"

namespace spyre {
namespace {

namespace fs = std::filesystem;

constexpr int kCapSysAdmin = 21;  // linux/capability.h

// The first version of each struct: callers compiled against it keep working.
constexpr uint32_t kIdentityV1 = sizeof(spyre_mgmt_identity);
constexpr uint32_t kStatusV1 = sizeof(spyre_mgmt_status);
constexpr uint32_t kCountersV1 = sizeof(spyre_mgmt_counters);
constexpr uint32_t kUtilizationV1 = sizeof(spyre_mgmt_utilization);
constexpr uint32_t kProcessV1 = sizeof(spyre_mgmt_process);
constexpr uint32_t kPeerV1 = sizeof(spyre_mgmt_peer);

// Checks the caller's size of a sized struct.
void check_size(uint32_t size, uint32_t v1, const char* what) {
    require(size >= v1, "{}.size is {}: set it to sizeof({}) (at least {})", what, size, what, v1);
}

// Copies the fields of `full` that fit in the caller's struct; size then says how many bytes.
template <typename T>
void deliver(T* out, T full) {
    const uint32_t n = std::min<uint32_t>(out->size, sizeof(T));
    full.size = n;
    std::memcpy(static_cast<void*>(out), &full, n);
}

// Fills at most `capacity` entries of the caller's array, whose stride is out[0].size (the
// struct size the caller was built with), and sets *count to the number there are.
template <typename T>
void deliver_array(T* out, uint32_t capacity, uint32_t* count, uint32_t v1, const char* arg,
                   const char* type, const std::vector<T>& list) {
    require(out != nullptr || capacity == 0, "`{}` is NULL but `capacity` is not 0", arg);
    const uint32_t stride = out ? out[0].size : 0;
    if (out) check_size(stride, v1, type);
    auto* base = reinterpret_cast<unsigned char*>(out);
    for (uint32_t i = 0; i < capacity && i < list.size(); ++i) {
        auto* slot = reinterpret_cast<T*>(base + size_t{i} * stride);
        slot->size = stride;
        deliver(slot, list[i]);
    }
    *count = static_cast<uint32_t>(list.size());
}

template <size_t N>
void copy_str(char (&dst)[N], std::string_view s) {
    size_t n = std::min(N - 1, s.size());
    std::memcpy(dst, s.data(), n);
    dst[n] = '\0';
}

uint64_t cycles_to_ns(uint64_t cycles, uint32_t clock_mhz) {
    if (!clock_mhz) return 0;
    return static_cast<uint64_t>(static_cast<unsigned __int128>(cycles) * 1000 / clock_mhz);
}

// ---- kernel backend sources ----

std::string pci_dir(const Device& d) {
    return std::string("/sys/bus/pci/devices/") + d.info().pci_address;
}

std::optional<std::string> read_attr(const fs::path& p) {
    std::ifstream f(p);
    if (!f) return std::nullopt;
    std::string s;
    std::getline(f, s);
    if (f.bad()) return std::nullopt;
    return s;
}

std::optional<uint64_t> read_u64(const fs::path& p) {
    auto s = read_attr(p);
    if (!s || s->empty()) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s->c_str(), &end, 10);
    if (errno || *end) return std::nullopt;
    return v;
}

// A sysfs array attribute: unsigned decimals separated by spaces.
std::optional<std::vector<uint64_t>> read_u64_list(const fs::path& p) {
    auto s = read_attr(p);
    if (!s) return std::nullopt;
    std::vector<uint64_t> values;
    const char* pos = s->c_str();
    while (*pos) {
        char* end = nullptr;
        errno = 0;
        unsigned long long v = std::strtoull(pos, &end, 10);
        if (errno || end == pos || (*end && *end != ' ')) return std::nullopt;
        values.push_back(v);
        pos = *end ? end + 1 : end;
    }
    return values;
}

// The card's hwmon directory (hwmon/hwmonN), if any.
std::optional<fs::path> hwmon_dir(const Device& d) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(pci_dir(d) + "/hwmon", ec))
        if (e.path().filename().string().starts_with("hwmon")) return e.path();
    return std::nullopt;
}

bool is_kernel(const Device& d) { return d.info().backend == SPYRE_BACKEND_KERNEL; }
bool has_telemetry(const Device& d) { return d.info().caps & SPYRE_DEVICE_CAP_TELEMETRY; }

// Busy time per core since power on, in ns: spyre.ko's core_busy_time_ns, or the simulated
// card's active cycles.
std::vector<uint64_t> core_busy_ns(Device& d) {
    if (is_kernel(d))
        return read_u64_list(pci_dir(d) + "/core_busy_time_ns").value_or(std::vector<uint64_t>{});
    std::vector<uint64_t> ns = d.core_active_cycles();
    for (uint64_t& v : ns) v = cycles_to_ns(v, d.info().clock_mhz);
    return ns;
}

spyre_mgmt_identity identity_of(Device& d) {
    const spyre_device_info& i = d.info();
    spyre_mgmt_identity id{};
    copy_str(id.name, i.name);
    copy_str(id.pci_address, i.pci_address);
    copy_str(id.hw_version, std::format("{}.{}", i.hw_version_major, i.hw_version_minor));
    copy_str(id.driver_name, i.driver_name);
    copy_str(id.driver_version, i.driver_version);
    copy_str(id.library_version, spyre_get_version_string());
    copy_str(id.backend, spyre_backend_string(static_cast<spyre_backend>(i.backend)));
    id.num_cores = i.num_cores;
    id.clock_mhz = i.clock_mhz;
    id.numa_node = -1;
    // The card has no serial number register (hw/spyre_hw.h): SPYRE_MGMT_HAS_SERIAL stays clear.
    if (is_kernel(d)) {
        auto speed = read_attr(pci_dir(d) + "/pcie_link_speed");
        auto width = read_u64(pci_dir(d) + "/pcie_link_width");
        if (speed && width && *speed != "unknown") {
            copy_str(id.pcie_link_speed, *speed);
            id.pcie_link_width = static_cast<uint32_t>(*width);
            id.valid |= SPYRE_MGMT_HAS_PCIE_LINK;
        }
        if (auto node = read_attr(pci_dir(d) + "/numa_node"))
            id.numa_node = std::atoi(node->c_str());
    }
    return id;
}

spyre_health health_from_sysfs(const std::string& state) {
    if (state == "ready") return SPYRE_HEALTH_OK;
    if (state == "resetting") return SPYRE_HEALTH_RESETTING;
    if (state == "wedged") return SPYRE_HEALTH_WEDGED;
    return SPYRE_HEALTH_UNKNOWN;
}

spyre_mgmt_status status_of(Device& d) {
    spyre_mgmt_status s{};
    auto m = d.query_mem();
    s.mem_total_bytes = m.devmem_total;
    s.mem_used_bytes = m.devmem_used;
    s.mem_free_bytes = m.devmem_total - std::min(m.devmem_used, m.devmem_total);
    s.host_pinned_bytes = m.host_bo_bytes;
    std::optional<drm_spyre_telemetry> t;
    if (has_telemetry(d)) t = d.query_telemetry();
    s.health = SPYRE_HEALTH_UNKNOWN;
    if (is_kernel(d)) {
        if (auto st = read_attr(pci_dir(d) + "/state")) s.health = health_from_sysfs(*st);
        if (auto hw = hwmon_dir(d)) {
            auto temp = read_u64(*hw / "temp1_input");
            auto power = read_u64(*hw / "power1_input");
            auto cap = read_u64(*hw / "power1_cap");
            if (temp) {
                s.temperature_mc = static_cast<uint32_t>(*temp);
                s.valid |= SPYRE_MGMT_HAS_TEMPERATURE;
            }
            if (power && cap) {  // hwmon: microwatts
                s.power_mw = static_cast<uint32_t>(*power / 1000);
                s.power_cap_mw = static_cast<uint32_t>(*cap / 1000);
                s.valid |= SPYRE_MGMT_HAS_POWER;
            }
        }
    } else if (t) {
        // The simulator models no thermals: its sensors are constants, not reported.
        s.health = t->state == DRM_SPYRE_STATE_WEDGED ? SPYRE_HEALTH_WEDGED : SPYRE_HEALTH_OK;
    }
    if (s.health == SPYRE_HEALTH_UNKNOWN && t)
        s.health = t->state == DRM_SPYRE_STATE_WEDGED ? SPYRE_HEALTH_WEDGED : SPYRE_HEALTH_OK;
    return s;
}

spyre_mgmt_counters counters_of(Device& d) {
    spyre_mgmt_counters c{};
    c.timestamp_ns = monotonic_ns();
    const uint32_t mhz = d.info().clock_mhz;
    if (has_telemetry(d)) {
        auto t = d.query_telemetry();
        c.ddr_read_bytes = t.engine_ddr_read_bytes;
        c.ddr_write_bytes = t.engine_ddr_write_bytes;
        c.pcie_h2d_bytes = t.h2d_bytes;
        c.pcie_d2h_bytes = t.d2h_bytes;
        c.d2d_bytes = t.d2d_bytes;
        c.cmd_errors = t.cmd_errors;
        c.jobs_failed = t.jobs_failed;
        c.launch_errors = t.launch_errors;
        c.device_resets = t.resets;
        c.valid |= SPYRE_MGMT_HAS_PCIE_BYTES | SPYRE_MGMT_HAS_ERRORS;
        if (d.info().caps & SPYRE_DEVICE_CAP_P2P) {
            c.p2p_read_bytes = t.p2p_rd_bytes;
            c.p2p_write_bytes = t.p2p_wr_bytes;
            c.valid |= SPYRE_MGMT_HAS_P2P_BYTES;
        }
        if (d.info().caps & SPYRE_DEVICE_CAP_LAUNCH) {
            c.engine_busy_ns = cycles_to_ns(t.engine_cycles, mhz);
            c.valid |= SPYRE_MGMT_HAS_ENGINE_BUSY | SPYRE_MGMT_HAS_DDR_BYTES;
        }
        if (is_kernel(d)) {  // the simulator has no driver recovery
            c.jobs_timed_out = t.jobs_timed_out;
            c.ring_resets = t.ring_resets;
            c.card_resets = t.card_resets;
            c.valid |= SPYRE_MGMT_HAS_RECOVERY;
        }
    }
    if (is_kernel(d))  // the driver's own account of busy time, when it has one
        if (auto busy = read_u64(pci_dir(d) + "/busy_time_ns")) {
            c.engine_busy_ns = *busy;
            c.valid |= SPYRE_MGMT_HAS_ENGINE_BUSY;
        }
    auto cores = core_busy_ns(d);
    if (!cores.empty()) {
        c.num_cores = static_cast<uint32_t>(std::min<size_t>(cores.size(), SPYRE_LAUNCH_MAX_CORES));
        std::copy_n(cores.begin(), c.num_cores, c.core_busy_ns);
        c.valid |= SPYRE_MGMT_HAS_CORE_BUSY;
    }
    return c;
}

// The other cards, in device index order. The driver names a peer by its accel minor;
// libspyre's index is the card's place in enumerate_devices() (minor order).
std::vector<spyre_mgmt_peer> peers_of(Device& d) {
    std::vector<spyre_mgmt_peer> out;
    const auto raw = d.query_peers();
    const auto nodes = is_kernel(d) ? enumerate_devices() : std::vector<DeviceNode>{};
    for (const drm_spyre_peer& p : raw) {
        spyre_mgmt_peer m{};
        m.flags = ((p.flags & DRM_SPYRE_PEER_P2P) ? SPYRE_MGMT_PEER_P2P : 0) |
                  ((p.flags & DRM_SPYRE_PEER_SHARED_BRIDGE) ? SPYRE_MGMT_PEER_SHARED_BRIDGE : 0);
        m.distance = p.distance;
        m.index = static_cast<int32_t>(p.accel_minor);
        if (is_kernel(d)) {
            auto it = std::find_if(nodes.begin(), nodes.end(),
                                   [&](const DeviceNode& n) { return n.minor == p.accel_minor; });
            if (it == nodes.end()) continue;  // not (or no longer) a spyre card we can open
            m.index = static_cast<int32_t>(it - nodes.begin());
            copy_str(m.pci_address, it->pci_address);
        }
        out.push_back(m);
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.index < b.index; });
    return out;
}

std::string read_comm(pid_t pid) {
    auto s = read_attr(std::format("/proc/{}/comm", pid));
    return s.value_or("");
}

std::vector<spyre_mgmt_process> processes_of(Device& d) {
    std::vector<spyre_mgmt_process> out;
    if (is_kernel(d)) {
        for (const FdinfoClient& c : scan_clients("/proc", d.info().pci_address)) {
            spyre_mgmt_process p{};
            p.pid = c.pid;
            copy_str(p.command, c.command);
            p.client_id = c.client_id;
            p.device_memory_bytes = c.device_bytes;
            p.host_memory_bytes = c.host_bytes;
            if (c.compute_ns) {
                p.compute_busy_ns = *c.compute_ns;
                p.valid |= SPYRE_MGMT_HAS_ENGINE_BUSY;
            }
            if (c.dma_ns) {
                p.dma_busy_ns = *c.dma_ns;
                p.valid |= SPYRE_MGMT_HAS_DMA_BUSY;
            }
            out.push_back(p);
        }
        return out;
    }
    // A simulated card lives in this process: this process is its only client, and holds
    // all of its memory. The simulator models no DMA time.
    spyre_mgmt_process p{};
    p.pid = ::getpid();
    copy_str(p.command, read_comm(p.pid));
    auto m = d.query_mem();
    p.device_memory_bytes = m.devmem_used;
    p.host_memory_bytes = m.host_bo_bytes;
    p.compute_busy_ns = cycles_to_ns(d.query_telemetry().engine_cycles, d.info().clock_mhz);
    p.valid = SPYRE_MGMT_HAS_ENGINE_BUSY;
    out.push_back(p);
    return out;
}

bool has_cap_sys_admin() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.starts_with("CapEff:")) {
            unsigned long long caps = std::strtoull(line.c_str() + 7, nullptr, 16);
            return caps & (1ull << kCapSysAdmin);
        }
    return ::geteuid() == 0;
}

void reset_card(int index, uint32_t flags) {
    require((flags & ~SPYRE_MGMT_RESET_FORCE) == 0,
            "unknown flags {:#x} (only SPYRE_MGMT_RESET_FORCE)", flags);
    if (selected_backend() == SPYRE_BACKEND_SIM)
        fail(SPYRE_ERROR_NOT_SUPPORTED, "simulated cards (SPYRE_BACKEND=sim) cannot be reset");
    auto nodes = enumerate_devices();
    if (nodes.empty()) fail(SPYRE_ERROR_NO_DEVICE, no_device_message());
    if (index < 0 || static_cast<size_t>(index) >= nodes.size())
        fail(SPYRE_ERROR_NO_DEVICE,
             std::format("device index {} out of range: {} Spyre device{} found (valid: 0..{})",
                         index, nodes.size(), nodes.size() == 1 ? "" : "s", nodes.size() - 1));
    const std::string& bdf = nodes[index].pci_address;
    if (!has_cap_sys_admin())
        fail(SPYRE_ERROR_PERMISSION,
             std::format("resetting spyre{} ({}) needs CAP_SYS_ADMIN: run as root", index, bdf));
    if (!(flags & SPYRE_MGMT_RESET_FORCE)) {
        std::string users;
        for (const FdinfoClient& c : scan_clients("/proc", bdf))
            if (c.pid != ::getpid())
                users += std::format("{}{} ({})", users.empty() ? "" : ", ", c.pid, c.command);
        if (!users.empty())
            fail(SPYRE_ERROR_BUSY,
                 std::format("spyre{} ({}) is in use by pid {}; stop them first, or force the "
                             "reset (their running jobs are re-run or fail)",
                             index, bdf, users));
    }
    const std::string path = std::format("/sys/bus/pci/devices/{}/reset", bdf);
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (fd.get() < 0) {
        int err = errno;
        if (err == ENOENT)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("{} has no PCI reset method ({} is missing)", bdf, path));
        fail(status_from_errno(err), std::format("cannot open {}: {}", path, errno_text(err)));
    }
    // The write returns once the driver's reset_done has brought the card back.
    if (::write(fd.get(), "1", 1) != 1) {
        int err = errno;
        fail(status_from_errno(err),
             std::format("PCI reset of spyre{} ({}) failed: {}", index, bdf, errno_text(err)));
    }
}

// A spyre_mgmt_get_* call: checks the handle and the caller's struct, fills it from make(dev).
template <typename T, typename Make>
spyre_status get_sized(const char* fn, spyre_device_t device, T* out, uint32_t v1, const char* what,
                       Make make) {
    return guard(fn, [&] {
        auto d = device_of(device);
        require(out != nullptr, "output pointer to {} is NULL", what);
        check_size(out->size, v1, what);
        deliver(out, make(*d));
    });
}

double rate(uint64_t before, uint64_t after, int64_t interval_ns) {
    return after > before ? static_cast<double>(after - before) * 1e9 / interval_ns : 0.0;
}

double percent(uint64_t before, uint64_t after, int64_t interval_ns) {
    return std::min(100.0, rate(before, after, interval_ns) / 1e9 * 100.0);
}

}  // namespace
}  // namespace spyre

using namespace spyre;

extern "C" {

const char* spyre_health_string(spyre_health health) {
    switch (health) {
        case SPYRE_HEALTH_OK:
            return "ok";
        case SPYRE_HEALTH_RESETTING:
            return "resetting";
        case SPYRE_HEALTH_WEDGED:
            return "wedged";
        case SPYRE_HEALTH_UNKNOWN:
            break;
    }
    return "unknown";
}

spyre_status spyre_mgmt_get_identity(spyre_device_t device, spyre_mgmt_identity* id) {
    return get_sized(__func__, device, id, kIdentityV1, "spyre_mgmt_identity", identity_of);
}

spyre_status spyre_mgmt_get_status(spyre_device_t device, spyre_mgmt_status* status) {
    return get_sized(__func__, device, status, kStatusV1, "spyre_mgmt_status", status_of);
}

spyre_status spyre_mgmt_get_counters(spyre_device_t device, spyre_mgmt_counters* counters) {
    return get_sized(__func__, device, counters, kCountersV1, "spyre_mgmt_counters", counters_of);
}

spyre_status spyre_mgmt_get_utilization(const spyre_mgmt_counters* before,
                                        const spyre_mgmt_counters* after,
                                        spyre_mgmt_utilization* util) {
    return guard(__func__, [&] {
        require(before && after && util, "`before`, `after` and `util` must not be NULL");
        check_size(before->size, kCountersV1, "spyre_mgmt_counters");
        check_size(after->size, kCountersV1, "spyre_mgmt_counters");
        check_size(util->size, kUtilizationV1, "spyre_mgmt_utilization");
        const int64_t dt = after->timestamp_ns - before->timestamp_ns;
        require(dt > 0,
                "`after` was sampled {} ns after `before`: sample `before` "
                "first",
                dt);
        spyre_mgmt_utilization u{};
        u.valid = before->valid & after->valid;
        u.interval_ns = dt;
        u.engine_percent = percent(before->engine_busy_ns, after->engine_busy_ns, dt);
        u.ddr_read_bytes_per_s = rate(before->ddr_read_bytes, after->ddr_read_bytes, dt);
        u.ddr_write_bytes_per_s = rate(before->ddr_write_bytes, after->ddr_write_bytes, dt);
        u.pcie_h2d_bytes_per_s = rate(before->pcie_h2d_bytes, after->pcie_h2d_bytes, dt);
        u.pcie_d2h_bytes_per_s = rate(before->pcie_d2h_bytes, after->pcie_d2h_bytes, dt);
        u.p2p_read_bytes_per_s = rate(before->p2p_read_bytes, after->p2p_read_bytes, dt);
        u.p2p_write_bytes_per_s = rate(before->p2p_write_bytes, after->p2p_write_bytes, dt);
        if (u.valid & SPYRE_MGMT_HAS_CORE_BUSY) {
            u.num_cores = std::min({before->num_cores, after->num_cores,
                                    static_cast<uint32_t>(SPYRE_LAUNCH_MAX_CORES)});
            for (uint32_t i = 0; i < u.num_cores; ++i)
                u.core_percent[i] = percent(before->core_busy_ns[i], after->core_busy_ns[i], dt);
        }
        deliver(util, u);
    });
}

spyre_status spyre_mgmt_get_processes(spyre_device_t device, spyre_mgmt_process* procs,
                                      uint32_t capacity, uint32_t* count) {
    if (count) *count = 0;
    return guard(__func__, [&] {
        auto d = device_of(device);
        require(count != nullptr, "output pointer `count` is NULL");
        deliver_array(procs, capacity, count, kProcessV1, "procs", "spyre_mgmt_process",
                      processes_of(*d));
    });
}

spyre_status spyre_mgmt_get_peers(spyre_device_t device, spyre_mgmt_peer* peers, uint32_t capacity,
                                  uint32_t* count) {
    if (count) *count = 0;
    return guard(__func__, [&] {
        auto d = device_of(device);
        require(count != nullptr, "output pointer `count` is NULL");
        deliver_array(peers, capacity, count, kPeerV1, "peers", "spyre_mgmt_peer", peers_of(*d));
    });
}

spyre_status spyre_mgmt_reset(int index, uint32_t flags) {
    return guard(__func__, [&] { reset_card(index, flags); });
}

}  // extern "C"

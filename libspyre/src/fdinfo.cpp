#include "fdinfo.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

namespace spyre {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n'))
        s.remove_suffix(1);
    return s;
}

// Leading unsigned number of s and the rest after it (trimmed).
std::optional<std::pair<uint64_t, std::string_view>> number_and_unit(std::string_view s) {
    s = trim(s);
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end == s.data()) return std::nullopt;
    return std::pair{v, trim(s.substr(end - s.data()))};
}

std::optional<uint64_t> parse_ns(std::string_view s) {
    auto nu = number_and_unit(s);
    if (!nu || nu->second != "ns") return std::nullopt;
    return nu->first;
}

std::string read_small_file(const std::filesystem::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace

std::optional<uint64_t> parse_drm_size(std::string_view text) {
    auto nu = number_and_unit(text);
    if (!nu) return std::nullopt;
    const auto& [v, unit] = *nu;
    int shift = unit.empty()    ? 0
                : unit == "KiB" ? 10
                : unit == "MiB" ? 20
                : unit == "GiB" ? 30
                                : -1;
    if (shift < 0 || (shift && v > (UINT64_MAX >> shift))) return std::nullopt;
    return v << shift;
}

std::optional<FdinfoClient> parse_fdinfo(std::string_view text) {
    FdinfoClient c;
    bool spyre = false, has_id = false;
    while (!text.empty()) {
        size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        size_t colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        std::string_view key = trim(line.substr(0, colon)), val = trim(line.substr(colon + 1));
        if (key == "drm-driver") {
            spyre = val == "spyre";
        } else if (key == "drm-client-id") {
            auto nu = number_and_unit(val);
            has_id = nu && nu->second.empty();
            if (has_id) c.client_id = nu->first;
        } else if (key == "drm-pdev") {
            c.pdev = val;
        } else if (key == "drm-total-device") {
            c.device_bytes = parse_drm_size(val).value_or(0);
        } else if (key == "drm-total-memory") {
            c.host_bytes = parse_drm_size(val).value_or(0);
        } else if (key == "drm-engine-compute") {
            c.compute_ns = parse_ns(val);
        } else if (key == "drm-engine-dma") {
            c.dma_ns = parse_ns(val);
        }
    }
    if (!spyre || !has_id) return std::nullopt;
    return c;
}

std::vector<FdinfoClient> scan_clients(const std::string& proc_root, const std::string& pdev) {
    namespace fs = std::filesystem;
    std::vector<FdinfoClient> out;
    std::error_code ec;
    for (const auto& p : fs::directory_iterator(proc_root, ec)) {
        const std::string name = p.path().filename().string();
        int pid = 0;
        auto [end, perr] = std::from_chars(name.data(), name.data() + name.size(), pid);
        if (perr != std::errc() || end != name.data() + name.size() || pid <= 0) continue;
        std::set<uint64_t> seen;  // dup'ed fds share one client
        std::error_code fec;
        for (const auto& fd : fs::directory_iterator(p.path() / "fd", fec)) {
            std::error_code lec;
            fs::path target = fs::read_symlink(fd.path(), lec);
            if (lec || !target.string().starts_with("/dev/accel/")) continue;
            auto c = parse_fdinfo(read_small_file(p.path() / "fdinfo" / fd.path().filename()));
            if (!c || c->pdev != pdev || !seen.insert(c->client_id).second) continue;
            c->pid = pid;
            c->command = read_small_file(p.path() / "comm");
            while (!c->command.empty() && c->command.back() == '\n') c->command.pop_back();
            out.push_back(std::move(*c));
        }
    }
    std::sort(out.begin(), out.end(), [](const FdinfoClient& a, const FdinfoClient& b) {
        return std::pair(a.pid, a.client_id) < std::pair(b.pid, b.client_id);
    });
    return out;
}

}  // namespace spyre

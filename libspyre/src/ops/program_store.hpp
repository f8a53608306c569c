// SPDX-License-Identifier: MIT
// The op library's programs on disk (Documentation/ops.md "Program cache on disk"): a planned
// and generated program stored under the hash of its plan key and the version of everything
// that decides its bytes (libspyre's build, the ISA, this file format), so a second process
// reads it instead of planning and generating it again. One file per program, written to a
// temporary name and renamed into place (readers see a whole file or none); every file is
// checked (header, full key, CRC-32 of its contents, owner and mode) and one that fails is
// removed and regenerated, never used. The directory must belong to the user and not be
// writable by group or others; its total size is bounded, least recently used files go first.
// The total is kept in a ledger file beside the programs, so a save never lists the directory
// unless the ledger says the bound is passed (a listing of thousands of files over a network or
// emulated file system takes seconds).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spyre::ops {

// What a plan leaves for its launches: the program and the values reported with it.
struct StoredPlan {
    std::vector<uint8_t> image;
    uint32_t cores = 0;
    uint64_t cycles = 0;
    std::string plan;
    bool operator==(const StoredPlan&) const = default;
};

class ProgramStore {
  public:
    static constexpr uint32_t kFormat = 2;  // the file layout below; a new one is a new key
    static constexpr uint64_t kDefaultMaxBytes = 512ull << 20;
    static constexpr uint64_t kMinMaxBytes = 1ull << 20;
    static constexpr uint64_t kMaxMaxBytes = 1ull << 40;
    // The ledger: the store's bytes as of the last listing plus every save since (8 bytes in
    // the host's byte order, updated under flock by every process that writes).
    static constexpr const char* kLedgerName = "usage";

    struct Config {
        std::string dir;      // created (0700) if missing
        std::string version;  // part of every key: a new version finds none of the old files
        uint64_t max_bytes = kDefaultMaxBytes;
    };
    struct Stats {
        uint64_t hits = 0, misses = 0;
        uint64_t rejected = 0;  // files found corrupt, truncated, foreign or unsafe (removed)
        uint64_t writes = 0, write_failures = 0, evictions = 0;
        uint64_t scans =
            0;  // directory listings to size the store (the ledger was missing or full)
    };

    // The store in c.dir, or nullptr with the reason in *why. *report: the user should hear of
    // it (a relative path, another user's directory, one writable by group or others), not a
    // directory that cannot be made or opened (a read-only home).
    static std::unique_ptr<ProgramStore> open(const Config& c, std::string* why,
                                              bool* report = nullptr);
    ~ProgramStore();
    ProgramStore(const ProgramStore&) = delete;
    ProgramStore& operator=(const ProgramStore&) = delete;

    // The program stored under `key` (a plan key: raw bytes), if a sound file holds it.
    std::optional<StoredPlan> load(std::string_view key);
    // Stores it (best effort: a failure is counted, never thrown).
    void save(std::string_view key, const StoredPlan& p);

    Stats stats() const;
    const std::string& dir() const { return dir_; }
    const std::string& version() const { return version_; }
    // The file name of `key`: 64 hex bits (CRC-32, Adler-32) of version and key, ".sprog".
    std::string file_name(std::string_view key) const;
    // Total bytes of the store's files now (a directory scan).
    uint64_t disk_bytes() const;
    // What the ledger records (none if it is missing or damaged).
    std::optional<uint64_t> ledger_bytes() const;

  private:
    ProgramStore(int dir_fd, const Config& c);
    std::string full_key(std::string_view key) const;
    void reject(const std::string& name);
    // Adds `written` bytes (less what a replaced file held) to the ledger; lists the directory
    // and evicts only when the ledger is missing or passes the bound.
    void account(int64_t written);
    void evict_and_record();

    int dir_fd_;
    std::string dir_, version_;
    uint64_t max_bytes_;
    mutable std::mutex mu_;
    Stats stats_;
};

// "libspyre <version> build <ELF build id> isa <ISA version> store <format>": what decides a
// program's bytes besides its plan key. Empty if libspyre's build cannot be identified.
std::string program_version_key();

// The process's store from the environment: SPYRE_PROGRAM_CACHE=0 disables it,
// SPYRE_PROGRAM_CACHE_DIR names the directory (default $XDG_CACHE_HOME/spyre/programs, else
// $HOME/.cache/spyre/programs), SPYRE_PROGRAM_CACHE_MAX_MB bounds it (default 512). nullptr
// when off; *status then says why (a refused directory is also reported once on stderr).
ProgramStore* process_program_store(std::string* status = nullptr);

}  // namespace spyre::ops

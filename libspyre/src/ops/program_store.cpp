// SPDX-License-Identifier: MIT
#include "ops/program_store.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <format>

#include "spyre/isa.hpp"
#include "spyre/spyre.h"

namespace spyre::ops {

namespace {

// The file: this header, the full key (version '\0' plan key), then the body: cores (u32),
// plan text length (u32), cycles (u64), the plan text, the program image. Little endian (the
// file never leaves the host that wrote it: the version key holds the build).
constexpr char kMagic[8] = {'S', 'P', 'Y', 'P', 'R', 'O', 'G', '\n'};
struct FileHeader {
    char magic[8];
    uint32_t format;
    uint32_t header_bytes;
    uint64_t key_bytes;
    uint64_t body_bytes;
    uint64_t name_hash;  // the file's name: name_hash() of the full key
    uint32_t checksum;   // CRC-32 of full key and body (damage, not tampering: files of others
    uint32_t pad;        // are refused by owner and mode)
};
static_assert(sizeof(FileHeader) == 48);
constexpr size_t kBodyFixed = 16;
constexpr const char* kSuffix = ".sprog";
constexpr const char* kTmpPrefix = ".tmp-";
// A temporary file this old is left over from a process that died while writing it.
constexpr time_t kStaleTmpSeconds = 600;

uint32_t crc32_of(uint32_t crc, const void* p, size_t n) {
    auto* b = static_cast<const Bytef*>(p);
    while (n) {  // zlib takes uInt lengths
        const uInt k = uInt(std::min<size_t>(n, 1u << 30));
        crc = uint32_t(::crc32(crc, b, k));
        b += k, n -= k;
    }
    return crc;
}

// 64 bits of the key for the file's name (the header holds the whole key, so two keys that
// share a name only replace each other's file, never read it): CRC-32 and Adler-32 side by side.
uint64_t name_hash(std::string_view key) {
    uint64_t adler = ::adler32(0, Z_NULL, 0);
    adler = ::adler32_z(adler, reinterpret_cast<const Bytef*>(key.data()), key.size());
    return uint64_t(crc32_of(0, key.data(), key.size())) << 32 | (adler & 0xffffffffu);
}

std::string to_hex(const uint8_t* p, size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += std::format("{:02x}", p[i]);
    return s;
}

std::string name_of(uint64_t hash) { return std::format("{:016x}", hash); }

bool full_write(int fd, const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    while (n) {
        const ssize_t w = ::write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        b += w, n -= size_t(w);
    }
    return true;
}

bool full_read(int fd, void* p, size_t n) {
    auto* b = static_cast<uint8_t*>(p);
    while (n) {
        const ssize_t r = ::read(fd, b, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        b += r, n -= size_t(r);
    }
    return true;
}

constexpr size_t kNameDigits = 16;  // name_of(): 64 bits in hex

bool is_store_file(const char* name) {
    const size_t n = std::strlen(name);
    return n == kNameDigits + std::strlen(kSuffix) &&
           std::strcmp(name + kNameDigits, kSuffix) == 0 &&
           std::all_of(name, name + kNameDigits,
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Creates the missing directories of `path` (mode 0700).
void make_dirs(const std::string& path) {
    for (size_t p = 1; p <= path.size(); ++p)
        if (p == path.size() || path[p] == '/') ::mkdir(path.substr(0, p).c_str(), 0700);
}

}  // namespace

std::unique_ptr<ProgramStore> ProgramStore::open(const Config& c, std::string* why, bool* report) {
    if (report) *report = false;
    auto refuse = [&](std::string reason, bool to_report = false) {
        if (why) *why = std::move(reason);
        if (report) *report = to_report;
        return std::unique_ptr<ProgramStore>();
    };
    if (c.dir.empty() || c.dir[0] != '/')
        return refuse("the directory is not an absolute path", true);
    if (c.version.empty()) return refuse("libspyre's build cannot be identified");
    make_dirs(c.dir);
    const int fd = ::open(c.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return refuse(std::format("cannot open {}: {}", c.dir, std::strerror(errno)));
    struct stat st{};
    if (::fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
        ::close(fd);
        return refuse(std::format("{} is not a directory", c.dir));
    }
    if (st.st_uid != ::geteuid()) {
        ::close(fd);
        return refuse(std::format("{} belongs to uid {}, not to this user ({})", c.dir, st.st_uid,
                                  ::geteuid()),
                      true);
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        ::close(fd);
        return refuse(
            std::format("{} is writable by group or others (mode {:o})", c.dir, st.st_mode & 07777),
            true);
    }
    return std::unique_ptr<ProgramStore>(new ProgramStore(fd, c));
}

ProgramStore::ProgramStore(int dir_fd, const Config& c)
    : dir_fd_(dir_fd),
      dir_(c.dir),
      version_(c.version),
      max_bytes_(std::clamp(c.max_bytes, kMinMaxBytes, kMaxMaxBytes)) {}

ProgramStore::~ProgramStore() { ::close(dir_fd_); }

std::string ProgramStore::full_key(std::string_view key) const {
    std::string k = version_;
    k.push_back('\0');
    k.append(key);
    return k;
}

std::string ProgramStore::file_name(std::string_view key) const {
    return name_of(name_hash(full_key(key))) + kSuffix;
}

ProgramStore::Stats ProgramStore::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

void ProgramStore::reject(const std::string& name) {
    ::unlinkat(dir_fd_, name.c_str(), 0);  // our directory: a bad file is replaced, not kept
    std::lock_guard lock(mu_);
    stats_.rejected++;
    stats_.misses++;
}

std::optional<StoredPlan> ProgramStore::load(std::string_view key) {
    const std::string fk = full_key(key);
    const uint64_t hash = name_hash(fk);
    const std::string name = name_of(hash) + kSuffix;
    // O_NOFOLLOW: a symlink is not ours (ELOOP: rejected); O_NONBLOCK: a FIFO must not block
    const int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno != ENOENT) {
            reject(name);
        } else {
            std::lock_guard lock(mu_);
            stats_.misses++;
        }
        return std::nullopt;
    }
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st{};
    // the user's own regular file, writable by nobody else, of a size a program may have
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
        (st.st_mode & (S_IWGRP | S_IWOTH)) || uint64_t(st.st_size) < sizeof(FileHeader) ||
        uint64_t(st.st_size) > max_bytes_) {
        reject(name);
        return std::nullopt;
    }
    std::vector<uint8_t> bytes(size_t(st.st_size));
    FileHeader h{};
    if (!full_read(fd, bytes.data(), bytes.size())) {
        reject(name);
        return std::nullopt;
    }
    std::memcpy(&h, bytes.data(), sizeof h);
    const uint8_t* key_p = bytes.data() + sizeof h;
    // the header, then exactly the full key and the body it announces (a truncated file fails)
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.format != kFormat ||
        h.header_bytes != sizeof h || h.key_bytes != fk.size() ||
        bytes.size() < sizeof h + fk.size() + kBodyFixed ||
        h.body_bytes != bytes.size() - sizeof h - fk.size() || h.name_hash != hash ||
        std::memcmp(key_p, fk.data(), fk.size()) != 0) {
        reject(name);
        return std::nullopt;
    }
    if (h.checksum != crc32_of(0, key_p, bytes.size() - sizeof h)) {
        reject(name);
        return std::nullopt;
    }
    const uint8_t* body = key_p + h.key_bytes;
    StoredPlan p;
    uint32_t plan_len = 0;
    std::memcpy(&p.cores, body, 4);
    std::memcpy(&plan_len, body + 4, 4);
    std::memcpy(&p.cycles, body + 8, 8);
    if (plan_len > h.body_bytes - kBodyFixed || h.body_bytes - kBodyFixed - plan_len == 0) {
        reject(name);
        return std::nullopt;
    }
    p.plan.assign(reinterpret_cast<const char*>(body + kBodyFixed), plan_len);
    p.image.assign(body + kBodyFixed + plan_len, body + h.body_bytes);
    ::futimens(fd, nullptr);  // recently used: eviction takes the least recently used first
    std::lock_guard lock(mu_);
    stats_.hits++;
    return p;
}

void ProgramStore::save(std::string_view key, const StoredPlan& p) {
    const std::string fk = full_key(key);
    const uint64_t hash = name_hash(fk);
    const std::string name = name_of(hash) + kSuffix;
    std::vector<uint8_t> body(kBodyFixed);
    const uint32_t plan_len = uint32_t(p.plan.size());
    std::memcpy(body.data(), &p.cores, 4);
    std::memcpy(body.data() + 4, &plan_len, 4);
    std::memcpy(body.data() + 8, &p.cycles, 8);
    body.insert(body.end(), p.plan.begin(), p.plan.end());
    body.insert(body.end(), p.image.begin(), p.image.end());
    FileHeader h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.format = kFormat;
    h.header_bytes = sizeof h;
    h.key_bytes = fk.size();
    h.body_bytes = body.size();
    h.name_hash = hash;
    h.checksum = crc32_of(crc32_of(0, fk.data(), fk.size()), body.data(), body.size());
    const uint64_t total = sizeof h + fk.size() + body.size();
    auto failed = [&] {
        std::lock_guard lock(mu_);
        stats_.write_failures++;
    };
    // one program may take at most an eighth of the store (a bigger one is not stored)
    if (p.image.empty() || total > max_bytes_ / 8) return failed();
    static std::atomic<uint64_t> seq{0};
    const std::string tmp = std::format("{}{}-{}-{}", kTmpPrefix, ::getpid(), seq++, name);
    const int fd =
        ::openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return failed();
    const bool ok = full_write(fd, &h, sizeof h) && full_write(fd, fk.data(), fk.size()) &&
                    full_write(fd, body.data(), body.size());
    // a file it replaces (another process stored the same program) leaves the ledger's count
    struct stat old{};
    const uint64_t replaced =
        ::fstatat(dir_fd_, name.c_str(), &old, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(old.st_mode)
            ? uint64_t(old.st_size)
            : 0;
    // the rename publishes a whole file: readers see it complete or not at all
    if (::close(fd) != 0 || !ok || ::renameat(dir_fd_, tmp.c_str(), dir_fd_, name.c_str()) != 0) {
        ::unlinkat(dir_fd_, tmp.c_str(), 0);
        return failed();
    }
    {
        std::lock_guard lock(mu_);
        stats_.writes++;
    }
    account(int64_t(total) - int64_t(replaced));
}

namespace {

struct FileInfo {
    timespec mtime;
    uint64_t bytes;
    std::string name;
};

// The store's files (and removes temporary files left by processes that died writing them).
std::vector<FileInfo> scan(int dir_fd) {
    std::vector<FileInfo> files;
    const int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return files;
    DIR* d = ::fdopendir(fd);
    if (!d) {
        ::close(fd);
        return files;
    }
    const time_t now = ::time(nullptr);
    while (const dirent* e = ::readdir(d)) {
        struct stat st{};
        const bool tmp = std::strncmp(e->d_name, kTmpPrefix, std::strlen(kTmpPrefix)) == 0;
        if ((!tmp && !is_store_file(e->d_name)) ||
            ::fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (tmp) {
            if (S_ISREG(st.st_mode) && now - st.st_mtime > kStaleTmpSeconds)
                ::unlinkat(dir_fd, e->d_name, 0);
            continue;
        }
        files.push_back({st.st_mtim, uint64_t(st.st_size), e->d_name});
    }
    ::closedir(d);
    return files;
}

}  // namespace

uint64_t ProgramStore::disk_bytes() const {
    uint64_t total = 0;
    for (const FileInfo& f : scan(dir_fd_)) total += f.bytes;
    return total;
}

namespace {

// The ledger, opened for update: a regular file of ours (O_NOFOLLOW: a symlink is refused).
int open_ledger(int dir_fd) {
    const int fd = ::openat(dir_fd, ProgramStore::kLedgerName,
                            O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
    if (fd < 0) return -1;
    struct stat st{};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// Reads and rewrites the ledger under an exclusive lock; `update` gets the recorded total (none
// if the ledger is new or damaged) and returns the one to record (none: leave it as it is).
template <typename Update>
void update_ledger(int fd, Update update) {
    if (::flock(fd, LOCK_EX) != 0) return;
    uint64_t v = 0;
    const std::optional<uint64_t> now =
        ::pread(fd, &v, sizeof v, 0) == ssize_t(sizeof v) ? std::optional(v) : std::nullopt;
    if (const std::optional<uint64_t> next = update(now)) {
        v = *next;
        if (::pwrite(fd, &v, sizeof v, 0) != ssize_t(sizeof v)) ::ftruncate(fd, 0);  // unknown
    }
    ::flock(fd, LOCK_UN);
}

}  // namespace

std::optional<uint64_t> ProgramStore::ledger_bytes() const {
    const int fd = ::openat(dir_fd_, kLedgerName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return std::nullopt;
    uint64_t v = 0;
    const bool ok = ::pread(fd, &v, sizeof v, 0) == ssize_t(sizeof v);
    ::close(fd);
    return ok ? std::optional(v) : std::nullopt;
}

void ProgramStore::account(int64_t written) {
    const int fd = open_ledger(dir_fd_);
    if (fd < 0) return;  // a directory we cannot write holds no new files either
    bool full = true;
    update_ledger(fd, [&](std::optional<uint64_t> total) -> std::optional<uint64_t> {
        if (!total) return std::nullopt;
        const uint64_t next = written < 0 && uint64_t(-written) > *total ? 0 : *total + written;
        full = next > max_bytes_;
        return next;
    });
    ::close(fd);
    if (full) evict_and_record();
}

void ProgramStore::evict_and_record() {
    std::vector<FileInfo> files = scan(dir_fd_);
    uint64_t total = 0;
    for (const FileInfo& f : files) total += f.bytes;
    uint64_t evicted = 0;
    if (total > max_bytes_) {
        // least recently used first (a hit touches its file), down to 3/4 of the bound so the
        // next writes do not list the directory again at once
        std::sort(files.begin(), files.end(), [](const FileInfo& a, const FileInfo& b) {
            return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec
                                                    : a.mtime.tv_nsec < b.mtime.tv_nsec;
        });
        for (const FileInfo& f : files) {
            if (total <= max_bytes_ / 4 * 3) break;
            if (::unlinkat(dir_fd_, f.name.c_str(), 0) == 0 || errno == ENOENT) {
                total -= f.bytes;
                evicted++;
            }
        }
    }
    // What other processes saved while this one listed is lost from the count (the ledger then
    // runs low by that much until the next listing, which it corrects).
    if (const int fd = open_ledger(dir_fd_); fd >= 0) {
        update_ledger(fd, [&](std::optional<uint64_t>) { return std::optional(total); });
        ::close(fd);
    }
    std::lock_guard lock(mu_);
    stats_.scans++;
    stats_.evictions += evicted;
}

namespace {

// The ELF build id of the object holding this code (libspyre.so, or a test linking it
// statically): any change to the library's code gives another.
std::string own_build_id() {
    struct Search {
        uintptr_t addr;
        std::string id;
    } s{reinterpret_cast<uintptr_t>(&own_build_id), {}};
    ::dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* arg) -> int {
            auto* s = static_cast<Search*>(arg);
            bool mine = false;
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const auto& ph = info->dlpi_phdr[i];
                const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
                if (ph.p_type == PT_LOAD && s->addr >= lo && s->addr < lo + ph.p_memsz) mine = true;
            }
            if (!mine) return 0;
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const auto& ph = info->dlpi_phdr[i];
                if (ph.p_type != PT_NOTE) continue;
                auto* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
                const uint8_t* end = p + ph.p_memsz;
                while (p + sizeof(ElfW(Nhdr)) <= end) {
                    ElfW(Nhdr) n;
                    std::memcpy(&n, p, sizeof n);
                    const uint8_t* name = p + sizeof n;
                    const uint8_t* desc = name + ((n.n_namesz + 3) & ~3u);
                    if (desc + n.n_descsz > end) break;
                    if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 &&
                        std::memcmp(name, "GNU", 4) == 0 && n.n_descsz > 0)
                        s->id = to_hex(desc, n.n_descsz);
                    p = desc + ((n.n_descsz + 3) & ~3u);
                }
            }
            return 1;
        },
        &s);
    if (!s.id.empty()) return s.id;
    // no build id: the CRC-32 and size of the file itself
    Dl_info dl{};
    if (!::dladdr(reinterpret_cast<void*>(&own_build_id), &dl) || !dl.dli_fname) return {};
    const int fd = ::open(dl.dli_fname, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {};
    uint32_t crc = 0;
    uint64_t size = 0;
    uint8_t buf[1 << 16];
    ssize_t r;
    while ((r = ::read(fd, buf, sizeof buf)) > 0) crc = crc32_of(crc, buf, size_t(r)), size += r;
    ::close(fd);
    if (r < 0) return {};
    return std::format("crc32:{:08x}:{}", crc, size);
}

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

}  // namespace

std::string program_version_key() {
    static const std::string key = [] {
        const std::string id = own_build_id();
        if (id.empty()) return std::string();
        return std::format("libspyre {} build {} isa {} store {}", spyre_get_version_string(), id,
                           isa::kVersion, ProgramStore::kFormat);
    }();
    return key;
}

ProgramStore* process_program_store(std::string* status) {
    struct Process {
        std::unique_ptr<ProgramStore> store;
        std::string status;
    };
    static Process* p = [] {  // never destroyed: ops may run while statics are torn down
        auto* p = new Process;
        if (env("SPYRE_PROGRAM_CACHE") == "0") {
            p->status = "disabled (SPYRE_PROGRAM_CACHE=0)";
            return p;
        }
        ProgramStore::Config c;
        c.version = program_version_key();
        c.dir = env("SPYRE_PROGRAM_CACHE_DIR");
        if (c.dir.empty() && !env("XDG_CACHE_HOME").empty())
            c.dir = env("XDG_CACHE_HOME") + "/spyre/programs";
        if (c.dir.empty() && !env("HOME").empty()) c.dir = env("HOME") + "/.cache/spyre/programs";
        const std::string mb = env("SPYRE_PROGRAM_CACHE_MAX_MB");
        std::string why;
        bool warn = false;  // an unsafe directory or a bad setting; not a missing or read-only one
        if (!mb.empty()) {
            char* end = nullptr;
            errno = 0;
            const unsigned long long v = std::strtoull(mb.c_str(), &end, 10);
            warn = errno || *end || mb[0] == '-' || v < 1 || v > (ProgramStore::kMaxMaxBytes >> 20);
            if (warn)
                why = std::format(
                    "SPYRE_PROGRAM_CACHE_MAX_MB={} is not a number of MiB from 1 "
                    "to {}",
                    mb, ProgramStore::kMaxMaxBytes >> 20);
            else
                c.max_bytes = uint64_t(v) << 20;
        }
        if (why.empty()) {
            if (c.dir.empty())
                why = "no directory (neither SPYRE_PROGRAM_CACHE_DIR, XDG_CACHE_HOME nor HOME)";
            else
                p->store = ProgramStore::open(c, &why, &warn);
        }
        if (!p->store) {
            p->status = "off: " + why;
            if (warn)
                std::fprintf(stderr, "libspyre: program cache on disk off: %s\n", why.c_str());
        }
        return p;
    }();
    if (status) *status = p->status;
    return p->store.get();
}

}  // namespace spyre::ops

// SPDX-License-Identifier: MIT
// The program cache on disk (ops/program_store.hpp): a generated fused program stored and read back
// by another store on the directory (as the next process would) byte for byte; a new version finds
// none of the old files; corrupt, truncated, foreign, symlinked and group-writable files are
// rejected, removed and stored again; the bound evicts the least recently used files; unsafe
// directories are refused; processes writing and reading the same programs at once.
#include "ops/program_store.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <format>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ops/fused_program.hpp"
#include "ops/pricing.hpp"

namespace spyre::ops {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class ProgramStoreTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/spyre-progstore-XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        root_ = tmpl;
        dir_ = root_ + "/programs";
    }
    void TearDown() override {
        std::error_code ec;
        fs::permissions(root_, fs::perms::owner_all, ec);
        if (fs::exists(dir_)) fs::permissions(dir_, fs::perms::owner_all, ec);
        fs::remove_all(root_, ec);
    }
    std::unique_ptr<ProgramStore> open(std::string version = "v1", uint64_t max = 64 << 20) {
        std::string why;
        auto s = ProgramStore::open({dir_, version, max}, &why);
        EXPECT_TRUE(s) << why;
        return s;
    }
    std::string path(const ProgramStore& s, std::string_view key) const {
        return dir_ + "/" + s.file_name(key);
    }
    std::vector<std::string> files() const {
        std::vector<std::string> r;
        for (const auto& e : fs::directory_iterator(dir_)) r.push_back(e.path().filename());
        return r;
    }
    std::string root_, dir_;
};

// A real program: the fused chain torch.compile emits, planned and generated.
StoredPlan fused_plan(uint64_t n) {
    const FusedKernel k = parse_fused(
        "spyre.kernel 1\nin f16 full\nin f16 full\nout f16\n%0 = load 0\n%1 = load 1\n"
        "%2 = mul %0 %1\n%3 = const 1.5\n%4 = add %2 %3\n%5 = relu %4\n%6 = exp %0\n"
        "%7 = sub %5 %6\nstore 0 %7\n");
    const spyre_engine_config cfg = default_engine_config();
    const Pricer pricer(cfg);
    const FusedPlan p = plan_fused(pricer, k, n, cfg.num_cores);
    return {build_fused(k, n, p), p.cores, p.cycles, fused_plan_name(p)};
}

StoredPlan filler(size_t bytes, uint8_t seed) {
    StoredPlan p;
    p.image.resize(bytes);
    for (size_t i = 0; i < bytes; ++i) p.image[i] = uint8_t(seed + i * 7);
    p.cores = 3;
    p.cycles = 1000 + seed;
    p.plan = "filler " + std::to_string(seed);
    return p;
}

TEST_F(ProgramStoreTest, HitIsByteIdenticalAcrossStores) {
    const StoredPlan want = fused_plan(1 << 20);
    ASSERT_GT(want.image.size(), 64u);
    {
        auto s = open();
        EXPECT_FALSE(s->load("fused-key"));
        s->save("fused-key", want);
        EXPECT_EQ(s->stats().writes, 1u);
        EXPECT_EQ(s->stats().misses, 1u);
    }
    auto s = open();  // as the next process: nothing in memory
    const auto got = s->load("fused-key");
    ASSERT_TRUE(got);
    EXPECT_EQ(got->image, want.image);  // byte for byte
    EXPECT_EQ(*got, want);
    EXPECT_FALSE(s->load("another-key"));
    // a key of raw bytes, zeros included
    const std::string bin("k\0\x01\xff", 4);
    s->save(bin, want);
    EXPECT_TRUE(s->load(bin));
    EXPECT_FALSE(s->load(std::string("k\0\x01\xfe", 4)));
    const auto st = s->stats();
    EXPECT_EQ(st.hits, 2u);
    EXPECT_EQ(st.misses, 2u);
    EXPECT_EQ(st.rejected, 0u);
    for (const auto& f : files())  // no temporary files: programs and the ledger
        if (f != ProgramStore::kLedgerName) EXPECT_EQ(f.size(), 16u + 6u) << f;
    EXPECT_EQ(fs::status(dir_).permissions() & fs::perms::all, fs::perms::owner_all);
}

TEST_F(ProgramStoreTest, VersionChangeFindsNothing) {
    const StoredPlan p = filler(4096, 1);
    open("libspyre 0.1.0 build aa isa 1 store 1")->save("k", p);
    auto other = open("libspyre 0.1.0 build ab isa 1 store 1");
    EXPECT_NE(other->file_name("k"), open("libspyre 0.1.0 build aa isa 1 store 1")->file_name("k"));
    EXPECT_FALSE(other->load("k"));
    EXPECT_EQ(other->stats().rejected, 0u);
    other->save("k", filler(4096, 2));
    EXPECT_EQ(*other->load("k"), filler(4096, 2));
    EXPECT_EQ(*open("libspyre 0.1.0 build aa isa 1 store 1")->load("k"), p);  // both kept
    // the version key of this build: library version, its build id, ISA and file format
    const std::string v = program_version_key();
    EXPECT_EQ(v.rfind("libspyre ", 0), 0u) << v;
    EXPECT_NE(v.find(" build "), std::string::npos) << v;
    EXPECT_NE(v.find(std::format(" isa 1 store {}", ProgramStore::kFormat)), std::string::npos)
        << v;
}

// Each way a file can be wrong: rejected (counted, removed), then stored again and read.
TEST_F(ProgramStoreTest, BadFilesAreRejectedAndReplaced) {
    const StoredPlan p = filler(10000, 5);
    auto s = open();
    s->save("k", p);
    s->save("other", filler(10000, 6));
    const std::string f = path(*s, "k");
    const auto bytes = [&] {
        std::ifstream in(f, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), {});
    }();
    auto write = [&](const std::string& data, mode_t mode = 0600) {
        fs::remove(f);
        const int fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_EXCL, mode);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::write(fd, data.data(), data.size()), ssize_t(data.size()));
        ::fchmod(fd, mode);
        ::close(fd);
    };
    std::string flipped = bytes;
    flipped[bytes.size() - 100] ^= 1;  // in the image
    std::string flipped_key = bytes;
    flipped_key[48 + 1] ^= 1;  // in the stored key (after the 48-byte header)
    std::string foreign;       // another key's whole file under this name
    {
        std::ifstream in(path(*s, "other"), std::ios::binary);
        foreign.assign(std::istreambuf_iterator<char>(in), {});
    }
    const std::vector<std::pair<const char*, std::string>> bad = {
        {"a flipped image byte", flipped},
        {"a flipped key byte", flipped_key},
        {"truncated in the image", bytes.substr(0, bytes.size() - 1)},
        {"truncated in the header", bytes.substr(0, 50)},
        {"empty", ""},
        {"another key's file", foreign},
        {"garbage", std::string(bytes.size(), 'x')},
        {"one byte too many", bytes + "x"},
    };
    uint64_t rejected = 0;
    for (const auto& [what, data] : bad) {
        SCOPED_TRACE(what);
        write(data);
        EXPECT_FALSE(s->load("k"));
        EXPECT_EQ(s->stats().rejected, ++rejected);
        EXPECT_FALSE(fs::exists(f));  // removed
        s->save("k", p);
        EXPECT_EQ(*s->load("k"), p);
    }
    {
        SCOPED_TRACE("group and world writable");
        write(bytes, 0666);
        EXPECT_FALSE(s->load("k"));
        EXPECT_EQ(s->stats().rejected, ++rejected);
    }
    {
        SCOPED_TRACE("a symlink to a sound file");
        const std::string elsewhere = root_ + "/elsewhere";
        {
            std::ofstream(elsewhere, std::ios::binary) << bytes;
        }
        fs::remove(f);
        fs::create_symlink(elsewhere, f);
        EXPECT_FALSE(s->load("k"));
        EXPECT_EQ(s->stats().rejected, ++rejected);
        EXPECT_TRUE(fs::exists(elsewhere));  // the link is removed, not its target
    }
    s->save("k", p);
    EXPECT_EQ(*s->load("k"), p);
}

TEST_F(ProgramStoreTest, BoundEvictsLeastRecentlyUsed) {
    const uint64_t max = 1 << 20;  // the smallest bound: files of up to 128 KiB
    auto s = open("v1", max);
    s->save("too big", filler(max / 8, 0));
    EXPECT_EQ(s->stats().write_failures, 1u);
    const size_t each = 100 << 10;
    auto key = [](int i) { return "k" + std::to_string(i); };
    for (int i = 0; i < 8; ++i) {
        s->save(key(i), filler(each, uint8_t(i)));
        std::this_thread::sleep_for(std::chrono::milliseconds(15));  // distinct mtimes
    }
    ASSERT_TRUE(s->load(key(0)));  // used: now the most recent
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    for (int i = 8; i < 14; ++i) {
        s->save(key(i), filler(each, uint8_t(i)));
        std::this_thread::sleep_for(std::chrono::milliseconds(15));
        EXPECT_LE(s->disk_bytes(), max) << i;
    }
    EXPECT_GT(s->stats().evictions, 0u);
    EXPECT_TRUE(s->load(key(0)));   // used late: kept
    EXPECT_TRUE(s->load(key(13)));  // the newest: kept
    EXPECT_FALSE(s->load(key(1)));  // the least recently used: gone
    EXPECT_EQ(s->stats().rejected, 0u);
}

// A save lists the directory only when the ledger is missing or passes the bound: a process's
// first save into a directory of thousands of files over 9p under TCG took over a minute.
TEST_F(ProgramStoreTest, SavesKeepTheLedgerAndListTheDirectoryOnlyWhenNeeded) {
    auto key = [](int i) { return "k" + std::to_string(i); };
    {
        auto first = open();
        first->save(key(0), filler(1000, 0));  // no ledger yet: one listing makes it
        EXPECT_EQ(first->stats().scans, 1u);
        EXPECT_EQ(first->ledger_bytes(), first->disk_bytes());
    }
    auto s = open();  // the next process: the ledger has room, no listing
    for (int i = 1; i < 40; ++i) s->save(key(i), filler(1000 + i, uint8_t(i)));
    s->save(key(3), filler(1000 + 3, 3));  // the same program again: replaced, not added
    EXPECT_EQ(s->stats().writes, 40u);
    EXPECT_EQ(s->stats().scans, 0u);
    EXPECT_EQ(s->ledger_bytes(), s->disk_bytes());
    // removed: the next save lists once and records the truth
    fs::remove(dir_ + "/" + ProgramStore::kLedgerName);
    EXPECT_FALSE(s->ledger_bytes());
    s->save(key(40), filler(1000, 40));
    EXPECT_EQ(s->stats().scans, 1u);
    EXPECT_EQ(s->ledger_bytes(), s->disk_bytes());
    // a ledger that overstates (files removed by hand) lists once, evicts nothing it need not
    {
        std::ofstream(dir_ + "/" + ProgramStore::kLedgerName, std::ios::binary)
            << "\xff\xff\xff\xff\xff\xff\xff\x7f";
    }
    s->save(key(41), filler(1000, 41));
    EXPECT_EQ(s->stats().scans, 2u);
    EXPECT_EQ(s->stats().evictions, 0u);
    EXPECT_EQ(s->ledger_bytes(), s->disk_bytes());
    for (int i = 0; i < 42; ++i) EXPECT_TRUE(s->load(key(i))) << i;
}

TEST_F(ProgramStoreTest, LedgerThatIsNotARegularFileOfOursIsNotUsed) {
    auto s = open();
    const std::string ledger = dir_ + "/" + ProgramStore::kLedgerName;
    const std::string elsewhere = root_ + "/elsewhere";
    {
        std::ofstream(elsewhere, std::ios::binary) << "12345678";
    }
    fs::create_symlink(elsewhere, ledger);
    s->save("k", filler(1000, 1));
    EXPECT_EQ(*s->load("k"), filler(1000, 1));  // the program is stored all the same
    std::ifstream in(elsewhere, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "12345678");  // not written
    EXPECT_EQ(s->stats().scans, 0u);  // and no listing without a ledger to record it
}

TEST_F(ProgramStoreTest, UnsafeDirectoriesAreRefused) {
    std::string why;
    EXPECT_FALSE(ProgramStore::open({"relative/dir", "v1", 1 << 20}, &why));
    EXPECT_NE(why.find("absolute"), std::string::npos) << why;
    EXPECT_FALSE(ProgramStore::open({dir_, "", 1 << 20}, &why));
    ASSERT_TRUE(open());  // made, mode 0700
    for (const fs::perms extra : {fs::perms::group_write, fs::perms::others_write}) {
        fs::permissions(dir_, fs::perms::owner_all | extra);
        why.clear();
        bool report = false;
        EXPECT_FALSE(ProgramStore::open({dir_, "v1", 1 << 20}, &why, &report));
        EXPECT_NE(why.find("writable by group or others"), std::string::npos) << why;
        EXPECT_TRUE(report);  // the user hears of it
    }
    fs::permissions(dir_, fs::perms::owner_all);
    {
        std::ofstream(root_ + "/file") << "x";
    }
    bool report = true;
    EXPECT_FALSE(ProgramStore::open({root_ + "/file", "v1", 1 << 20}, &why, &report));
    EXPECT_FALSE(report);    // cannot be opened (as a read-only home): off without a warning
    if (::geteuid() == 0) {  // another user's directory (root can make one)
        ASSERT_EQ(::chown(dir_.c_str(), 4242, 4242), 0);
        why.clear();
        EXPECT_FALSE(ProgramStore::open({dir_, "v1", 1 << 20}, &why));
        EXPECT_NE(why.find("belongs to uid 4242"), std::string::npos) << why;
        ASSERT_EQ(::chown(dir_.c_str(), 0, 0), 0);
        // and another user's file in our directory
        auto s = open();
        s->save("k", filler(1000, 1));
        ASSERT_EQ(::chown(path(*s, "k").c_str(), 4242, 4242), 0);
        EXPECT_FALSE(s->load("k"));
        EXPECT_EQ(s->stats().rejected, 1u);
    }
}

// Processes storing and reading the same programs at once: every read is whole and right.
TEST_F(ProgramStoreTest, ConcurrentProcesses) {
    ASSERT_TRUE(open());
    const int procs = 4, keys = 12;
    std::vector<pid_t> pids;
    for (int p = 0; p < procs; ++p) {
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            std::string why;
            auto s = ProgramStore::open({dir_, "v1", 64 << 20}, &why);
            int bad = s ? 0 : 100;
            for (int round = 0; s && round < 20; ++round)
                for (int k = 0; k < keys; ++k) {
                    const int kk = (k + p) % keys;
                    const std::string key = "k" + std::to_string(kk);
                    const StoredPlan want = filler(20000 + 1000 * kk, uint8_t(kk));
                    if (auto got = s->load(key)) {
                        if (!(*got == want)) bad++;
                    } else {
                        s->save(key, want);
                    }
                }
            if (s && s->stats().rejected) bad++;
            ::_exit(bad);
        }
        pids.push_back(pid);
    }
    for (const pid_t pid : pids) {
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        EXPECT_EQ(WEXITSTATUS(status), 0);
    }
    auto s = open();
    for (int k = 0; k < keys; ++k)
        EXPECT_EQ(*s->load("k" + std::to_string(k)), filler(20000 + 1000 * k, uint8_t(k))) << k;
    for (const auto& f : files()) EXPECT_EQ(f.rfind(".tmp-", 0), std::string::npos) << f;
}

}  // namespace
}  // namespace spyre::ops

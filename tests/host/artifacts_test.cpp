// The built artifacts: libspyre.so exports only the C API and has a SONAME; the tools fail
// cleanly without a card.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>

#include "command_util.hpp"
#include "spyre/spyre.h"

namespace {

spyre_test::CmdResult run(const std::string& cmd) { return spyre_test::run_command(cmd, true); }

bool driver_loaded() {
    struct stat st;
    return stat("/sys/module/spyre", &st) == 0;
}

// The functions the public headers declare: every "spyre_name(" in them (declarations; the
// headers hold no calls).
std::set<std::string> declared_functions() {
    std::set<std::string> names;
    const std::regex decl(R"(\b(spyre_[a-z0-9_]+)\s*\()");
    for (const auto& entry : std::filesystem::directory_iterator(SPYRE_PUBLIC_INCLUDE_DIR)) {
        if (entry.path().extension() != ".h") continue;
        std::ifstream in(entry.path());
        const std::string text((std::istreambuf_iterator<char>(in)), {});
        for (std::sregex_iterator it(text.begin(), text.end(), decl), end; it != end; ++it)
            names.insert((*it)[1].str());
    }
    return names;
}

TEST(SharedLibrary, ExportsOnlyTheCApi) {
    auto r = run(std::string("nm -D --defined-only ") + SPYRE_SO_PATH);
    ASSERT_EQ(r.status, 0) << r.out;
    std::set<std::string> exported;
    std::string line;
    for (size_t pos = 0; pos < r.out.size();) {
        size_t end = r.out.find('\n', pos);
        line = r.out.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
        pos = end == std::string::npos ? r.out.size() : end + 1;
        size_t sp = line.rfind(' ');
        std::string sym = line.substr(sp + 1);
        sym = sym.substr(0, sym.find('@'));  // spyre_free@@LIBSPYRE_0
        if (sym.empty() || sym.starts_with("LIBSPYRE_")) continue;
        EXPECT_TRUE(sym.starts_with("spyre_")) << "unexpected export: " << sym;
        EXPECT_FALSE(sym.starts_with("spyre_engine_")) << "engine internals exported: " << sym;
        exported.insert(sym);
    }
    // exactly the functions of spyre.h, spyre/ops.h, spyre/comm.h and spyre/program_cache.h
    const std::set<std::string> declared = declared_functions();
    EXPECT_GT(declared.size(), 100u);
    for (const auto& name : declared) EXPECT_TRUE(exported.count(name)) << "not exported: " << name;
    for (const auto& name : exported) EXPECT_TRUE(declared.count(name)) << "not declared: " << name;
}

TEST(SharedLibrary, HasSonameAndWorksThroughDlopen) {
    auto r = run(std::string("objdump -p ") + SPYRE_SO_PATH);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("SONAME               libspyre.so.0"), std::string::npos) << r.out;
    void* h = dlopen(SPYRE_SO_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h, nullptr) << dlerror();
    using StatusString = const char* (*)(spyre_status);
    auto fn = reinterpret_cast<StatusString>(dlsym(h, "spyre_status_string"));
    ASSERT_NE(fn, nullptr);
    EXPECT_STREQ(fn(SPYRE_ERROR_TIMEOUT), "timeout");
    EXPECT_EQ(dlsym(h, "_ZN5spyre11status_fromEi"), nullptr);
    dlclose(h);
}

TEST(Tools, SmiWithoutCardFailsWithAdvice) {
    if (driver_loaded()) GTEST_SKIP() << "the spyre driver is loaded on this machine";
    for (const char* args : {"", " --json", " -L", " -q"}) {
        auto r = run(std::string(SPYRE_SMI_PATH) + args);
        EXPECT_EQ(r.status, 2) << args << ": " << r.out;
        EXPECT_NE(
            r.out.find("No Spyre card found. Is the spyre driver loaded? Try: modprobe spyre"),
            std::string::npos)
            << r.out;
    }
}

TEST(Tools, SmiHelpAndBadOption) {
    auto r = run(std::string(SPYRE_SMI_PATH) + " --help");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("--json"), std::string::npos) << r.out;
    r = run(std::string(SPYRE_SMI_PATH) + " --no-such-option");
    EXPECT_NE(r.status, 0) << r.out;
}

TEST(Tools, RoundtripWithoutCardFails) {
    if (driver_loaded()) GTEST_SKIP() << "the spyre driver is loaded on this machine";
    auto r = run(SPYRE_ROUNDTRIP_PATH);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("modprobe spyre"), std::string::npos) << r.out;
}

}  // namespace

// Runs a shell command and captures its output and exit status. Shared by the host and guest
// tests that exercise the built binaries (spyre-smi, spyre-roundtrip, the shared library).
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace spyre_test {

struct CmdResult {
    int status;       // exit status, -1 if the command could not run or was killed
    std::string out;  // standard output (and standard error if merged)
};

inline CmdResult run_command(const std::string& cmd, bool merge_stderr) {
    CmdResult r{-1, {}};
    FILE* f = popen((merge_stderr ? cmd + " 2>&1" : cmd).c_str(), "r");
    if (!f) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) r.out.append(buf, n);
    int st = pclose(f);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

}  // namespace spyre_test

#include "SpyreFork.h"

#include <c10/util/Exception.h>
#include <pthread.h>

#include <atomic>

namespace torch_spyre {
namespace {

std::atomic<bool> g_used{false};
std::atomic<bool> g_bad_fork{false};

// In the child: the parent's use of spyre (copied with its memory) makes the child a bad fork.
void on_fork_child() {
    if (g_used.load()) g_bad_fork = true;
}

const bool g_registered = [] {
    pthread_atfork(nullptr, nullptr, &on_fork_child);
    return true;
}();

}  // namespace

bool in_bad_fork() noexcept { return g_bad_fork.load(std::memory_order_relaxed); }

void check_not_forked() {
    TORCH_CHECK(!in_bad_fork(),
                "torch_spyre: cannot re-initialize Spyre in a forked subprocess (the parent used "
                "spyre before os.fork, and its device handles, streams and worker threads do not "
                "survive a fork). To use Spyre with multiprocessing, use the 'spawn' or "
                "'forkserver' start method.");
}

void note_initialized() noexcept { g_used = true; }

}  // namespace torch_spyre

// Fork safety, as CUDA's: a child forked after the parent used spyre cannot use the parent's
// device handles, streams and worker threads (libspyre's state does not survive fork). The
// first spyre use in such a child raises a clear error instead of hanging or corrupting the
// parent's cards; the child must use the 'spawn' start method (or not have the parent touch
// spyre before forking).
#pragma once

namespace torch_spyre {

// Whether this process is a child forked after its parent had initialized spyre.
bool in_bad_fork() noexcept;
// Throws (RuntimeError) in such a child.
void check_not_forked();
// Marks the runtime as used by this process, so that its fork children are refused.
void note_initialized() noexcept;

}  // namespace torch_spyre

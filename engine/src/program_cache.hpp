// SPDX-License-Identifier: MIT
// Decoded programs of recent jobs, found by their image bytes: a launch of a program the engine
// has run before skips decoding and validation, which depend on the image alone. A few entries,
// the least recently used replaced first. Each also keeps how long its last run took on the host
// (RunHint), which only decides how the next run is scheduled on host threads.
#pragma once

#include <cstring>
#include <vector>

#include "program.hpp"

namespace spyre::eng {

// The host time of a program's last run (its phases, without start and results).
struct RunHint {
    bool known = false;
    bool inline_run = false;  // it ran on the calling thread alone
    uint64_t ns = 0;
    // the first kPhases phases of that run: host time each, and (bit p) which ran alone
    static constexpr uint32_t kPhases = 8;
    uint32_t phase_ns[kPhases] = {};
    uint32_t phase_inline = 0;
};

class ProgramCache {
  public:
    ProgramCache() { entries_.reserve(kEntries); }  // entries never move

    // The validated program of image [bytes, bytes + size), or nullptr with f filled, and its
    // run hint. Both valid until the next call.
    const Program* get(const uint8_t* bytes, uint64_t size, Failure& f, RunHint** hint) {
        ++clock_;
        if (bytes && size <= kMaxImage) {
            for (Entry& e : entries_)  // (an empty image: no program, never a match)
                if (!e.image.empty() && e.image.size() == size &&
                    std::memcmp(e.image.data(), bytes, size) == 0) {
                    e.used = clock_;
                    *hint = &e.hint;
                    return &e.prog;
                }
        }
        Entry& e = victim(bytes && size <= kMaxImage);
        e.image.clear();
        e.used = 0;
        e.hint = RunHint{};
        *hint = &e.hint;
        if (!validate(bytes, size, e.prog, f)) return nullptr;
        if (&e != &big_) {
            e.image.assign(bytes, bytes + size);
            e.used = clock_;
        }
        return &e.prog;
    }

  private:
    static constexpr size_t kEntries = 32;
    static constexpr uint64_t kMaxImage = 64 << 10;  // larger programs are decoded every time
    struct Entry {
        std::vector<uint8_t> image;  // empty: no program
        Program prog;
        RunHint hint;
        uint64_t used = 0;
    };
    Entry& victim(bool cached) {
        if (!cached) return big_;
        if (entries_.size() < kEntries) return entries_.emplace_back();
        Entry* v = &entries_[0];
        for (Entry& e : entries_)
            if (e.used < v->used) v = &e;
        return *v;
    }
    std::vector<Entry> entries_;
    Entry big_;
    uint64_t clock_ = 0;
};

}  // namespace spyre::eng

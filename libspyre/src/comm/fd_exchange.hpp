// Hands file descriptors (dma-bufs of the p2p transport between processes) from every rank to
// every other rank: each rank listens on a unix socket in the abstract namespace named after
// the communicator's shared-memory segment and its rank ("\0spyre-comm/<segment>-r<rank>",
// nothing in the file system), connects to each other rank's socket and sends it one message
// with its fd as SCM_RIGHTS. A message is believed only from the process that joined the
// communicator as the rank it claims (SO_PEERCRED); every wait is bounded by the segment's
// timeout and notices a dead peer or a failed communicator.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/shm_segment.hpp"
#include "raii.hpp"

namespace spyre::comm {

class FdExchange {
  public:
    // Listens for this rank's messages; every rank must have done so before any sends
    // (a segment barrier in between).
    explicit FdExchange(Segment& seg);

    struct Item {
        UniqueFd fd;         // invalid: the rank had nothing to give
        uint64_t value = 0;  // a number that travels with it (an offset)
    };
    // Sends give[r] to every rank r in `peers` (an invalid fd: "nothing"), then returns what each
    // of them sent this rank (indexed by rank; an invalid fd where nothing came, e.g. a peer
    // that could not reach this rank's socket). The fds of `give` stay the caller's. Once per
    // communicator (the segment counts the ranks that have sent).
    std::vector<Item> exchange(const std::vector<int>& peers, const std::vector<Item>& give);

  private:
    Segment& seg_;
    UniqueFd listen_;
};

}  // namespace spyre::comm

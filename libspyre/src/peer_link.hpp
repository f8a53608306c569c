// The modeled peer link of hw 1.6 (Documentation/hardware.md section 11, "Peer copies"), as
// the card model prices a copy that moves all its bytes to or from a peer card. The simulator
// backend charges its peer copies with it, so that modeled times agree with the card model.
#pragma once

#include <algorithm>
#include <cstdint>

#include "spyre/engine.h"

namespace spyre {

// p2p-mbps: PCIe Gen5 x16, 32 GT/s x 16 lanes x 128/130 = 63.0 GB/s raw per direction, about
// 60 GB/s after TLP overhead (the same figure as host DMA); a peer copy crosses this card's
// link, a switch and the peer's link, all Gen5 x16.
inline constexpr uint64_t kP2pLinkBytesPerS = 60000ull * 1000 * 1000;
// SPYRE_CYCLES_P2P_LATENCY: once per copy that touches a peer, two Gen5 switch traversals
// (~150 ns each) and a read completion round trip through the peer (~700 ns): 1 us at 1.5 GHz.
inline constexpr uint64_t kP2pLatencyCycles = 1500;

// SPYRE_CYCLES_SEM_SIGNAL: a semaphore signal (hw 1.8, SEM_SIGNAL), plus kP2pLatencyCycles
// when it goes into a peer card: with device-side waits every message between two cards is a
// push and its "posted" signal (libspyre.md "Device-side waits"). The simulator charges
// signals nothing.
inline constexpr uint64_t kSemSignalCycles = 32;

// 256 + 1500 + ceil(bytes * clock / min(p2p link, this card's DDR, the peer's DDR)).
inline uint64_t peer_copy_cycles(const spyre_engine_config& self, const spyre_engine_config& peer,
                                 uint64_t bytes) {
    const uint64_t rate = std::min({kP2pLinkBytesPerS, self.ddr_bytes_per_s, peer.ddr_bytes_per_s});
    const unsigned __int128 num = static_cast<unsigned __int128>(bytes) * self.clock_hz;
    return self.dma_setup_cycles + kP2pLatencyCycles +
           static_cast<uint64_t>((num + rate - 1) / rate);
}

}  // namespace spyre

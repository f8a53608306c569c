// What the collectives' tests share (comm_test.cpp: ranks as threads; comm_rank_suite.cpp and
// comm_rank_main.cpp: one rank per process): values <-> bytes of a dtype, joining a rank on its
// card, and device buffers padded around an offset.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "spyre/comm.h"
#include "spyre/numerics.hpp"
#include "spyre/spyre.h"

namespace comm_test {

inline size_t esize(spyre_dtype t) { return t == SPYRE_DTYPE_FLOAT32 ? 4 : 2; }

// Host values -> bytes of t (fp16/bf16 rounded).
inline std::vector<uint8_t> to_bytes(const std::vector<float>& v, spyre_dtype t) {
    std::vector<uint8_t> b(v.size() * esize(t));
    for (size_t i = 0; i < v.size(); ++i) {
        if (t == SPYRE_DTYPE_FLOAT32) {
            std::memcpy(&b[i * 4], &v[i], 4);
        } else {
            const uint16_t h = t == SPYRE_DTYPE_FLOAT16 ? spyre::num::f32_to_f16(v[i])
                                                        : spyre::num::f32_to_bf16(v[i]);
            std::memcpy(&b[i * 2], &h, 2);
        }
    }
    return b;
}

inline std::vector<float> from_bytes(const std::vector<uint8_t>& b, spyre_dtype t) {
    std::vector<float> v(b.size() / esize(t));
    for (size_t i = 0; i < v.size(); ++i) {
        if (t == SPYRE_DTYPE_FLOAT32) {
            std::memcpy(&v[i], &b[i * 4], 4);
        } else {
            uint16_t h;
            std::memcpy(&h, &b[i * 2], 2);
            v[i] =
                t == SPYRE_DTYPE_FLOAT16 ? spyre::num::f16_to_f32(h) : spyre::num::bf16_to_f32(h);
        }
    }
    return v;
}

// Rank `rank` of `n` on card rank mod the card count: opens it and joins the communicator.
inline spyre_status join_rank(const spyre_comm_unique_id& id, int n, int rank, spyre_device_t* dev,
                              spyre_comm_t* comm) {
    int cards = 0;
    if (spyre_status s = spyre_get_device_count(&cards)) return s;
    if (spyre_status s = spyre_device_open(rank % (cards > 0 ? cards : 1), dev)) return s;
    return spyre_comm_init_rank(comm, n, &id, rank, *dev);
}

// A buffer of `dev` holding b at `offset`, with `offset` bytes before and extra + 1 after (so
// that an overrun shows); null on failure (spyre_last_error says why).
inline spyre_buffer_t upload(spyre_device_t dev, const std::vector<uint8_t>& b, uint64_t offset,
                             uint64_t extra = 0) {
    spyre_buffer_t buf = nullptr;
    if (spyre_malloc(dev, offset + b.size() + extra + 1, &buf)) return nullptr;
    if (!b.empty() && spyre_memcpy_htod(buf, offset, b.data(), b.size())) {
        spyre_free(buf);
        return nullptr;
    }
    return buf;
}

// bytes of buf at offset, once `stream`'s work (NULL: all of dev's) has finished.
inline spyre_status download(spyre_device_t dev, spyre_stream_t stream, spyre_buffer_t buf,
                             uint64_t offset, std::vector<uint8_t>& out) {
    if (spyre_status s = stream ? spyre_stream_synchronize(stream) : spyre_device_synchronize(dev))
        return s;
    return out.empty() ? SPYRE_SUCCESS : spyre_memcpy_dtoh(out.data(), buf, offset, out.size());
}

}  // namespace comm_test

// SPDX-License-Identifier: MIT
// Scaled dot-product attention on the cores: out = softmax(scale * Q K^T + mask) V, flash
// style (K/V streamed in blocks with an online softmax, nothing but the output written to DDR),
// GQA heads of one KV head processed together so each K/V block is loaded once for all of them.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "ops/pricing.hpp"
#include "spyre/isa.hpp"

namespace spyre::ops {

// Q [B, Hq, Lq, D], K and V [B, Hkv, Lk, D], out [B, Hq, Lq, D]: dense row-major, starting
// 128-byte aligned, D x element size a multiple of 128 bytes. Hq = group x Hkv.
// causal: query i sees keys j <= i + (Lk - Lq) (the KV cache holds Lk - Lq earlier tokens).
struct AttentionShape {
    uint64_t B = 1, Hq = 1, Hkv = 1, Lq = 1, Lk = 1, D = 128;
    isa::DType t = isa::DType::F16;
    bool causal = false;
    float scale = 0.0f;  // 0 = 1 / sqrt(D)
    // Byte strides of the (batch, head, position) dims of q, k, v and out; rows of D elements
    // are contiguous. All 0 = dense [B, H, L, D]. Every used stride is a multiple of 128.
    uint64_t q_st[3] = {}, k_st[3] = {}, v_st[3] = {}, o_st[3] = {};
    // An attention mask [B or 1, Hq or 1, Lq or 1, Lk] (launch argument 4): ADD adds it to the
    // scaled scores (fp32, fp16 or bf16: mask_t), KEEP keeps a score where it is nonzero (I8, a
    // boolean's bytes) and sets it to -inf elsewhere. m_st: byte strides of its batch, head and
    // query dims, 0 where it broadcasts (multiples of 128; its rows of Lk are contiguous).
    enum class Mask : uint8_t { NONE, ADD, KEEP } mask = Mask::NONE;
    isa::DType mask_t = isa::DType::F32;
    uint64_t m_st[3] = {};
    // lse: also write each query row's logsumexp of the scaled, masked scores (fp32, launch
    // argument 5), the statistic the backward pass recomputes the probabilities from. l_st: byte
    // strides of its batch and head dims (multiples of 128; its Lq values contiguous). A plan
    // then needs whole sticks per query block (lse_fits).
    bool lse = false;
    uint64_t l_st[2] = {};
    // runtime_lk: the program reads the key length from launch argument 6 and the batch and head
    // byte strides of K and V from arguments 7..10 (attention_length_args), so one program
    // serves every key length (a decode step grows Lk by one). Not with causal; Lk and the
    // strides of the shape are then those it is priced at, not part of the program.
    bool runtime_lk = false;
    // The strides with dense defaults filled in.
    AttentionShape resolved() const;
};

struct AttentionPlan {
    uint64_t bq = 1;          // query rows per head in one work unit (divides Lq)
    uint64_t bk = 64;         // keys per block
    uint32_t cores = 1;       // cores the units are spread over
    bool prefetch_q = false;  // load the next unit's Q rows while this unit computes
    uint64_t lx_bytes = 0;
    uint64_t cycles = 0;  // priced
    spyre_engine_result stats{};
};

// Launch arguments: 0 = Q, 1 = K, 2 = V, 3 = out, 4 = mask, 5 = lse (device addresses); with
// runtime_lk also attention_length_args(s).
std::vector<uint8_t> build_attention(const AttentionShape& s, const AttentionPlan& p);
// Launch arguments 6..10 of a runtime_lk program for s at its key length: Lk, then the batch
// and head byte strides of K and V (dense defaults resolved at Lk).
std::vector<uint64_t> attention_length_args(const AttentionShape& s);
// LX bytes a plan needs, or 0 if it cannot be laid out.
uint64_t attention_lx_bytes(const AttentionShape& s, uint64_t bq, uint64_t bk,
                            bool prefetch_q = false);
// Enumerates query/key blocks and core counts, prices the candidates exactly, returns the best.
AttentionPlan plan_attention(const Pricer& pricer, const AttentionShape& s, uint32_t max_cores);
// The plan of s with the blocks of `chosen` (the best plan of the same heads at a nearby key
// length), priced once instead of every candidate; nothing if those blocks do not suit s. A
// decode step grows Lk by one, and pricing every candidate at every step was most of its host
// time (ops.md "Attention plans across key lengths").
std::optional<AttentionPlan> replan_attention(const Pricer& pricer, const AttentionShape& s,
                                              const AttentionPlan& chosen, uint32_t max_cores);
// The key lengths one runtime_lk decode program serves, the bucket of Lk: 1..64, then each
// power of two's 2^(k-1) + 1 .. 2^k.
struct LengthBucket {
    uint64_t lo, hi;
};
inline LengthBucket attention_length_bucket(uint64_t Lk) {
    const uint64_t hi = std::max<uint64_t>(64, std::bit_ceil(Lk));
    return {hi == 64 ? 1 : hi / 2 + 1, hi};
}
// The plan of a runtime_lk program serving key lengths lo..s.Lk: every candidate priced at a few
// lengths spread over them, the least sum wins; cycles is its price at s.Lk.
AttentionPlan plan_attention_lengths(const Pricer& pricer, const AttentionShape& s, uint64_t lo,
                                     uint32_t max_cores);
// The modeled cycles of a runtime_lk program (`image` on `cores` cores, built for s) at
// kLengthPoints key lengths spread evenly over lo..hi, ascending, and the cycles at Lk
// interpolated between the two nearest (linear): what libspyre reports for a decode length
// without pricing every length.
constexpr int kLengthPoints = 9;
using LengthPrices = std::vector<std::pair<uint64_t, uint64_t>>;  // (Lk, cycles)
LengthPrices price_attention_lengths(const Pricer& pricer, const std::vector<uint8_t>& image,
                                     uint32_t cores, const AttentionShape& s, uint64_t lo,
                                     uint64_t hi);
uint64_t interpolate_cycles(const LengthPrices& points, uint64_t Lk);
// Whether query blocks of bq rows start on a stick of an fp32 [.., Lq] row (every block
// stores its rows of the logsumexp, or of the backward's row statistics, with one DMA).
inline bool lse_block_fits(uint64_t Lq, uint64_t bq) { return bq == Lq || (bq * 4) % 128 == 0; }
// The dense byte strides (batch, head) of an fp32 [B, H, Lq] row statistic with 128-byte rows.
inline void dense_row_stat_strides(uint64_t H, uint64_t Lq, uint64_t* st) {
    st[1] = (Lq * 4 + 127) / 128 * 128, st[0] = H * st[1];
}
// Bytes a tensor spans (0 = q, 1 = k, 2 = v, 3 = out, 4 = mask: 0 without one, 5 = lse: 0
// without).
uint64_t attention_tensor_bytes(const AttentionShape& s, int which);
// Exact cycles of one plan (timing-only run); fills p.cycles and p.stats.
void price_attention(const Pricer& pricer, const AttentionShape& s, AttentionPlan& p);

}  // namespace spyre::ops

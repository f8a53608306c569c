// SPDX-License-Identifier: MIT
// The backward pass of scaled dot-product attention on the cores, flash style: the
// probabilities are recomputed tile by tile from the forward's logsumexp, nothing of size
// [Lq, Lk] is written to DDR. Two programs, launched in this order:
//   dQ pass: a unit is (batch, KV head, query block) with the group's query heads stacked;
//     it writes delta = rowsum(dO * O) for the dK/dV pass and dQ = scale sum_j dS K;
//   dK/dV pass: a unit is (batch, KV head, key block); over the query blocks that see it,
//     dV = sum P^T dO and dK = scale sum dS^T Q, the group's query heads summed in the matmul.
// Per tile: P = exp(scale Q K^T + mask - lse), dP = dO V^T, dS = P (dP - delta).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/attention_program.hpp"
#include "ops/pricing.hpp"

namespace spyre::ops {

// The forward's shape (a.lse set: a.l_st are the logsumexp's strides) and the strides of the
// gradients: byte strides of the (batch, head, position) dims, all 0 = dense; rows contiguous.
// delta is the dQ pass's scratch, an fp32 [B, Hq, Lq] laid out like the logsumexp (d_st).
struct AttentionGradShape {
    AttentionShape a;
    uint64_t do_st[3] = {}, dq_st[3] = {}, dk_st[3] = {}, dv_st[3] = {};
    uint64_t d_st[2] = {};
    AttentionGradShape resolved() const;
};

struct AttentionGradPlan {
    uint64_t bq = 1, bk = 64;  // dQ pass: query rows per head of a unit, keys per block
    uint64_t kq = 1, kk = 64;  // dK/dV pass: query rows per head of a block, keys of a unit
    uint32_t dq_cores = 1, dkv_cores = 1;
    uint64_t dq_lx = 0, dkv_lx = 0;
    uint64_t dq_cycles = 0, dkv_cycles = 0;  // priced
};

// Launch arguments of both programs: 0 = Q, 1 = K, 2 = V, 3 = out, 4 = mask, 5 = lse, 6 = dO,
// 7 = delta, 8 = dQ, 9 = dK, 10 = dV.
enum : int {
    kGradQ,
    kGradK,
    kGradV,
    kGradOut,
    kGradMask,
    kGradLse,
    kGradDout,
    kGradDelta,
    kGradDq,
    kGradDk,
    kGradDv,
    kGradArgs
};
std::vector<uint8_t> build_attention_dq(const AttentionGradShape& s, const AttentionGradPlan& p);
std::vector<uint8_t> build_attention_dkv(const AttentionGradShape& s, const AttentionGradPlan& p);
// LX bytes of a pass's blocks (0: they do not fit the shape).
uint64_t attention_dq_lx_bytes(const AttentionGradShape& s, uint64_t bq, uint64_t bk);
uint64_t attention_dkv_lx_bytes(const AttentionGradShape& s, uint64_t kq, uint64_t kk);
// Bytes a launch argument's tensor spans (kGradQ .. kGradDv).
uint64_t attention_grad_tensor_bytes(const AttentionGradShape& s, int which);
// Prices the candidate blocks of each pass exactly and returns the best of each (passes: bit 0
// the dQ pass, bit 1 the dK/dV pass; the other pass's fields stay default).
AttentionGradPlan plan_attention_grad(const Pricer& pricer, const AttentionGradShape& s,
                                      uint32_t max_cores, int passes = 3);

}  // namespace spyre::ops

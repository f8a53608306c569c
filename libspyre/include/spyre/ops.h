/* SPDX-License-Identifier: MIT */
/*
 * libspyre op library: tensor operations planned onto the cores of a Spyre card. Each call
 * validates its tensors, picks a plan (work division over the cores, scratchpad use, shared
 * operands), caches it by shape, dtype and layout, and queues the plan's device program on a
 * stream. Same library as spyre.h (libspyre.so); Documentation/ops.md is the reference.
 */
#ifndef SPYRE_OPS_H_
#define SPYRE_OPS_H_

#include <stdint.h>

#include "spyre/spyre.h"

#if defined(__cplusplus)
extern "C" {
#endif

typedef enum spyre_dtype {
    SPYRE_DTYPE_FLOAT32 = 0,
    SPYRE_DTYPE_FLOAT16 = 1,
    SPYRE_DTYPE_BFLOAT16 = 2,
    SPYRE_DTYPE_INT8 = 3,
    SPYRE_DTYPE_INT32 = 4,
    SPYRE_DTYPE_INT64 = 5, /* indices, and the integer elementwise ops (exact, VINT) */
    SPYRE_DTYPE_UINT8 = 6, /* the integer elementwise ops */
} spyre_dtype;

#define SPYRE_TENSOR_MAX_DIMS 8

/* A tensor in device memory: element (i0, .., in-1) is at byte
 * offset + sum(i_d * strides[d]) * element size of buffer. Strides are in elements, >= 0. */
typedef struct spyre_tensor {
    spyre_buffer_t buffer;
    uint64_t offset; /* bytes from the start of buffer to element (0, .., 0) */
    int32_t dtype;   /* spyre_dtype */
    uint32_t ndim;   /* 0 (a scalar) .. SPYRE_TENSOR_MAX_DIMS */
    int64_t shape[SPYRE_TENSOR_MAX_DIMS];
    int64_t strides[SPYRE_TENSOR_MAX_DIMS];
} spyre_tensor;

/* Fills *t as a dense row-major tensor of `buffer` at `offset`. */
SPYRE_API spyre_status spyre_tensor_init(spyre_tensor* t, spyre_buffer_t buffer, uint64_t offset,
                                         spyre_dtype dtype, uint32_t ndim, const int64_t* shape);

typedef enum spyre_activation {
    SPYRE_ACTIVATION_NONE = 0,
    SPYRE_ACTIVATION_RELU = 1,
    SPYRE_ACTIVATION_GELU = 2,      /* erf form */
    SPYRE_ACTIVATION_GELU_TANH = 3, /* tanh approximation */
    SPYRE_ACTIVATION_SILU = 4,
} spyre_activation;

/*
 * out = a @ b. a [..., M, K], b [..., K, N], out [..., M, N]; leading (batch) dims equal or
 * absent on a/b (absent = shared). fp16, bf16, fp32 inputs of one type; out has the input type
 * or fp32 (fp32 accumulation either way). int8 inputs give an int32 out: exact products
 * summed in int32 on the matrix unit (I8 MM), wrapping modulo 2^32. b may be a transposed view
 * (strides of an N x K row-major matrix), e.g. w.t(). Queued on `stream` (NULL: the card's
 * default stream).
 */
SPYRE_API spyre_status spyre_op_matmul(spyre_stream_t stream, const spyre_tensor* a,
                                       const spyre_tensor* b, const spyre_tensor* out);

/*
 * out = activation(x @ weight^T + bias): x [..., in], weight [out_features, in] (row-major, as
 * torch.nn.Linear stores it), bias [out_features] or NULL, out [..., out_features]. The bias
 * and the activation run in the matmul's epilogue on the fp32 result (one rounding). int8 x and
 * weight give an int32 out (as spyre_op_matmul), without bias or activation.
 */
SPYRE_API spyre_status spyre_op_linear(spyre_stream_t stream, const spyre_tensor* x,
                                       const spyre_tensor* weight, const spyre_tensor* bias,
                                       spyre_activation activation, const spyre_tensor* out);

/*
 * Weight-only int8 linear: out = activation((x @ weight^T) * scales + bias), x [..., in] fp32,
 * fp16 or bf16, weight int8 [out_features, in] (per output channel quantized), scales
 * [out_features] float (fp32 or x's type), bias [out_features] or NULL, out [..., out_features]
 * of x's type or fp32. The weight streams from DDR as int8 (half the bytes of fp16) and is
 * converted on the cores (exact), the products accumulate in fp32, the scales, bias and
 * activation run in the epilogue (one rounding). torch's _weight_int8pack_mm.
 */
SPYRE_API spyre_status spyre_op_linear_int8_weight(spyre_stream_t stream, const spyre_tensor* x,
                                                   const spyre_tensor* weight,
                                                   const spyre_tensor* scales,
                                                   const spyre_tensor* bias,
                                                   spyre_activation activation,
                                                   const spyre_tensor* out);

/*
 * The q/k projection of a rotary-embedding attention in one pass:
 * out = rotary(x @ weight^T) per head, i.e. spyre_op_linear (no bias, no activation) whose
 * epilogue applies spyre_op_rotary to the fp32 result (rounded once). x [..., L, in] (rows: the
 * leading dims' sequences of L positions each), weight [H * D, in], out [..., L, H * D] with the
 * rows of x (its own type or float32); cos and sin [L, D], [B or 1, L, D] or [B or 1, 1, L, D]
 * (B: the sequences) with contiguous rows, 128-byte aligned rows and strides; D (cos's last dim)
 * even. Row (b, l), head h of out is rotated with position l of sequence b. Shapes the planner
 * cannot split into whole heads give SPYRE_ERROR_NOT_SUPPORTED (run spyre_op_linear and
 * spyre_op_rotary instead).
 */
SPYRE_API spyre_status spyre_op_linear_rotary(spyre_stream_t stream, const spyre_tensor* x,
                                              const spyre_tensor* weight, const spyre_tensor* cos,
                                              const spyre_tensor* sin, const spyre_tensor* out);

/*
 * A transformer MLP block, x [M, H] -> out [M, H], weights as torch.nn.Linear stores them:
 *   gated (w_gate non-NULL, SwiGLU / GeGLU): out = (act(x w_gate^T) * (x w_up^T)) w_down^T;
 *   plain (w_gate NULL):                    out = act(x w_up^T) w_down^T.
 * w_up and w_gate [I, H], w_down [H, I]. The gate and up products run as one program (one pass
 * over x, the product of the two in its epilogue), then the down projection; the hidden
 * activations [M, I] live in scratch on the card.
 */
SPYRE_API spyre_status spyre_op_mlp(spyre_stream_t stream, const spyre_tensor* x,
                                    const spyre_tensor* w_gate, const spyre_tensor* w_up,
                                    const spyre_tensor* w_down, spyre_activation activation,
                                    const spyre_tensor* out);

/*
 * out = softmax(scale * q k^T + mask) v per head. q [B, Hq, Lq, D], k and v [B, Hkv, Lk, D],
 * out [B, Hq, Lq, D]; Hq a multiple of Hkv (grouped-query attention: q head h uses kv head
 * h / (Hq / Hkv)). Any batch, head and position strides that are multiples of 128 bytes (so
 * torch's [B, L, H, D].transpose(1, 2) views and a KV cache with spare room work in place);
 * the D elements of a row contiguous, D x element size a multiple of 128 bytes. causal: query i
 * sees keys j <= i + (Lk - Lq). scale 0 means 1 / sqrt(D). fp16, bf16 or fp32, all one type.
 */
SPYRE_API spyre_status spyre_op_attention(spyre_stream_t stream, const spyre_tensor* q,
                                          const spyre_tensor* k, const spyre_tensor* v,
                                          const spyre_tensor* out, int causal, float scale);

/*
 * spyre_op_attention with an attention mask (NULL: none), torch's attn_mask: [Lq, Lk],
 * [B or 1, Lq, Lk] or [B or 1, Hq or 1, Lq, Lk] (a size-1 query dim broadcasts too, e.g. a
 * [B, 1, 1, Lk] padding mask). A float mask (fp32, fp16, bf16) is added to the scaled scores;
 * an int8 mask is boolean (torch.bool's bytes): nonzero = attend, zero = the score is -inf.
 * Combined with causal when causal is set. Its key dim contiguous; other strides are free (rows
 * that are not 128-byte stick rows are re-laid on the cores first, one more launch). A query
 * that sees no key gets NaN, as softmax over nothing but -inf.
 */
SPYRE_API spyre_status spyre_op_attention_masked(spyre_stream_t stream, const spyre_tensor* q,
                                                 const spyre_tensor* k, const spyre_tensor* v,
                                                 const spyre_tensor* mask, const spyre_tensor* out,
                                                 int causal, float scale);

/*
 * spyre_op_attention_masked (mask NULL: none) that also writes each query row's logsumexp of
 * the scaled, masked scores to lse, float32 [B, Hq, Lq]: the statistic
 * spyre_op_attention_backward recomputes the probabilities from. lse's Lq values contiguous from
 * a 128-byte aligned start, its batch and head strides multiples of 128 bytes (e.g. a
 * [B, Hq, up(Lq, 32)] buffer seen as [B, Hq, Lq]). A row that sees no key gets -inf.
 */
SPYRE_API spyre_status spyre_op_attention_lse(spyre_stream_t stream, const spyre_tensor* q,
                                              const spyre_tensor* k, const spyre_tensor* v,
                                              const spyre_tensor* mask, const spyre_tensor* out,
                                              const spyre_tensor* lse, int causal, float scale);

/*
 * The gradients of spyre_op_attention_lse: given its inputs q, k, v, mask (NULL: none; it gets
 * no gradient), causal and scale, its out and lse, and dout (the gradient of out, like q),
 * writes dq (like q), dk and dv (like k; summed over the query heads of each kv head), flash
 * style: the [Lq, Lk] probabilities are recomputed in tiles on the cores, never stored. Tensors
 * as for spyre_op_attention (any 128-byte multiple strides, contiguous head rows); fp32, fp16,
 * bf16, accumulated in fp32. Two launches (dQ, then dK/dV) and an fp32 [B, Hq, Lq] scratch.
 */
SPYRE_API spyre_status spyre_op_attention_backward(
    spyre_stream_t stream, const spyre_tensor* q, const spyre_tensor* k, const spyre_tensor* v,
    const spyre_tensor* mask, const spyre_tensor* out, const spyre_tensor* dout,
    const spyre_tensor* lse, const spyre_tensor* dq, const spyre_tensor* dk, const spyre_tensor* dv,
    int causal, float scale);

/*
 * Rotary position embedding, rotate-half convention (GPT-NeoX, Llama, Granite):
 * out = x * cos + rotate_half(x) * sin with rotate_half(x) = [-x2, x1] over the two halves of a
 * head row. x and out [B, H, L, D] (strides as for attention; out may be x), cos and sin
 * [L, D], [B or 1, L, D] or [B or 1, 1, L, D] with contiguous rows. Computed in fp32, rounded
 * once to x's type.
 */
SPYRE_API spyre_status spyre_op_rotary(spyre_stream_t stream, const spyre_tensor* x,
                                       const spyre_tensor* cos, const spyre_tensor* sin,
                                       const spyre_tensor* out);

/*
 * out[i, :] = weight[indices[i], :] (torch.nn.functional.embedding): indices int64 or int32 of
 * any shape (dense), weight [V, D], out [..indices shape.., D]; weight and out rows contiguous
 * and 128-byte aligned. Any element type (rows are moved as bytes). An index outside [0, V)
 * fails the queued launch with SPYRE_ERROR_PROGRAM (reported by the next synchronize, like a
 * device-side assert); nothing past the bad index is guaranteed to be written.
 */
SPYRE_API spyre_status spyre_op_embedding(spyre_stream_t stream, const spyre_tensor* indices,
                                          const spyre_tensor* weight, const spyre_tensor* out);

/*
 * The embedding's other direction, a row scatter: table[indices[i], :] = rows[i, :]; shapes,
 * layouts and the device-side bounds check as spyre_op_embedding (rows as its out). Rows move
 * by DMA only, so the table may be any size (the scatter ops keep a table's slab in a core's
 * scratchpad). With repeated indices, which of their rows lands is unspecified.
 */
SPYRE_API spyre_status spyre_op_scatter_rows(spyre_stream_t stream, const spyre_tensor* indices,
                                             const spyre_tensor* rows, const spyre_tensor* table);

/*
 * Gather and scatter along one dim by device-resident indices (Documentation/ops.md "Indexing").
 * `table` is the indexed tensor, dense, with V = table->shape[dim]; `rows` (out of a gather,
 * source of a scatter) is dense with table's shape except N at dim; `index` (int64 or int32,
 * dense) has rows' rank with N at dim, and either rows' sizes or 1 in the dims before dim (all
 * of them) and likewise in the dims after it (a 1 broadcasts the index there: index_select).
 *   spyre_op_gather:  rows[.., n, ..] = table[.., index[.., n, ..], ..]
 *   spyre_op_scatter: table[.., index[.., n, ..], ..] = rows[.., n, ..]   (index_copy)
 *                     with SPYRE_INDEX_ACCUMULATE: += (scatter_add; duplicate indices are
 *                     added one by one in ascending order of n, then of the later dims: the
 *                     result is deterministic)
 * Any element type; the written tensor starts 128-byte aligned and does not overlap the others.
 * SPYRE_INDEX_WRAP_NEGATIVE takes indices in [-V, 0) as index + V (advanced indexing). An
 * index outside [0, V) (or [-V, V)) fails the queued launch with SPYRE_ERROR_PROGRAM (reported
 * by the next synchronize, like a device-side assert); the written tensor is then unspecified.
 * The table's slab for one outer index (its dims from `dim` on) must fit a core's scratchpad
 * (else SPYRE_ERROR_NOT_SUPPORTED); index and rows of any length pass in tiles.
 */
typedef enum spyre_index_flags {
    SPYRE_INDEX_WRAP_NEGATIVE = 1,
    SPYRE_INDEX_ACCUMULATE = 2, /* spyre_op_scatter only */
} spyre_index_flags;

SPYRE_API spyre_status spyre_op_gather(spyre_stream_t stream, const spyre_tensor* table,
                                       int32_t dim, const spyre_tensor* index,
                                       const spyre_tensor* rows, uint32_t flags);
SPYRE_API spyre_status spyre_op_scatter(spyre_stream_t stream, const spyre_tensor* table,
                                        int32_t dim, const spyre_tensor* index,
                                        const spyre_tensor* rows, uint32_t flags);

/*
 * Cumulative sum or product along dim `dim` (negative: counted from the end) of a dense x into
 * the dense out of x's shape and type (out may be x: in place; otherwise no overlap), with
 * PyTorch's CPU numerics (Documentation/ops.md "Scans"): int8, int32, int64, uint8 exactly
 * (wrapping like torch); fp16 and bf16 accumulated in fp32 and rounded once per element; fp32
 * sums accumulated in double in index order (each output is one double sum rounded once, as
 * torch's double accumulator). fp32 products give SPYRE_ERROR_NOT_SUPPORTED (torch accumulates
 * them in double, which the cores have no product for), as do x or out not starting 128-byte
 * aligned and slabs (the dims from `dim` on) too large for a core's scratchpad.
 */
typedef enum spyre_scan_op {
    SPYRE_SCAN_SUM = 0,  /* torch.cumsum */
    SPYRE_SCAN_PROD = 1, /* torch.cumprod */
} spyre_scan_op;

SPYRE_API spyre_status spyre_op_scan(spyre_stream_t stream, spyre_scan_op op, const spyre_tensor* x,
                                     int32_t dim, const spyre_tensor* out);

/*
 * Sort and top-k along dim `dim` (negative: from the end) of a dense fp32/fp16/bf16 x whose dims
 * after `dim` have size 1 (others: SPYRE_ERROR_NOT_SUPPORTED, move `dim` last first):
 * `values` (x's type) and `indices` (int64), dense, of x's shape with k <= n at dim, get the
 * first k elements of each row's sorted order and their positions in the row (k = n: torch.sort;
 * descending with k < n: torch.topk). The order is stable (ties in ascending index order) with
 * NaN largest, as torch's stable sort; NaN values come out as the canonical quiet NaN and
 * -0.0 / +0.0 tie and keep their signs. Rows longer than a core's scratchpad takes (padded to a
 * power of two: about 32768 elements) and tensors not starting 128-byte aligned give
 * SPYRE_ERROR_NOT_SUPPORTED (Documentation/ops.md "Sort and top-k").
 */
typedef enum spyre_sort_flags {
    SPYRE_SORT_DESCENDING = 1,
} spyre_sort_flags;

SPYRE_API spyre_status spyre_op_sort(spyre_stream_t stream, const spyre_tensor* x, int32_t dim,
                                     uint32_t flags, const spyre_tensor* values,
                                     const spyre_tensor* indices);

/*
 * out[i] = start + i * step over the elements of a dense `out` (torch.arange with integer
 * start and step): int64 and int32 exactly (int64 wraps like torch), fp32/fp16/bf16 as the
 * exact value rounded once to fp32, then to the type. `out` starts 128-byte aligned; at most
 * 2^31 - 1 elements.
 */
SPYRE_API spyre_status spyre_op_arange(spyre_stream_t stream, const spyre_tensor* out,
                                       int64_t start, int64_t step);

/* Elementwise operations (Documentation/ops.md "Elementwise"). */
typedef enum spyre_unary_op {
    SPYRE_UNARY_RELU = 0,
    SPYRE_UNARY_GELU = 1,      /* erf form */
    SPYRE_UNARY_GELU_TANH = 2, /* tanh approximation */
    SPYRE_UNARY_SILU = 3,
    SPYRE_UNARY_SIGMOID = 4,
    SPYRE_UNARY_EXP = 5,
    SPYRE_UNARY_LOG = 6,
    SPYRE_UNARY_TANH = 7,
    SPYRE_UNARY_NEG = 8,
    SPYRE_UNARY_ABS = 9,
    SPYRE_UNARY_SQRT = 10,
    SPYRE_UNARY_RSQRT = 11,
    SPYRE_UNARY_RECIPROCAL = 12,
    SPYRE_UNARY_SIN = 13,
    SPYRE_UNARY_COS = 14,
    SPYRE_UNARY_CAST = 15,        /* copy converted to out's type */
    SPYRE_UNARY_BITWISE_NOT = 16, /* integers only */
    /* 0.15: rounding, sign and the rest of torch's float unary set (float types only) */
    SPYRE_UNARY_FLOOR = 17,
    SPYRE_UNARY_CEIL = 18,
    SPYRE_UNARY_TRUNC = 19,
    SPYRE_UNARY_ROUND = 20, /* half to even (torch.round) */
    SPYRE_UNARY_SIGN = 21,  /* -1, 0 or 1; NaN gives 0 (torch.sign) */
    SPYRE_UNARY_ERF = 22,
    SPYRE_UNARY_ERFC = 23,
    SPYRE_UNARY_LOG1P = 24,
    SPYRE_UNARY_EXPM1 = 25,
    SPYRE_UNARY_EXP2 = 26,
    SPYRE_UNARY_LOG2 = 27,
    SPYRE_UNARY_LOG10 = 28,
    SPYRE_UNARY_TAN = 29,
    SPYRE_UNARY_ASIN = 30,
    SPYRE_UNARY_ACOS = 31,
    SPYRE_UNARY_ATAN = 32,
    SPYRE_UNARY_SINH = 33,
    SPYRE_UNARY_COSH = 34,
    SPYRE_UNARY_ASINH = 35,
    SPYRE_UNARY_ACOSH = 36,
    SPYRE_UNARY_ATANH = 37,
} spyre_unary_op;

typedef enum spyre_binary_op {
    SPYRE_BINARY_ADD = 0, /* a + alpha * b */
    SPYRE_BINARY_SUB = 1, /* a - alpha * b */
    SPYRE_BINARY_MUL = 2,
    SPYRE_BINARY_DIV = 3,
    SPYRE_BINARY_MAX = 4, /* NaN-propagating */
    SPYRE_BINARY_MIN = 5,
    SPYRE_BINARY_EQ = 6, /* compares write 1 / 0 in out's type */
    SPYRE_BINARY_NE = 7,
    SPYRE_BINARY_LT = 8,
    SPYRE_BINARY_LE = 9,
    SPYRE_BINARY_GT = 10,
    SPYRE_BINARY_GE = 11,
    /* integers only (Documentation/ops-elementwise.md "Integers") */
    SPYRE_BINARY_FLOOR_DIVIDE = 12, /* floor division; a zero divisor fails the launch */
    SPYRE_BINARY_REMAINDER = 13,    /* the divisor's sign (torch.remainder) */
    SPYRE_BINARY_BITWISE_AND = 14,
    SPYRE_BINARY_BITWISE_OR = 15,
    SPYRE_BINARY_BITWISE_XOR = 16,
    SPYRE_BINARY_LSHIFT = 17, /* counts < 0 or >= the width give 0 */
    SPYRE_BINARY_RSHIFT = 18, /* arithmetic; counts < 0 or >= the width give the sign fill */
} spyre_binary_op;

/* out = f(x); x and out dense and of one shape (out's type may differ for CAST). */
SPYRE_API spyre_status spyre_op_unary(spyre_stream_t stream, spyre_unary_op op,
                                      const spyre_tensor* x, const spyre_tensor* out);
/*
 * out = a OP b with torch-style broadcasting of a and b to out's shape, in the forms the vector
 * unit broadcasts natively after collapsing dims: an operand equal to out, a single element, a
 * trailing block of dims ([..., 1, n] against out [..., m, n]: ROW) or a leading block ([m, 1]
 * against [m, n]: COL). b may be NULL with `scalar` instead. Other broadcasts give
 * SPYRE_ERROR_NOT_SUPPORTED. alpha scales b for ADD and SUB (1 otherwise). Operands dense, any
 * of fp32, fp16, bf16 (mixed allowed); out fp32/fp16/bf16, or int8/int32 for compares.
 */
SPYRE_API spyre_status spyre_op_binary(spyre_stream_t stream, spyre_binary_op op,
                                       const spyre_tensor* a, const spyre_tensor* b, double scalar,
                                       double alpha, const spyre_tensor* out);
/*
 * spyre_op_binary on integer tensors (int8, int32, int64, uint8; a and b of one type, out of that
 * type, or any integer type for compares) with an exact 64-bit scalar and alpha: exact, wrapping
 * like torch (ISA VINT). ADD/SUB with alpha != 1 need a full b or the scalar. A broadcast a with
 * the non-commutative ops (FLOOR_DIVIDE, REMAINDER, shifts), or a and b both broadcast, give
 * SPYRE_ERROR_NOT_SUPPORTED. A zero divisor fails the queued launch with SPYRE_ERROR_PROGRAM
 * (reported by the next synchronize; the output is then unspecified). spyre_op_binary takes
 * integer tensors too when scalar and alpha are whole numbers within int64.
 */
SPYRE_API spyre_status spyre_op_binary_int(spyre_stream_t stream, spyre_binary_op op,
                                           const spyre_tensor* a, const spyre_tensor* b,
                                           int64_t scalar, int64_t alpha, const spyre_tensor* out);
/* out = cond != 0 ? a : b (torch.where), broadcasting as for spyre_op_binary; a or b NULL
 * means the scalar a_scalar / b_scalar (masked_fill is where(mask, value, x)). */
SPYRE_API spyre_status spyre_op_where(spyre_stream_t stream, const spyre_tensor* cond,
                                      const spyre_tensor* a, double a_scalar, const spyre_tensor* b,
                                      double b_scalar, const spyre_tensor* out);
/* out = min(max(x, lo), hi) (torch.clamp) in one pass, broadcasting as for spyre_op_binary; lo or
 * hi NULL means the scalar lo_scalar / hi_scalar. NaN in x or a bound gives NaN; hi wins where
 * lo > hi. Bounds are fp32, fp16 or bf16 (a one-sided clamp is spyre_op_binary MAX or MIN). */
SPYRE_API spyre_status spyre_op_clamp(spyre_stream_t stream, const spyre_tensor* x,
                                      const spyre_tensor* lo, double lo_scalar,
                                      const spyre_tensor* hi, double hi_scalar,
                                      const spyre_tensor* out);

/*
 * A fused pointwise kernel (torch.compile's Spyre backend): `kernel` is a kernel description
 * (Documentation/torch_compile.md "Kernel descriptions"): typed inputs ("full": n dense
 * elements; "scalar": one element read by every position), typed outputs and a straight-line
 * list of fp32 ops over the n positions, compiled to ONE program (cached per description, n and
 * card) and queued on `stream`. A row kernel ("rows C") sees the n positions as n / C rows of C
 * and adds reductions over each row, "row" operands and outputs (n / C elements, one per row)
 * and "col" inputs (C elements, one per column). inputs[i] / outputs[j] follow the
 * description's order: full, row and col operands dense with at least that many elements,
 * starting 128-byte aligned; scalar inputs at least one element. Kernels or operands the
 * generator cannot take (rows longer than a core's scratchpad among them) give
 * SPYRE_ERROR_NOT_SUPPORTED with the reason (the caller falls back).
 */
SPYRE_API spyre_status spyre_op_fused(spyre_stream_t stream, const char* kernel, uint64_t n,
                                      const spyre_tensor* inputs, uint32_t num_inputs,
                                      const spyre_tensor* outputs, uint32_t num_outputs);

/*
 * A fused kernel prepared ahead of its launches (API 0.21; torch.compile prepares the kernels of
 * a compiled graph when it loads the graph, so no call plans or generates them): `kernel`
 * parsed and planned for n positions on cards of `device`'s configuration, its program
 * generated (or read from the program cache on disk) and loaded on `device`. What the
 * description would give at a launch of spyre_op_fused (a kernel the generator cannot take, n not
 * a whole number of rows) is returned here, with the reason. The kernel launches on any card of
 * the same configuration (cores, scratchpad, clock) and is independent of `device`'s handle
 * (close it whenever). Destroy it with spyre_fused_kernel_destroy (launches already queued are
 * not affected).
 */
typedef struct spyre_fused_kernel* spyre_fused_kernel_t;
SPYRE_API spyre_status spyre_fused_kernel_create(spyre_device_t device, const char* kernel,
                                                 uint64_t n, spyre_fused_kernel_t* out);
/* spyre_op_fused of a prepared kernel: the same operands, checks and results, without parsing
 * the description or looking its plan up. A card of another configuration than the kernel was
 * prepared for gives SPYRE_ERROR_INVALID_ARGUMENT. */
SPYRE_API spyre_status spyre_op_fused_prepared(spyre_stream_t stream, spyre_fused_kernel_t kernel,
                                               const spyre_tensor* inputs, uint32_t num_inputs,
                                               const spyre_tensor* outputs, uint32_t num_outputs);
SPYRE_API spyre_status spyre_fused_kernel_destroy(spyre_fused_kernel_t kernel);

/* Random numbers (Documentation/ops.md "Random numbers"): counter-based Philox4x32-10 on the
 * cores (VRNG, Documentation/isa.md). Element k of out (row-major order) is element k of the
 * stream (seed, offset), whatever the number of cores or chunks: the same seed and offset give
 * the same values on every card and plan, and a new offset gives an independent stream. */
typedef enum spyre_random_dist {
    SPYRE_RANDOM_UNIFORM = 0,   /* a + (b - a) u, u in [0, 1); out fp32/fp16/bf16 */
    SPYRE_RANDOM_NORMAL = 1,    /* a + b z, z standard normal (Box-Muller); out fp32/fp16/bf16 */
    SPYRE_RANDOM_BITS = 2,      /* raw 32-bit words; out int32 */
    SPYRE_RANDOM_BERNOULLI = 3, /* 1 where u < p else 0, p = a or the tensor p; out fp32/fp16/
                                   bf16/int8/int32 */
} spyre_random_dist;

/* Fills out (dense, starting 128-byte aligned; empty is a no-op). p: NULL, or for BERNOULLI a
 * dense fp32/fp16/bf16 tensor of out's shape holding the probabilities (a is then unused). */
SPYRE_API spyre_status spyre_op_random(spyre_stream_t stream, spyre_random_dist dist,
                                       const spyre_tensor* out, uint64_t seed, uint64_t offset,
                                       double a, double b, const spyre_tensor* p);

/* dst = src made dense: any strided view (transposes, permutes, slices, expanded dims with
 * stride 0) of up to 8 dims copied into the dense row-major dst of the same shape and type
 * (bytes moved unchanged). dst starts 128-byte aligned. */
SPYRE_API spyre_status spyre_op_copy(spyre_stream_t stream, const spyre_tensor* src,
                                     const spyre_tensor* dst);

/* Row-wise ops along the last dim of a dense tensor viewed as [rows, cols]: fp16, bf16 or
 * fp32, statistics in fp32 inside (Documentation/ops-rowwise.md). */
SPYRE_API spyre_status spyre_op_softmax(spyre_stream_t stream, const spyre_tensor* x, int log,
                                        const spyre_tensor* out);
/* softmax (log: log_softmax) along dim `dim` of x (negative: counted from the end), x of any
 * strides; out dense, x's type and shape. Along the last dim of a dense x it is
 * spyre_op_softmax; a dense x whose dims after `dim` are whole 128-byte sticks runs as one
 * column program (reduced across rows in LX); otherwise the copy program first lays x out on the
 * cores with `dim` last (one launch) and moves the result back into out (one more). */
SPYRE_API spyre_status spyre_op_softmax_dim(spyre_stream_t stream, const spyre_tensor* x,
                                            int64_t dim, int log, const spyre_tensor* out);
/* out = (x - mean) / sqrt(var + eps) * weight + bias; weight and bias [cols] (fp32 or x's type)
 * or NULL. */
SPYRE_API spyre_status spyre_op_layer_norm(spyre_stream_t stream, const spyre_tensor* x,
                                           const spyre_tensor* weight, const spyre_tensor* bias,
                                           float eps, const spyre_tensor* out);
/* out = x / sqrt(mean(x^2) + eps) * weight; weight [cols] or NULL. */
SPYRE_API spyre_status spyre_op_rms_norm(spyre_stream_t stream, const spyre_tensor* x,
                                         const spyre_tensor* weight, float eps,
                                         const spyre_tensor* out);
/* The residual add of a pre-norm decoder fused with the RMSNorm that follows it, in one
 * program (one read of x and residual, two writes): out_residual = x + residual (rounded to x's
 * type) and out = out_residual / sqrt(mean(out_residual^2) + eps) * weight. x, residual, out and
 * out_residual of one type and shape, dense and 128-byte aligned; weight [cols] or NULL as for
 * spyre_op_rms_norm. out and out_residual may each be x or residual itself (in place), must not
 * overlap each other, and must not overlap anything else partially. Rows so long that
 * spyre_op_rms_norm runs them in chunks are SPYRE_ERROR_NOT_SUPPORTED (add, then rms_norm).
 * (0.13) */
SPYRE_API spyre_status spyre_op_add_rms_norm(spyre_stream_t stream, const spyre_tensor* x,
                                             const spyre_tensor* residual,
                                             const spyre_tensor* weight, float eps,
                                             const spyre_tensor* out,
                                             const spyre_tensor* out_residual);

typedef enum spyre_reduce_op {
    SPYRE_REDUCE_SUM = 0,
    SPYRE_REDUCE_MEAN = 1,
    SPYRE_REDUCE_MAX = 2, /* NaN-propagating */
    SPYRE_REDUCE_MIN = 3,
    SPYRE_REDUCE_ARGMAX = 4, /* first index of the maximum; out int32 */
} spyre_reduce_op;

/* out[r] = reduce(x[r, :]) over the last dim; out has x's leading dims (keepdim or not: out's
 * shape is x's without the last dim, or with it as 1); x's type (int32 for ARGMAX). Rows of
 * more than 2^23 elements reduce in two launches (equal blocks of at most 2^23, then the
 * blocks' results) when their length has such a divisor; ARGMAX of them is NOT_SUPPORTED. */
SPYRE_API spyre_status spyre_op_reduce(spyre_stream_t stream, spyre_reduce_op op,
                                       const spyre_tensor* x, const spyre_tensor* out);
/* The reduction along dim `dim` of x (negative: from the end), x of any strides; out dense
 * with x's other dims in order (keepdim or not). Off the last dim: the column program as for
 * spyre_op_softmax_dim (not ARGMAX), else the copy program lays x out with `dim` last first
 * (one more launch). */
SPYRE_API spyre_status spyre_op_reduce_dim(spyre_stream_t stream, spyre_reduce_op op,
                                           const spyre_tensor* x, int64_t dim,
                                           const spyre_tensor* out);

/* What the last op of the calling thread ran: its plan and the modeled device time of its
 * programs on the cycle model (known when queued: the plan was priced when it was made). */
typedef struct spyre_op_info {
    char op[32];             /* "linear", "matmul", ... */
    char plan[128];          /* e.g. "m4 n8 k1 (sub 128x1600, kc 64, 2 buffers, multicast)" */
    uint32_t cores;          /* cores of the main program */
    uint32_t launches;       /* device programs queued (padding steps included) */
    uint64_t modeled_cycles; /* sum over the launches */
    uint64_t modeled_ns;
    uint32_t plan_cached; /* 1 if the plan came from the plan cache */
    uint32_t reserved0;
    uint64_t reserved[7];
} spyre_op_info;

SPYRE_API spyre_status spyre_op_get_last_info(spyre_op_info* info);

/* Plan cache statistics of the process (all cards). */
SPYRE_API spyre_status spyre_op_get_cache_stats(uint64_t* hits, uint64_t* misses);

#if defined(__cplusplus)
}
#endif

#endif /* SPYRE_OPS_H_ */

// SPDX-License-Identifier: MIT
// Internal to the kernels (kernels.cpp, kernels_avx512.cpp): one instruction-set implementation
// of the conversion and matmul kernels. kernels.cpp holds the portable and AVX2 ones and picks one
// at run time (Documentation/isa.md "Kernel implementations"); kernels_avx512.cpp fills in the
// AVX-512 one. Every implementation performs the same IEEE operations in the same order, so
// results are bit-identical whichever is in use.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels.hpp"

namespace spyre::kern::detail {

// Matmul micro-kernel of the generic driver (kernels.cpp): per step, 6 words of A and 16 words
// of packed B; C is a 6 x 16 tile of 4-byte elements (see kernels.cpp).
using Ukr = void (*)(size_t steps, const char* a, size_t ars, size_t ass, const void* b, uint8_t* c,
                     size_t ldc, bool zero);

struct Impl {
    const char* name;
    // Row conversions (n elements, any alignment), bit-identical to spyre/numerics.hpp.
    void (*h2f)(const uint8_t*, size_t, float*);   // fp16 -> fp32
    void (*f2h)(uint8_t*, size_t, const float*);   // fp32 -> fp16 (RNE)
    void (*bf2f)(const uint8_t*, size_t, float*);  // bf16 -> fp32
    void (*f2bf)(uint8_t*, size_t, const float*);  // fp32 -> bf16 (RNE)
    void (*i8f)(const uint8_t*, size_t, float*);   // int8 -> fp32
    void (*fi8)(uint8_t*, size_t, const float*);   // fp32 -> int8 (RNE, saturating)
    void (*i32f)(const uint8_t*, size_t, float*);  // int32 -> fp32 (RNE)
    void (*fi32)(uint8_t*, size_t, const float*);  // fp32 -> int32 (RNE, saturating)
    // Pieces of the generic matmul driver (6 x 16 register tiles).
    Ukr ukr_f32;
    Ukr ukr_i8;
    void (*pack_a)(const float* const*, size_t, size_t, float*);
    void (*ukr_f32_part)(size_t rows, size_t steps, const char* a, const void* b, uint8_t* c,
                         size_t ldc, bool zero);
    // Whole-matmul kernels replacing the generic driver when set: called with m, n, k > 0 and C
    // not overlapping A or B (kern::matmul copies them aside first).
    void (*mm_float)(const MatmulArgs&);  // F16, BF16, F32
    void (*mm_i8)(const MatmulArgs&);     // I8
    bool mm_f32_b_trans = false;          // mm_float takes F32 with b_trans (else never set)
};

// Scalar conversions (spyre/numerics.hpp), shared by the implementations for their row tails.
void h2f_portable(const uint8_t*, size_t, float*);
void f2h_portable(uint8_t*, size_t, const float*);
void bf2f_portable(const uint8_t*, size_t, float*);
void f2bf_portable(uint8_t*, size_t, const float*);
void i8f_portable(const uint8_t*, size_t, float*);
void fi8_portable(uint8_t*, size_t, const float*);
void i32f_portable(const uint8_t*, size_t, float*);
void fi32_portable(uint8_t*, size_t, const float*);

#if defined(__x86_64__) && defined(__GNUC__)
#define SPYRE_KERN_X86 1
// kernels_avx512.cpp: whether this CPU (and OS) runs the AVX-512 kernels (F, BW, VL, DQ with FMA
// and F16C); whether it has AVX512-VNNI (int8 matmul); fills the fields it implements into im
// (the others keep what im holds: the AVX2 kernels).
bool avx512_supported();
bool avx512_vnni_supported();
bool avx512_bf16_supported();  // and VDPBF16PS used for bf16 matmuls where it is exact
// Test hook: bf16 matmuls this thread ran with VDPBF16PS (the others used FMAs).
uint64_t bf16_dp_matmuls();
// Test hook: operands this thread's bf16 matmuls took packed from the cache (MatmulArgs::a_gen,
// b_gen).
uint64_t bf16_pack_hits();
// kern::forget_packed for the AVX-512 bf16 packing cache.
void avx512_forget_packed(const uint8_t* lo, const uint8_t* hi);
void avx512_fill(Impl& im);
#endif

}  // namespace spyre::kern::detail

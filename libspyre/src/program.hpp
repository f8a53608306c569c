// Program images (Documentation/isa.md "Program format"): header checks done by
// spyre_program_load before an image is copied to the device.
#pragma once

#include <cstddef>
#include <cstdint>

namespace spyre {

inline constexpr uint32_t kProgramMagic = 0x50595053;  // "SPYP"
inline constexpr uint16_t kProgramVersion = 1;
inline constexpr uint32_t kProgramHeaderBytes = 32;
inline constexpr uint32_t kProgramInstrBytes = 16;
inline constexpr uint32_t kProgramMaxInstructions = 1u << 20;

// Throws SPYRE_ERROR_PROGRAM with the precise reason unless image[0, size) is a well-formed
// program image; returns its instruction count.
uint32_t check_program_image(const void* image, size_t size);

}  // namespace spyre

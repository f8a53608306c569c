#include "program.hpp"

#include <cstring>
#include <format>

#include "error.hpp"

namespace spyre {

namespace {

uint32_t le32(const unsigned char* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint16_t le16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

}  // namespace

uint32_t check_program_image(const void* image, size_t size) {
    const auto* p = static_cast<const unsigned char*>(image);
    if (size < kProgramHeaderBytes)
        fail(SPYRE_ERROR_PROGRAM,
             std::format("program image truncated: {} bytes, shorter than the {}-byte header", size,
                         kProgramHeaderBytes));
    const uint32_t magic = le32(p);
    if (magic != kProgramMagic)
        fail(SPYRE_ERROR_PROGRAM,
             std::format("not a Spyre program image: magic {:#010x}, expected {:#010x} (\"SPYP\")",
                         magic, kProgramMagic));
    const uint16_t version = le16(p + 4);
    if (version != kProgramVersion)
        fail(SPYRE_ERROR_PROGRAM,
             std::format("unsupported program format version {} (this library and the card "
                         "run version {})",
                         version, kProgramVersion));
    const uint16_t header = le16(p + 6);
    if (header != kProgramHeaderBytes)
        fail(SPYRE_ERROR_PROGRAM,
             std::format("bad program header size {} (version {} headers are {} bytes)", header,
                         version, kProgramHeaderBytes));
    const uint32_t n = le32(p + 8);
    if (n == 0 || n > kProgramMaxInstructions)
        fail(SPYRE_ERROR_PROGRAM,
             std::format("bad instruction count {} in the program header (1 .. {})", n,
                         kProgramMaxInstructions));
    const uint32_t flags = le32(p + 12);
    if (flags)
        fail(SPYRE_ERROR_PROGRAM, std::format("program header flags {:#x} must be 0", flags));
    for (unsigned i = 16; i < kProgramHeaderBytes; ++i)
        if (p[i])
            fail(SPYRE_ERROR_PROGRAM,
                 std::format("program header reserved byte {} is {:#04x}, must be 0", i, p[i]));
    const uint64_t expect = kProgramHeaderBytes + uint64_t(n) * kProgramInstrBytes;
    if (size < expect)
        fail(SPYRE_ERROR_PROGRAM,
             std::format("program image truncated: {} bytes, its header announces {} "
                         "instructions = {} bytes",
                         size, n, expect));
    if (size > expect)
        fail(SPYRE_ERROR_PROGRAM,
             std::format("program image has {} trailing bytes: {} bytes, its header announces "
                         "{} instructions = {} bytes",
                         size - expect, size, n, expect));
    return n;
}

}  // namespace spyre

// SPDX-License-Identifier: MIT
#include "test_util.hpp"

#include <algorithm>
#include <bit>
#include <stdexcept>

namespace spyre::test {

Rig::Rig(uint32_t threads, uint64_t mem_bytes, uint32_t cores) {
    spyre_engine_config_default(&cfg);
    cfg.num_threads = threads;
    cfg.num_cores = cores;
    eng = spyre_engine_create(&cfg);
    if (!eng) throw std::runtime_error("spyre_engine_create failed");
    mem.assign(mem_bytes, 0);
    windows.push_back({0, mem_bytes});
}

Rig::Rig(const spyre_engine_config& c, uint64_t mem_bytes) : cfg(c) {
    eng = spyre_engine_create(&cfg);
    if (!eng) throw std::runtime_error("spyre_engine_create failed");
    mem.assign(mem_bytes, 0);
    windows.push_back({0, mem_bytes});
}

Rig::~Rig() { spyre_engine_destroy(eng); }

int Rig::run(const std::vector<uint8_t>& prog, const std::vector<uint64_t>& args, uint32_t ncores) {
    spyre_engine_job job{};
    job.program = prog.data();
    job.program_size = prog.size();
    job.args = args.data();
    job.num_args = static_cast<uint32_t>(args.size());
    job.num_cores = ncores;
    job.mem = mem.data();
    job.mem_size = mem.size();
    job.windows = windows.data();
    job.num_windows = static_cast<uint32_t>(windows.size());
    return spyre_engine_run(eng, &job, &res);
}

void Rig::put_as(DType t, uint64_t addr, const std::vector<float>& v) {
    uint8_t* p = mem.data() + addr;
    for (size_t i = 0; i < v.size(); ++i) {
        switch (t) {
            case DType::F32:
                std::memcpy(p + 4 * i, &v[i], 4);
                break;
            case DType::F16: {
                uint16_t h = num::f32_to_f16(v[i]);
                std::memcpy(p + 2 * i, &h, 2);
                break;
            }
            case DType::BF16: {
                uint16_t h = num::f32_to_bf16(v[i]);
                std::memcpy(p + 2 * i, &h, 2);
                break;
            }
            case DType::I8:
                p[i] = static_cast<uint8_t>(num::f32_to_i8(v[i]));
                break;
            case DType::I32: {
                int32_t x = num::f32_to_i32(v[i]);
                std::memcpy(p + 4 * i, &x, 4);
                break;
            }
            default:
                break;
        }
    }
}

std::vector<float> Rig::get_as(DType t, uint64_t addr, size_t n) const {
    std::vector<float> v(n);
    const uint8_t* p = mem.data() + addr;
    for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        int32_t x;
        switch (t) {
            case DType::F32:
                std::memcpy(&v[i], p + 4 * i, 4);
                break;
            case DType::F16:
                std::memcpy(&h, p + 2 * i, 2);
                v[i] = num::f16_to_f32(h);
                break;
            case DType::BF16:
                std::memcpy(&h, p + 2 * i, 2);
                v[i] = num::bf16_to_f32(h);
                break;
            case DType::I8:
                v[i] = static_cast<int8_t>(p[i]);
                break;
            case DType::I32:
                std::memcpy(&x, p + 4 * i, 4);
                v[i] = static_cast<float>(x);
                break;
            default:
                break;
        }
    }
    return v;
}

float round_to(DType t, float v) {
    switch (t) {
        case DType::F16:
            return num::f16_to_f32(num::f32_to_f16(v));
        case DType::BF16:
            return num::bf16_to_f32(num::f32_to_bf16(v));
        case DType::I8:
            return num::f32_to_i8(v);
        case DType::I32:
            return static_cast<float>(num::f32_to_i32(v));
        default:
            return v;
    }
}

uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
bool same_float(float a, float b) { return (a != a && b != b) || f32_bits(a) == f32_bits(b); }

LxImageRun::LxImageRun(Rig& r, uint64_t n) : rig(r), bytes(n) {
    std::fill(rig.mem.begin() + kLxIn, rig.mem.begin() + kLxIn + n, 0);
    std::fill(rig.mem.begin() + kLxOut, rig.mem.begin() + kLxOut + n, 0xee);
}

int LxImageRun::run(const std::function<void(PB&)>& body) {
    PB b;
    b.li(10, 0), b.li(11, kLxIn), b.li(12, static_cast<int64_t>(bytes));
    b.load(10, 11, 12);
    body(b);
    b.li(10, 0), b.li(11, kLxOut), b.li(12, static_cast<int64_t>(bytes));
    b.store(10, 11, 12);
    b.halt();
    return rig.run(b.finish());
}

}  // namespace spyre::test

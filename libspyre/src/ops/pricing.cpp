// SPDX-License-Identifier: MIT
#include "ops/pricing.hpp"

#include <stdexcept>
#include <string>

namespace spyre::ops {

spyre_engine_config default_engine_config() {
    spyre_engine_config c;
    spyre_engine_config_default(&c);
    return c;
}

Pricer::Pricer(const spyre_engine_config& cfg) : cfg_(cfg) {
    cfg_.num_threads = 1;  // nothing is computed: one host thread is plenty
    eng_ = spyre_engine_create(&cfg_);
    if (!eng_) throw std::runtime_error("op planner: invalid engine configuration");
}

Pricer::~Pricer() { spyre_engine_destroy(eng_); }

spyre_engine_result Pricer::price(const std::vector<uint8_t>& image, uint32_t cores,
                                  const std::vector<uint64_t>& args, uint64_t mem_size) const {
    const spyre_engine_window w{0, mem_size};
    spyre_engine_job job{};
    job.program = image.data();
    job.program_size = image.size();
    job.args = args.data();
    job.num_args = static_cast<uint32_t>(args.size());
    job.num_cores = cores;
    job.mem_size = mem_size;
    job.windows = &w;
    job.num_windows = 1;
    job.flags = SPYRE_ENGINE_JOB_TIMING_ONLY;
    spyre_engine_result r{};
    const int rc = spyre_engine_run(eng_, &job, &r);
    if (rc == SPYRE_ENGINE_ERR_INSTR_BUDGET || rc == SPYRE_ENGINE_ERR_CYCLE_BUDGET)
        throw JobTooLarge(std::string(kJobTooLargeText) + ": " + r.message);
    if (rc != SPYRE_ENGINE_OK)
        throw std::runtime_error(std::string("program faults when priced: ") + r.message);
    return r;
}

}  // namespace spyre::ops

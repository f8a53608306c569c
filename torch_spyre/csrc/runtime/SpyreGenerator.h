// The device random number generator of the spyre backend: a Philox4x32-10 stream per card
// (Documentation/torch_spyre.md "Random numbers"). Its state is a seed (the Philox key) and a
// 64-bit offset (the high half of the Philox counter): every random kernel takes the current
// (seed, offset) and advances the offset by one, and the card generates element k of the
// output from counter (k / 4, offset), so a kernel's values depend only on the state, never on
// how the work is split over cores. The state as a tensor (get_state/set_state,
// torch.spyre.get_rng_state) is 16 bytes: seed then offset, little endian.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>
#include <utility>

namespace torch_spyre {

class SpyreGeneratorImpl final : public c10::GeneratorImpl {
  public:
    static constexpr int64_t kStateBytes = 16;

    explicit SpyreGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

    void set_current_seed(uint64_t seed) override;  // also restarts the offset at 0
    void set_offset(uint64_t offset) override { offset_ = offset; }
    uint64_t get_offset() const override { return offset_; }
    uint64_t current_seed() const override { return seed_; }
    uint64_t seed() override;  // a non-deterministic seed, set and returned
    void set_state(const c10::TensorImpl& state) override;
    c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

    // The (seed, offset) of one kernel launch; advances the offset so the next launch draws an
    // independent stream. Callers hold mutex_.
    std::pair<uint64_t, uint64_t> next_stream() { return {seed_, offset_++}; }

    static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  private:
    SpyreGeneratorImpl* clone_impl() const override;
    uint64_t seed_;
    uint64_t offset_ = 0;
};

// The default generator of card `device` (-1: the current device), made on first use with
// c10::default_rng_seed_val like CUDA's.
const at::Generator& default_generator(c10::DeviceIndex device);

// The (seed, offset) for one launch from `gen` or, if it is empty, the default generator of
// `device`, under the generator's lock.
std::pair<uint64_t, uint64_t> next_stream(const std::optional<at::Generator>& gen,
                                          c10::DeviceIndex device);

}  // namespace torch_spyre

// The spyre device generator (SpyreGenerator.h): the GeneratorImpl, the per-card default
// generators and the registration that makes torch.Generator(device="spyre") work.
#include "SpyreGenerator.h"

#include <ATen/Functions.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "SpyreFunctions.h"

namespace torch_spyre {

SpyreGeneratorImpl::SpyreGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void SpyreGeneratorImpl::set_current_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
}

uint64_t SpyreGeneratorImpl::seed() {
    const uint64_t s = c10::detail::getNonDeterministicRandom(/*is_cuda=*/true);
    set_current_seed(s);
    return s;
}

c10::intrusive_ptr<c10::TensorImpl> SpyreGeneratorImpl::get_state() const {
    at::Tensor state = at::empty({kStateBytes}, at::TensorOptions().dtype(at::kByte));
    auto* p = state.data_ptr<uint8_t>();
    std::memcpy(p, &seed_, 8);
    std::memcpy(p + 8, &offset_, 8);
    return state.getIntrusivePtr();
}

void SpyreGeneratorImpl::set_state(const c10::TensorImpl& state) {
    at::detail::check_rng_state(state);
    TORCH_CHECK_VALUE(state.numel() == kStateBytes, "spyre RNG state must have ", kStateBytes,
                      " bytes (seed and offset), got ", state.numel());
    const auto* p = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, p, 8);
    std::memcpy(&offset_, p + 8, 8);
}

SpyreGeneratorImpl* SpyreGeneratorImpl::clone_impl() const {
    auto* g = new SpyreGeneratorImpl(device().index(), seed_);
    g->offset_ = offset_;
    return g;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
    static std::once_flag once;
    // a deque: references to made generators stay valid
    static std::deque<at::Generator> gens;
    std::call_once(once, [] {
        for (c10::DeviceIndex i = 0; i < device_count(); ++i)
            gens.push_back(at::make_generator<SpyreGeneratorImpl>(i));
    });
    const c10::DeviceIndex d = resolve_device(device);
    check_device_index(d);
    TORCH_CHECK(static_cast<size_t>(d) < gens.size(), "spyre: no generator for device ", d);
    return gens[static_cast<size_t>(d)];
}

std::pair<uint64_t, uint64_t> next_stream(const std::optional<at::Generator>& gen,
                                          c10::DeviceIndex device) {
    auto* g = at::get_generator_or_default<SpyreGeneratorImpl>(gen, default_generator(device));
    TORCH_CHECK(g->device().index() == device || g->device().index() < 0,
                "the generator is on spyre:", g->device().index(),
                " but the tensor on spyre:", device);
    std::lock_guard<std::mutex> lock(g->mutex_);
    return g->next_stream();
}

namespace {

at::Generator make_generator(c10::DeviceIndex device) {
    return at::make_generator<SpyreGeneratorImpl>(resolve_device(device));
}

}  // namespace

REGISTER_GENERATOR_PRIVATEUSE1(make_generator)

}  // namespace torch_spyre

// Allocation and storage of spyre tensors: empty / empty_strided (through the caching
// allocator), resize_, set_ and record_stream.
#include "Memory.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>

#include "../runtime/SpyreAllocator.h"
#include "../runtime/SpyreException.h"
#include "../runtime/SpyreFunctions.h"
#include "../runtime/SpyreStream.h"

namespace torch_spyre::aten {
namespace {

constexpr auto kSpyreKeys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);

// The spyre device of a factory call (device=None or spyre without index: the current one).
c10::Device target_device(std::optional<c10::Device> device) {
    const c10::Device d = device.value_or(c10::Device(c10::DeviceType::PrivateUse1));
    TORCH_CHECK(d.is_privateuseone(), "torch_spyre: expected a spyre device, got ", d);
    const c10::DeviceIndex idx = resolve_device(d.has_index() ? d.index() : -1);
    check_device_index(idx);
    return c10::Device(c10::DeviceType::PrivateUse1, idx);
}

void check_factory_options(std::optional<at::Layout> layout, std::optional<bool> pin_memory) {
    TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
                "torch_spyre supports strided tensors only, not ", *layout);
    TORCH_CHECK(!pin_memory.value_or(false),
                "pin_memory=True applies to CPU tensors only (spyre memory needs no pinning)");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
    check_factory_options(layout, pin_memory);
    c10::DeviceGuard guard(target_device(device));
    return at::detail::empty_generic(size, device_allocator(), kSpyreKeys,
                                     c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
    check_factory_options(layout, pin_memory);
    c10::DeviceGuard guard(target_device(device));
    return at::detail::empty_strided_generic(size, stride, device_allocator(), kSpyreKeys,
                                             c10::dtype_or_default(dtype));
}

// Sets sizes (and strides) and grows the storage if they need more bytes.
void resize_impl(c10::TensorImpl* self, c10::IntArrayRef size, at::OptionalIntArrayRef stride) {
    if (self->sizes() == size && (!stride || self->strides() == *stride)) return;
    const size_t itemsize = self->dtype().itemsize();
    const size_t offset = static_cast<size_t>(self->storage_offset());
    size_t nbytes = 0;
    if (stride) {
        self->set_sizes_and_strides(size, *stride);
        nbytes = at::detail::computeStorageNbytes(size, *stride, itemsize, offset);
    } else {
        self->set_sizes_contiguous(size);
        nbytes = at::detail::computeStorageNbytesContiguous(size, itemsize, offset);
    }
    if (self->numel() == 0) return;
    const c10::Storage& storage = self->unsafe_storage();
    if (!storage) {
        c10::DeviceGuard guard(self->device());
        self->set_storage_keep_dtype(c10::Storage(c10::Storage::use_byte_size_t(), nbytes,
                                                  device_allocator(), /*resizable=*/true));
    } else if (nbytes > storage.nbytes()) {
        resize_bytes(storage.unsafeGetStorageImpl(), nbytes);
    }
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
    TORCH_CHECK(!self.has_names(), "torch_spyre: resize_ of a named tensor");
    c10::TensorImpl* impl = self.unsafeGetTensorImpl();
    resize_impl(impl, size, std::nullopt);
    if (memory_format) {
        TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve, "Unsupported memory format ",
                    *memory_format);
        impl->empty_tensor_restride(*memory_format);
    }
    return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
    at::native::checkSetStorage(self, std::move(source), storage_offset, size, stride);
    self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
    resize_impl(self.unsafeGetTensorImpl(), size,
                stride.empty() ? at::OptionalIntArrayRef() : at::OptionalIntArrayRef(stride));
    return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
    const int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
    return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
    if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
    return set_storage(self, source.storage(), source.storage_offset(), source.sizes(),
                       source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
    c10::DeviceGuard guard(self.device());
    c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), true);
    return set_storage(self, std::move(storage), 0, {0}, {});
}

void record_stream_op(at::Tensor& self, c10::Stream stream) {
    record_stream(self.storage().data_ptr(), stream);
}

}  // namespace

void resize_bytes(c10::StorageImpl* storage, size_t nbytes) {
    TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
    c10::Allocator* alloc = storage->allocator();
    TORCH_CHECK(alloc != nullptr, "torch_spyre: the storage has no allocator to resize with");
    c10::DeviceGuard guard(storage->device());
    at::DataPtr fresh = nbytes ? alloc->allocate(nbytes) : at::DataPtr(nullptr, storage->device());
    const size_t keep = std::min(storage->nbytes(), nbytes);
    if (keep > 0 && storage->data_ptr().get()) {
        const DevicePtr src = lookup(storage->data_ptr().get());
        const DevicePtr dst = lookup(fresh.get());
        const c10::Stream stream = current_stream(storage->device().index());
        SPYRE_CHECK(spyre_memcpy_dtod_async(dst.buffer, dst.offset, src.buffer, src.offset, keep,
                                            native_stream(stream)));
        // The old block is read by that copy: not reusable before it has run.
        record_stream(storage->data_ptr(), stream);
    }
    storage->set_data_ptr_noswap(std::move(fresh));
    storage->set_nbytes(nbytes);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
    m.impl("empty_strided", TORCH_FN(empty_strided));
    m.impl("resize_", TORCH_FN(resize_));
    m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
    m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
    m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
    m.impl("set_", TORCH_FN(set_empty));
    m.impl("record_stream", TORCH_FN(record_stream_op));
}

}  // namespace torch_spyre::aten

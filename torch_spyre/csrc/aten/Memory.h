// Storage management of spyre tensors (csrc/aten/Memory.cpp).
#pragma once

#include <c10/core/StorageImpl.h>

#include <cstddef>

namespace torch_spyre::aten {

// Resizes a spyre storage to `nbytes`, keeping its first min(old, new) bytes (a new block and a
// device-to-device copy on the current stream). For resize_ and UntypedStorage.resize_.
void resize_bytes(c10::StorageImpl* storage, size_t nbytes);

}  // namespace torch_spyre::aten

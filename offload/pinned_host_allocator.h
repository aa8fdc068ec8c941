// Page-locked (pinned) host memory for HostPool in CUDA builds, and the one
// factory that picks an allocator for the offload tiers.
//
// Pinned memory is what cudaMemcpyAsync needs to overlap host-device copies
// with compute; DeepSpeed's offload_optimizer.pin_memory / offload_param.
// pin_memory ask for it. This file's .cpp is the one place in offload/ that
// tests ZS_HAVE_CUDA.
#pragma once

#include <memory>

#include "offload/host_allocator.h"

namespace zeroshard {

/// The allocator for the offload tiers' host buffers: pinned memory
/// (PageableHostAllocator memory registered with cudaHostRegister, so 4 KiB
/// aligned as O_DIRECT needs) when `pinned` is true, pageable memory
/// (PageableHostAllocator) otherwise. Throws ConfigError naming
/// `config_key` when pinned memory is asked for in a build without CUDA or
/// on a machine without a CUDA device.
std::shared_ptr<HostAllocator> make_host_allocator(bool pinned, const char* config_key);

}  // namespace zeroshard

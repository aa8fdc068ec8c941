// The sharded module's weights as a state dict: full tensors under the
// module's own parameter names, gathered from the engine, and written to a
// file that libtorch (torch::pickle_load), Python's torch.load or a
// safetensors reader loads without zeroshard.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>
#include <torch/ordered_dict.h>

#include "libtorch/shard.h"

namespace zeroshard::torch {

/// Every parameter under each of its names (a tied weight under both, as
/// Python's state_dict()), in named_parameters() order, then this rank's
/// buffers in named_buffers() order: contiguous cpu tensors of the
/// module's shapes in the engine's compute dtype (the values the forward
/// uses), owned copies. Collective at stage 3 (Engine::gather_parameter,
/// one parameter at a time): every rank calls it. Throws InvariantError
/// during a forward or backward.
::torch::OrderedDict<std::string, at::Tensor> gather_state_dict(ShardedModule& module);

/// Writes gather_state_dict(module) to `path` on rank 0 (every rank calls
/// it; the others write nothing): a ".safetensors" path as safetensors
/// (dtype F32, BF16 or F16; "format": "pt" metadata), any other as
/// torch's pickle archive (torch::pickle_save of a Dict[str, Tensor]),
/// which torch::pickle_load and Python's torch.load read back as a dict.
/// Written to <path>.tmp, fsynced and renamed: a crash leaves the old file
/// or the new one. Throws AgreedIoError on every rank when rank 0 cannot
/// write (naming the path), and as gather_state_dict.
void export_state_dict(ShardedModule& module, const std::string& path);

}  // namespace zeroshard::torch

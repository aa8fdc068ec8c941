// Where the main job's forward and backward run: `--device cpu` (OpenBLAS,
// the default) or `--device cuda` (cuBLAS on one GPU per rank). The Engine
// and its buffers stay in host memory either way; see cuda_mlp.h.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "comm/communicator.h"
#include "runtime/config/config.h"  // ComputeDevice: the device that computes the MLP
#include "examples/fashion_mnist/classifier.h"
#include "examples/fashion_mnist/mlp.h"

namespace zeroshard::examples {

/// "cpu" or "cuda".
std::string_view compute_device_name(ComputeDevice d);

/// The device named "cpu" or "cuda" (exact, lower case). Throws ConfigError
/// naming --device and the accepted values for anything else.
ComputeDevice parse_compute_device(std::string_view name);

/// True when this build has the CUDA backend (ZS_HAVE_CUDA).
bool cuda_compiled_in();

/// Makes `d` usable by this rank and describes it ("cpu", or e.g.
/// "cuda:1 (NVIDIA H200, 139.8 GiB)"). For cuda: one rank per GPU, the
/// device index being the rank's node-local rank (comm/nccl/local_rank.h);
/// the device is made current on the calling thread (cudaSetDevice).
/// Collective over `comm` for cuda (every rank must call it; the ranks agree
/// on success before any throws, so none is left waiting); no communication
/// for cpu. Errors: ConfigError "built without CUDA" in a build without the
/// CUDA backend; DeviceError when a rank sees no CUDA device or fewer
/// devices than ranks on its node (the message names the rank, its local
/// rank and the device count), the same error kind on every rank.
std::string select_compute_device(ComputeDevice d, Communicator& comm);

/// The classifier that runs `mlp`'s model on `d`: null for cpu (use `mlp`
/// itself), a CudaMlp on the current device for cuda (call
/// select_compute_device first). `mlp` must outlive the result and its
/// engine must be finalized. Throws ConfigError "built without CUDA" for
/// cuda in a build without the CUDA backend, DeviceError for CUDA failures.
std::unique_ptr<Classifier> make_device_classifier(Mlp& mlp, ComputeDevice d);

}  // namespace zeroshard::examples

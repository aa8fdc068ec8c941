// --device cpu|cuda: the one file of the example that looks at ZS_HAVE_CUDA;
// see compute_device.h.
#include "examples/fashion_mnist/compute_device.h"

#include <fmt/format.h>

#include "core/error.h"
#include "zs_config.h"

#if ZS_HAVE_CUDA
#include "examples/fashion_mnist/cuda_mlp.h"
#endif

namespace zeroshard::examples {
namespace {

#if !ZS_HAVE_CUDA
[[noreturn]] void throw_built_without_cuda() {
  throw ConfigError(
      "--device cuda: this fashion_mnist was built without CUDA (nvcc, cuBLAS or NCCL was not "
      "found when the build folder was set up); put nvcc on PATH (export "
      "PATH=/usr/local/cuda/bin:$PATH), set up the build again with -Dcuda=enabled, or use "
      "--device cpu");
}
#endif

}  // namespace

std::string_view compute_device_name(ComputeDevice d) {
  return d == ComputeDevice::cuda ? "cuda" : "cpu";
}

ComputeDevice parse_compute_device(std::string_view name) {
  if (name == "cpu") return ComputeDevice::cpu;
  if (name == "cuda") return ComputeDevice::cuda;
  throw ConfigError(fmt::format("--device \"{}\": expected cpu or cuda", name));
}

bool cuda_compiled_in() { return ZS_HAVE_CUDA != 0; }

std::string select_compute_device(ComputeDevice d, Communicator& comm) {
  if (d == ComputeDevice::cpu) return "cpu";
#if ZS_HAVE_CUDA
  return select_cuda_device(comm);
#else
  (void)comm;
  throw_built_without_cuda();
#endif
}

std::unique_ptr<Classifier> make_device_classifier(Mlp& mlp, ComputeDevice d) {
  if (d == ComputeDevice::cpu) return nullptr;
#if ZS_HAVE_CUDA
  return std::make_unique<CudaMlp>(mlp);
#else
  (void)mlp;
  throw_built_without_cuda();
#endif
}

}  // namespace zeroshard::examples

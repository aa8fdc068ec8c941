// gather_state_dict and export_state_dict (libtorch/state_dict.h).
#include "libtorch/state_dict.h"

#include <filesystem>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "comm/collective_error.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "libtorch/shard_state.h"
#include "runtime/checkpoint/safetensors_writer.h"

namespace zeroshard::torch {

namespace {

DType dtype_of(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return DType::f32;
    case c10::ScalarType::BFloat16: return DType::bf16;
    case c10::ScalarType::Half: return DType::f16;
    case c10::ScalarType::Double: return DType::f64;
    default: break;
  }
  throw IoError(std::string("zeroshard::torch::export_state_dict: no safetensors dtype for a tensor of ") +
                c10::toString(t));
}

void write_safetensors(const ::torch::OrderedDict<std::string, at::Tensor>& dict, const std::string& path) {
  std::vector<SafetensorsEntry> entries;
  for (const auto& item : dict) {
    SafetensorsEntry e;
    e.name = item.key();
    e.dtype = dtype_of(item.value().scalar_type());
    e.shape = item.value().sizes().vec();
    e.numel = static_cast<std::uint64_t>(item.value().numel());
    entries.push_back(std::move(e));
  }
  const SafetensorsPlan plan = plan_safetensors({{"format", "pt"}}, std::move(entries));
  DurableFileWriter out(path);
  const std::string prefix = safetensors_prefix(plan);
  out.write(prefix.data(), prefix.size());
  for (const auto& item : dict) out.write(item.value().data_ptr(), item.value().nbytes());
  out.finish();
}

void write_pickle(const ::torch::OrderedDict<std::string, at::Tensor>& dict, const std::string& path) {
  c10::Dict<std::string, at::Tensor> d;
  for (const auto& item : dict) d.insert(item.key(), item.value());
  const std::vector<char> bytes = ::torch::jit::pickle_save(c10::IValue(d));
  DurableFileWriter out(path);
  out.write(bytes.data(), bytes.size());
  out.finish();
}

}  // namespace

::torch::OrderedDict<std::string, at::Tensor> gather_state_dict(ShardedModule& module) {
  ShardState& s = module.state();
  s.check_idle("gather_state_dict()");
  ::torch::OrderedDict<std::string, at::Tensor> dict;
  for (const auto& item : s.module().named_parameters(true)) {
    const ParamEntry& e = s.params()[s.index_of(item.key())];
    std::vector<float> values = s.engine().gather_parameter(e.id);
    at::Tensor full = at::from_blob(values.data(), e.shape, at::TensorOptions().dtype(at::kFloat))
                          .to(s.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    dict.insert(item.key(), std::move(full));
  }
  for (const auto& item : s.module().named_buffers(true)) dict.insert(item.key(), item.value().detach().clone());
  return dict;
}

void export_state_dict(ShardedModule& module, const std::string& path) {
  const ::torch::OrderedDict<std::string, at::Tensor> dict = gather_state_dict(module);
  Communicator& comm = module.state().comm();
  run_agreed(comm, [&] {
    if (comm.rank() != 0) return;
    const std::string tmp = path + ".tmp";
    if (std::filesystem::path(path).extension() == ".safetensors") {
      write_safetensors(dict, tmp);
    } else {
      write_pickle(dict, tmp);
    }
    const auto parent = std::filesystem::absolute(path).parent_path().string();
    rename_durable(tmp, path, parent);
  });
}

}  // namespace zeroshard::torch

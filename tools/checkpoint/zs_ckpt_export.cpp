// zs_ckpt_export: consolidates a sharded zeroshard checkpoint (any world
// size, any stage) into one fp32 safetensors file of the model's parameters,
// loadable with safetensors.torch.load_file / safetensors.numpy.load_file.
//
//   zs_ckpt_export /ckpt/run1 model.safetensors          # the checkpoint `latest` names
//   zs_ckpt_export /ckpt/run1/step-00000400 model.safetensors
//
// Exit status: 0 on success, 1 on an error (one line on stderr).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <string>

#include "examples/report/error_message.h"
#include "tools/checkpoint/safetensors_export.h"

int main(int argc, char** argv) {
  std::string ckpt, out;
  bool quiet = false;
  CLI::App app{"Export a sharded zeroshard checkpoint's fp32 master weights to one safetensors file"};
  app.add_option("CKPT_DIR", ckpt,
                 "checkpoint directory (with manifest.json) or save directory (with `latest`)")
      ->required();
  app.add_option("OUT", out, "output .safetensors file (written to OUT.tmp, then renamed)")->required();
  app.add_flag("-q,--quiet", quiet, "print nothing on success (no progress line either)");
  CLI11_PARSE(app, argc, argv);

  try {
    const auto r = zeroshard::tools::export_safetensors(ckpt, out, !quiet);
    if (!quiet) {
      fmt::print("exported {} ({} at optimizer step {}): {} tensors, {} bytes of fp32 data, {} bytes "
                 "in {} (read buffer {} bytes)\n",
                 r.checkpoint_dir, r.tag, r.optimizer_step, r.tensors, r.data_bytes, r.file_bytes, out,
                 r.buffer_bytes);
    }
    return 0;
  } catch (const std::exception& e) {
    return zeroshard::examples::print_error("zs_ckpt_export", e);
  }
}

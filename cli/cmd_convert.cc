// ckpt convert: HF safetensors -> ckpt, ckpt -> HF safetensors, ckpt -> torch.save
// (the work is in ckpt/convert/convert.h; this parses, calls and prints).
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "ckpt/convert/convert.h"
#include "cli/commands.h"
#include "cli/gpt_job.h"
#include "tests/testing/negative_controls.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;

struct ConvertFlags {
  std::string src, dst, to, layout = "tp=1", compression = "none", negative_control;
  int64_t iteration = -1, vocab_divisible_by = 128, chunk_kb = 4096;
  double max_shard_mb = 5120;
  bool mcore = false, stack_layers = false, extra_state = false, keep_padding = false, json = false;
};

int Fail(const Status& st) {
  std::fprintf(stderr, "ckpt convert: %s\n", st.ToString().c_str());
  return kExitError;
}

Result<convert::ConvertStats> Run(const ConvertFlags& f) {
  if (f.to == "ckpt") {
    convert::HfImportOptions o;
    o.hf_dir = f.src;
    o.root = f.dst;
    o.iteration = f.iteration < 0 ? 0 : f.iteration;
    CKPT_ASSIGN_OR_RETURN(o.layout, ParallelConfig::Parse(f.layout));
    o.keys.stack_layers = f.mcore || f.stack_layers;
    o.keys.extra_state = f.mcore || f.extra_state;
    o.vocab_divisible_by = f.vocab_divisible_by;
    CKPT_ASSIGN_OR_RETURN(o.write.codec.compression, ParseCompression(f.compression));
    o.write.chunk_bytes = f.chunk_kb * 1024;
    if (!f.negative_control.empty() && !(o.links_hook = testing::ConvertNegativeControl(f.negative_control)))
      return Status::InvalidArgument("--negative-control '" + f.negative_control + "' (known: naive-qkv, swap-gate-up)");
    return convert::ImportHfLlama(o);
  }
  if (f.to == "hf") {
    convert::HfExportOptions o;
    o.root = f.src;
    o.iteration = f.iteration;
    o.out_dir = f.dst;
    o.max_shard_bytes = int64_t(f.max_shard_mb * (1 << 20));
    return convert::ExportHfLlama(o);
  }
  if (f.to == "torch") {
    convert::TorchExportOptions o;
    o.root = f.src;
    o.iteration = f.iteration;
    o.out_path = f.dst;
    o.keep_vocab_padding = f.keep_padding;
    return convert::ExportTorch(o);
  }
  return Status::InvalidArgument("--to '" + f.to + "': give ckpt (from a HF directory), hf or torch (from a checkpoint)");
}

int RunConvert(const ConvertFlags& f) {
  MemoryProbe mem;
  mem.ResetPeak();
  auto stats = Run(f);
  if (!stats.ok()) return Fail(stats.status());
  const convert::ConvertStats& s = *stats;
  const double mbps = s.seconds > 0 ? s.bytes_written / 1e6 / s.seconds : 0.0;
  json out = {{"op", "convert"}, {"to", f.to}, {"src", f.src}, {"dst", f.dst}, {"tensors", s.tensors},
              {"files", s.files}, {"model_bytes", s.model_bytes}, {"bytes_read", s.bytes_read},
              {"bytes_written", s.bytes_written}, {"seconds", s.seconds}, {"mb_per_s", mbps},
              {"peak_buffer_bytes", s.peak_buffer_bytes}, {"peak_rss_bytes", mem.Peak()},
              {"objects_skipped", s.objects_skipped}};
  if (f.to == "ckpt") out["layout"] = f.layout;
  if (f.json) {
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  std::printf("convert %s -> %s (%s): %lld tensors, %.1f MB written in %.3f s = %.0f MB/s, %d file(s); "
              "peak RSS %.1f MB (largest buffer %.1f MB) for a %.1f MB model%s\n",
              f.src.c_str(), f.dst.c_str(), f.to == "ckpt" ? f.layout.c_str() : f.to.c_str(),
              static_cast<long long>(s.tensors), s.bytes_written / 1e6, s.seconds, mbps, s.files, mem.Peak() / 1e6,
              s.peak_buffer_bytes / 1e6, s.model_bytes / 1e6,
              s.objects_skipped ? (", " + std::to_string(s.objects_skipped) + " per-rank object(s) left out").c_str()
                                : "");
  return kExitOk;
}

}  // namespace

void RegisterConvert(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "convert", "Convert between ckpt and HF safetensors (Llama) or one torch.save file (docs: README \"Convert\")");
  auto f = std::make_shared<ConvertFlags>();
  cmd->add_option("src", f->src, "source: a HF model directory (--to ckpt) or a checkpoint root")->required();
  cmd->add_option("dst", f->dst, "destination: checkpoint root, HF directory, or .pt file")->required();
  cmd->add_option("--to", f->to, "ckpt (HF -> ckpt), hf (ckpt -> HF safetensors) or torch (ckpt -> torch.save)")
      ->required();
  cmd->add_option("--layout", f->layout, "--to ckpt: target layout, e.g. tp=4,pp=2 or pp=4,vpp=2");
  cmd->add_option("--iter", f->iteration, "--to ckpt: iteration to write (0); else the one to read (latest)");
  cmd->add_flag("--mcore", f->mcore, "--to ckpt: Megatron-Core training's keys: --stack-layers --extra-state");
  cmd->add_flag("--stack-layers", f->stack_layers, "--to ckpt: keys decoder.layers.<name> with a layer axis");
  cmd->add_flag("--extra-state", f->extra_state, "--to ckpt: MCore's _extra_state objects of the linear layers");
  cmd->add_option("--vocab-divisible-by", f->vocab_divisible_by, "--to ckpt: pad the vocab to a multiple of this x TP");
  cmd->add_option("--compress", f->compression, "--to ckpt: none or zstd");
  cmd->add_option("--chunk-kb", f->chunk_kb, "--to ckpt: target chunk size in KiB");
  cmd->add_option("--max-shard-mb", f->max_shard_mb, "--to hf: largest safetensors file in MiB (default 5120; fractions allowed)");
  cmd->add_flag("--keep-vocab-padding", f->keep_padding, "--to torch: keep the padded vocab rows");
  cmd->add_flag("--json", f->json, "machine-readable output");
  cmd->add_option("--negative-control", f->negative_control,
                  "tests only: a wrong mapping (naive-qkv, swap-gate-up) the oracle must catch")->group("");
  cmd->callback([=]() { *exit_code = RunConvert(*f); });
}

}  // namespace ckpt::cli

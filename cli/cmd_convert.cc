// ckpt convert: HF safetensors -> ckpt, ckpt -> HF safetensors, ckpt -> torch.save
// (the work is in ckpt/convert/convert.h; this parses, calls and prints).
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "ckpt/convert/convert.h"
#include "cli/commands.h"
#include "cli/gpt_job.h"
#include "cli/progress.h"
#include "cli/harness_seam.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;

Status Fail(const Status& st) {
  std::fprintf(stderr, "ckpt convert: %s\n", st.ToString().c_str());
  return st;  // a damaged checkpoint (kCorruption) is exit 1, like verify and load
}

// The HF model's bytes: its .safetensors files (the reads of --to ckpt).
int64_t SafetensorsBytes(Env* env, const std::string& dir, int64_t* files) {
  int64_t bytes = 0;
  auto names = env->ListDir(dir);
  for (const std::string& n : names.ok() ? *names : std::vector<std::string>{}) {
    if (n.size() < 12 || n.compare(n.size() - 12, 12, ".safetensors") != 0) continue;
    auto st = env->Stat(JoinPath(dir, n));
    if (st.ok()) bytes += int64_t(st->size), ++*files;
  }
  return bytes;
}

// Progress counts the source's reads: the HF files (--to ckpt) or the checkpoint's.
Result<convert::ConvertStats> Run(const ConvertFlags& f, CliProgress* p) {
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
    if (p->active()) {
      int64_t files = 0;
      const int64_t bytes = SafetensorsBytes(DefaultEnv(), f.src, &files);
      p->SetTotals(bytes, files);
    }
    o.env = p->env();
    if (!f.negative_control.empty() && !Harness().convert_links) return NoHarness("--negative-control");
    if (!f.negative_control.empty() && !(o.links_hook = Harness().convert_links(f.negative_control)))
      return Status::InvalidArgument("--negative-control '" + f.negative_control + "' (known: naive-qkv, swap-gate-up)");
    return convert::ImportHfLlama(o);
  }
  if (f.to == "hf") {
    // Checked as a double: 0, -1 and NaN are refused, not cast to a size.
    if (!(f.max_shard_mb > 0) || f.max_shard_mb > double(int64_t(1) << 40)) {
      char mb[64];
      std::snprintf(mb, sizeof mb, "%g", f.max_shard_mb);
      return Status::InvalidArgument(std::string("--max-shard-mb ") + mb + ": give the largest file size in MiB, > 0");
    }
    convert::HfExportOptions o;
    o.root = f.src;
    o.iteration = f.iteration;
    o.out_dir = f.dst;
    o.max_shard_bytes = int64_t(f.max_shard_mb * (1 << 20));
    p->SetTotalsFromManifest(f.src, f.iteration);
    o.env = p->env();
    return convert::ExportHfLlama(o);
  }
  if (f.to == "torch") {
    convert::TorchExportOptions o;
    o.root = f.src;
    o.iteration = f.iteration;
    o.out_path = f.dst;
    o.keep_vocab_padding = f.keep_padding;
    p->SetTotalsFromManifest(f.src, f.iteration);
    o.env = p->env();
    return convert::ExportTorch(o);
  }
  return Status::InvalidArgument("--to '" + f.to + "': give ckpt (from a HF directory), hf or torch (from a checkpoint)");
}

}  // namespace

Status RunConvert(const ConvertFlags& f) {
  MemoryProbe mem;
  mem.ResetPeak();
  CliProgress progress("convert", f.json, f.no_progress, 0, DefaultEnv(), /*count_writes=*/false,
                       f.to == "ckpt" ? ".safetensors" : ".h5");
  auto stats = Run(f, &progress);
  progress.Finish();
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
    return Status::Ok();
  }
  std::printf("convert %s -> %s (%s): %lld tensors, %.1f MB written in %.3f s = %.0f MB/s, %d file(s); "
              "peak RSS %.1f MB (largest buffer %.1f MB) for a %.1f MB model%s\n",
              f.src.c_str(), f.dst.c_str(), f.to == "ckpt" ? f.layout.c_str() : f.to.c_str(),
              static_cast<long long>(s.tensors), s.bytes_written / 1e6, s.seconds, mbps, s.files, mem.Peak() / 1e6,
              s.peak_buffer_bytes / 1e6, s.model_bytes / 1e6,
              s.objects_skipped ? (", " + std::to_string(s.objects_skipped) + " per-rank object(s) left out").c_str()
                                : "");
  return Status::Ok();
}

}  // namespace ckpt::cli

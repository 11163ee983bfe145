// ckpt._ckpt conversions: the library behind `ckpt convert`
// (ckpt/convert/convert.h) for Python callers. Each call runs one conversion
// with the GIL released and returns its ConvertStats as a dict; a failed
// conversion raises ckpt.CkptError (nothing partial is left visible).
#include "py_convert.h"

#include <functional>

#include "ckpt/convert/convert.h"
#include "py_progress.h"

namespace ckpt::py {
namespace {

pyb::dict ToDict(const convert::ConvertStats& s) {
  pyb::dict d;
  d["bytes_read"] = s.bytes_read;
  d["bytes_written"] = s.bytes_written;
  d["tensors"] = s.tensors;
  d["files"] = s.files;
  d["model_bytes"] = s.model_bytes;
  d["peak_buffer_bytes"] = s.peak_buffer_bytes;
  d["objects_skipped"] = s.objects_skipped;
  d["seconds"] = s.seconds;
  return d;
}

pyb::dict Run(const std::function<Result<convert::ConvertStats>()>& fn, PyProgress* meter) {
  return ToDict(RunWithoutGil([&] {
    auto r = fn();
    meter->Finish();
    return r;
  }, 0, "convert"));
}

// The .safetensors files of an HF directory (the reads of an import): bytes and count.
void SetSafetensorsTotals(PyProgress* meter, const std::string& dir) {
  if (!meter->active()) return;
  int64_t bytes = 0, files = 0;
  auto names = DefaultEnv()->ListDir(dir);
  for (const std::string& n : names.ok() ? *names : std::vector<std::string>{}) {
    if (n.size() < 12 || n.compare(n.size() - 12, 12, ".safetensors") != 0) continue;
    auto st = DefaultEnv()->Stat(JoinPath(dir, n));
    if (st.ok()) bytes += int64_t(st->size), ++files;
  }
  meter->SetTotals(bytes, files);
}

pyb::dict HfToCkpt(const std::string& hf_dir, const std::string& root, int64_t iteration,
                   const std::string& layout, bool stack_layers, bool extra_state, int64_t vocab_divisible_by,
                   const std::string& compress, const pyb::object& progress) {
  PyProgress meter(progress, "convert", DefaultEnv(), /*count_writes=*/false, ".safetensors");
  SetSafetensorsTotals(&meter, hf_dir);
  convert::HfImportOptions o;
  o.env = meter.env();
  o.hf_dir = hf_dir;
  o.root = root;
  o.iteration = iteration;
  o.layout = Value(ParallelConfig::Parse(layout), 0, "convert");
  o.keys.stack_layers = stack_layers;
  o.keys.extra_state = extra_state;
  o.vocab_divisible_by = vocab_divisible_by;
  o.write.codec.compression = Value(ParseCompression(compress), 0, "convert");
  return Run([&] { return convert::ImportHfLlama(o); }, &meter);
}

pyb::dict CkptToHf(const std::string& root, const std::string& out_dir, int64_t iteration, int64_t max_shard_bytes,
                   const pyb::object& progress) {
  PyProgress meter(progress, "convert", DefaultEnv(), /*count_writes=*/false);
  meter.SetTotalsFromManifest(root, iteration);
  convert::HfExportOptions o;
  o.env = meter.env();
  o.root = root;
  o.out_dir = out_dir;
  o.iteration = iteration;
  if (max_shard_bytes != 0) o.max_shard_bytes = max_shard_bytes;  // 0: the default; < 0 is refused
  return Run([&] { return convert::ExportHfLlama(o); }, &meter);
}

pyb::dict CkptToTorch(const std::string& root, const std::string& out_path, int64_t iteration,
                      bool keep_vocab_padding, const pyb::object& progress) {
  PyProgress meter(progress, "convert", DefaultEnv(), /*count_writes=*/false);
  meter.SetTotalsFromManifest(root, iteration);
  convert::TorchExportOptions o;
  o.env = meter.env();
  o.root = root;
  o.out_path = out_path;
  o.iteration = iteration;
  o.keep_vocab_padding = keep_vocab_padding;
  return Run([&] { return convert::ExportTorch(o); }, &meter);
}

}  // namespace

void DefineConvert(pyb::module_& m) {
  m.def("convert_hf_to_ckpt", &HfToCkpt);
  m.def("convert_ckpt_to_hf", &CkptToHf);
  m.def("convert_ckpt_to_torch", &CkptToTorch);
}

}  // namespace ckpt::py

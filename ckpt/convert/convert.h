// Conversions between ckpt checkpoints and the formats users already have:
// Hugging Face safetensors (Llama-style models) and one consolidated
// torch.save file. The library behind `ckpt convert`, callable from the
// Python API.
//
//  - ImportHfLlama: a HF model directory (config.json + model.safetensors or
//    the shards of model.safetensors.index.json) -> a committed ckpt
//    checkpoint at any target layout (TP/PP/VPP/DP; vocab padded for the
//    target TP; GptShards' keys and sharding, hf_llama.h's mapping). It writes
//    each target rank's shard file tensor by tensor, filling each main-replica
//    shard straight from the HF files (QKV interleaved, [gate; up]), so memory
//    is one shard buffer (the largest local tensor), never the model. The
//    commit is the normal one (nothing visible until the directory rename).
//    Metadata: "model" (family megatron_gpt, its config with the MCore
//    options, name "hf:LlamaForCausalLM"), "hf_config",
//    "converted_from" - what ckpt's own saves record plus the origin.
//  - ExportHfLlama: any ckpt GPT checkpoint of Llama shape (any layout; keys
//    per layer or stacked) -> HF safetensors + config.json, vocab padding
//    stripped, QKV and fc1 split back, files of at most max_shard_bytes
//    (model-0000i-of-0000n.safetensors + model.safetensors.index.json; one
//    model.safetensors when it fits). Streams row blocks of block_bytes.
//  - ExportTorch: the whole checkpoint as one torch.save file (zip format,
//    torch_save.h) that torch.load opens without ckpt: a dict of every
//    tensor key (MCore's names, global tensors, vocab padding stripped unless
//    keep_vocab_padding) plus one-cell objects (`_extra_state` -> None, UTF-8
//    blobs such as JSON -> str, others - e.g. the Python API's pickles ->
//    1-D torch.uint8 tensors of their bytes, so torch.load(weights_only=True)
//    reads the file). Per-rank objects (multi-cell grids other than
//    _extra_state) are layout-bound and left out (counted in stats).
//
// Errors name the file and tensor: kNotFound (missing file or tensor),
// kInvalidArgument (config/shape/architecture), kUnimplemented (dtype or
// model kind), kCorruption (malformed safetensors, damaged checkpoint). A
// failed conversion leaves no partial output visible (tmp dirs/files removed)
// and nothing it created: the files it wrote and the directories it created
// (the destination itself when it did not exist) are removed again.
// Thread-compatible: one conversion per call, no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/format/shard_file.h"
#include "ckpt/base/status.h"
#include "ckpt/convert/hf_llama.h"
#include "reshard/parallel_state.h"

namespace ckpt::convert {

struct ConvertStats {
  int64_t bytes_read = 0;      // source tensor bytes read
  int64_t bytes_written = 0;   // tensor bytes written
  int64_t tensors = 0;         // tensors (HF side) converted
  int files = 0;               // output files
  int64_t model_bytes = 0;     // the model's tensor bytes (HF side)
  int64_t peak_buffer_bytes = 0;  // largest tensor buffer held at once
  int64_t objects_skipped = 0;    // ExportTorch: per-rank objects left out
  double seconds = 0;
};

// Megatron-Core key options of the target (megatron_gpt.h).
struct McoreKeyOptions {
  bool stack_layers = false;  // "decoder.layers.<name>" + layer axis (MCore training's default)
  bool extra_state = false;   // register the local linears' `_extra_state` objects
};

struct HfImportOptions {
  std::string hf_dir;
  std::string root;
  int64_t iteration = 0;
  ParallelConfig layout;
  McoreKeyOptions keys;
  int64_t vocab_divisible_by = 128;  // Megatron's --make-vocab-size-divisible-by
  ShardWriteOptions write;
  Env* env = nullptr;  // nullptr: DefaultEnv()
  // Test hook: may rewrite the HF -> MCore mapping before it is used (the
  // negative controls of harness/, set by ckpt-lab); empty in the product.
  std::function<void(std::vector<TensorLink>*)> links_hook;
};
Result<ConvertStats> ImportHfLlama(const HfImportOptions& opts);

struct HfExportOptions {
  std::string root;
  int64_t iteration = -1;  // -1: latest
  std::string out_dir;
  int64_t max_shard_bytes = int64_t(5) << 30;  // transformers' default max_shard_size "5GB"-ish; > 0
  int64_t block_bytes = int64_t(16) << 20;      // > 0 (kInvalidArgument otherwise)
  double rms_norm_eps = 1e-5;    // when the checkpoint records no hf_config
  double rope_theta = 10000.0;
  Env* env = nullptr;
};
Result<ConvertStats> ExportHfLlama(const HfExportOptions& opts);

struct TorchExportOptions {
  std::string root;
  int64_t iteration = -1;
  std::string out_path;
  bool keep_vocab_padding = false;
  int64_t block_bytes = int64_t(16) << 20;
  Env* env = nullptr;
};
Result<ConvertStats> ExportTorch(const TorchExportOptions& opts);

}  // namespace ckpt::convert

// ckpt inspect: what a checkpoint holds (tensors, shapes, dtypes, sizes, layout,
// the model family its metadata records).
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"
#include "cli/commands.h"
#include "reshard/family.h"

namespace ckpt::cli {
namespace {

struct TensorSummary {
  DType dtype = DType::kFloat32;
  Shape global_shape;
  int shards = 0;
  int64_t bytes = 0;
  int64_t stored = 0;
  std::string compression;
};

std::map<std::string, TensorSummary> Summarise(const Manifest& m) {
  std::map<std::string, TensorSummary> out;
  for (const auto& s : m.shards) {
    TensorSummary& t = out[s.meta.key];
    t.dtype = s.meta.dtype;
    t.global_shape = s.meta.global_shape;
    t.shards++;
    t.bytes += s.meta.num_bytes();
    for (const auto& c : s.record.chunks) t.stored += int64_t(c.stored_size);
    t.compression = std::string(CompressionName(s.record.compression));
  }
  return out;
}

// The recorded model as the registry resolves it: {"family", "config"} (the
// family's canonical config), {"error"} when it does not resolve (e.g. a
// family this build does not register), null when none is recorded.
nlohmann::json ModelJson(const Manifest& m) {
  Result<std::optional<reshard::ModelRef>> model = reshard::ModelOf(m.metadata);
  if (!model.ok()) return {{"error", model.status().ToString()}};
  if (!model->has_value()) return nullptr;
  return {{"family", std::string((*model)->family->name())}, {"config", (*model)->config}};
}

nlohmann::json ToJson(const Manifest& m, const std::string& root) {
  nlohmann::json j;
  j["root"] = root;
  j["iteration"] = m.iteration;
  j["format_version"] = m.format_version;
  j["chunk_hash"] = std::string(ChunkHashName(m.chunk_hash));
  j["layout"] = m.layout;
  j["metadata"] = m.metadata;
  j["model"] = ModelJson(m);
  j["files"] = nlohmann::json::array();
  for (const auto& f : m.files) j["files"].push_back({{"name", f.name}, {"rank", f.rank}, {"size", f.size}});
  j["tensors"] = nlohmann::json::array();
  for (const auto& [key, t] : Summarise(m))
    j["tensors"].push_back({{"key", key}, {"dtype", std::string(DTypeName(t.dtype))}, {"global_shape", t.global_shape},
                            {"shards", t.shards}, {"bytes", t.bytes}, {"stored_bytes", t.stored},
                            {"compression", t.compression}});
  j["objects"] = nlohmann::json::array();
  for (const auto& o : m.objects)
    j["objects"].push_back({{"key", o.meta.key}, {"cell", o.meta.cell()}, {"size", o.size}});
  j["total_bytes"] = m.TotalTensorBytes();
  j["total_file_bytes"] = m.TotalStoredBytes();
  return j;
}

void PrintText(const Manifest& m, const std::string& root) {
  std::printf("checkpoint %s  iteration %lld  format v%d  chunk hash %s\n", root.c_str(),
              static_cast<long long>(m.iteration), m.format_version, std::string(ChunkHashName(m.chunk_hash)).c_str());
  std::printf("layout   %s\n", m.layout.dump().c_str());
  if (!m.metadata.empty()) std::printf("metadata %s\n", m.metadata.dump().c_str());
  if (const nlohmann::json model = ModelJson(m); !model.is_null())
    std::printf("model    %s\n", model.contains("error") ? model["error"].get<std::string>().c_str()
                                                          : (model["family"].get<std::string>() + " " +
                                                             model["config"].dump()).c_str());
  std::printf("files    %zu shard files, %lld bytes\n", m.files.size(), static_cast<long long>(m.TotalStoredBytes()));
  std::printf("\n%-60s %-6s %-22s %6s %14s %14s\n", "tensor", "dtype", "global shape", "shards", "bytes", "stored");
  for (const auto& [key, t] : Summarise(m))
    std::printf("%-60s %-6s %-22s %6d %14lld %14lld\n", key.c_str(), std::string(DTypeName(t.dtype)).c_str(),
                ShapeToString(t.global_shape).c_str(), t.shards, static_cast<long long>(t.bytes),
                static_cast<long long>(t.stored));
  for (const auto& o : m.objects)
    std::printf("%-60s %-6s cell %-17lld %6d %14llu\n", o.meta.key.c_str(), "object",
                static_cast<long long>(o.meta.cell()), 1, static_cast<unsigned long long>(o.size));
  std::printf("\n%zu tensor shards, %zu objects, %lld tensor bytes\n", m.shards.size(), m.objects.size(),
              static_cast<long long>(m.TotalTensorBytes()));
}

}  // namespace

Status RunInspect(const InspectFlags& f) {
  auto m = ReadManifest(DefaultEnv(), f.root, f.iteration);
  if (!m.ok()) {
    std::fprintf(stderr, "ckpt inspect: %s\n", m.status().ToString().c_str());
    return m.status();  // a manifest that fails its own hash is damaged data (exit 1)
  }
  if (f.json)
    std::printf("%s\n", ToJson(*m, f.root).dump(2).c_str());
  else
    PrintText(*m, f.root);
  return Status::Ok();
}

}  // namespace ckpt::cli

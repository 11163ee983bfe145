// ckpt fingerprint / ckpt diff: the layout-invariant digest of a checkpoint's
// global state (per tensor on request) and an element-wise comparison of two
// checkpoints with the largest difference in ulps.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/fingerprint.h"
#include "cli/commands.h"
#include "cli/progress.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;

std::string Ulps(uint64_t u) { return u == kUlpNaN ? "nan" : std::to_string(u); }

json ToJson(const Fingerprint& fp, bool per_tensor) {
  json j = {{"iteration", fp.iteration}, {"digest", fp.digest}, {"tensors", fp.tensors.size()},
            {"objects", fp.objects.size()}, {"bytes_hashed", fp.bytes_hashed}, {"bytes_read", fp.bytes_read},
            {"chunks_read", fp.chunks_read}, {"peak_buffer_bytes", fp.peak_buffer_bytes}, {"seconds", fp.seconds},
            {"mb_per_s", fp.seconds > 0 ? fp.bytes_hashed / 1e6 / fp.seconds : 0.0}};  // canonical bytes
  if (!per_tensor) return j;
  j["per_tensor"] = json::array();
  for (const auto& t : fp.tensors)
    j["per_tensor"].push_back({{"key", t.key}, {"dtype", std::string(DTypeName(t.dtype))},
                               {"saved_shape", t.saved_shape}, {"canonical_shape", t.canonical_shape},
                               {"shards", t.shards}, {"bytes", t.bytes}, {"padding_nonzero", t.padding_nonzero},
                               {"digest", t.digest}});
  j["per_object"] = json::array();
  for (const auto& o : fp.objects)
    j["per_object"].push_back({{"key", o.key}, {"cells", o.cells}, {"included", o.included}, {"digest", o.digest}});
  return j;
}

void PrintText(const Fingerprint& fp, bool per_tensor) {
  int64_t excluded = 0;
  for (const auto& o : fp.objects) excluded += !o.included;
  std::printf("fingerprint %s\n", fp.digest.c_str());
  std::printf("  iteration %lld, %zu tensors, %zu objects (%lld layout-dependent, excluded); %.2f MB canonical, "
              "%.2f MB stored read in %.3f s (%.0f MB/s canonical); peak buffer %.2f MB\n",
              static_cast<long long>(fp.iteration), fp.tensors.size(), fp.objects.size(),
              static_cast<long long>(excluded), fp.bytes_hashed / 1e6, fp.bytes_read / 1e6, fp.seconds,
              fp.seconds > 0 ? fp.bytes_hashed / 1e6 / fp.seconds : 0.0, fp.peak_buffer_bytes / 1e6);
  if (!per_tensor) return;
  for (const auto& t : fp.tensors) {
    std::string extra;
    if (t.canonical_shape != t.saved_shape) extra += " (saved " + ShapeToString(t.saved_shape) + ")";
    if (t.padding_nonzero > 0) extra += " padding_nonzero " + std::to_string(t.padding_nonzero);
    std::printf("  %.16s  %s %s %s%s\n", t.digest.c_str(), t.key.c_str(), std::string(DTypeName(t.dtype)).c_str(),
                ShapeToString(t.canonical_shape).c_str(), extra.c_str());
  }
  for (const auto& o : fp.objects)
    std::printf("  %-16.16s  object %s%s\n", o.included ? o.digest.c_str() : "(excluded)", o.key.c_str(),
                o.included ? "" : (" grid of " + std::to_string(o.cells) + " cells").c_str());
}

json ToJson(const CheckpointDiff& d) {
  json t = json::array(), o = json::array();
  for (const auto& x : d.tensors)
    t.push_back({{"key", x.key}, {"status", x.status}, {"elements", x.elements}, {"differing", x.differing},
                 {"max_ulp", x.max_ulp == kUlpNaN ? json("nan") : json(x.max_ulp)}, {"max_index", x.max_index},
                 {"a", x.a_value}, {"b", x.b_value}, {"max_abs", x.max_abs}});
  for (const auto& x : d.objects) o.push_back({{"key", x.key}, {"status", x.status}});
  const uint64_t mu = d.max_ulp();
  return {{"same", d.same()}, {"iteration_a", d.iteration_a}, {"iteration_b", d.iteration_b},
          {"tensors_compared", d.tensors_compared}, {"objects_compared", d.objects_compared},
          {"max_ulp", mu == kUlpNaN ? json("nan") : json(mu)}, {"tensors", t}, {"objects", o}};
}

void PrintText(const CheckpointDiff& d) {
  for (const auto& x : d.tensors) {
    if (x.status != "differ") {
      std::printf("%-7s %s\n", x.status.c_str(), x.key.c_str());
      continue;
    }
    std::printf("differ  %s: %lld of %lld elements, max %s ulp at %s (a=%.9g b=%.9g), max abs %.3g\n", x.key.c_str(),
                static_cast<long long>(x.differing), static_cast<long long>(x.elements), Ulps(x.max_ulp).c_str(),
                ShapeToString(x.max_index).c_str(), x.a_value, x.b_value, x.max_abs);
  }
  for (const auto& x : d.objects) std::printf("%-7s object %s\n", x.status.c_str(), x.key.c_str());
  if (d.same())
    std::printf("same: %lld tensors and %lld objects equal bit for bit (iterations %lld, %lld)\n",
                static_cast<long long>(d.tensors_compared), static_cast<long long>(d.objects_compared),
                static_cast<long long>(d.iteration_a), static_cast<long long>(d.iteration_b));
  else
    std::printf("differ: %zu tensors, %zu objects; max ulp distance %s\n", d.tensors.size(), d.objects.size(),
                Ulps(d.max_ulp()).c_str());
}

}  // namespace

Status RunFingerprint(const FingerprintFlags& f) {
  FingerprintOptions opts = f.opts;
  opts.verify_hashes = !f.no_verify;
  opts.block_bytes = f.block_kb * 1024;
  CliProgress progress("fingerprint", f.json, f.no_progress, 0, opts.env ? opts.env : DefaultEnv(),
                       /*count_writes=*/false, ".h5");
  progress.SetTotalsFromManifest(f.root, opts.iteration);
  opts.env = progress.env();
  auto r = FingerprintCheckpoint(f.root, opts);
  progress.Finish();
  if (!r.ok()) {
    std::fprintf(stderr, "ckpt fingerprint: %s\n", r.status().ToString().c_str());
    return r.status();
  }
  if (f.json)
    std::printf("%s\n", ToJson(*r, f.per_tensor).dump(2).c_str());
  else
    PrintText(*r, f.per_tensor);
  return Status::Ok();
}

Status RunDiff(const DiffFlags& f) {
  // Counts both sides' reads; the total is both iterations' files.
  CliProgress progress("diff", f.json, f.no_progress, 0, f.opts_a.env ? f.opts_a.env : DefaultEnv(),
                       /*count_writes=*/false, ".h5");
  progress.SetTotalsFromManifests({{f.a, f.opts_a.iteration}, {f.b, f.opts_b.iteration}});
  FingerprintOptions a = f.opts_a, b = f.opts_b;
  a.env = b.env = progress.env();
  auto r = DiffCheckpoints(f.a, f.b, a, b);
  progress.Finish();
  if (!r.ok()) {
    std::fprintf(stderr, "ckpt diff: %s\n", r.status().ToString().c_str());
    return r.status();
  }
  if (f.json)
    std::printf("%s\n", ToJson(*r).dump(2).c_str());
  else
    PrintText(*r);
  return r->same() ? Status::Ok() : CheckFailed("the checkpoints differ");
}

}  // namespace ckpt::cli

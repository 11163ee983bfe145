// ckpt fingerprint / ckpt diff: the layout-invariant digest of a checkpoint's
// global state (per tensor on request) and an element-wise comparison of two
// checkpoints with the largest difference in ulps.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/fingerprint.h"
#include "cli/commands.h"

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

void RegisterFingerprint(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("fingerprint", "Layout-invariant digest of a checkpoint's global state");
  auto root = std::make_shared<std::string>();
  auto opts = std::make_shared<FingerprintOptions>();
  auto per_tensor = std::make_shared<bool>(false), json_out = std::make_shared<bool>(false);
  auto no_verify = std::make_shared<bool>(false);
  auto block_kb = std::make_shared<int64_t>(4096);
  cmd->add_option("root", *root, "checkpoint root directory")->required();
  cmd->add_option("--iter", opts->iteration, "iteration (default: the latest: the newest committed one at or above the tracker's)");
  cmd->add_flag("--per-tensor", *per_tensor, "list every tensor's and object's digest");
  cmd->add_flag("--json", *json_out, "machine-readable output");
  cmd->add_flag("--no-verify", *no_verify, "skip the chunk hash checks");
  cmd->add_option("--block-kb", *block_kb, "rows read per block, in KiB");
  cmd->callback([=]() {
    opts->verify_hashes = !*no_verify;
    opts->block_bytes = *block_kb * 1024;
    auto r = FingerprintCheckpoint(*root, *opts);
    if (!r.ok()) {
      std::fprintf(stderr, "ckpt fingerprint: %s\n", r.status().ToString().c_str());
      *exit_code = ExitCodeOf(r.status());
      return;
    }
    if (*json_out)
      std::printf("%s\n", ToJson(*r, *per_tensor).dump(2).c_str());
    else
      PrintText(*r, *per_tensor);
    *exit_code = kExitOk;
  });
}

void RegisterDiff(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("diff", "Which tensors of two checkpoints differ, and by how many ulps (exit 0 same, 1 differ)");
  auto a = std::make_shared<std::string>(), b = std::make_shared<std::string>();
  auto oa = std::make_shared<FingerprintOptions>(), ob = std::make_shared<FingerprintOptions>();
  auto json_out = std::make_shared<bool>(false);
  cmd->add_option("a", *a, "first checkpoint root")->required();
  cmd->add_option("b", *b, "second checkpoint root")->required();
  cmd->add_option("--iter-a", oa->iteration, "iteration of a (default: its tracker's)");
  cmd->add_option("--iter-b", ob->iteration, "iteration of b (default: its tracker's)");
  cmd->add_flag("--json", *json_out, "machine-readable output");
  cmd->callback([=]() {
    auto r = DiffCheckpoints(*a, *b, *oa, *ob);
    if (!r.ok()) {
      std::fprintf(stderr, "ckpt diff: %s\n", r.status().ToString().c_str());
      *exit_code = ExitCodeOf(r.status());
      return;
    }
    if (*json_out)
      std::printf("%s\n", ToJson(*r).dump(2).c_str());
    else
      PrintText(*r);
    *exit_code = r->same() ? kExitOk : kExitCheckFailed;
  });
}

}  // namespace ckpt::cli

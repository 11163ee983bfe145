// Strict key handling at load (LoadOptions::strict): which requested keys the
// checkpoint lacks, which of its keys no rank requested, and the failures.
#include <algorithm>
#include <set>

#include "ckpt/base/key_bound.h"
#include "ckpt/protocol/load_internal.h"

namespace ckpt {

std::string_view StrictModeName(StrictMode mode) {
  switch (mode) {
    case StrictMode::kNone: return "none";
    case StrictMode::kUnexpected: return "unexpected";
    case StrictMode::kMissing: return "missing";
    case StrictMode::kAll: return "all";
  }
  return "?";
}

Result<StrictMode> ParseStrictMode(std::string_view name) {
  for (StrictMode m : {StrictMode::kNone, StrictMode::kUnexpected, StrictMode::kMissing, StrictMode::kAll})
    if (name == StrictModeName(m)) return m;
  return Status::InvalidArgument("strict mode '" + std::string(name) + "' is not one of none, unexpected, missing, all");
}

namespace load_internal {
namespace {

bool RaisesMissing(StrictMode m) { return m == StrictMode::kMissing || m == StrictMode::kAll; }
bool RaisesUnexpected(StrictMode m) { return m == StrictMode::kUnexpected || m == StrictMode::kAll; }

// "a, b, c and N more" (at most `max` names).
std::string NameList(const std::vector<std::string>& names, size_t max = 8) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < max; ++i) out += (i ? ", '" : "'") + QuoteKey(names[i]) + "'";
  if (names.size() > max) out += " and " + std::to_string(names.size() - max) + " more";
  return out;
}

}  // namespace

KeyCheck CheckKeys(const ShardedStateDict& state, const Manifest& m) {
  std::set<std::string> saved_t, saved_o, asked;
  for (const auto& s : m.shards) saved_t.insert(s.meta.key);
  for (const auto& o : m.objects) saved_o.insert(o.meta.key);
  KeyCheck kc;
  std::set<std::string> missing;
  for (const auto& t : state.tensors()) {
    asked.insert(t.meta.key);
    if (!saved_t.count(t.meta.key) && missing.insert(t.meta.key).second)
      kc.why.push_back("tensor '" + QuoteKey(t.meta.key) + "' is not in checkpoint iteration " + std::to_string(m.iteration));
  }
  for (const auto& o : state.objects()) {
    asked.insert(o.meta.key);
    if (!saved_o.count(o.meta.key) && missing.insert(o.meta.key).second)
      kc.why.push_back("object '" + QuoteKey(o.meta.key) + "' cell " + std::to_string(o.meta.cell()) +
                       " is not in checkpoint iteration " + std::to_string(m.iteration));
  }
  kc.missing.assign(missing.begin(), missing.end());
  std::set<std::string> unasked;
  for (const auto* keys : {&saved_t, &saved_o})
    for (const auto& k : *keys)
      if (!asked.count(k)) unasked.insert(k);
  kc.unrequested.assign(unasked.begin(), unasked.end());
  return kc;
}

Status MissingKeysStatus(const KeyCheck& kc, StrictMode mode) {
  if (kc.missing.empty() || !RaisesMissing(mode)) return Status::Ok();
  std::string msg = std::to_string(kc.missing.size()) + " requested key(s) missing (strict " +
                    std::string(StrictModeName(mode)) + "): ";
  for (size_t i = 0; i < kc.why.size() && i < 8; ++i) msg += (i ? "; " : "") + kc.why[i];
  if (kc.why.size() > 8) msg += "; and " + std::to_string(kc.why.size() - 8) + " more";
  return Status::NotFound(msg);
}

ShardedStateDict Without(const ShardedStateDict& state, const std::vector<std::string>& drop,
                         std::vector<size_t>* kept_objects) {
  const std::set<std::string> gone(drop.begin(), drop.end());
  ShardedStateDict out;
  for (const auto& t : state.tensors())
    if (!gone.count(t.meta.key)) out.AddTensor(t.meta, t.data);
  for (size_t i = 0; i < state.objects().size(); ++i)
    if (!gone.count(state.objects()[i].meta.key)) {
      out.AddObject(state.objects()[i].meta);
      kept_objects->push_back(i);
    }
  return out;
}

Status AgreeUnexpected(const LoadOptions& opts, LoadStats* stats) {
  if (opts.comm && opts.comm->size() > 1) {
    // Unexpected = unrequested on every rank: intersect the ranks' lists.
    CKPT_ASSIGN_OR_RETURN(auto all, opts.comm->AllGather(PackStrings(stats->unexpected_keys), opts.timeout, Phase::kStrict));
    std::vector<std::string> common = stats->unexpected_keys;
    for (const auto& packed : all) {
      CKPT_ASSIGN_OR_RETURN(auto theirs, UnpackStrings(packed));
      std::vector<std::string> both;
      std::set_intersection(common.begin(), common.end(), theirs.begin(), theirs.end(), std::back_inserter(both));
      common = std::move(both);
    }
    stats->unexpected_keys = std::move(common);
  }
  if (stats->unexpected_keys.empty() || !RaisesUnexpected(opts.strict)) return Status::Ok();
  return Status::FailedPrecondition(
      "checkpoint iteration " + std::to_string(stats->iteration) + " holds " +
      std::to_string(stats->unexpected_keys.size()) + " key(s) no rank requested (strict " +
      std::string(StrictModeName(opts.strict)) + "; e.g. a model with fewer layers than saved): " +
      NameList(stats->unexpected_keys));
}

}  // namespace load_internal
}  // namespace ckpt

#include "faults/fault_spec.h"

#include <algorithm>
#include <charconv>

namespace ckpt::faults {
namespace {

constexpr std::pair<Action, std::string_view> kActions[] = {
    {Action::kCrash, "crash"},   {Action::kSigkill, "sigkill"},   {Action::kPowerCut, "powercut"},
    {Action::kEio, "eio"},       {Action::kEnospc, "enospc"},     {Action::kShortWrite, "short"},
    {Action::kDelay, "delay"},   {Action::kHang, "hang"},         {Action::kBitFlip, "bitflip"},
    {Action::kTruncate, "truncate"}, {Action::kDelete, "delete"},
};

Result<int64_t> ParseInt(std::string_view key, std::string_view v) {
  int64_t x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size())
    return Status::InvalidArgument("fault spec: " + std::string(key) + "=" + std::string(v) + " is not an integer");
  return x;
}

std::vector<std::string_view> Split(std::string_view s, std::string_view seps) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find_first_of(seps, i);
    if (j == std::string_view::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

Status SetKey(FaultRule& r, std::string_view key, std::string_view v) {
  if (key == "point") {
    r.point = v;
  } else if (key == "rank" || key == "nth" || key == "ms" || key == "bytes") {
    CKPT_ASSIGN_OR_RETURN(int64_t x, ParseInt(key, v));
    if (key == "rank") r.rank = int(x);
    if (key == "nth") r.nth = x;
    if (key == "ms") r.ms = x;
    if (key == "bytes") r.bytes = x;
  } else if (key == "path") {
    r.path = v;
  } else if (key == "action") {
    CKPT_ASSIGN_OR_RETURN(r.action, ParseAction(v));
  } else if (key == "file") {
    r.file = v;
  } else if (key == "chunk") {
    if (v != "first" && v != "mid" && v != "last")
      return Status::InvalidArgument("fault spec: chunk=" + std::string(v) + " (want first, mid or last)");
    r.chunk = v;
  } else {
    return Status::InvalidArgument("fault spec: unknown key '" + std::string(key) + "'");
  }
  return Status::Ok();
}

Status Check(const FaultRule& r, std::string_view text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("fault spec rule '" + std::string(text) + "': " + why);
  };
  if (r.point.empty()) return bad("no point=");
  if (!IsKnownPoint(r.point)) return bad("unknown point '" + r.point + "'");
  if (r.nth < 1) return bad("nth must be >= 1");
  if (r.rank < -1) return bad("rank must be >= 0");
  if (r.action == Action::kShortWrite && r.point != "env.pwrite") return bad("action=short needs point=env.pwrite");
  if (r.persistent && r.action != Action::kEio && r.action != Action::kEnospc && r.action != Action::kDelay)
    return bad("persistent applies to eio, enospc and delay only");
  if (r.ms < 0) return bad("ms must be >= 0");
  return Status::Ok();
}

Result<FaultRule> ParseRule(std::string_view text, bool* nosync) {
  FaultRule r;
  bool has_action = false, any = false;
  for (std::string_view tok : Split(text, " \t,")) {
    if (tok == "nosync") {
      *nosync = true;
      continue;
    }
    any = true;
    if (tok == "persistent") {
      r.persistent = true;
      continue;
    }
    size_t eq = tok.find('=');
    if (eq == std::string_view::npos)
      return Status::InvalidArgument("fault spec: token '" + std::string(tok) + "' is not key=value");
    CKPT_RETURN_IF_ERROR(SetKey(r, tok.substr(0, eq), tok.substr(eq + 1)));
    has_action = has_action || tok.substr(0, eq) == "action";
  }
  if (!any) return Status::NotFound("empty rule");
  if (!has_action) return Status::InvalidArgument("fault spec rule '" + std::string(text) + "': no action=");
  CKPT_RETURN_IF_ERROR(Check(r, text));
  return r;
}

}  // namespace

std::string_view ActionName(Action a) {
  for (const auto& [act, name] : kActions)
    if (act == a) return name;
  return "?";
}

Result<Action> ParseAction(std::string_view name) {
  for (const auto& [act, n] : kActions)
    if (n == name) return act;
  return Status::InvalidArgument("fault spec: unknown action '" + std::string(name) +
                                 "' (crash, sigkill, powercut, eio, enospc, short, delay, hang, bitflip, "
                                 "truncate, delete)");
}

bool IsDamage(Action a) { return a == Action::kBitFlip || a == Action::kTruncate || a == Action::kDelete; }

const std::vector<std::string>& EnvPoints() {
  static const std::vector<std::string> p = {"env.open",  "env.pread", "env.pwrite", "env.truncate", "env.size",
                                             "env.fsync", "env.close", "env.mkdir",  "env.remove",   "env.rmdir",
                                             "env.rename", "env.syncdir", "env.listdir", "env.stat"};
  return p;
}

const std::vector<std::string>& StepPoints() {
  static const std::vector<std::string> p = {
      "step.begin",           "step.plan",       "step.shard_write", "step.shard_fsync",
      "step.vote",            "step.manifest_write", "step.manifest_rename", "step.dir_rename",
      "step.root_fsync",      "step.tracker_update", "step.commit"};
  return p;
}

const std::vector<std::string>& LocalTierStepPoints() {
  static const std::vector<std::string> p = {"step.local_replicate", "step.local_receive", "step.local_vote",
                                             "step.local_marker", "step.local_gc"};
  return p;
}

bool IsKnownPoint(std::string_view point) {
  auto has = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), point) != v.end(); };
  return has(EnvPoints()) || has(StepPoints()) || has(LocalTierStepPoints());
}

std::string FaultRule::ToString() const {
  std::string s = "point=" + point;
  if (rank >= 0) s += " rank=" + std::to_string(rank);
  s += " nth=" + std::to_string(nth);
  if (!path.empty()) s += " path=" + path;
  s += " action=" + std::string(ActionName(action));
  if (persistent) s += " persistent";
  if (action == Action::kDelay) s += " ms=" + std::to_string(ms);
  if (action == Action::kShortWrite && bytes >= 0) s += " bytes=" + std::to_string(bytes);
  if (IsDamage(action)) {
    if (!file.empty()) s += " file=" + file;
    s += " chunk=" + chunk;
  }
  return s;
}

std::string FaultPlan::ToString() const {
  std::string s = disable_sync ? "nosync" : "";
  for (const auto& r : rules) s += (s.empty() ? "" : "; ") + r.ToString();
  return s;
}

Result<FaultPlan> ParseFaultPlan(std::string_view text) {
  FaultPlan plan;
  for (std::string_view line : Split(text, "\n;")) {
    size_t hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    auto rule = ParseRule(line, &plan.disable_sync);
    if (rule.ok()) {
      plan.rules.push_back(std::move(rule).value());
    } else if (rule.status().code() != Code::kNotFound) {
      return rule.status();
    }
  }
  return plan;
}

Result<FaultPlan> LoadFaultPlanFile(Env* env, const std::string& path) {
  CKPT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(env, path));
  auto plan = ParseFaultPlan(text);
  if (!plan.ok()) return plan.status().WithContext("fault spec file '" + path + "'");
  return plan;
}

}  // namespace ckpt::faults

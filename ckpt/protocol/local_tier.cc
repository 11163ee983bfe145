// The local tier (local_tier.h): own save through SaveCheckpoint on a
// one-rank root, replicas as packed files over Comm::AllToAll, verified in a
// staging dir before their rename, the marker after a job-wide vote.
#include "ckpt/protocol/local_tier.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "ckpt/base/agree.h"
#include "ckpt/base/status_wire.h"
#include "ckpt/protocol/verify.h"

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
constexpr const char* kMarker = "LOCAL_COMPLETE";

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Ctx {
  const LocalTierOptions& o;
  Env* env;
  Comm* comm;
  LocalComm local;
  int rank, world;
  explicit Ctx(const LocalTierOptions& opts)
      : o(opts), env(opts.env ? opts.env : DefaultEnv()), comm(opts.comm ? opts.comm : &local),
        rank(comm->rank()), world(comm->size()) {}
  std::string MyNode() const { return o.NodeDir(o.node_of(rank)); }
  std::string RankRoot(int r) const { return JoinPath(MyNode(), "rank_" + std::to_string(r)); }
  bool leader() const { return rank % o.ranks_per_node == 0; }
  Status Step(std::string_view step) const { return o.hook ? o.hook(step, rank) : Status::Ok(); }
  Status Mine(const Status& st, int64_t it, Phase phase) const {
    return st.WithContext("local tier iter " + std::to_string(it) + ", rank " + std::to_string(rank) + ", phase '" +
                          std::string(PhaseName(phase)) + "'")
        .At(rank, phase);
  }
  // Every rank learns the first failure (or OK): AgreeStatus.
  Status Agree(const Status& mine, Phase phase) const { return AgreeStatus(comm, mine, phase, o.timeout); }
};

// The files of a committed iteration dir, packed as name, bytes, name, bytes...
Result<std::string> PackCopy(Env* env, const std::string& root, int64_t it) {
  const std::string dir = JoinPath(root, IterDirName(it));
  CKPT_ASSIGN_OR_RETURN(auto names, env->ListDir(dir));
  std::vector<std::string> parts;
  for (const auto& n : names) {
    CKPT_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(env, JoinPath(dir, n)));
    parts.push_back(n);
    parts.push_back(std::move(bytes));
  }
  return PackStrings(parts);
}

bool Committed(Env* env, const std::string& root, int64_t it) { return ReadManifest(env, root, it).ok(); }

// Writes a packed copy into <root>/.recv_N/iter_N, verifies every chunk hash
// against its manifest, then renames it to <root>/iter_N (a stale, unmarked
// iter_N is replaced). A torn or damaged copy never becomes an iter_N.
Status StoreCopy(const Ctx& c, const std::string& root, int64_t it, const std::string& packed) {
  CKPT_ASSIGN_OR_RETURN(auto parts, UnpackStrings(packed));
  if (parts.size() % 2) return Status::Corruption("malformed local copy (odd part count)");
  const std::string staging = JoinPath(root, ".recv_" + std::to_string(it));
  const std::string dir = JoinPath(staging, IterDirName(it));
  CKPT_RETURN_IF_ERROR(RemoveTree(c.env, staging));
  CKPT_RETURN_IF_ERROR(CreateDirs(c.env, dir));
  for (size_t i = 0; i < parts.size(); i += 2) {
    if (parts[i].empty() || parts[i].find('/') != std::string::npos || parts[i][0] == '.')
      return Status::Corruption("malformed local copy: file name '" + parts[i] + "'");
    CKPT_RETURN_IF_ERROR(WriteStringToFileSync(c.env, JoinPath(dir, parts[i]), parts[i + 1]));
  }
  CKPT_RETURN_IF_ERROR(c.env->SyncDir(dir));
  VerifyOptions vo;
  vo.iteration = it;
  CKPT_ASSIGN_OR_RETURN(VerifyReport rep, VerifyCheckpoint(c.env, staging, vo));
  if (!rep.ok()) return Status::Corruption("copy of '" + root + "' iteration " + std::to_string(it) +
                                           " failed its hash check on arrival: " + rep.issues[0].ToString());
  CKPT_RETURN_IF_ERROR(c.Step("local_receive"));
  const std::string target = JoinPath(root, IterDirName(it));
  CKPT_RETURN_IF_ERROR(RemoveTree(c.env, target));
  CKPT_RETURN_IF_ERROR(c.env->RenameNoReplace(dir, target));
  CKPT_RETURN_IF_ERROR(c.env->SyncDir(root));
  return RemoveTree(c.env, staging);
}

// This node's marker (null if none or unreadable: a torn marker is no marker).
json ReadMarker(const Ctx& c) {
  auto text = ReadFileToString(c.env, JoinPath(c.MyNode(), kMarker));
  if (!text.ok()) return nullptr;
  json j = json::parse(*text, nullptr, false);
  return j.is_object() && j.contains("iteration") && j["iteration"].is_number_integer() ? j : json(nullptr);
}

// Leader: removes every rank copy on this node older than `keep` (marked) or
// newer than `drop_newer_than` (never marked), except the pinned one (a
// drain reads it); those are never needed again.
Status RemoveCopies(const Ctx& c, int64_t keep, int64_t drop_newer_than) {
  auto names = c.env->ListDir(c.MyNode());
  if (!names.ok()) return Status::Ok();  // no node dir yet
  for (const auto& n : *names) {
    if (n.rfind("rank_", 0) != 0) continue;
    const std::string root = JoinPath(c.MyNode(), n);
    auto entries = c.env->ListDir(root);
    if (!entries.ok()) continue;
    for (const auto& e : *entries) {
      auto it = ParseIterDirName(e);
      if (it.ok() && *it != c.o.pinned && (*it < keep || *it > drop_newer_than)) CKPT_RETURN_IF_ERROR(RemoveTree(c.env, JoinPath(root, e)));
    }
  }
  return Status::Ok();
}

json MarkerJson(const Ctx& c, int64_t it) {
  return {{"iteration", it}, {"world", c.world}, {"ranks_per_node", c.o.ranks_per_node}, {"layout", c.o.layout}};
}

// This rank's report for the choice: its node's marker and the iterations of
// every rank copy its node holds (leaders only; others report nothing).
json Holdings(const Ctx& c) {
  json mine = {{"node", c.o.node_of(c.rank)}, {"marker", c.leader() ? ReadMarker(c) : json(nullptr)},
               {"held", json::object()}};
  if (c.leader()) {
    auto names = c.env->ListDir(c.MyNode());
    for (const auto& n : names.ok() ? *names : std::vector<std::string>{}) {
      if (n.rfind("rank_", 0) != 0) continue;
      auto its = ListIterations(c.env, JoinPath(c.MyNode(), n));
      if (its.ok()) mine["held"][n.substr(5)] = *its;
    }
  }
  return mine;
}

// Rank 0: the choice from every rank's Holdings (index = rank) and the
// global root's latest.
std::string DecideTier(const Ctx& c, const std::vector<std::string>& msgs, const std::string& global_root) {
  TierChoice ch;
  auto g = LatestIteration(c.env, global_root);
  ch.global_iteration = g.ok() ? *g : -1;
  std::string local_why = "no node holds a complete local iteration";
  std::vector<json> reps;
  for (auto& m : msgs) reps.push_back(json::parse(m, nullptr, false));
  int64_t best = -1;
  for (const auto& r : reps) {
    if (!r.is_object() || !r["marker"].is_object()) continue;
    const json& mk = r["marker"];
    if (mk.value("world", -1) != c.world || mk.value("ranks_per_node", -1) != c.o.ranks_per_node ||
        mk.value("layout", json()) != c.o.layout) {
      local_why = "the local tier was written by another layout (" + mk.value("layout", json()).dump() + ", " +
                  std::to_string(mk.value("world", -1)) + " ranks): a layout change restores from global";
      continue;
    }
    best = std::max(best, mk.value("iteration", int64_t(-1)));
  }
  if (best >= 0) {
    for (int s = 0; s < c.world && best >= 0; ++s) {
      bool held = false;
      for (const auto& r : reps)
        if (r.is_object() && r["held"].contains(std::to_string(s)))
          for (const auto& it : r["held"][std::to_string(s)]) held = held || it.get<int64_t>() == best;
      if (!held) {
        local_why = "local iteration " + std::to_string(best) + " is complete, but rank " + std::to_string(s) +
                    "'s copy is on no surviving node (more nodes lost than replicas)";
        best = -1;
      }
    }
  }
  ch.local_iteration = best;
  if (best >= 0 && best >= ch.global_iteration) {
    ch = {"local", best, "local iteration " + std::to_string(best) + " is complete on the nodes and their replicas" +
                             (ch.global_iteration >= 0 ? " and newer than (or as new as) global iteration " +
                                                             std::to_string(ch.global_iteration)
                                                       : std::string(", no global iteration")),
          best, ch.global_iteration};
  } else if (ch.global_iteration >= 0) {
    ch = {"global", ch.global_iteration,
          "global iteration " + std::to_string(ch.global_iteration) + " is the newest complete one (" +
              (best >= 0 ? "local has only " + std::to_string(best) : local_why) + ")",
          best, ch.global_iteration};
  } else {
    ch = {"none", -1, "no tier holds a checkpoint (" + local_why + ")", best, -1};
  }
  return EncodeOutcome(json{{"tier", ch.tier}, {"iteration", ch.iteration}, {"why", ch.why},
                            {"local", ch.local_iteration}, {"global", ch.global_iteration}}
                           .dump());
}

// Leaders, after the choice: copies newer than what resumes were never
// marked (or belong to a future being replaced): drop them and such markers;
// resuming from global drops every marker (the local tier starts over).
Status ForgetNewer(const Ctx& c, const TierChoice& ch) {
  if (!c.leader()) return Status::Ok();
  const int64_t keep_upto = ch.tier == "local" ? ch.iteration : -1;
  json mk = ReadMarker(c);
  Status st = Status::Ok();
  if (mk.is_object() && mk["iteration"].get<int64_t>() > keep_upto)
    st = c.env->RemoveFile(JoinPath(c.MyNode(), kMarker));
  if (st.ok() && ch.tier == "local") st = RemoveCopies(c, 0, keep_upto);
  return st.ok() ? st : c.Mine(st, ch.iteration, Phase::kTierCleanup);
}

// Sends my committed copy to my replica holders and stores (verified) the
// copies sent to me; my own receive failure, or a job-wide earlier failure.
Status Replicate(const Ctx& c, int64_t iteration, LocalSaveStats* st) {
  const auto t1 = Clock::now();
  std::vector<std::string> out(c.world);
  Status prep = [&]() -> Status {
    CKPT_RETURN_IF_ERROR(c.Step("local_replicate"));
    CKPT_ASSIGN_OR_RETURN(std::string packed, PackCopy(c.env, c.RankRoot(c.rank), iteration));
    st->own_bytes = int64_t(packed.size());
    for (int h : c.o.ReplicaHolders(c.rank, c.world)) {
      out[h] = packed;
      st->sent_bytes += int64_t(packed.size());
    }
    return Status::Ok();
  }();
  CKPT_RETURN_IF_ERROR(c.Agree(prep.ok() ? prep : c.Mine(prep, iteration, Phase::kLocalReplicate), Phase::kLocalReplicate));
  CKPT_ASSIGN_OR_RETURN(auto in, c.comm->AllToAll(std::move(out), c.o.timeout, Phase::kLocalReplicate));
  Status recv = Status::Ok();
  for (int s = 0; s < c.world && recv.ok(); ++s) {
    if (s == c.rank || in[s].empty()) continue;
    st->received_bytes += int64_t(in[s].size());
    recv = StoreCopy(c, c.RankRoot(s), iteration, in[s]);
    if (!recv.ok()) recv = recv.WithContext("replica of rank " + std::to_string(s));
  }
  st->buffer_bytes = st->sent_bytes + st->received_bytes;
  st->replicate_seconds = Since(t1);
  return recv.ok() ? c.Step("local_vote") : recv;
}

}  // namespace

std::string LocalTierOptions::NodeDir(int node) const {
  std::string d = dir;
  for (size_t p = d.find("{node}"); p != std::string::npos; p = d.find("{node}"))
    d.replace(p, 6, std::to_string(node));
  return d;
}

std::vector<int> LocalTierOptions::ReplicaHolders(int rank, int world) const {
  const int nodes = world / ranks_per_node;
  std::vector<int> h;
  for (int k = 1; k <= replicas; ++k) h.push_back(((node_of(rank) + k) % nodes) * ranks_per_node + rank % ranks_per_node);
  return h;
}

Status LocalTierOptions::Validate(int world) const {
  if (dir.empty()) return Status::InvalidArgument("local tier: no directory");
  if (ranks_per_node < 1 || world % ranks_per_node)
    return Status::InvalidArgument("local tier: ranks per node " + std::to_string(ranks_per_node) +
                                   " does not divide the job's " + std::to_string(world) + " ranks");
  const int nodes = world / ranks_per_node;
  if (replicas < 0 || (replicas >= nodes && replicas > 0))
    return Status::InvalidArgument("local tier: " + std::to_string(replicas) + " replicas need more than " +
                                   std::to_string(replicas) + " nodes; the job has " + std::to_string(nodes));
  return Status::Ok();
}

ShardedStateDict LocalView(const ShardedStateDict& sd) {
  // A rank may hold several pieces of one key (SwiGLU's W and V halves):
  // they are laid end to end, in dict order, in one 1-D tensor of that key.
  std::map<std::string, int64_t> total, next;
  for (const auto& t : sd.tensors()) total[t.meta.key] += t.meta.num_elements();
  ShardedStateDict v;
  for (const auto& t : sd.tensors()) {
    ShardedTensor m;
    m.key = t.meta.key;
    m.dtype = t.meta.dtype;
    m.global_shape = {total[m.key]};
    m.local_shape = {t.meta.num_elements()};
    m.global_offset = {next[m.key]};
    next[m.key] += t.meta.num_elements();
    v.AddTensor(std::move(m), t.data);
  }
  for (const auto& o : sd.objects()) {
    ShardedObject m = o.meta;
    m.replica_id.clear();
    v.AddObject(std::move(m), o.bytes);
  }
  return v;
}

Result<LocalSaveStats> LocalSave(const ShardedStateDict& sd, int64_t iteration, const LocalTierOptions& opts) {
  Ctx c(opts);
  CKPT_RETURN_IF_ERROR(opts.Validate(c.world));
  LocalSaveStats st;
  st.iteration = iteration;
  const auto t0 = Clock::now();
  // 1. own copy (the only part that reads training memory).
  Status own = [&]() -> Status {
    CKPT_RETURN_IF_ERROR(RemoveTree(c.env, JoinPath(c.RankRoot(c.rank), IterDirName(iteration))));  // stale, unmarked
    SaveOptions so;
    so.root = c.RankRoot(c.rank);
    so.iteration = iteration;
    so.env = c.env;
    so.write = opts.write;
    so.timeout = opts.timeout;
    so.allow_older = true;  // a restart from an older tier re-saves below stale copies
    so.hook = opts.hook;
    return SaveCheckpoint(LocalView(sd), so).status();
  }();
  st.write_seconds = Since(t0);
  CKPT_RETURN_IF_ERROR(c.Agree(own.ok() ? own : c.Mine(own, iteration, Phase::kLocalWrite), Phase::kLocalWrite));

  // 2. replicas, from the committed files (not from training memory).
  Status recv = Replicate(c, iteration, &st);

  // 3. commit: every copy and replica is in place and verified, then the markers.
  const auto t2 = Clock::now();
  CKPT_RETURN_IF_ERROR(c.Agree(recv.ok() ? recv : c.Mine(recv, iteration, Phase::kLocalReceive), Phase::kLocalCommit));
  Status mark = Status::Ok();
  if (c.leader()) {
    mark = c.Step("local_marker");
    if (mark.ok()) mark = WriteFileAtomic(c.env, JoinPath(c.MyNode(), kMarker), MarkerJson(c, iteration).dump());
    if (mark.ok()) mark = c.Step("local_gc");
    if (mark.ok()) mark = RemoveCopies(c, iteration, iteration);
  }
  // A marker failure on one node leaves the iteration complete on the others.
  CKPT_RETURN_IF_ERROR(c.Agree(mark.ok() ? mark : c.Mine(mark, iteration, Phase::kLocalMarker), Phase::kLocalMarked));
  st.commit_seconds = Since(t2);
  st.seconds = Since(t0);
  return st;
}

Result<TierChoice> ChooseResumeTier(const LocalTierOptions& opts, const std::string& global_root) {
  Ctx c(opts);
  CKPT_RETURN_IF_ERROR(opts.Validate(c.world));
  auto decide = [&](std::vector<std::string> msgs) { return DecideTier(c, msgs, global_root); };
  CKPT_ASSIGN_OR_RETURN(std::string got, c.comm->GatherDecide(Holdings(c).dump(), 0, opts.timeout, Phase::kTierGather,
                                                              Phase::kTierGather, decide));
  CKPT_ASSIGN_OR_RETURN(std::string payload, DecodeOutcome(got));
  json d = json::parse(payload);
  TierChoice ch{d["tier"], d["iteration"], d["why"], d["local"], d["global"]};
  CKPT_RETURN_IF_ERROR(ForgetNewer(c, ch));
  return ch;
}

Result<LocalRestoreStats> LocalRestore(ShardedStateDict& request, int64_t iteration, const LocalTierOptions& opts) {
  Ctx c(opts);
  const auto t0 = Clock::now();
  LocalRestoreStats st;
  st.iteration = iteration;
  // Who needs its copy, and which copies each node holds (its leader says).
  json mine = {{"need", !Committed(c.env, c.RankRoot(c.rank), iteration)}, {"has", json::array()}};
  if (c.leader())
    for (int s = 0; s < c.world; ++s)
      if (Committed(c.env, c.RankRoot(s), iteration)) mine["has"].push_back(s);
  CKPT_ASSIGN_OR_RETURN(auto all, c.comm->AllGather(mine.dump(), opts.timeout, Phase::kRestoreHoldings));
  std::vector<json> reps;
  for (auto& m : all) reps.push_back(json::parse(m, nullptr, false));
  std::vector<std::string> out(c.world);
  Status send = Status::Ok();
  for (int s = 0; s < c.world && send.ok(); ++s) {
    if (!reps[s].value("need", false)) continue;
    int from = -1;  // the lowest leader whose node holds s's copy (the same choice on every rank)
    for (int r = 0; r < c.world && from < 0; ++r)
      for (const auto& h : reps[r].value("has", json::array())) from = h.get<int>() == s ? r : from;
    if (s == c.rank) st.from_rank = from;
    if (from != c.rank) continue;
    auto packed = PackCopy(c.env, c.RankRoot(s), iteration);
    send = packed.ok() ? Status::Ok() : packed.status();
    if (send.ok()) st.sent_bytes += int64_t(packed->size()), out[s] = std::move(*packed);
  }
  CKPT_ASSIGN_OR_RETURN(auto in, c.comm->AllToAll(std::move(out), opts.timeout, Phase::kRestoreFetch));
  Status got = send;
  if (got.ok() && reps[c.rank].value("need", false)) {
    if (st.from_rank < 0 || in[st.from_rank].empty())
      got = Status::NotFound("no surviving node holds rank " + std::to_string(c.rank) + "'s copy of local iteration " +
                             std::to_string(iteration));
    else
      got = StoreCopy(c, c.RankRoot(c.rank), iteration, in[st.from_rank]);
    st.fetched_bytes = got.ok() ? int64_t(in[st.from_rank].size()) : 0;
  }
  ShardedStateDict view = LocalView(request);
  if (got.ok()) {
    LoadOptions lo;
    lo.root = c.RankRoot(c.rank);
    lo.iteration = iteration;
    lo.env = c.env;
    lo.timeout = opts.timeout;
    lo.strict = StrictMode::kAll;
    auto ls = LoadCheckpoint(view, lo);
    got = ls.ok() ? Status::Ok() : ls.status();
    if (ls.ok()) st.load = *ls;
  }
  CKPT_RETURN_IF_ERROR(c.Agree(got.ok() ? got : c.Mine(got, iteration, Phase::kLocalRestore), Phase::kLocalRestore));
  for (size_t i = 0; i < view.objects().size(); ++i) request.objects()[i].bytes = view.objects()[i].bytes;
  st.seconds = Since(t0);
  return st;
}

}  // namespace ckpt

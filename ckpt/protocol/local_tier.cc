// The local tier (local_tier.h): own save through SaveCheckpoint on a
// one-rank root, replicas as packed files over Comm::AllToAll, verified in a
// staging dir before their rename, the marker after a job-wide vote.
#include "ckpt/protocol/local_tier.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "ckpt/base/agree.h"
#include "ckpt/base/clock.h"
#include "ckpt/base/status_wire.h"
#include "ckpt/protocol/local_copy_stream.h"
#include "ckpt/protocol/verify.h"

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
constexpr const char* kMarker = "LOCAL_COMPLETE";

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

bool Committed(Env* env, const std::string& root, int64_t it) { return ReadManifest(env, root, it).ok(); }

// Where a copy arriving for `root` is staged: <root>/.recv_N/iter_N (its
// parent, <root>/.recv_N, is a one-rank checkpoint root itself).
std::string StagingRoot(const std::string& root, int64_t it) { return JoinPath(root, ".recv_" + std::to_string(it)); }
std::string IterDir(const std::string& root, int64_t it) { return JoinPath(root, IterDirName(it)); }

// A fresh, empty staging root for a copy of `root` (a stale one is removed).
Status ClearStaging(const Ctx& c, const std::string& root, int64_t it) {
  return RemoveTree(c.env, StagingRoot(root, it));
}

// A staged copy, checked by the caller, renamed to <root>/iter_N (a stale,
// unmarked iter_N is replaced); a torn or damaged copy never becomes an iter_N.
Status PublishCopy(const Ctx& c, const std::string& root, int64_t it) {
  const std::string staging = StagingRoot(root, it);
  CKPT_RETURN_IF_ERROR(c.Step("local_receive"));
  const std::string target = JoinPath(root, IterDirName(it));
  CKPT_RETURN_IF_ERROR(RemoveTree(c.env, target));
  CKPT_RETURN_IF_ERROR(c.env->RenameNoReplace(JoinPath(staging, IterDirName(it)), target));
  CKPT_RETURN_IF_ERROR(c.env->SyncDir(root));
  return RemoveTree(c.env, staging);
}

// A replica streamed in at save time: every chunk hash (and the HDF5
// metadata) verified against its manifest in the staging dir, then published.
Status CheckReplica(const Ctx& c, const std::string& root, int64_t it) {
  VerifyOptions vo;
  vo.iteration = it;
  CKPT_ASSIGN_OR_RETURN(VerifyReport rep, VerifyCheckpoint(c.env, StagingRoot(root, it), vo));
  if (!rep.ok()) return Status::Corruption("copy of '" + root + "' iteration " + std::to_string(it) +
                                           " failed its hash check on arrival: " + rep.issues[0].ToString());
  return PublishCopy(c, root, it);
}

// Loads `view` (strict: every byte, chunk hashes checked) from the one-rank
// root `root`.
Result<LoadStats> LoadCopy(const Ctx& c, const std::string& root, int64_t it, ShardedStateDict& view) {
  LoadOptions lo;
  lo.root = root;
  lo.iteration = it;
  lo.env = c.env;
  lo.timeout = c.o.timeout;
  lo.strict = StrictMode::kAll;
  // Workers as a job's load has them: this node's cores shared by its ranks
  // (without the job's comm it would be all cores for every rank).
  lo.threads = DefaultWorkerThreads(c.comm);
  return LoadCheckpoint(view, lo);
}

// A copy fetched from a peer at restore, streamed into the staging dir: loaded
// from there, the load checking every chunk hash (the check on arrival; no
// separate verify pass re-reading and re-hashing it first), then published so
// this node holds it again. A damaged copy fails the load and is never published.
Status RestoreFetched(const Ctx& c, int64_t it, ShardedStateDict& view, LocalRestoreStats* st) {
  const std::string root = c.RankRoot(c.rank);
  const auto t1 = Clock::now();
  auto loaded = LoadCopy(c, StagingRoot(root, it), it, view);
  st->load_seconds = Since(t1);
  if (!loaded.ok()) {
    (void)ClearStaging(c, root, it);  // the load's error is the one to report
    return loaded.status().WithContext("copy of rank " + std::to_string(c.rank) + " fetched from rank " +
                                       std::to_string(st->from_rank));
  }
  st->load = *loaded;
  const auto t2 = Clock::now();
  Status published = PublishCopy(c, root, it);
  st->keep_seconds = Since(t2);
  return published;
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

// Streams my committed copy to my replica holders and the copies whose
// holder I am into staging, verifies and publishes those; my own failure, or
// a job-wide earlier one.
Status Replicate(const Ctx& c, int64_t iteration, LocalSaveStats* st) {
  const auto t1 = Clock::now();
  std::vector<CopySend> sends;
  std::vector<CopyRecv> recvs;
  Status prep = [&]() -> Status {
    CKPT_RETURN_IF_ERROR(c.Step("local_replicate"));
    for (int h : c.o.ReplicaHolders(c.rank, c.world)) sends.push_back({h, IterDir(c.RankRoot(c.rank), iteration)});
    for (int s = 0; s < c.world; ++s) {
      const auto hs = c.o.ReplicaHolders(s, c.world);
      if (s == c.rank || std::find(hs.begin(), hs.end(), c.rank) == hs.end()) continue;
      CKPT_RETURN_IF_ERROR(ClearStaging(c, c.RankRoot(s), iteration));
      recvs.push_back({s, IterDir(StagingRoot(c.RankRoot(s), iteration), iteration)});
    }
    return Status::Ok();
  }();
  CKPT_RETURN_IF_ERROR(c.Agree(prep.ok() ? prep : c.Mine(prep, iteration, Phase::kLocalReplicate), Phase::kLocalReplicate));
  auto streamed = StreamCopies(c.env, c.comm, sends, recvs, c.o.round_bytes, c.o.timeout, Phase::kLocalReplicate);
  Status recv = streamed.status();
  if (streamed.ok()) {
    st->sent_bytes = streamed->sent_bytes;
    st->received_bytes = streamed->received_bytes;
    st->buffer_bytes = streamed->buffer_bytes;
    st->own_bytes = c.o.replicas > 0 ? streamed->sent_bytes / c.o.replicas : 0;
  }
  for (size_t i = 0; i < recvs.size() && recv.ok(); ++i) {
    recv = CheckReplica(c, c.RankRoot(recvs[i].from), iteration);
    if (!recv.ok()) recv = recv.WithContext("replica of rank " + std::to_string(recvs[i].from));
  }
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
  return CheckNodeDirsDistinct(nodes);
}

// Two nodes of the job on one host (known from the comm: every rank's host
// name) must not share a directory: each commits, replaces and removes its
// own copies there, and they would remove each other's (seen as NotFound in
// phase 'local_marker'). Nodes on different hosts share a path as usual.
Status LocalTierOptions::CheckNodeDirsDistinct(int nodes) const {
  if (!comm) return Status::Ok();
  std::map<std::pair<std::string, std::string>, int> seen;  // (host, node dir) -> node
  for (int n = 0; n < nodes; ++n) {
    const std::string host = comm->host(n * ranks_per_node);
    if (host.empty()) return Status::Ok();  // hosts unknown to this comm: nothing to judge
    const auto [it, fresh] = seen.emplace(std::pair{host, NodeDir(n)}, n);
    if (!fresh)
      return Status::InvalidArgument("local tier: nodes " + std::to_string(it->second) + " and " + std::to_string(n) +
                                     " both run on host '" + host + "' and would share the local directory '" +
                                     NodeDir(n) + "'; give each node its own (put {node} in the directory, e.g. " +
                                     dir + "/node{node})");
  }
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
  std::vector<CopySend> sends;
  std::vector<CopyRecv> recvs;
  for (int s = 0; s < c.world; ++s) {
    if (!reps[s].value("need", false)) continue;
    // The copy comes from the rank that holds it as its replica (placement:
    // one sender per lost rank, in parallel), else the lowest leader
    // holding it; the same choice on every rank.
    int from = -1;
    for (int r = 0; r < c.world && from < 0; ++r)
      for (const auto& h : reps[r].value("has", json::array())) from = h.get<int>() == s ? r : from;
    for (int h : opts.ReplicaHolders(s, c.world))
      for (const auto& x : reps[h - h % opts.ranks_per_node].value("has", json::array()))
        if (x.get<int>() == s) from = h;
    if (s == c.rank) st.from_rank = from;
    if (from == c.rank) sends.push_back({s, IterDir(c.RankRoot(s), iteration)});
  }
  const bool need = reps[c.rank].value("need", false);
  Status got = Status::Ok();
  if (need && st.from_rank < 0)
    got = Status::NotFound("no surviving node holds rank " + std::to_string(c.rank) + "'s copy of local iteration " +
                           std::to_string(iteration));
  if (need && got.ok()) got = ClearStaging(c, c.RankRoot(c.rank), iteration);
  if (need && got.ok())
    recvs.push_back({st.from_rank, IterDir(StagingRoot(c.RankRoot(c.rank), iteration), iteration)});
  auto streamed = StreamCopies(c.env, c.comm, got.ok() ? sends : std::vector<CopySend>{}, recvs, opts.round_bytes,
                               opts.timeout, Phase::kRestoreFetch);
  if (got.ok()) got = streamed.status();
  if (streamed.ok()) st.sent_bytes = streamed->sent_bytes, st.fetched_bytes = streamed->received_bytes;
  st.fetch_seconds = Since(t0);
  ShardedStateDict view = LocalView(request);
  if (got.ok() && need) {
    got = RestoreFetched(c, iteration, view, &st);
  } else if (got.ok()) {
    const auto t1 = Clock::now();
    auto ls = LoadCopy(c, c.RankRoot(c.rank), iteration, view);
    got = ls.status();
    if (ls.ok()) st.load = *ls;
    st.load_seconds = Since(t1);
  }
  CKPT_RETURN_IF_ERROR(c.Agree(got.ok() ? got : c.Mine(got, iteration, Phase::kLocalRestore), Phase::kLocalRestore));
  for (size_t i = 0; i < view.objects().size(); ++i) request.objects()[i].bytes = view.objects()[i].bytes;
  st.seconds = Since(t0);
  return st;
}

ShardedStateDict DrainBuffers(const ShardedStateDict& live, std::vector<std::byte>* buf) {
  if (buf->size() != size_t(live.TotalBytes())) buf->assign(size_t(live.TotalBytes()), std::byte{0});
  ShardedStateDict sd;
  size_t off = 0;
  for (const auto& t : live.tensors()) {
    sd.AddTensor(t.meta, std::span<std::byte>(buf->data() + off, t.data.size()));
    off += t.data.size();
  }
  for (const auto& o : live.objects()) sd.AddObject(o.meta);
  return sd;
}

Result<SaveStats> DrainLocalCopy(ShardedStateDict& sd, const LoadOptions& from, SaveOptions to,
                                 const std::string& context) {
  ShardedStateDict view = LocalView(sd);
  LoadOptions lo = from;
  lo.strict = StrictMode::kAll;
  Status read = LoadCheckpoint(view, lo).status();
  for (size_t i = 0; read.ok() && i < view.objects().size(); ++i) sd.objects()[i].bytes = view.objects()[i].bytes;
  if (!read.ok())
    to.hook = [read, hook = to.hook](std::string_view step, int r) {
      return step == "plan" ? read : hook ? hook(step, r) : Status::Ok();
    };
  Result<SaveStats> st = SaveCheckpoint(sd, to);
  if (!read.ok()) return read.WithContext(context);
  return st;
}

}  // namespace ckpt

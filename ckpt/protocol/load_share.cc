// SharedLoadTensors: read-once-and-send over a group of loading ranks.
#include "ckpt/protocol/load_share.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>

#include "ckpt/base/status_wire.h"
#include "ckpt/format/chunk_reader.h"

namespace ckpt {
namespace {

using load_internal::ChunkKey;
using load_internal::ChunkPlan;

// Global chunk ids: chunk c of saved shard s is base[s] + c.
class ChunkIds {
 public:
  explicit ChunkIds(const Manifest& m) : base_{0} {
    for (const auto& s : m.shards) base_.push_back(base_.back() + int64_t(s.record.chunks.size()));
  }
  int64_t Id(const ChunkKey& k) const { return base_[k.first] + k.second; }
  bool Valid(int64_t id) const { return id >= 0 && id < base_.back(); }
  ChunkKey Key(int64_t id) const {
    const int s = int(std::upper_bound(base_.begin(), base_.end(), id) - base_.begin()) - 1;
    return {s, id - base_[s]};
  }

 private:
  std::vector<int64_t> base_;
};

void PutI64(std::string* out, int64_t v) { out->append(reinterpret_cast<const char*>(&v), sizeof v); }

// Bounds-checked reader of the messages built with PutI64.
struct Cursor {
  std::string_view v;
  size_t pos = 0;
  bool I64(int64_t* out) {
    if (v.size() - pos < sizeof *out) return false;
    std::memcpy(out, v.data() + pos, sizeof *out);
    pos += sizeof *out;
    return true;
  }
  bool Bytes(size_t n, std::string_view* out) {
    if (v.size() - pos < n) return false;
    *out = v.substr(pos, n);
    pos += n;
    return true;
  }
  bool done() const { return pos == v.size(); }
};

int JobRank(const LoadOptions& opts) { return opts.comm ? opts.comm->rank() : opts.share_comm->rank(); }

// 'E' + the typed status, its origin this rank unless it was relayed.
std::string EncodeError(const Status& st, int job_rank) { return "E" + EncodeStatus(st.At(job_rank, Phase::kLoad)); }

// Another rank's error, with its code and origin (a fallback load must see
// damage as damage, and agreement names the rank that hit it).
Status DecodeError(std::string_view msg) {
  Status st = DecodeStatus(msg.substr(1));
  if (st.ok()) return Status::Internal("read sharing: an error message without an error");
  if (!st.has_origin()) return st;
  return Status(st.code(), st.message() + " (reported by rank " + std::to_string(st.origin_rank()) +
                               ", which shares load reads with this rank)", st.origin_rank(), st.phase())
      .WithCause(st.cause());
}

struct Hello {
  int64_t iteration = 0, stored = 0, shards = 0;
  std::vector<int64_t> ids;  // ascending
};

std::string EncodeHello(const Manifest& m, const ChunkIds& ids, const ChunkPlan& cp) {
  std::vector<int64_t> mine;
  for (const auto& key : cp.order) mine.push_back(ids.Id(key));
  std::sort(mine.begin(), mine.end());
  std::string out = "K";
  PutI64(&out, m.iteration);
  PutI64(&out, m.TotalStoredBytes());
  PutI64(&out, int64_t(m.shards.size()));
  for (size_t i = 0; i < mine.size();) {  // ranges of consecutive ids
    size_t j = i + 1;
    while (j < mine.size() && mine[j] == mine[j - 1] + 1) ++j;
    PutI64(&out, mine[i]);
    PutI64(&out, int64_t(j - i));
    i = j;
  }
  return out;
}

// `rank`'s handshake, checked against this rank's manifest.
Result<Hello> ParseHello(std::string_view msg, const Manifest& m, const ChunkIds& ids, int rank) {
  Hello h;
  Cursor c{msg, 1};
  if (!c.I64(&h.iteration) || !c.I64(&h.stored) || !c.I64(&h.shards))
    return Status::Internal("read sharing: malformed handshake");
  if (h.iteration != m.iteration || h.stored != m.TotalStoredBytes() || h.shards != int64_t(m.shards.size()))
    return Status::Aborted("ranks sharing load reads load different checkpoints: group rank " + std::to_string(rank) +
                           " has iteration " + std::to_string(h.iteration) + ", this rank " +
                           std::to_string(m.iteration));
  while (!c.done()) {
    int64_t first = 0, n = 0;
    if (!c.I64(&first) || !c.I64(&n) || n <= 0 || !ids.Valid(first) || !ids.Valid(first + n - 1))
      return Status::Internal("read sharing: malformed chunk range in handshake");
    for (int64_t i = 0; i < n; ++i) h.ids.push_back(first + i);
  }
  return h;
}

// This rank's part of the group's assignment (identical on every rank).
struct Assignment {
  std::vector<ChunkKey> private_chunks;             // only this rank needs them
  std::vector<std::vector<ChunkKey>> served;        // per round: read here, others need them too
  std::map<ChunkKey, std::vector<int>> dests;       // served chunk -> other needers
  int rounds = 0;
  int64_t expected_in = 0;                          // chunks other ranks read for this one
};

Assignment Assign(const Manifest& m, const ChunkIds& ids, const std::vector<Hello>& all, int me, int64_t budget) {
  auto stored = [&](const ChunkKey& k) { return int64_t(m.shards[k.first].record.chunks[k.second].stored_size); };
  auto file_order = [&](const ChunkKey& a, const ChunkKey& b) {
    const ManifestShard &sa = m.shards[a.first], &sb = m.shards[b.first];
    if (sa.file != sb.file) return sa.file < sb.file;
    return sa.record.chunks[a.second].file_offset < sb.record.chunks[b.second].file_offset;
  };
  std::vector<std::pair<int64_t, int>> need;  // (id, group rank)
  for (int r = 0; r < int(all.size()); ++r)
    for (int64_t id : all[r].ids) need.push_back({id, r});
  std::sort(need.begin(), need.end());
  const int g = int(all.size());
  std::vector<int64_t> load(g, 0);
  std::vector<std::pair<size_t, size_t>> shared;  // [begin, end) in `need` of chunks with several needers
  Assignment a;
  for (size_t i = 0; i < need.size();) {
    size_t j = i + 1;
    while (j < need.size() && need[j].first == need[i].first) ++j;
    if (j - i == 1) {
      load[need[i].second] += stored(ids.Key(need[i].first));
      if (need[i].second == me) a.private_chunks.push_back(ids.Key(need[i].first));
    } else {
      shared.push_back({i, j});
    }
    i = j;
  }
  std::vector<std::vector<std::pair<ChunkKey, int64_t>>> served(g);  // per reader: chunk, bytes sent
  for (auto [i, j] : shared) {
    int reader = need[i].second;
    for (size_t k = i; k < j; ++k)
      if (load[need[k].second] < load[reader]) reader = need[k].second;
    const ChunkKey key = ids.Key(need[i].first);
    load[reader] += stored(key);
    served[reader].push_back({key, stored(key) * int64_t(j - i - 1)});
    for (size_t k = i; k < j; ++k) {
      const int r = need[k].second;
      if (reader == me && r != me) a.dests[key].push_back(r);
      if (r == me && reader != me) ++a.expected_in;
    }
  }
  for (int r = 0; r < g; ++r) {
    std::sort(served[r].begin(), served[r].end(), [&](const auto& x, const auto& y) { return file_order(x.first, y.first); });
    std::vector<std::vector<ChunkKey>> rounds;
    int64_t in_round = 0;
    for (const auto& [key, bytes] : served[r]) {
      if (rounds.empty() || in_round + bytes > budget) {
        rounds.emplace_back();
        in_round = 0;
      }
      rounds.back().push_back(key);
      in_round += bytes;
    }
    a.rounds = std::max(a.rounds, int(rounds.size()));
    if (r == me) a.served = std::move(rounds);
  }
  a.served.resize(size_t(a.rounds));
  std::sort(a.private_chunks.begin(), a.private_chunks.end(), file_order);
  return a;
}

// One rank's state across the rounds of a shared load.
class SharedLoad {
 public:
  SharedLoad(ShardedStateDict& state, const Manifest& m, const ChunkPlan& cp, const ChunkIds& ids, Assignment a,
             const std::string& dir, const LoadOptions& opts, Env* env, LoadStats* stats)
      : state_(state), m_(m), cp_(cp), ids_(ids), a_(std::move(a)), opts_(opts), stats_(stats) {
    workers_ = size_t(std::max(opts.threads, 1));
    for (size_t w = 0; w < workers_; ++w)
      readers_.push_back(std::make_unique<ChunkReader>(env, dir, &m, opts.verify_hashes, opts.direct_io));
  }

  Status Run() {
    const size_t rounds = size_t(std::max(a_.rounds, 1)), np = a_.private_chunks.size();
    for (size_t k = 0; k < rounds; ++k) {
      std::vector<ChunkKey> work(a_.private_chunks.begin() + np * k / rounds, a_.private_chunks.begin() + np * (k + 1) / rounds);
      if (k < a_.served.size()) work.insert(work.end(), a_.served[k].begin(), a_.served[k].end());
      std::vector<std::vector<Outgoing>> out(workers_);
      if (mine_.ok()) mine_ = ReadAll(work, &out);
      if (a_.rounds == 0) break;  // nothing shared in the whole group: no exchange
      ++stats_->share_rounds;
      CKPT_RETURN_IF_ERROR(Exchange(out));
      if (!mine_.ok() || !group_.ok()) break;
    }
    stats_->threads = int(workers_);
    for (const auto& r : readers_) {
      stats_->bytes_read += r->bytes_read();
      stats_->chunks_read += r->chunks_read();
      load_internal::AddDirectIo(*r, stats_);
    }
    CKPT_RETURN_IF_ERROR(mine_);
    CKPT_RETURN_IF_ERROR(group_);
    if (stats_->chunks_received != a_.expected_in)
      return Status::Internal("read sharing: received " + std::to_string(stats_->chunks_received) + " of " +
                              std::to_string(a_.expected_in) + " chunks other ranks read for this one");
    return Status::Ok();
  }

 private:
  struct Outgoing {
    ChunkKey key;
    std::string stored;
  };

  std::string What(const ChunkKey& k) const { return "tensor '" + m_.shards[k.first].meta.key + "'"; }
  std::string FilePath(const ChunkKey& k) const { return readers_[0]->FilePath(m_.shards[k.first].file); }

  // Reads `work` on the worker threads: private chunks are scattered, served
  // ones are kept (stored bytes) for their other needers too.
  Status ReadAll(const std::vector<ChunkKey>& work, std::vector<std::vector<Outgoing>>* out) {
    const size_t n = std::max<size_t>(1, std::min(workers_, work.size()));
    std::vector<Status> results(n);
    std::vector<int64_t> elements(n, 0);
    std::atomic<bool> stop{false};
    load_internal::RunWorkers(n, [&](size_t w) {
      std::vector<std::byte> buf;
      for (size_t i = work.size() * w / n; i < work.size() * (w + 1) / n && results[w].ok() && !stop; ++i)
        results[w] = ReadOne(work[i], *readers_[w], &buf, &(*out)[w], &elements[w]);
      if (!results[w].ok()) stop = true;
    });
    for (size_t w = 0; w < n; ++w) {
      stats_->elements += elements[w];
      CKPT_RETURN_IF_ERROR(results[w]);
    }
    return Status::Ok();
  }

  Status ReadOne(const ChunkKey& key, ChunkReader& reader, std::vector<std::byte>* buf, std::vector<Outgoing>* out,
                 int64_t* elements) {
    const ManifestShard& s = m_.shards[key.first];
    CKPT_ASSIGN_OR_RETURN(auto stored, reader.ReadStored(s.file, s.record, key.second, What(key)));
    if (a_.dests.count(key))
      out->push_back({key, std::string(reinterpret_cast<const char*>(stored.data()), stored.size())});
    if (!cp_.targets.count(key)) return Status::Ok();
    return Decode(key, stored, buf, elements);
  }

  Status Decode(const ChunkKey& key, std::span<const std::byte> stored, std::vector<std::byte>* buf, int64_t* elements) {
    const ManifestShard& s = m_.shards[key.first];
    CKPT_ASSIGN_OR_RETURN(auto chunk, load_internal::DecodeStored(s.record, key.second, DTypeSize(s.meta.dtype), stored,
                                                                  buf, "file '" + FilePath(key) + "', " + What(key)));
    return load_internal::Scatter(state_, m_, cp_, key, chunk, FilePath(key), elements);
  }

  // Sends this round's served chunks (or this rank's error) and takes in the
  // chunks other ranks read for this one.
  Status Exchange(const std::vector<std::vector<Outgoing>>& outgoing) {
    Comm* c = opts_.share_comm;
    std::vector<std::string> msgs(size_t(c->size()), mine_.ok() ? "D" : EncodeError(mine_, JobRank(opts_)));
    if (mine_.ok())
      for (const auto& list : outgoing)
        for (const Outgoing& o : list)
          for (int d : a_.dests.at(o.key)) {
            PutI64(&msgs[d], ids_.Id(o.key));
            PutI64(&msgs[d], int64_t(o.stored.size()));
            msgs[d] += o.stored;
            stats_->bytes_sent += int64_t(o.stored.size());
          }
    msgs[c->rank()].clear();
    CKPT_ASSIGN_OR_RETURN(auto in, c->AllToAll(std::move(msgs), opts_.timeout, Phase::kLoadShare));
    std::vector<std::pair<ChunkKey, std::string_view>> got;
    for (int s = 0; s < c->size(); ++s) {
      if (s == c->rank()) continue;
      if (!in[s].empty() && in[s][0] == 'E') {
        if (group_.ok()) group_ = DecodeError(in[s]);
        continue;
      }
      CKPT_RETURN_IF_ERROR(ParseChunks(in[s], &got));
    }
    if (!mine_.ok() || !group_.ok()) return Status::Ok();
    mine_ = ScatterReceived(got);
    return Status::Ok();
  }

  Status ParseChunks(std::string_view msg, std::vector<std::pair<ChunkKey, std::string_view>>* got) {
    Cursor cur{msg, 1};
    while (!cur.done()) {
      int64_t id = 0, len = 0;
      std::string_view bytes;
      if (!cur.I64(&id) || !cur.I64(&len) || len < 0 || !cur.Bytes(size_t(len), &bytes) || !ids_.Valid(id) ||
          !cp_.targets.count(ids_.Key(id)))
        return Status::Internal("read sharing: malformed or unexpected chunk message");
      got->push_back({ids_.Key(id), bytes});
      stats_->bytes_received += len;
      ++stats_->chunks_received;
    }
    return Status::Ok();
  }

  Status ScatterReceived(const std::vector<std::pair<ChunkKey, std::string_view>>& got) {
    const size_t n = std::max<size_t>(1, std::min(workers_, got.size()));
    std::vector<Status> results(n);
    std::vector<int64_t> elements(n, 0);
    load_internal::RunWorkers(n, [&](size_t w) {
      std::vector<std::byte> buf;
      for (size_t i = w; i < got.size() && results[w].ok(); i += n) {
        const auto& [key, bytes] = got[i];
        results[w] = Decode(key, std::as_bytes(std::span(bytes.data(), bytes.size())), &buf, &elements[w]);
      }
    });
    for (size_t w = 0; w < n; ++w) {
      stats_->elements += elements[w];
      CKPT_RETURN_IF_ERROR(results[w]);
    }
    return Status::Ok();
  }

  ShardedStateDict& state_;
  const Manifest& m_;
  const ChunkPlan& cp_;
  const ChunkIds& ids_;
  Assignment a_;
  const LoadOptions& opts_;
  LoadStats* stats_;
  size_t workers_ = 1;
  std::vector<std::unique_ptr<ChunkReader>> readers_;
  Status mine_, group_;  // this rank's first error; the first error another rank reported
};

}  // namespace

Status SharedLoadTensors(ShardedStateDict& state, const Manifest* m, const Result<ChunkPlan>& cp,
                         const std::string& dir, const LoadOptions& opts, Env* env, LoadStats* stats) {
  Comm* c = opts.share_comm;
  if (!cp.ok()) {  // tell the group, then fail with this rank's own error
    c->AllGather(EncodeError(cp.status(), JobRank(opts)), opts.timeout, Phase::kLoadShare).status().IgnoreError();
    return cp.status();
  }
  const ChunkIds ids(*m);
  CKPT_ASSIGN_OR_RETURN(auto all, c->AllGather(EncodeHello(*m, ids, *cp), opts.timeout, Phase::kLoadShare));
  std::vector<Hello> hellos;
  for (int r = 0; r < int(all.size()); ++r) {
    if (!all[r].empty() && all[r][0] == 'E') return DecodeError(all[r]);
    CKPT_ASSIGN_OR_RETURN(Hello h, ParseHello(all[r], *m, ids, r));
    hellos.push_back(std::move(h));
  }
  Assignment a = Assign(*m, ids, hellos, c->rank(), std::max<int64_t>(1, opts.share_round_bytes));
  return SharedLoad(state, *m, *cp, ids, std::move(a), dir, opts, env, stats).Run();
}

}  // namespace ckpt

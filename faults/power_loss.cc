// ApplyPowerLoss: forward pass (identities, durability), choice of what
// survives, then undo of name changes (newest first) and rewind of file data.
#include "faults/power_loss.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <random>

#include "faults/power_loss_env.h"

namespace ckpt::faults {
namespace {

std::string Normalize(std::string p) {
  std::string out;
  for (char c : p)
    if (!(c == '/' && !out.empty() && out.back() == '/')) out += c;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// The namespace as a tree of identities: renaming a node moves its subtree.
class Tree {
 public:
  int Lookup(const std::string& path) {
    if (path.empty() || path == "/" || path == ".") return Top(path);
    int parent = Lookup(DirName(path));
    auto it = child_.find({parent, BaseName(path)});
    if (it != child_.end()) return it->second;
    return New(parent, BaseName(path));
  }
  int Fresh(const std::string& path) { return New(Lookup(DirName(path)), BaseName(path)); }
  void Detach(int n) {
    Node& x = nodes_[n];
    auto it = child_.find({x.parent, x.name});
    if (it != child_.end() && it->second == n) child_.erase(it);
    x.attached = false;
  }
  void Attach(int n, int parent, const std::string& name) {
    Detach(n);
    auto it = child_.find({parent, name});
    if (it != child_.end()) nodes_[it->second].attached = false;
    nodes_[n] = {parent, name, true};
    child_[{parent, name}] = n;
  }
  bool attached(int n) const {
    for (; n >= 0; n = nodes_[n].parent)
      if (!nodes_[n].attached) return false;
    return true;
  }
  std::string Path(int n) const {
    const Node& x = nodes_[n];
    return x.parent < 0 ? x.name : JoinPath(Path(x.parent), x.name);
  }

 private:
  struct Node {
    int parent = -1;
    std::string name;
    bool attached = true;
  };
  int Top(const std::string& p) {
    const std::string key = p.empty() ? "." : p;
    auto it = top_.find(key);
    if (it != top_.end()) return it->second;
    nodes_.push_back({-1, key, true});
    return top_[key] = int(nodes_.size()) - 1;
  }
  int New(int parent, const std::string& name) {
    nodes_.push_back({parent, name, true});
    int n = int(nodes_.size()) - 1;
    Attach(n, parent, name);
    return n;
  }
  std::vector<Node> nodes_;
  std::map<std::pair<int, std::string>, int> child_;
  std::map<std::string, int> top_;
};

struct Item {
  JournalRecord rec;
  int node = -1, dir = -1, dir2 = -1, replaced = -1;
  bool ns = false, data = false, durable = false, keep = false, after_cut = false;
};

void Undo(const JournalRecord& r, std::string& buf) {
  switch (r.op) {
    case JournalOp::kCreate:
      buf = r.data;
      return;
    case JournalOp::kWrite:
      if (buf.size() < r.a + r.pre.size()) buf.resize(r.a + r.pre.size());
      std::memcpy(buf.data() + r.a, r.pre.data(), r.pre.size());
      buf.resize(r.b);
      return;
    case JournalOp::kTruncate:
      buf.resize(r.b);
      if (r.a + r.pre.size() <= buf.size()) std::memcpy(buf.data() + r.a, r.pre.data(), r.pre.size());
      return;
    default:
      return;
  }
}

void Redo(const JournalRecord& r, std::string& buf) {
  switch (r.op) {
    case JournalOp::kCreate:
      buf.clear();
      return;
    case JournalOp::kWrite:
      if (buf.size() < r.a + r.data.size()) buf.resize(r.a + r.data.size());
      std::memcpy(buf.data() + r.a, r.data.data(), r.data.size());
      return;
    case JournalOp::kTruncate:
      buf.resize(r.a);
      return;
    default:
      return;
  }
}

class Replayer {
 public:
  Replayer(Env* env, int64_t cut, PowerLossMode mode, uint64_t seed) : env_(env), cut_(cut), mode_(mode), rng_(seed) {
    report_.cut_ns = cut;
  }

  Result<PowerLossReport> Run(std::vector<JournalRecord> recs) {
    std::stable_sort(recs.begin(), recs.end(), [](const JournalRecord& a, const JournalRecord& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.rank != b.rank ? a.rank < b.rank : a.seq < b.seq;
    });
    report_.records = int64_t(recs.size());
    for (auto& r : recs) Forward(std::move(r));
    MarkDurable();
    Choose();
    for (auto it = items_.rbegin(); it != items_.rend(); ++it)
      if (it->ns && !it->keep) CKPT_RETURN_IF_ERROR(UndoName(*it));
    CKPT_RETURN_IF_ERROR(RewindData());
    return report_;
  }

 private:
  void Forward(JournalRecord r) {
    r.path = Normalize(r.path);
    r.path2 = Normalize(r.path2);
    Item it;
    it.after_cut = r.ts > cut_;
    switch (r.op) {
      case JournalOp::kCreate:
        if (r.a) {
          it.node = tree_.Lookup(r.path);
          it.data = true;
        } else {
          it.dir = tree_.Lookup(DirName(r.path));
          it.node = tree_.Fresh(r.path);
          it.ns = true;
        }
        break;
      case JournalOp::kWrite:
      case JournalOp::kTruncate:
        it.node = tree_.Lookup(r.path);
        it.data = true;
        break;
      case JournalOp::kMkdir:
        it.dir = tree_.Lookup(DirName(r.path));
        it.node = tree_.Fresh(r.path);
        it.ns = true;
        break;
      case JournalOp::kRemove:
      case JournalOp::kRmdir:
        it.dir = tree_.Lookup(DirName(r.path));
        it.node = tree_.Lookup(r.path);
        tree_.Detach(it.node);
        it.ns = true;
        break;
      case JournalOp::kRename:
        it.dir = tree_.Lookup(DirName(r.path));
        it.node = tree_.Lookup(r.path);
        it.dir2 = tree_.Lookup(DirName(r.path2));
        if (r.a) it.replaced = tree_.Lookup(r.path2);
        tree_.Attach(it.node, it.dir2, BaseName(r.path2));
        it.ns = true;
        break;
      case JournalOp::kSync:
      case JournalOp::kSyncDir:
        if (!it.after_cut) syncs_[tree_.Lookup(r.path)].push_back(r.ts);
        return;
    }
    it.rec = std::move(r);
    items_.push_back(std::move(it));
  }

  bool SyncedAfter(int node, int64_t ts) const {
    auto it = syncs_.find(node);
    if (it == syncs_.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(), [&](int64_t t) { return t > ts; });
  }

  void MarkDurable() {
    for (Item& it : items_) {
      if (it.after_cut) continue;
      if (it.data) it.durable = SyncedAfter(it.node, it.rec.ts);
      if (it.ns) it.durable = SyncedAfter(it.dir, it.rec.ts) && (it.dir2 < 0 || SyncedAfter(it.dir2, it.rec.ts));
      it.keep = it.durable;
    }
  }

  // Which non-durable changes (journaled before the cut) survive.
  void Choose() {
    if (mode_ == PowerLossMode::kDropAll) return;
    std::vector<Item*> names;
    std::map<int, std::vector<Item*>> writes;
    for (Item& it : items_) {
      if (it.durable || it.after_cut) continue;
      if (it.ns) names.push_back(&it);
      if (it.data) writes[it.node].push_back(&it);
    }
    KeepPrefix(names);
    if (mode_ == PowerLossMode::kKeepPrefix)
      for (auto& [node, list] : writes) KeepPrefix(list);
    for (Item* n : names) report_.names_kept += n->keep ? 1 : 0;
  }

  void KeepPrefix(std::vector<Item*>& list) {
    size_t k = size_t(rng_() % (list.size() + 1));
    for (size_t i = 0; i < k; ++i) list[i]->keep = true;
  }

  Status UndoName(Item& it) {
    const JournalRecord& r = it.rec;
    ++report_.names_undone;
    switch (r.op) {
      case JournalOp::kCreate:
        if (tree_.attached(it.node)) CKPT_RETURN_IF_ERROR(RemoveIfPresent(tree_.Path(it.node)));
        tree_.Detach(it.node);
        return Status::Ok();
      case JournalOp::kMkdir:
        if (tree_.attached(it.node)) CKPT_RETURN_IF_ERROR(RemoveTree(env_, tree_.Path(it.node)));
        tree_.Detach(it.node);
        return Status::Ok();
      case JournalOp::kRemove:
        // A durably removed parent took the entry with it.
        if (!tree_.attached(it.dir)) return Status::Ok();
        tree_.Attach(it.node, it.dir, BaseName(r.path));
        return WriteStringToFileSync(env_, tree_.Path(it.node), r.data);
      case JournalOp::kRmdir:
        if (!tree_.attached(it.dir)) return Status::Ok();
        tree_.Attach(it.node, it.dir, BaseName(r.path));
        return env_->CreateDir(tree_.Path(it.node));
      case JournalOp::kRename: {
        if (tree_.attached(it.node) && tree_.attached(it.dir)) {
          const std::string cur = tree_.Path(it.node);
          tree_.Attach(it.node, it.dir, BaseName(r.path));
          CKPT_RETURN_IF_ERROR(env_->Rename(cur, tree_.Path(it.node)));
        }
        if (it.replaced < 0) return Status::Ok();
        tree_.Attach(it.replaced, it.dir2, BaseName(r.path2));
        return WriteStringToFileSync(env_, tree_.Path(it.replaced), r.data);
      }
      default:
        return Status::Ok();
    }
  }

  Status RemoveIfPresent(const std::string& path) {
    CKPT_ASSIGN_OR_RETURN(FileInfo info, env_->Stat(path));
    return info.exists ? env_->RemoveFile(path) : Status::Ok();
  }

  Status RewindData() {
    std::map<int, std::vector<const Item*>> by_node;
    for (const Item& it : items_)
      if (it.data && !it.durable) by_node[it.node].push_back(&it);
    for (const auto& [node, list] : by_node) {
      if (!tree_.attached(node)) continue;
      CKPT_RETURN_IF_ERROR(RewindFile(tree_.Path(node), list));
    }
    return Status::Ok();
  }

  Status RewindFile(const std::string& path, const std::vector<const Item*>& list) {
    CKPT_ASSIGN_OR_RETURN(FileInfo info, env_->Stat(path));
    if (info.kind != FileKind::kFile) return Status::Ok();
    CKPT_ASSIGN_OR_RETURN(std::string now, ReadFileToString(env_, path));
    std::string old = now;  // the durable image: every non-durable change undone
    for (auto it = list.rbegin(); it != list.rend(); ++it) Undo((*it)->rec, old);
    std::string out = old;
    if (mode_ == PowerLossMode::kTornSectors) {
      out = Torn(old, list);
    } else {
      for (const Item* it : list) {
        if (it->keep) Redo(it->rec, out);
        ++(it->keep ? report_.writes_kept : report_.writes_dropped);
      }
    }
    if (out == now) return Status::Ok();
    ++report_.files_rewound;
    CKPT_ASSIGN_OR_RETURN(auto f, env_->OpenFile(path, OpenMode::kReadWrite));
    CKPT_RETURN_IF_ERROR(f->Truncate(0));
    CKPT_RETURN_IF_ERROR(f->PWrite(0, std::as_bytes(std::span(out.data(), out.size()))));
    CKPT_RETURN_IF_ERROR(f->Sync());
    return f->Close();
  }

  // Each sector a pre-cut write touched: old or new bytes, by coin flip.
  std::string Torn(const std::string& old, const std::vector<const Item*>& list) {
    std::string fresh = old;
    std::vector<bool> touched;
    auto touch = [&](uint64_t from, uint64_t to) {
      for (uint64_t s = from / kSectorBytes; s * kSectorBytes < to; ++s) {
        if (touched.size() <= s) touched.resize(s + 1, false);
        touched[s] = true;
      }
    };
    for (const Item* it : list) {
      if (it->after_cut) continue;
      Redo(it->rec, fresh);
      const JournalRecord& r = it->rec;
      if (r.op == JournalOp::kWrite) touch(r.a, r.a + r.data.size());
      if (r.op == JournalOp::kTruncate) touch(std::min(r.a, r.b), std::max(r.a, r.b));
      if (r.op == JournalOp::kCreate) touch(0, r.data.size());
    }
    std::string out = (rng_() & 1) ? fresh : old;
    out.resize((rng_() & 1) ? fresh.size() : old.size(), '\0');
    for (size_t s = 0; s < touched.size(); ++s) {
      if (!touched[s]) continue;
      const bool take_new = rng_() & 1;
      ++(take_new ? report_.sectors_new : report_.sectors_old);
      const std::string& src = take_new ? fresh : old;
      for (uint64_t i = s * kSectorBytes; i < (s + 1) * kSectorBytes && i < out.size(); ++i)
        out[i] = i < src.size() ? src[i] : '\0';
    }
    return out;
  }

  Env* env_;
  int64_t cut_;
  PowerLossMode mode_;
  std::mt19937_64 rng_;
  Tree tree_;
  std::vector<Item> items_;
  std::map<int, std::vector<int64_t>> syncs_;
  PowerLossReport report_;
};

}  // namespace

std::string_view PowerLossModeName(PowerLossMode m) {
  switch (m) {
    case PowerLossMode::kDropAll: return "drop";
    case PowerLossMode::kKeepPrefix: return "prefix";
    case PowerLossMode::kTornSectors: return "torn";
  }
  return "?";
}

Result<PowerLossMode> ParsePowerLossMode(std::string_view name) {
  for (auto m : {PowerLossMode::kDropAll, PowerLossMode::kKeepPrefix, PowerLossMode::kTornSectors})
    if (PowerLossModeName(m) == name) return m;
  return Status::InvalidArgument("unknown power-loss mode '" + std::string(name) + "' (drop, prefix, torn)");
}

std::string PowerLossReport::ToString() const {
  return "records " + std::to_string(records) + ", names undone " + std::to_string(names_undone) + " / kept " +
         std::to_string(names_kept) + ", files rewound " + std::to_string(files_rewound) + ", writes dropped " +
         std::to_string(writes_dropped) + " / kept " + std::to_string(writes_kept) + ", torn sectors old " +
         std::to_string(sectors_old) + " / new " + std::to_string(sectors_new);
}

Result<PowerLossReport> ApplyPowerLoss(Env* env, const std::vector<std::string>& journal_paths, int64_t cut_ns,
                                       PowerLossMode mode, uint64_t seed) {
  std::vector<JournalRecord> all;
  for (const auto& p : journal_paths) {
    CKPT_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(DefaultEnv(), p));
    CKPT_ASSIGN_OR_RETURN(auto recs, DecodeJournal(bytes, "'" + p + "'"));
    for (auto& r : recs) all.push_back(std::move(r));
  }
  return Replayer(env, cut_ns, mode, seed).Run(std::move(all));
}

std::string CutMarkerPath(const std::string& dir) { return JoinPath(dir, "cut"); }
std::string JournalPath(const std::string& dir, int rank) {
  return JoinPath(dir, "rank_" + std::to_string(rank) + ".journal");
}

Result<PowerLossReport> ApplyPowerLossDir(Env* env, const std::string& dir, PowerLossMode mode, uint64_t seed) {
  CKPT_ASSIGN_OR_RETURN(auto names, DefaultEnv()->ListDir(dir));
  std::vector<std::string> journals;
  for (const auto& n : names)
    if (n.size() > 8 && n.substr(n.size() - 8) == ".journal") journals.push_back(JoinPath(dir, n));
  CKPT_ASSIGN_OR_RETURN(int64_t cut, ReadCutMarker(CutMarkerPath(dir)));
  return ApplyPowerLoss(env, journals, cut, mode, seed);
}

}  // namespace ckpt::faults

#include "reshard/geometry/intersect.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

namespace ckpt::reshard {
namespace {

// The flat range a shard holds, in its own box's row-major order.
FlatRange HeldRange(const ShardedTensor& t) {
  return t.flat_range ? *t.flat_range : FlatRange{0, NumElements(t.local_shape)};
}

bool HasRank(const ShardedTensor& t, size_t n) {
  return t.global_offset.size() == n && t.local_shape.size() == n;
}

// First index in [lo, hi) where a monotone (false..true) predicate holds, else hi.
template <typename Pred>
int64_t FirstTrue(int64_t lo, int64_t hi, Pred pred) {
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (pred(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// The intersection box of two shards as `count` segments, each `seg_len`
// elements contiguous in both boxes' row-major order. Axes [0, outer) are
// iterated; the rest (the last axis not held in full by both boxes, plus the
// trailing axes both hold in full) is one segment. Segment starts increase
// strictly with the segment index in both boxes, which lets flat ranges be
// applied by binary search instead of visiting every row.
struct Walk {
  size_t outer = 0;
  // Per outer axis d: axes[3d] = intersection extent, axes[3d+1] and
  // axes[3d+2] = stride in box a and box b. One allocation per walk: this
  // runs for every (saved, requested) candidate pair of a plan.
  std::vector<int64_t> axes;
  int64_t a_base = 0, b_base = 0;  // box-linear index of the first element
  int64_t seg_len = 1;
  int64_t count = 1;

  int64_t ext(size_t d) const { return axes[3 * d]; }
  int64_t a_stride(size_t d) const { return axes[3 * d + 1]; }
  int64_t b_stride(size_t d) const { return axes[3 * d + 2]; }

  // Box-linear starts of segment j in box a and box b.
  std::pair<int64_t, int64_t> Start(int64_t j) const {
    int64_t a = a_base, b = b_base;
    for (size_t d = outer; d-- > 0;) {
      int64_t i = j % ext(d);
      j /= ext(d);
      a += i * a_stride(d);
      b += i * b_stride(d);
    }
    return {a, b};
  }
};

int64_t Lo(const ShardedTensor& a, const ShardedTensor& b, size_t d) {
  return std::max(a.global_offset[d], b.global_offset[d]);
}
int64_t Extent(const ShardedTensor& a, const ShardedTensor& b, size_t d) {
  return std::min(a.global_offset[d] + a.local_shape[d], b.global_offset[d] + b.local_shape[d]) -
         Lo(a, b, d);
}

// Returns nullopt when ranks differ or the boxes share no element.
std::optional<Walk> MakeWalk(const ShardedTensor& a, const ShardedTensor& b) {
  const size_t n = a.local_shape.size();
  if (!HasRank(a, n) || !HasRank(b, n)) return std::nullopt;
  for (size_t d = 0; d < n; ++d)
    if (Extent(a, b, d) <= 0) return std::nullopt;
  // Backward pass with running strides. Axes from the back that both boxes
  // hold in full, plus the first one that is not, form the segment (k is
  // that axis); the axes before it are iterated.
  Walk w;
  int64_t sa = 1, sb = 1;
  bool in_segment = true;
  for (size_t d = n; d-- > 0;) {
    const int64_t ext = Extent(a, b, d);
    w.a_base += (Lo(a, b, d) - a.global_offset[d]) * sa;
    w.b_base += (Lo(a, b, d) - b.global_offset[d]) * sb;
    if (in_segment) {
      w.seg_len *= ext;
      const bool full = ext == a.local_shape[d] && ext == b.local_shape[d];
      if (!full || d == 0) {
        in_segment = false;
        w.outer = d;
        w.axes.resize(3 * d);
      }
    } else {
      w.count *= ext;
      w.axes[3 * d] = ext;
      w.axes[3 * d + 1] = sa;
      w.axes[3 * d + 2] = sb;
    }
    sa *= a.local_shape[d];
    sb *= b.local_shape[d];
  }
  return w;  // rank 0: one element at linear index 0 in both
}

// Calls fn(src, dst, len) for every maximal piece of a segment both shards
// hold, in increasing src (and dst) order, in flat coordinates.
template <typename Fn>
void ForEachPiece(const ShardedTensor& saved, const ShardedTensor& req, Fn&& fn) {
  std::optional<Walk> w = MakeWalk(saved, req);
  if (!w) return;
  const FlatRange fs = HeldRange(saved), fr = HeldRange(req);
  if (fs.size() <= 0 || fr.size() <= 0) return;
  const int64_t len = w->seg_len;
  // Segments before jlo end before a flat range starts; from jhi on they start
  // after one ends. Only [jlo, jhi) is visited.
  const int64_t jlo = FirstTrue(0, w->count, [&](int64_t j) {
    auto [a, b] = w->Start(j);
    return a + len > fs.begin && b + len > fr.begin;
  });
  const int64_t jhi = FirstTrue(jlo, w->count, [&](int64_t j) {
    auto [a, b] = w->Start(j);
    return a >= fs.end || b >= fr.end;
  });
  if (jlo >= jhi) return;
  // Odometer over the outer axes, starting at segment jlo.
  std::vector<int64_t> idx(w->outer);
  for (int64_t j = jlo, d = int64_t(w->outer); d-- > 0;) {
    idx[d] = j % w->ext(size_t(d));
    j /= w->ext(size_t(d));
  }
  auto [a, b] = w->Start(jlo);
  for (int64_t j = jlo; j < jhi; ++j) {
    int64_t t0 = std::max({int64_t{0}, fs.begin - a, fr.begin - b});
    int64_t t1 = std::min({len, fs.end - a, fr.end - b});
    if (t0 < t1) fn(a + t0 - fs.begin, b + t0 - fr.begin, t1 - t0);
    for (size_t d = w->outer; d-- > 0;) {
      a += w->a_stride(d);
      b += w->b_stride(d);
      if (++idx[d] < w->ext(d)) break;
      a -= w->ext(d) * w->a_stride(d);
      b -= w->ext(d) * w->b_stride(d);
      idx[d] = 0;
    }
  }
}

// ---- CheckCoverage -------------------------------------------------------

// Shards of one tensor with an identical box; each holds a flat range of it.
struct BoxGroup {
  const ShardedTensor* box = nullptr;  // representative shard (offset, shape)
  struct Piece {
    int shard;
    FlatRange range;
  };
  std::vector<Piece> pieces;  // sorted by range.begin
};

class CoverageChecker {
 public:
  CoverageChecker(const std::string& key, const Shape& global_shape,
                  const std::vector<ShardedTensor>& shards)
      : key_(key), global_(global_shape), shards_(shards) {}

  Status Run() {
    for (size_t i = 0; i < shards_.size(); ++i) CKPT_RETURN_IF_ERROR(CheckBounds(int(i)));
    BuildGroups();
    int64_t held = 0;
    for (const BoxGroup& g : groups_) {
      CKPT_RETURN_IF_ERROR(CheckWithinGroup(g));
      for (const auto& p : g.pieces) held += p.range.size();
    }
    CKPT_RETURN_IF_ERROR(CheckAcrossGroups());
    // No overlaps and all in bounds: the union is `held` elements.
    const int64_t numel = NumElements(global_);
    if (held == numel) return Status::Ok();
    std::string msg = "tensor '" + key_ + "': main-replica shards leave " +
                      std::to_string(numel - held) + " of " + std::to_string(numel) +
                      " elements uncovered";
    if (std::optional<Shape> p = FindMissingPoint())
      msg += " (e.g. global index " + ShapeToString(*p) + ")";
    return Status::Corruption(msg);
  }

 private:
  std::string Describe(int i) const {
    return "#" + std::to_string(i) + " (" + shards_[size_t(i)].DebugString() + ")";
  }

  Status CheckBounds(int i) const {
    const ShardedTensor& t = shards_[size_t(i)];
    auto bad = [&](const std::string& why) {
      return Status::Corruption("tensor '" + key_ + "': shard " + Describe(i) + " " + why);
    };
    const size_t n = global_.size();
    if (!HasRank(t, n) || t.global_shape.size() != n)
      return bad("has the wrong rank for global shape " + ShapeToString(global_));
    if (t.global_shape != global_)
      return bad("declares a different global shape than " + ShapeToString(global_));
    for (size_t d = 0; d < n; ++d) {
      if (t.global_offset[d] < 0 || t.local_shape[d] < 0 ||
          t.global_offset[d] + t.local_shape[d] > global_[d])
        return bad("lies outside the global shape " + ShapeToString(global_) + " on axis " +
                   std::to_string(d));
    }
    if (t.flat_range && (t.flat_range->begin < 0 || t.flat_range->end < t.flat_range->begin ||
                         t.flat_range->end > NumElements(t.local_shape)))
      return bad("has a flat range outside its box");
    return Status::Ok();
  }

  // Groups non-empty shards by identical box (sorting, so thousands of shards
  // cost n log n), each group's flat ranges sorted by begin.
  void BuildGroups() {
    std::vector<int> order;
    for (size_t i = 0; i < shards_.size(); ++i)
      if (shards_[i].num_elements() > 0) order.push_back(int(i));
    auto box_less = [&](int x, int y) {
      const ShardedTensor &a = shards_[size_t(x)], &b = shards_[size_t(y)];
      return std::tie(a.global_offset, a.local_shape) < std::tie(b.global_offset, b.local_shape);
    };
    std::stable_sort(order.begin(), order.end(), box_less);
    for (size_t i = 0; i < order.size(); ++i) {
      if (i == 0 || box_less(order[i - 1], order[i]))
        groups_.push_back({&shards_[size_t(order[i])], {}});
      groups_.back().pieces.push_back({order[i], HeldRange(shards_[size_t(order[i])])});
    }
    for (BoxGroup& g : groups_)
      std::sort(g.pieces.begin(), g.pieces.end(),
                [](const auto& x, const auto& y) { return x.range.begin < y.range.begin; });
  }

  Status Overlap(int a, int b, int64_t count) const {
    return Status::Corruption("tensor '" + key_ + "': shards " + Describe(a) + " and " +
                              Describe(b) + " overlap in " + std::to_string(count) + " elements");
  }

  // Sorted, so each range need only be compared with the one before it.
  Status CheckWithinGroup(const BoxGroup& g) const {
    for (size_t i = 1; i < g.pieces.size(); ++i) {
      const auto &prev = g.pieces[i - 1], &cur = g.pieces[i];
      if (cur.range.begin < prev.range.end)
        return Overlap(prev.shard, cur.shard,
                       std::min(prev.range.end, cur.range.end) - cur.range.begin);
    }
    return Status::Ok();
  }

  // Sweeps the groups along the axis with the most distinct offsets, so only
  // boxes that can intersect on that axis are compared.
  Status CheckAcrossGroups() const {
    if (global_.empty() || groups_.size() < 2) return Status::Ok();
    const size_t axis = SweepAxis();
    std::vector<const BoxGroup*> order;
    for (const BoxGroup& g : groups_) order.push_back(&g);
    std::sort(order.begin(), order.end(), [&](const BoxGroup* x, const BoxGroup* y) {
      return x->box->global_offset[axis] < y->box->global_offset[axis];
    });
    for (size_t i = 0; i < order.size(); ++i) {
      const ShardedTensor& bi = *order[i]->box;
      const int64_t end = bi.global_offset[axis] + bi.local_shape[axis];
      for (size_t j = i + 1; j < order.size() && order[j]->box->global_offset[axis] < end; ++j)
        CKPT_RETURN_IF_ERROR(CheckGroupPair(*order[i], *order[j]));
    }
    return Status::Ok();
  }

  size_t SweepAxis() const {
    size_t best = 0, best_distinct = 0;
    for (size_t d = 0; d < global_.size(); ++d) {
      std::vector<int64_t> offs;
      for (const BoxGroup& g : groups_) offs.push_back(g.box->global_offset[d]);
      std::sort(offs.begin(), offs.end());
      size_t distinct = size_t(std::unique(offs.begin(), offs.end()) - offs.begin());
      if (distinct > best_distinct) best = d, best_distinct = distinct;
    }
    return best;
  }

  // Distinct, intersecting boxes are legal only when their flat ranges keep
  // every shared element in one shard (rare), so the pairwise cost is paid
  // only for them.
  Status CheckGroupPair(const BoxGroup& x, const BoxGroup& y) const {
    if (!MakeWalk(*x.box, *y.box)) return Status::Ok();
    for (const auto& p : x.pieces)
      for (const auto& q : y.pieces) {
        int64_t n = OverlapCount(shards_[size_t(p.shard)], shards_[size_t(q.shard)]);
        if (n > 0) return Overlap(p.shard, q.shard, n);
      }
    return Status::Ok();
  }

  bool Covered(const Shape& p) const {
    for (const BoxGroup& g : groups_) {
      const ShardedTensor& b = *g.box;
      int64_t lin = 0;
      bool inside = true;
      for (size_t d = 0; d < p.size() && inside; ++d) {
        int64_t rel = p[d] - b.global_offset[d];
        inside = rel >= 0 && rel < b.local_shape[d];
        lin = lin * b.local_shape[d] + rel;
      }
      if (!inside) continue;
      for (const auto& piece : g.pieces)
        if (lin >= piece.range.begin && lin < piece.range.end) return true;
    }
    return false;
  }

  // Best effort, bounded: tests the first hole of each box's flat ranges,
  // then the lower corners of the grid cells that the box boundaries cut the
  // tensor into (an uncovered cell always has an uncovered lower corner).
  std::optional<Shape> FindMissingPoint() const {
    const int64_t kBudget = int64_t{1} << 25;  // point tests x shards (~0.1 s)
    const int64_t per_test = int64_t(shards_.size()) + 1;
    int64_t tests = 0;
    auto try_point = [&](const Shape& p) {
      ++tests;
      return !Covered(p);
    };
    for (const BoxGroup& g : groups_) {
      if (tests * per_test > kBudget) return std::nullopt;
      int64_t hole = 0;
      for (const auto& piece : g.pieces)
        if (piece.range.begin > hole)
          break;
        else
          hole = std::max(hole, piece.range.end);
      if (hole >= NumElements(g.box->local_shape)) continue;
      Shape p(global_.size());
      for (size_t d = global_.size(); d-- > 0;) {
        p[d] = g.box->global_offset[d] + hole % g.box->local_shape[d];
        hole /= g.box->local_shape[d];
      }
      if (try_point(p)) return p;
    }
    std::vector<std::vector<int64_t>> cuts(global_.size());
    int64_t cells = 1;
    for (size_t d = 0; d < global_.size(); ++d) {
      cuts[d].push_back(0);
      for (const BoxGroup& g : groups_) {
        cuts[d].push_back(g.box->global_offset[d]);
        cuts[d].push_back(g.box->global_offset[d] + g.box->local_shape[d]);
      }
      std::sort(cuts[d].begin(), cuts[d].end());
      cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
      while (!cuts[d].empty() && cuts[d].back() >= global_[d]) cuts[d].pop_back();
      cells *= int64_t(cuts[d].size());
      if (cells == 0 || (tests + cells) * per_test > kBudget) return std::nullopt;
    }
    Shape p(global_.size());
    for (int64_t c = 0; c < cells; ++c) {
      for (int64_t rest = c, d = int64_t(global_.size()); d-- > 0;) {
        const auto& axis_cuts = cuts[size_t(d)];
        p[size_t(d)] = axis_cuts[size_t(rest % int64_t(axis_cuts.size()))];
        rest /= int64_t(axis_cuts.size());
      }
      if (try_point(p)) return p;
    }
    return std::nullopt;
  }

  const std::string& key_;
  const Shape& global_;
  const std::vector<ShardedTensor>& shards_;
  std::vector<BoxGroup> groups_;
};

}  // namespace

// Pieces are already maximal: consecutive segments are contiguous in both
// boxes only if the segment's leading axis is full in both, and MakeWalk folds
// such axes into the segment. Clipping only shortens pieces, so no two
// emitted pieces can be merged (the brute-force test checks this).
std::vector<CopyRun> Intersect(const ShardedTensor& saved, const ShardedTensor& requested) {
  std::vector<CopyRun> runs;
  ForEachPiece(saved, requested, [&](int64_t src, int64_t dst, int64_t len) {
    runs.push_back({src, dst, len});
  });
  return runs;
}

int64_t OverlapCount(const ShardedTensor& a, const ShardedTensor& b) {
  if (!a.flat_range && !b.flat_range) {
    std::optional<Walk> w = MakeWalk(a, b);
    return w ? w->seg_len * w->count : 0;
  }
  int64_t n = 0;
  ForEachPiece(a, b, [&](int64_t, int64_t, int64_t len) { n += len; });
  return n;
}

Status CheckCoverage(const std::string& key, const Shape& global_shape,
                     const std::vector<ShardedTensor>& main_shards) {
  return CoverageChecker(key, global_shape, main_shards).Run();
}

}  // namespace ckpt::reshard

#include "faults/boundaries.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace ckpt::faults {
namespace {

// The tmp-dir suffix is "<host>-<pid>-<hex>" (commit.cc): everything up to the
// next '/' differs between runs, so it all becomes "*".
std::string StripNonce(std::string p) {
  for (size_t pos = p.find(".tmp-"); pos != std::string::npos; pos = p.find(".tmp-", pos + 1)) {
    const size_t begin = pos + 5;
    size_t end = p.find('/', begin);
    if (end == std::string::npos) end = p.size();
    if (end > begin) p.replace(begin, end - begin, "*");
  }
  return p;
}

// Drops every occurrence of "<root>/" (renames name two paths) and maps the root itself to ".".
std::string StripRoot(std::string s, const std::string& root) {
  if (s == root) return ".";
  const std::string prefix = root + "/";
  for (size_t pos = s.find(prefix); pos != std::string::npos; pos = s.find(prefix, pos)) s.erase(pos, prefix.size());
  return s;
}

bool Wanted(const std::set<std::string>& points, const std::string& p) { return points.empty() || points.count(p); }

}  // namespace

std::string Boundary::Name() const {
  if (rank < 0) return "end";
  return "r" + std::to_string(rank) + " " + point + "#" + std::to_string(nth) + (path.empty() ? "" : " " + path);
}

std::string NormalizeTracePath(const std::string& path, const std::string& root) {
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  return StripNonce(StripRoot(path, r));
}

std::vector<Boundary> SelectBoundaries(const std::vector<std::vector<TraceEntry>>& traces, const std::string& root,
                                       BoundaryRule rule, const std::set<std::string>& points,
                                       const std::set<int>& ranks, bool with_end) {
  std::vector<Boundary> out;
  for (int r = 0; r < int(traces.size()); ++r) {
    if (!ranks.empty() && !ranks.count(r)) continue;
    std::map<std::string, std::vector<const TraceEntry*>> writes;  // per file, in order
    for (const TraceEntry& e : traces[r]) {
      if (!Wanted(points, e.point)) continue;
      const std::string path = NormalizeTracePath(e.path, root);
      if (rule == BoundaryRule::kAll || e.point != "env.pwrite") {
        out.push_back({r, e.point, e.nth, path, "op"});
        continue;
      }
      writes[path].push_back(&e);
    }
    for (const auto& [path, list] : writes) {
      const std::pair<size_t, const char*> picks[] = {
          {0, "first write"}, {list.size() / 2, "middle write"}, {list.size() - 1, "last write"}};
      std::set<size_t> seen;
      for (const auto& [i, why] : picks)
        if (seen.insert(i).second) out.push_back({r, "env.pwrite", list[i]->nth, path, why});
    }
  }
  if (with_end && Wanted(points, "end")) out.push_back({-1, "end", 0, "", "end"});
  return out;
}

bool SameTrace(const std::vector<TraceEntry>& a, const std::string& root_a, const std::vector<TraceEntry>& b,
               const std::string& root_b, std::string* first_difference) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    auto show = [](const std::vector<TraceEntry>& t, size_t i, const std::string& root) {
      if (i >= t.size()) return std::string("(end)");
      return t[i].point + "#" + std::to_string(t[i].nth) + " " + NormalizeTracePath(t[i].path, root) + " @" +
             std::to_string(t[i].offset) + "+" + std::to_string(t[i].bytes);
    };
    std::string x = show(a, i, root_a), y = show(b, i, root_b);
    if (x != y) {
      if (first_difference) *first_difference = "op " + std::to_string(i + 1) + ": " + x + " vs " + y;
      return false;
    }
  }
  return true;
}

}  // namespace ckpt::faults

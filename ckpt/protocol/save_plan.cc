#include "ckpt/protocol/save_plan.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

namespace ckpt {

using nlohmann::json;

std::string ShardIdentity(const ShardedTensor& m) {
  std::string id = m.key + "|" + ShapeToString(m.global_offset) + "|" + ShapeToString(m.local_shape);
  if (m.flat_range) id += "|" + std::to_string(m.flat_range->begin) + "-" + std::to_string(m.flat_range->end);
  return id;
}

std::string EncodeHeldShards(const std::vector<HeldShard>& held) {
  json j = json::array();
  for (const auto& h : held) j.push_back({h.identity, h.bytes, h.main});
  return j.dump();
}

Result<std::vector<HeldShard>> DecodeHeldShards(std::string_view bytes) {
  std::vector<HeldShard> out;
  try {
    for (const auto& e : json::parse(bytes))
      out.push_back({e.at(0).get<std::string>(), e.at(1).get<int64_t>(), e.at(2).get<bool>()});
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("bad plan message: ") + e.what());
  }
  return out;
}

namespace {

struct Group {
  std::string identity;
  int64_t bytes = 0;
  std::vector<std::pair<int, int>> holders;  // (rank, index in rank's list)
  int main_rank = -1;
};

}  // namespace

Result<WritePlan> PlanWrites(const std::vector<std::vector<HeldShard>>& held, bool balance) {
  std::map<std::string, Group> groups;
  for (int r = 0; r < int(held.size()); ++r) {
    for (int i = 0; i < int(held[r].size()); ++i) {
      const HeldShard& h = held[r][i];
      Group& g = groups[h.identity];
      g.identity = h.identity;
      g.bytes = h.bytes;
      g.holders.push_back({r, i});
      if (h.main) {
        if (g.main_rank >= 0)
          return Status::InvalidArgument("shard " + h.identity + ": ranks " + std::to_string(g.main_rank) +
                                         " and " + std::to_string(r) + " both hold its main replica");
        g.main_rank = r;
      }
    }
  }
  std::vector<Group*> order;
  for (auto& [id, g] : groups) order.push_back(&g);
  // Largest first; identity breaks ties so the plan does not depend on map order quirks.
  std::stable_sort(order.begin(), order.end(), [](const Group* a, const Group* b) { return a->bytes > b->bytes; });

  WritePlan plan;
  plan.writes.resize(held.size());
  plan.bytes_per_rank.assign(held.size(), 0);
  for (Group* g : order) {
    std::pair<int, int> pick{-1, -1};
    if (!balance) {
      if (g->main_rank < 0)
        return Status::InvalidArgument("shard " + g->identity + " is held only as non-main replicas");
      for (auto h : g->holders)
        if (h.first == g->main_rank) pick = h;
    } else {
      for (auto h : g->holders) {
        if (pick.first < 0) { pick = h; continue; }
        int64_t lp = plan.bytes_per_rank[pick.first], lh = plan.bytes_per_rank[h.first];
        bool better = lh < lp || (lh == lp && h.first == g->main_rank && pick.first != g->main_rank);
        if (better) pick = h;
      }
    }
    plan.writes[pick.first].push_back(pick.second);
    plan.bytes_per_rank[pick.first] += g->bytes;
  }
  for (auto& w : plan.writes) std::sort(w.begin(), w.end());
  return plan;
}

std::string EncodeWritePlan(const WritePlan& plan) {
  return json{{"writes", plan.writes}, {"bytes", plan.bytes_per_rank}}.dump();
}

Result<WritePlan> DecodeWritePlan(std::string_view bytes) {
  WritePlan p;
  try {
    json j = json::parse(bytes);
    p.writes = j.at("writes").get<std::vector<std::vector<int>>>();
    p.bytes_per_rank = j.at("bytes").get<std::vector<int64_t>>();
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("bad write plan message: ") + e.what());
  }
  return p;
}

}  // namespace ckpt

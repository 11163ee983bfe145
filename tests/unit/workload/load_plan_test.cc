// `ckpt plan` as library code (ckpt/workload/load_plan.h): simulated and real
// checkpoints give the same plan, read sharing never reads more than the
// ranks alone, and simulated chunks are the writer's (ShardChunkElems).
#include <gtest/gtest.h>

#include <thread>

#include "ckpt/format/chunk_layout.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/workload/gpt_local_state.h"
#include "ckpt/workload/load_plan.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_family.h"
#include "harness/test_util.h"

namespace ckpt::workload {
namespace {

// Saves the tiny preset under `layout` (threads as ranks) with `chunk_bytes`.
void SaveTiny(const std::string& root, const std::string& layout, int64_t chunk_bytes) {
  const ParallelConfig pc = *ParallelConfig::Parse(layout);
  const reshard::GptConfig gpt = *reshard::GptPreset("tiny");
  const reshard::ModelRef model{reshard::MegatronGptFamily().get(), reshard::GptConfigToJson(gpt)};
  auto comms = MakeThreadComms(pc.world_size());
  std::vector<Status> st(size_t(pc.world_size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < pc.world_size(); ++r)
    threads.emplace_back([&, r] {
      auto state = GptLocalState::Create(*TargetShards(model, pc, r));
      if (!state.ok()) {
        st[r] = state.status();
        return;
      }
      SaveOptions o;
      o.root = root;
      o.iteration = 1;
      o.comm = comms[r].get();
      o.write.chunk_bytes = chunk_bytes;
      o.layout = reshard::LayoutToJson(pc);
      o.metadata = {{"model", "tiny"}, {"gpt", reshard::GptConfigToJson(gpt)}};  // the pre-family form: still read
      st[r] = SaveCheckpoint(state->StateDict(), o).status();
    });
  for (auto& t : threads) t.join();
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
}

TEST(LoadPlanTest, SimulatedChunksAreTheWritersAndPlansAgreeWithARealCheckpoint) {
  const std::string root = testing::ScratchDir("load_plan_real");
  SaveTiny(root, "tp=2", 64 << 10);
  auto m = ReadManifest(DefaultEnv(), root, 1);
  ASSERT_TRUE(m.ok());
  for (const auto& s : m->shards) EXPECT_EQ(*ShardChunkElems(s.meta, 64 << 10), s.record.chunk_elems) << s.meta.key;

  auto real = PlanLoad({.root = root, .to = "tp=1,dp=2"});
  auto sim = PlanLoad({.simulate = "tiny", .from = "tp=2", .chunk_bytes = 64 << 10, .to = "tp=1,dp=2"});
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  EXPECT_EQ((*real)["ranks"], 2);
  EXPECT_EQ((*real)["distinct_plans"], 1);  // the DP replicas share one plan
  EXPECT_EQ((*real)["saved_shards"], (*sim)["saved_shards"]);
  // Both DP ranks read the same chunks (at most the checkpoint: padded vocab rows
  // are not requested); read sharing over the DP group reads them once.
  const int64_t per_rank = (*real)["bytes_read_max_rank"];
  EXPECT_GT(per_rank, 0);
  EXPECT_LE(per_rank, (*real)["checkpoint_bytes"].get<int64_t>());
  EXPECT_EQ((*real)["bytes_read_min_rank"], per_rank);
  EXPECT_EQ((*real)["bytes_read_total"], 2 * per_rank);
  EXPECT_EQ((*real)["bytes_read_total_share_dp"], per_rank);
  EXPECT_EQ((*real)["dp_groups"], 1);
  EXPECT_EQ((*sim)["bytes_read_total"], (*real)["bytes_read_total"]);
  EXPECT_NE(PlanText(*real).find("--share-reads dp (1 groups)"), std::string::npos) << PlanText(*real);
}

TEST(LoadPlanTest, PerRankListingAndErrors) {
  auto p = PlanLoad({.simulate = "tiny", .from = "tp=1", .to = "tp=2,pp=2", .per_rank = true});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ((*p)["per_rank"].size(), 4u);
  int64_t total = 0;
  for (const auto& r : (*p)["per_rank"]) total += r["bytes_read"].get<int64_t>();
  EXPECT_EQ(total, (*p)["bytes_read_total"]);
  EXPECT_LE((*p)["bytes_read_total_share_job"].get<int64_t>(), (*p)["bytes_read_total"].get<int64_t>());
  EXPECT_EQ(PlanLoad({.to = "tp=2"}).status().code(), Code::kInvalidArgument);  // neither root nor --simulate
  EXPECT_EQ(PlanLoad({.simulate = "tiny", .from = "tp=1", .to = "tp=banana"}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PlanLoad({.root = testing::ScratchDir("load_plan_none"), .to = "tp=1"}).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace ckpt::workload

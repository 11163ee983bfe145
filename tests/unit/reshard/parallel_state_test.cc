// ParallelConfig / RankCoords / groups against Megatron-Core's "tp-cp-ep-dp-pp" order.
#include "reshard/parallel_state.h"

#include <gtest/gtest.h>

#include <set>

namespace ckpt {
namespace {

using Groups = std::vector<std::vector<int>>;

ParallelConfig Cfg(std::string_view spec) {
  auto pc = ParallelConfig::Parse(spec);
  EXPECT_TRUE(pc.ok()) << pc.status().ToString();
  return pc.ok() ? *pc : ParallelConfig{};
}

Groups All(const ParallelConfig& pc, Group g) {
  auto groups = AllGroups(pc, g);
  EXPECT_TRUE(groups.ok()) << groups.status().ToString();
  return groups.ok() ? *groups : Groups{};
}

TEST(ParallelConfigTest, ParseAndToStringRoundTrip) {
  ParallelConfig pc = Cfg("tp=4,pp=2,dp=2,cp=1,ep=2,vpp=3");
  EXPECT_EQ(pc.tp, 4);
  EXPECT_EQ(pc.pp, 2);
  EXPECT_EQ(pc.dp, 2);
  EXPECT_EQ(pc.ep, 2);
  EXPECT_EQ(pc.vpp, 3);
  EXPECT_EQ(pc.world_size(), 16);
  EXPECT_EQ(pc.ToString(), "tp=4,pp=2,dp=2,cp=1,ep=2,vpp=3");
  EXPECT_EQ(Cfg(pc.ToString()), pc);
}

TEST(ParallelConfigTest, OmittedKeysDefaultToOneAndSpacesAreFine) {
  ParallelConfig pc = Cfg(" tp = 2 , dp=3 ");
  EXPECT_EQ(pc, (ParallelConfig{2, 1, 3, 1, 1, 1}));
  EXPECT_EQ(Cfg(""), ParallelConfig{});
}

TEST(ParallelConfigTest, BadSpecsAreInvalidArgumentNamingTheProblem) {
  struct Case {
    const char* spec;
    const char* needle;
  };
  for (const Case& c :
       {Case{"tp=0", "tp=0"}, Case{"tp=2,tp=2", "twice"},
        Case{"xp=2", "unknown parallel config key 'xp'"}, Case{"tp=two", "non-integer"},
        Case{"tp=2x", "non-integer"}, Case{"tp", "key=value"}, Case{"tp=2,", "ends with"},
        Case{"tp=2,,dp=2", "empty item"}, Case{"dp=3,ep=2", "ep=2 must divide"},
        Case{"pp=1,vpp=2", "vpp=2 needs pp > 1"}, Case{"dp=-1", "dp=-1"}}) {
    auto pc = ParallelConfig::Parse(c.spec);
    ASSERT_FALSE(pc.ok()) << c.spec;
    EXPECT_EQ(pc.status().code(), Code::kInvalidArgument) << c.spec;
    EXPECT_NE(pc.status().message().find(c.needle), std::string::npos)
        << c.spec << " -> " << pc.status().message();
  }
}

TEST(ParallelConfigTest, EpDividesDpTimesCp) {
  EXPECT_TRUE((ParallelConfig{1, 1, 2, 2, 4, 1}).Validate().ok());  // dp*cp = 4
  EXPECT_FALSE((ParallelConfig{1, 1, 2, 1, 4, 1}).Validate().ok());
  EXPECT_EQ((ParallelConfig{1, 1, 2, 2, 4, 1}).expert_dp(), 1);
}

// The example in MCore initialize_model_parallel's docstring: 16 GPUs, tp=2, pp=4.
TEST(RankOrderTest, MatchesMegatronDocstringTp2Pp4) {
  ParallelConfig pc = Cfg("tp=2,pp=4,dp=2");
  EXPECT_EQ(All(pc, Group::kDp),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(All(pc, Group::kTp),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(All(pc, Group::kPp),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
}

TEST(RankOrderTest, Tp2Pp2Dp2CoordsTpFastestPpSlowest) {
  ParallelConfig pc = Cfg("tp=2,pp=2,dp=2");
  // {tp, cp, dp, pp, ep, expert_dp}; with ep = 1 expert_dp == dp.
  const RankCoords want[8] = {{0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0}, {0, 0, 1, 0, 0, 1},
                              {1, 0, 1, 0, 0, 1}, {0, 0, 0, 1, 0, 0}, {1, 0, 0, 1, 0, 0},
                              {0, 0, 1, 1, 0, 1}, {1, 0, 1, 1, 0, 1}};
  for (int r = 0; r < 8; ++r) {
    auto c = CoordsOf(pc, r);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(*c, want[r]) << "rank " << r;
  }
  EXPECT_EQ(*TpGroup(pc, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(*DpGroup(pc, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(*PpGroup(pc, 5), (std::vector<int>{1, 5}));
}

TEST(RankOrderTest, ContextParallelSitsBetweenTpAndDp) {
  ParallelConfig pc = Cfg("tp=2,cp=2,dp=2");
  auto c = CoordsOf(pc, 6);  // 6 = tp 0 + 2*(cp 1 + 2*dp 1)
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->tp, 0);
  EXPECT_EQ(c->cp, 1);
  EXPECT_EQ(c->dp, 1);
  EXPECT_EQ(DpCpRank(pc, *c), 3);
  EXPECT_EQ(*GroupRanks(pc, 6, Group::kCp), (std::vector<int>{4, 6}));
  EXPECT_EQ(*GroupRanks(pc, 6, Group::kDp), (std::vector<int>{2, 6}));
  EXPECT_EQ(*GroupRanks(pc, 6, Group::kDpCp), (std::vector<int>{0, 2, 4, 6}));
}

// Expert generator: rank = etp + TP*(ep + EP*(edp + EDP*pp)) with etp == tp, cp = 1.
TEST(RankOrderTest, ExpertGroupsCarveEpOutOfDp) {
  ParallelConfig pc = Cfg("tp=2,pp=2,dp=4,ep=2");
  EXPECT_EQ(pc.expert_dp(), 2);
  EXPECT_EQ(*EpGroup(pc, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(*EpGroup(pc, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(*GroupRanks(pc, 0, Group::kExpertDp), (std::vector<int>{0, 4}));
  EXPECT_EQ(*EpGroup(pc, 9), (std::vector<int>{9, 11}));  // second stage
  auto c = CoordsOf(pc, 7);                               // 7 = 1 + 2*(ep 1 + 2*(edp 1))
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ep, 1);
  EXPECT_EQ(c->expert_dp, 1);
  EXPECT_EQ(c->dp, 3);
}

TEST(RankOrderTest, ExpertGroupsWithContextParallel) {
  ParallelConfig pc = Cfg("cp=2,dp=2,ep=2");  // dense rank = cp + 2*dp
  EXPECT_EQ(All(pc, Group::kEp), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(All(pc, Group::kExpertDp), (Groups{{0, 2}, {1, 3}}));
}

TEST(RankOrderTest, InverseMappingRoundTripsAndGroupsPartitionTheWorld) {
  for (const char* spec : {"tp=2,pp=2,dp=2", "tp=4,pp=2,dp=2,cp=2,ep=4", "tp=1,pp=3,dp=6,ep=3",
                           "tp=8", "pp=4,vpp=2", "cp=3,dp=2,ep=6"}) {
    ParallelConfig pc = Cfg(spec);
    for (int r = 0; r < pc.world_size(); ++r) {
      auto c = CoordsOf(pc, r);
      ASSERT_TRUE(c.ok());
      auto back = RankOf(pc, *c);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(*back, r) << spec;
    }
    for (Group g : {Group::kTp, Group::kCp, Group::kDp, Group::kDpCp, Group::kPp, Group::kEp,
                    Group::kExpertDp}) {
      std::set<int> seen;
      for (const auto& members : All(pc, g)) {
        for (int m : members) EXPECT_TRUE(seen.insert(m).second) << spec << " " << GroupName(g);
        EXPECT_EQ(*GroupRanks(pc, members.back(), g), members);
      }
      EXPECT_EQ(int(seen.size()), pc.world_size()) << spec << " " << GroupName(g);
    }
  }
}

TEST(RankOrderTest, BadRanksAndInconsistentCoordsAreRejected) {
  ParallelConfig pc = Cfg("tp=2,dp=4,ep=2");
  EXPECT_EQ(CoordsOf(pc, 8).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(CoordsOf(pc, -1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(GroupRanks(pc, 8, Group::kTp).status().code(), Code::kInvalidArgument);
  RankCoords c = *CoordsOf(pc, 3);
  c.tp = 2;
  EXPECT_NE(RankOf(pc, c).status().message().find("tp=2 outside [0, 2)"), std::string::npos);
  c = *CoordsOf(pc, 3);
  c.ep ^= 1;
  EXPECT_NE(RankOf(pc, c).status().message().find("disagree"), std::string::npos);
  ParallelConfig bad{2, 1, 3, 1, 2, 1};
  EXPECT_FALSE(CoordsOf(bad, 0).ok());
}

}  // namespace
}  // namespace ckpt

// The model-family registry (reshard/family.h): the built-in "megatron_gpt"
// family, resolution of a manifest's metadata (the "model" object, and the
// "gpt" key of checkpoints written before it), and the errors of a recorded
// family that is not registered or a config the family refuses.
#include "reshard/family.h"

#include <gtest/gtest.h>

#include "reshard/gpt_config_json.h"
#include "reshard/megatron_family.h"
#include "reshard/megatron_gpt.h"

namespace ckpt::reshard {
namespace {

using nlohmann::json;

json TinyJson() {
  auto cfg = GptPreset("tiny");
  EXPECT_TRUE(cfg.ok());
  return GptConfigToJson(*cfg);
}

TEST(ModelFamilyTest, MegatronGptIsBuiltIn) {
  const ModelFamily* f = FindModelFamily("megatron_gpt");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->name(), "megatron_gpt");
  EXPECT_EQ(ModelFamilyNames().front(), "megatron_gpt");
  // Shards through the seam are GptShards.
  auto pc = ParallelConfig::Parse("tp=2,pp=2");
  ASSERT_TRUE(pc.ok());
  auto c = CoordsOf(*pc, 3);
  ASSERT_TRUE(c.ok());
  auto via_family = f->Shards(TinyJson(), *pc, *c);
  auto direct = GptShards(*GptPreset("tiny"), *pc, *c);
  ASSERT_TRUE(via_family.ok() && direct.ok()) << via_family.status().ToString();
  ASSERT_EQ(via_family->size(), direct->size());
  for (size_t i = 0; i < direct->size(); ++i)
    EXPECT_EQ((*via_family)[i].tensor.DebugString(), (*direct)[i].tensor.DebugString());
}

TEST(ModelFamilyTest, LegacyGptKeyAndModelObjectResolveAlike) {
  auto legacy = ModelOf({{"model", "tiny"}, {"gpt", TinyJson()}});
  auto explicit_ = ModelOf({{"model", ModelMetadata(*MegatronGptFamily(), TinyJson())}});
  ASSERT_TRUE(legacy.ok() && explicit_.ok()) << legacy.status().ToString() << explicit_.status().ToString();
  ASSERT_TRUE(legacy->has_value() && explicit_->has_value());
  EXPECT_EQ((*legacy)->family, (*explicit_)->family);
  EXPECT_EQ((*legacy)->family->name(), "megatron_gpt");
  EXPECT_EQ((*legacy)->config, (*explicit_)->config);
  ShardedTensor padded;
  padded.allow_shape_mismatch = true;
  EXPECT_EQ((*legacy)->family->CanonicalRows((*legacy)->config, padded), 1100);
}

TEST(ModelFamilyTest, NoModelRecordedIsNotAnError) {
  for (const json& m : {json::object(), json{{"gpt", nullptr}}, json{{"model", "custom"}}, json()}) {
    auto r = ModelOf(m);
    ASSERT_TRUE(r.ok()) << m.dump();
    EXPECT_FALSE(r->has_value()) << m.dump();
  }
}

TEST(ModelFamilyTest, UnregisteredFamilyAndBadConfigAreRefused) {
  auto unknown = ModelOf({{"model", {{"family", "t5"}, {"config", json::object()}}}});
  ASSERT_EQ(unknown.status().code(), Code::kNotFound);
  EXPECT_NE(unknown.status().message().find("'t5'"), std::string::npos) << unknown.status().ToString();
  EXPECT_NE(unknown.status().message().find("megatron_gpt"), std::string::npos);
  EXPECT_EQ(ModelOf({{"model", {{"config", json::object()}}}}).status().code(), Code::kInvalidArgument);
  json bad = TinyJson();
  bad["num_heads"] = 7;  // not a multiple of the 8 query groups
  EXPECT_EQ(ModelOf({{"gpt", bad}}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(RegisterModelFamily(nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(RegisterModelFamily(MegatronGptFamily()).code(), Code::kAlreadyExists);
}

// What GPT saves record now ("model": {family, config, name}) and what they
// recorded before ("model": name, "gpt": config) give the GPT tools the same
// config and name; another family is refused by them, naming it.
TEST(ModelFamilyTest, RecordedGptConfigReadsBothFormsAndRefusesAnotherFamily) {
  auto tiny = GptPreset("tiny");
  ASSERT_TRUE(tiny.ok());
  const json now = {{"model", GptModelMetadata(*tiny, "tiny")}};
  EXPECT_EQ(now["model"]["family"], "megatron_gpt");
  EXPECT_EQ(now["model"]["name"], "tiny");
  EXPECT_FALSE(now.contains("gpt"));
  const json before = {{"model", "tiny"}, {"gpt", TinyJson()}};
  for (const json& m : {now, before}) {
    auto g = RecordedGptConfig(m, "test");
    ASSERT_TRUE(g.ok() && g->has_value()) << g.status().ToString() << m.dump();
    EXPECT_EQ(GptConfigToJson(**g), TinyJson());
    EXPECT_EQ(RecordedModelName(m), "tiny");
  }
  auto none = RecordedGptConfig(json::object(), "test");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ(RecordedModelName(json::object()), "custom");

  json other = now;
  other["model"]["family"] = "t5";
  EXPECT_EQ(RecordedGptConfig(other, "test").status().code(), Code::kNotFound);
  json bad = now;
  bad["model"]["config"]["num_heads"] = 7;
  auto refused = RecordedGptConfig(bad, "test");
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
  EXPECT_NE(refused.status().ToString().find("metadata.model"), std::string::npos) << refused.status().ToString();
}

}  // namespace
}  // namespace ckpt::reshard

// A toy second model family behind the ModelFamily seam (reshard/family.h):
// defined here, registered with one call, then saved under three layouts,
// fingerprinted (its padded vocabulary canonical by its own rule) and loaded
// resharded from the family the manifest records - no other file names it;
// then run through the `ckpt` commands (in-process: ckpt_cli) fingerprint,
// reshard (offline, by the family's rules) and inspect.
#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

#include "ckpt/base/comm.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/fingerprint.h"
#include "ckpt/workload/gpt_local_state.h"
#include "ckpt/workload/job_setup.h"
#include "reshard/family.h"
#include "reshard/gpt_config_json.h"
#include "cli/commands.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using nlohmann::json;
using reshard::ModelShard;

// "toy_mlp": an embedding of `vocab` rows padded to a multiple of 4 * TP and
// split over TP on axis 0, `layers` [width, width] matrices split over TP on
// axis 1, one TP-replicated norm. PP, CP and EP must be 1.
class ToyMlp final : public reshard::ModelFamily {
 public:
  std::string_view name() const override { return "toy_mlp"; }

  Result<json> ParseConfig(const json& c) const override {
    for (const char* k : {"vocab", "width", "layers"})
      if (!c.is_object() || !c.contains(k) || !c[k].is_number_integer() || c[k].get<int64_t>() <= 0)
        return Status::InvalidArgument(std::string("toy_mlp config: ") + k + " must be a positive integer");
    return json{{"vocab", c["vocab"]}, {"width", c["width"]}, {"layers", c["layers"]}};
  }

  Result<std::vector<ModelShard>> Shards(const json& config, const ParallelConfig& pc,
                                         const RankCoords& at) const override {
    CKPT_ASSIGN_OR_RETURN(json c, ParseConfig(config));
    if (pc.pp != 1 || pc.cp != 1 || pc.ep != 1) return Status::InvalidArgument("toy_mlp: pp, cp and ep must be 1");
    const int64_t w = c["width"], v = c["vocab"], tp = pc.tp, q = 4 * tp;
    if (w % tp != 0) return Status::InvalidArgument("toy_mlp: width % tp != 0");
    std::vector<ModelShard> out;
    auto add = [&](std::string key, Shape global, int axis, ReplicaId rep, bool padded) {
      ShardedTensor t{key, DType::kFloat32, global, Shape(global.size(), 0), global, std::move(rep), {}, padded};
      if (axis >= 0) {
        t.local_shape[size_t(axis)] /= tp;
        t.global_offset[size_t(axis)] = at.tp * t.local_shape[size_t(axis)];
      }
      out.push_back({t, key, t.local_shape, 0, {}});
    };
    add("embed.weight", {(v + q - 1) / q * q, w}, 0, {0, 0, at.dp}, true);
    for (int64_t l = 0; l < c["layers"].get<int64_t>(); ++l)
      add("layers." + std::to_string(l) + ".w", {w, w}, 1, {0, 0, at.dp}, false);
    add("norm.weight", {w}, -1, {0, at.tp, at.dp}, false);
    return out;
  }

  int64_t CanonicalRows(const json& config, const ShardedTensor& t) const override {
    return t.key == "embed.weight" ? config.value("vocab", int64_t{-1}) : -1;
  }
};

const json kConfig = {{"vocab", 37}, {"width", 8}, {"layers", 2}};

// The one registration.
const reshard::ModelFamily& Toy() {
  static const bool registered = reshard::RegisterModelFamily(std::make_shared<ToyMlp>()).ok();
  EXPECT_TRUE(registered);
  return *reshard::FindModelFamily("toy_mlp");
}

// Runs fn(rank, comm, shards of the rank) on one thread per rank of `spec`.
template <typename Fn>
void OnRanks(const std::string& spec, const json& config, Fn fn) {
  auto pc = ParallelConfig::Parse(spec);
  ASSERT_TRUE(pc.ok());
  auto comms = MakeThreadComms(pc->world_size());
  std::vector<Status> st(size_t(pc->world_size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < pc->world_size(); ++r)
    threads.emplace_back([&, r] {
      st[size_t(r)] = [&]() -> Status {
        CKPT_ASSIGN_OR_RETURN(RankCoords c, CoordsOf(*pc, r));
        CKPT_ASSIGN_OR_RETURN(auto shards, Toy().Shards(config, *pc, c));
        CKPT_ASSIGN_OR_RETURN(auto state, workload::GptLocalState::Create(std::move(shards)));
        return fn(comms[size_t(r)].get(), state, *pc);
      }();
    });
  for (auto& t : threads) t.join();
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
}

std::string SaveToy(const std::string& name, const std::string& spec) {
  const std::string root = testing::ScratchDir(name);
  OnRanks(spec, kConfig, [&](Comm* comm, workload::GptLocalState& state, const ParallelConfig& pc) -> Status {
    CKPT_RETURN_IF_ERROR(state.FillExpected(kConfig["vocab"]));
    SaveOptions o;
    o.root = root;
    o.iteration = 2;
    o.comm = comm;
    o.layout = reshard::LayoutToJson(pc);
    o.metadata = {{"model", reshard::ModelMetadata(Toy(), kConfig)}};
    ShardedStateDict sd = state.StateDict();
    return SaveCheckpoint(sd, o).status();
  });
  return root;
}

TEST(ToyFamilyTest, SavedUnderThreeLayoutsFingerprintsEqualAndLoadsResharded) {
  const std::string a = SaveToy("toy_tp4dp2", "tp=4,dp=2"), b = SaveToy("toy_tp2", "tp=2"),
                    c = SaveToy("toy_tp1", "tp=1");
  auto fa = FingerprintCheckpoint(a), fb = FingerprintCheckpoint(b), fc = FingerprintCheckpoint(c);
  ASSERT_TRUE(fa.ok() && fb.ok() && fc.ok()) << fa.status().ToString();
  EXPECT_EQ(fa->digest, fb->digest);
  EXPECT_EQ(fa->digest, fc->digest);
  ASSERT_EQ(fa->tensors.front().key, "embed.weight");
  EXPECT_EQ(fa->tensors.front().saved_shape, (Shape{48, 8}));  // 37 padded to a multiple of 16
  EXPECT_EQ(fc->tensors.front().saved_shape, (Shape{40, 8}));
  EXPECT_EQ(fa->tensors.front().canonical_shape, (Shape{37, 8}));

  // Load the TP 4 checkpoint at TP 2, with the family and config its manifest records.
  auto m = ReadManifest(DefaultEnv(), a, -1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto model = reshard::ModelOf(m->metadata);
  ASSERT_TRUE(model.ok() && model->has_value()) << model.status().ToString();
  ASSERT_EQ((*model)->family, &Toy());
  OnRanks("tp=2,dp=1", (*model)->config, [&](Comm* comm, workload::GptLocalState& state, const ParallelConfig&) -> Status {
    LoadOptions o;
    o.root = a;
    o.comm = comm;
    ShardedStateDict sd = state.StateDict();
    CKPT_RETURN_IF_ERROR(LoadCheckpoint(sd, o).status());
    std::string bad;
    CKPT_ASSIGN_OR_RETURN(int64_t mismatches, state.CountMismatches(kConfig["vocab"], &bad));
    return mismatches == 0 ? Status::Ok() : Status::Internal("mismatch at " + bad);
  });
}

// What a `ckpt` command prints on stdout (its --json output), and its Status.
template <typename Fn>
json CommandJson(Fn run) {
  ::testing::internal::CaptureStdout();
  const Status st = run();
  std::fflush(stdout);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_TRUE(st.ok()) << st.ToString() << "\n" << out;
  return st.ok() ? json::parse(out, nullptr, /*allow_exceptions=*/false) : json();
}

json Fingerprint(const std::string& root) {
  cli::FingerprintFlags f;
  f.root = root;
  f.json = f.per_tensor = f.no_progress = true;
  return CommandJson([&] { return cli::RunFingerprint(f); });
}

TEST(ToyFamilyTest, GoesThroughCkptInspectReshardAndFingerprint) {
  Toy();
  const std::string src = SaveToy("toy_cli_tp4dp2", "tp=4,dp=2"), dst = testing::ScratchDir("toy_cli_tp2");
  cli::InspectFlags in;
  in.root = src;
  in.json = true;
  const json inspected = CommandJson([&] { return cli::RunInspect(in); });
  EXPECT_EQ(inspected["model"], json({{"family", "toy_mlp"}, {"config", kConfig}})) << inspected.dump();

  // `ckpt reshard --to tp=2`: the target's shards come from the recorded family.
  cli::ReshardFlags r;
  r.req.src = src;
  r.req.dst = dst;
  r.req.to = "tp=2";
  r.json = r.no_progress = true;
  const json resharded = CommandJson([&] { return cli::RunReshard(r); });
  EXPECT_EQ(resharded["op"], "reshard") << resharded.dump();
  auto m = ReadManifest(DefaultEnv(), dst, -1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->layout["tp"], 2);
  EXPECT_EQ(m->metadata["model"]["family"], "toy_mlp");
  for (const auto& s : m->shards) {
    if (s.meta.key == "embed.weight") {
      EXPECT_EQ(s.meta.global_shape, (Shape{40, 8}));  // padded per TP 2, not 4
    }
  }

  // The GPT job behind `ckpt load/train` refuses it, naming the family.
  std::string name;
  auto gpt = workload::ResolveModel("", src, -1, &name);
  EXPECT_EQ(gpt.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(gpt.status().message().find("toy_mlp"), std::string::npos) << gpt.status().ToString();

  const json a = Fingerprint(src), b = Fingerprint(dst);
  ASSERT_TRUE(a.contains("digest") && b.contains("digest")) << a.dump() << b.dump();
  EXPECT_EQ(a["digest"], b["digest"]);
  EXPECT_EQ(a["per_tensor"][0]["key"], "embed.weight");
  EXPECT_EQ(a["per_tensor"][0]["canonical_shape"], json({37, 8}));
  EXPECT_EQ(b["per_tensor"][0]["saved_shape"], json({40, 8}));
}

TEST(ToyFamilyTest, RefusesABadConfigAndASecondRegistration) {
  EXPECT_EQ(Toy().Validate({{"vocab", 0}, {"width", 8}, {"layers", 1}}).code(), Code::kInvalidArgument);
  EXPECT_EQ(reshard::RegisterModelFamily(std::make_shared<ToyMlp>()).code(), Code::kAlreadyExists);
}

}  // namespace
}  // namespace ckpt

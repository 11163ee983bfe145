// Never through a link (env.h, DESIGN "Never through a link"): nothing under a
// checkpoint root is created, written, renamed or deleted through a symbolic
// link. Each case plants a link to a canary OUTSIDE the root that must
// survive with its content unchanged; the library cases and the same cases
// through the `ckpt` binary (save, train --keep-last).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "ckpt/convert/safetensors.h"
#include "ckpt/format/manifest.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/retention.h"
#include "ckpt/protocol/verify.h"
#include "faults/fault_env.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::Desc;
using testing::OwnedState;
using V = std::vector<int64_t>;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void Spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// A directory outside every root holding canary.txt ("precious").
struct Canary {
  explicit Canary(const std::string& name) : dir(testing::ScratchDir(name + "_outside")) { Spit(file(), kText); }
  std::string file() const { return dir + "/canary.txt"; }
  bool intact() const { return fs::is_regular_file(fs::symlink_status(file())) && Slurp(file()) == kText; }
  static constexpr const char* kText = "precious, not ckpt's\n";
  std::string dir;
};

Status Save(const std::string& root, int64_t iteration) {
  OwnedState s;
  s.Add(Desc("w", DType::kFloat32, {64}, {0}, {64}), true);
  SaveOptions o;
  o.root = root;
  o.iteration = iteration;
  return SaveCheckpoint(s.dict(), o).status();
}

bool IsLink(const std::string& p) { return fs::is_symlink(fs::symlink_status(p)); }

TEST(EnvLinks, StatReportsTheLinkItselfAndWhatItNames) {
  Canary c("env_stat");
  const std::string root = testing::ScratchDir("env_stat");
  fs::create_directory_symlink(c.dir, root + "/to_dir");
  fs::create_symlink(c.file(), root + "/to_file");
  fs::create_symlink(root + "/nowhere", root + "/dangling");
  Env* env = DefaultEnv();
  auto d = env->Stat(root + "/to_dir");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->exists);
  EXPECT_FALSE(d->is_dir);  // a link to a directory is not one
  EXPECT_EQ(d->kind, FileKind::kSymlink);
  EXPECT_EQ(d->link_target, FileKind::kDir);
  EXPECT_TRUE(d->IsDirOrLinkToDir());
  auto f = env->Stat(root + "/to_file");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, FileKind::kSymlink);
  EXPECT_EQ(f->link_target, FileKind::kFile);
  auto g = env->Stat(root + "/dangling");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->exists);
  EXPECT_EQ(g->link_target, FileKind::kNone);
  auto real = env->Stat(c.file());
  ASSERT_TRUE(real.ok());
  EXPECT_EQ(real->kind, FileKind::kFile);
  EXPECT_EQ(real->size, std::string(Canary::kText).size());
}

TEST(EnvLinks, OpenRefusesALinkUnlessAskedToFollowAndDecoratorsForwardThat) {
  Canary c("env_open");
  const std::string root = testing::ScratchDir("env_open");
  const std::string link = root + "/to_file";
  fs::create_symlink(c.file(), link);
  Env* env = DefaultEnv();
  auto w = env->OpenFile(link, OpenMode::kCreate);  // would truncate the canary
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), Code::kFailedPrecondition) << w.status().ToString();
  EXPECT_NE(w.status().message().find("symbolic link"), std::string::npos) << w.status().ToString();
  EXPECT_NE(w.status().message().find(link), std::string::npos) << w.status().ToString();
  EXPECT_FALSE(env->OpenFile(link, OpenMode::kReadWrite).ok());
  auto r = ReadFileToString(env, link);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorruption) << r.status().ToString();
  EXPECT_FALSE(env->OpenFile(link, OpenMode::kRead, OpenOptions{.direct = true}).ok());
  // An input the user names (a Hugging Face cache) may be a link: opt in.
  auto in = ReadFileToString(env, link, OpenOptions{.follow_links = true});
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(*in, Canary::kText);
  faults::FaultEnv faults(env, {});
  EXPECT_TRUE(ReadFileToString(&faults, link, OpenOptions{.follow_links = true}).ok());
  EXPECT_FALSE(faults.OpenFile(link, OpenMode::kCreate).ok());
  auto st = faults.Stat(link);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->kind, FileKind::kSymlink);
  EXPECT_TRUE(c.intact());
}

TEST(EnvLinks, RemoveTreeRemovesLinksThemselvesNeverTheirTargets) {
  Canary c("env_rmtree");
  const std::string root = testing::ScratchDir("env_rmtree");
  fs::create_directories(root + "/tree/sub");
  Spit(root + "/tree/sub/own.txt", "ours");
  fs::create_directory_symlink(c.dir, root + "/tree/sub/to_dir");
  fs::create_symlink(c.file(), root + "/tree/to_file");
  ASSERT_TRUE(RemoveTree(DefaultEnv(), root + "/tree").ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(root + "/tree")));
  // The tree named by `path` may itself be a link: only the link goes.
  fs::create_directory_symlink(c.dir, root + "/link_tree");
  ASSERT_TRUE(RemoveTree(DefaultEnv(), root + "/link_tree").ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(root + "/link_tree")));
  EXPECT_FALSE(DefaultEnv()->RemoveDir(c.dir + "/canary.txt").ok());
  EXPECT_TRUE(c.intact());
}

// Case (a): a stale-save name that is a link to another directory.
TEST(SaveLinks, StaleTmpDirThatIsALinkIsRefusedAndItsTargetKept) {
  Canary c("stale_link");
  const std::string root = testing::ScratchDir("stale_link");
  ASSERT_TRUE(Save(root, 1).ok());
  const std::string stale = root + "/" + TmpIterDirName(1, "gone-4242-00000000deadbeef");
  fs::create_directory_symlink(c.dir, stale);
  Status st = Save(root, 2);
  EXPECT_FALSE(st.ok());  // the save relays the refusal (kAborted naming rank 0's FailedPrecondition)
  EXPECT_NE(st.message().find(stale), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("symbolic link"), std::string::npos) << st.ToString();
  EXPECT_TRUE(c.intact());
  EXPECT_TRUE(IsLink(stale));  // not ours: left for its owner to remove
}

// Case (d): the tracker's tmp name is a link to a file elsewhere.
TEST(SaveLinks, TrackerTmpThatIsALinkIsNotWrittenThrough) {
  Canary c("tracker_link");
  const std::string root = testing::ScratchDir("tracker_link");
  ASSERT_TRUE(Save(root, 1).ok());
  const std::string tracker = root + "/" + kTrackerName;
  fs::create_symlink(c.file(), tracker + ".tmp");
  Status st = Save(root, 2);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(c.intact());
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(tracker)));
  EXPECT_EQ(Slurp(tracker), "2\n");
  EXPECT_FALSE(fs::exists(fs::symlink_status(tracker + ".tmp")));
  // A tracker that is itself a link is not read through (and a save replaces it).
  fs::remove(tracker);
  fs::create_symlink(c.file(), tracker);
  EXPECT_FALSE(ReadTracker(DefaultEnv(), root).ok());
  ASSERT_TRUE(Save(root, 3).ok());
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(tracker)));
  EXPECT_TRUE(c.intact());
}

// Case (b): iter_N is a link to an archived iteration: retention removes the
// link only; the archive is untouched. Reading through the link is allowed.
TEST(RetentionLinks, AnIterationThatIsALinkLosesTheLinkOnly) {
  Canary c("retention_iter_link");
  const std::string root = testing::ScratchDir("retention_iter_link");
  for (int64_t it : {2, 4}) ASSERT_TRUE(Save(root, it).ok());
  const std::string archived = c.dir + "/" + IterDirName(2);
  fs::rename(root + "/" + IterDirName(2), archived);
  fs::create_directory_symlink(archived, root + "/" + IterDirName(2));
  auto listed = ListIterations(DefaultEnv(), root);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, (V{2, 4}));
  OwnedState s;
  s.Add(Desc("w", DType::kFloat32, {64}, {0}, {64}), false);
  LoadOptions lo;
  lo.root = root;
  lo.iteration = 2;
  auto loaded = LoadCheckpoint(s.dict(), lo);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  const size_t archived_files = std::distance(fs::directory_iterator(archived), {});
  auto r = ApplyRetention(nullptr, root, 4, {.keep_last = 1});
  EXPECT_TRUE(c.intact());
  EXPECT_EQ(size_t(std::distance(fs::directory_iterator(archived), {})), archived_files);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->deleted, (V{2}));
  EXPECT_EQ(r->unlinked, (V{2}));
  EXPECT_EQ(r->kept, (V{4}));
  EXPECT_FALSE(fs::exists(fs::symlink_status(root + "/" + IterDirName(2))));
  EXPECT_TRUE(fs::exists(archived + "/" + kManifestName));
}

// Case (c): a link inside an old iteration is removed itself.
TEST(RetentionLinks, ALinkInsideAVictimIsRemovedNotFollowed) {
  Canary c("retention_inner_link");
  const std::string root = testing::ScratchDir("retention_inner_link");
  for (int64_t it : {2, 4}) ASSERT_TRUE(Save(root, it).ok());
  const std::string old = root + "/" + IterDirName(2);
  fs::create_directory_symlink(c.dir, old + "/notes");
  fs::create_symlink(c.file(), old + "/canary_link.txt");
  auto r = ApplyRetention(nullptr, root, 4, {.keep_last = 1});
  EXPECT_TRUE(c.intact());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->deleted, (V{2}));
  EXPECT_TRUE(r->unlinked.empty());
  EXPECT_FALSE(fs::exists(fs::symlink_status(old)));
  EXPECT_TRUE(c.intact());
}

TEST(VerifyLinks, AShardFileThatIsALinkIsReportedNotRead) {
  Canary c("verify_link");
  const std::string root = testing::ScratchDir("verify_link");
  ASSERT_TRUE(Save(root, 1).ok());
  const std::string shard = root + "/" + IterDirName(1) + "/" + ShardFileName(0);
  fs::rename(shard, c.dir + "/moved.h5");
  fs::create_symlink(c.dir + "/moved.h5", shard);
  auto rep = VerifyCheckpoint(DefaultEnv(), root, {});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_FALSE(rep->issues.empty());
  EXPECT_NE(rep->issues[0].problem.find("symbolic link"), std::string::npos) << rep->issues[0].problem;
  EXPECT_TRUE(c.intact());
}

// Convert inputs are the user's, not a root: a Hugging Face cache links its
// snapshot files to blobs, and those links are followed.
TEST(ConvertLinks, ASafetensorsInputThatIsALinkIsRead) {
  const std::string blobs = testing::ScratchDir("hf_blobs");
  const std::string snapshot = testing::ScratchDir("hf_snapshot");
  auto w = convert::SafetensorsWriter::Create(DefaultEnv(), blobs + "/blob1", {{"a", DType::kFloat32, {2}, 0, 0}}, {});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const float v[2] = {1.5f, -2};
  ASSERT_TRUE((*w)->Write(0, 0, std::as_bytes(std::span(v))).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  ASSERT_TRUE(convert::WriteSafetensorsIndex(DefaultEnv(), blobs + "/blob2", {{"a", "model-00001-of-00001.safetensors"}}, 8)
                  .ok());
  fs::create_symlink(blobs + "/blob1", snapshot + "/model-00001-of-00001.safetensors");
  fs::create_symlink(blobs + "/blob2", snapshot + "/" + convert::kSafetensorsIndexName);
  auto d = convert::SafetensorsDir::Open(DefaultEnv(), snapshot);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE((*d)->Find("a").ok());
}

// --- the same through the `ckpt` binary ---

using testing::CmdResult;
CmdResult Ckpt(const std::string& args) { return testing::RunCkpt(args); }

TEST(CliLinks, SaveRefusesAStaleTmpLinkAndDoesNotWriteThroughATrackerTmpLink) {
  Canary c("cli_save_links");
  const std::string root = testing::ScratchDir("cli_save_links");
  const std::string save = "save --layout tp=1 --model tiny --root " + root + " --iter ";
  CmdResult r = Ckpt(save + "1");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string stale = root + "/" + TmpIterDirName(2, "gone-4242-00000000deadbeef");
  fs::create_directory_symlink(c.dir, stale);
  r = Ckpt(save + "2");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(stale), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("symbolic link"), std::string::npos) << r.out;
  EXPECT_TRUE(c.intact());
  fs::remove(stale);
  const std::string tracker = root + "/" + kTrackerName;
  fs::create_symlink(c.file(), tracker + ".tmp");
  r = Ckpt(save + "2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(c.intact());
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(tracker)));
  EXPECT_EQ(Slurp(tracker), "2\n");
}

TEST(CliLinks, TrainKeepLastRemovesALinkedIterationsLinkOnly) {
  Canary c("cli_train_links");
  const std::string root = testing::ScratchDir("cli_train_links");
  const std::string train = "train --layout tp=1 --model tiny --save-every 1 --root " + root;
  CmdResult r = Ckpt(train + " --steps 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string archived = c.dir + "/" + IterDirName(1);
  fs::rename(root + "/" + IterDirName(1), archived);
  fs::create_directory_symlink(archived, root + "/" + IterDirName(1));
  fs::create_symlink(c.file(), root + "/" + IterDirName(2) + "/canary_link.txt");  // case (c)
  const size_t archived_files = std::distance(fs::directory_iterator(archived), {});
  r = Ckpt(train + " --steps 3 --resume --keep-last 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("links removed, targets kept: [1]"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(fs::symlink_status(root + "/" + IterDirName(1))));
  EXPECT_FALSE(fs::exists(fs::symlink_status(root + "/" + IterDirName(2))));
  EXPECT_TRUE(fs::is_directory(fs::symlink_status(root + "/" + IterDirName(3))));
  EXPECT_TRUE(c.intact());
  EXPECT_EQ(size_t(std::distance(fs::directory_iterator(archived), {})), archived_files);
}

}  // namespace
}  // namespace ckpt

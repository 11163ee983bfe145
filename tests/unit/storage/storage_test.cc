// The storage seam (ckpt/storage/storage.h): the conformance suite over every
// backend this build has - POSIX (by path and by file:// URL), in-memory, and
// both decorated by the fault-injecting and power-loss Envs - plus the scheme
// registry, error mapping under injected faults, and the FileWrapper base.
#include <gtest/gtest.h>

#include <memory>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/commit.h"
#include "ckpt/storage/layout.h"
#include "ckpt/storage/mem_env.h"
#include "ckpt/storage/storage.h"
#include "faults/fault_env.h"
#include "faults/power_loss.h"
#include "faults/power_loss_env.h"
#include "harness/state_util.h"
#include "harness/storage_conformance.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using testing::StorageBackend;

const std::string& Scratch() {
  static const std::string dir = testing::ScratchDir("storage");
  return dir;
}

// Decorating Envs live as long as the test process (Storages point at them).
Env* PassThroughFaultEnv(Env* target) {
  faults::FaultEnv::Options o;
  o.record_trace = false;
  return new faults::FaultEnv(target, o);
}

Env* PowerLossOverPosix() {
  static Env* env = [] {
    auto made = faults::PowerLossEnv::Create(
        DefaultEnv(), {JoinPath(Scratch(), "journal.bin"), JoinPath(Scratch(), "power_cut"), 0});
    return made.ok() ? static_cast<Env*>(made->release()) : nullptr;
  }();
  return env;
}

StorageBackend Posix() {
  return {"posix", [](const std::string& name) -> Result<std::unique_ptr<Storage>> {
            return NewPosixStorage(nullptr, JoinPath(Scratch(), name));
          }};
}
StorageBackend PosixUrl() {
  return {"posix_file_url", [](const std::string& name) { return OpenStorage("file://" + JoinPath(Scratch(), name)); }};
}
StorageBackend Mem() {
  return {"mem", [](const std::string& name) { return OpenStorage("mem://" + name); }};
}
StorageBackend FaultPosix() {
  return {"fault_posix", [](const std::string& name) -> Result<std::unique_ptr<Storage>> {
            static Env* env = PassThroughFaultEnv(DefaultEnv());
            return NewPosixStorage(env, JoinPath(Scratch(), name));
          }};
}
StorageBackend FaultMem() {
  return {"fault_mem", [](const std::string& name) -> Result<std::unique_ptr<Storage>> {
            static Env* env = PassThroughFaultEnv(SharedMemEnv());
            return NewMemStorage("mem://" + name, env);
          }};
}
StorageBackend PowerLossPosix() {
  return {"power_loss_posix", [](const std::string& name) -> Result<std::unique_ptr<Storage>> {
            if (!PowerLossOverPosix()) return Status::Internal("no power-loss Env");
            return NewPosixStorage(PowerLossOverPosix(), JoinPath(Scratch(), name));
          }};
}

CKPT_STORAGE_CONFORMANCE(Builtin, Posix(), PosixUrl(), Mem(), FaultPosix(), FaultMem(), PowerLossPosix());

TEST(StorageRegistry, SchemesOfUrls) {
  EXPECT_EQ(UrlScheme("/data/run1"), "file");
  EXPECT_EQ(UrlScheme("relative/run1"), "file");
  EXPECT_EQ(UrlScheme("file:///data/run1"), "file");
  EXPECT_EQ(UrlScheme("S3://bucket/prefix"), "s3");
  EXPECT_EQ(UrlScheme("mem://x"), "mem");
  EXPECT_EQ(UrlScheme("odd dir/a://b"), "file");  // not a scheme: a relative path
}

TEST(StorageRegistry, OpensByScheme) {
  auto posix = OpenStorage("file://" + JoinPath(Scratch(), "by_url"));
  ASSERT_TRUE(posix.ok()) << posix.status().ToString();
  EXPECT_EQ((*posix)->root(), JoinPath(Scratch(), "by_url"));  // the Env path of a file URL
  auto plain = OpenStorage(JoinPath(Scratch(), "by_path"));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->root(), (*plain)->url());
}

TEST(StorageRegistry, BadUrlsAreInvalidArgumentNamingThem) {
  auto unknown = OpenStorage("gopher://host/run1");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), Code::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("gopher://host/run1"), std::string::npos) << unknown.status().ToString();
  EXPECT_NE(unknown.status().message().find("file://"), std::string::npos) << unknown.status().ToString();
  EXPECT_EQ(OpenStorage("file://relative/path").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(OpenStorage("mem://a/b").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(OpenStorage("").status().code(), Code::kInvalidArgument);
}

TEST(StorageRegistry, RegisteredSchemeIsOpenedOnceTaken) {
  int opened = 0;
  ASSERT_TRUE(RegisterStorageScheme("conformancetest", [&opened](const std::string& url, const StorageOptions&)
                                                           -> Result<std::unique_ptr<Storage>> {
                ++opened;
                return NewMemStorage("mem://" + url.substr(std::string("conformancetest://").size()));
              }).ok());
  auto s = OpenStorage("conformancetest://r1");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(opened, 1);
  EXPECT_EQ(RegisterStorageScheme("conformancetest", nullptr).code(), Code::kAlreadyExists);
  EXPECT_EQ(RegisterStorageScheme("file", nullptr).code(), Code::kAlreadyExists);
}

// The protocol opens any URL root through its backend (OpenRoot) and does
// its IO through the Storage's env() at its root(): a file:// root is its
// path through the caller's Env, a mem:// root the shared MemEnv (the
// caller's POSIX Env would not find its paths), never a path joined onto the
// URL string. (Before issue 32 item 5 such roots were refused.)
TEST(StorageProtocol, UrlRootsOpenThroughTheirBackend) {
  const std::string plain = JoinPath(Scratch(), "plain_root");
  auto by_path = OpenRoot(nullptr, plain);
  ASSERT_TRUE(by_path.ok());
  EXPECT_EQ((*by_path)->root(), plain);
  auto by_url = OpenRoot(DefaultEnv(), "file://" + plain);
  ASSERT_TRUE(by_url.ok()) << by_url.status().ToString();
  EXPECT_EQ((*by_url)->root(), plain);
  EXPECT_EQ((*by_url)->env(), DefaultEnv());
  auto in_mem = OpenRoot(DefaultEnv(), "mem://protocol_root");
  ASSERT_TRUE(in_mem.ok()) << in_mem.status().ToString();
  EXPECT_EQ((*in_mem)->env(), SharedMemEnv());
  EXPECT_EQ((*in_mem)->url(), "mem://protocol_root");
  auto mem = OpenStorage("mem://protocol_root");
  ASSERT_TRUE(mem.ok());
  auto staged = (*mem)->Stage(4);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  bool published = false;
  ASSERT_TRUE((*staged)->Publish("{}", nullptr, &published).ok());
  auto listed = ListIterations(DefaultEnv(), "mem://protocol_root");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(*listed, std::vector<int64_t>({4}));
  EXPECT_EQ(OpenRoot(nullptr, "gopher://x").status().code(), Code::kInvalidArgument);
}

// SaveCheckpoint / LoadCheckpoint / VerifyCheckpoint-free reads on URL roots:
// a mem:// root saves into the shared MemEnv and loads back whole (nothing
// under a directory named "mem:" on disk), a file:// root lands at its path,
// and an opened Storage (SaveOptions::storage) is used as given.
TEST(StorageProtocol, SaveAndLoadThroughUrlRoots) {
  testing::OwnedState state;
  state.Add(testing::Desc("w", DType::kFloat32, {40, 8}, {0, 0}, {40, 8}), true);
  const std::string path = JoinPath(Scratch(), "file_url_root");
  for (const std::string& root : {std::string("mem://saveload"), "file://" + path}) {
    SaveOptions so;
    so.root = root;
    so.iteration = 3;
    auto saved = SaveCheckpoint(state.dict(), so);
    ASSERT_TRUE(saved.ok()) << root << ": " << saved.status().ToString();
    testing::OwnedState back;
    back.Add(testing::Desc("w", DType::kFloat32, {40, 8}, {0, 0}, {40, 8}), false);
    LoadOptions lo;
    lo.root = root;
    auto loaded = LoadCheckpoint(back.dict(), lo);
    ASSERT_TRUE(loaded.ok()) << root << ": " << loaded.status().ToString();
    EXPECT_EQ(back.CountMismatches(), 0) << root;
    auto latest = LatestIteration(nullptr, root);
    ASSERT_TRUE(latest.ok()) << latest.status().ToString();
    EXPECT_EQ(*latest, 3);
  }
  EXPECT_TRUE(SharedMemEnv()->Stat("/saveload/iter_0000003/manifest.json")->exists);
  EXPECT_TRUE(DefaultEnv()->Stat(JoinPath(path, "iter_0000003/manifest.json"))->exists);
  EXPECT_FALSE(DefaultEnv()->Stat("mem:")->exists);
  EXPECT_FALSE(DefaultEnv()->Stat("file:")->exists);
  auto opened = OpenStorage("mem://saveload_opened");
  ASSERT_TRUE(opened.ok());
  SaveOptions so;
  so.storage = opened->get();
  so.iteration = 1;
  ASSERT_TRUE(SaveCheckpoint(state.dict(), so).ok());
  EXPECT_EQ(*ListIterations(opened->get()), std::vector<int64_t>({1}));
}

// The medium's errors reach the caller with their code: ENOSPC while the
// manifest is written fails Publish with kNoSpace, nothing becomes visible,
// and the iteration can be saved again.
TEST(StorageFaults, NoSpaceInPublishIsNoSpaceAndNothingVisible) {
  faults::FaultEnv::Options o;
  o.plan = *faults::ParseFaultPlan("point=env.pwrite path=manifest.json action=enospc");
  faults::FaultEnv env(DefaultEnv(), o);
  auto s = NewPosixStorage(&env, JoinPath(Scratch(), "enospc"));
  auto staged = s->Stage(3);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  bool published = false;
  Status st = (*staged)->Publish("{}", nullptr, &published);
  EXPECT_EQ(st.code(), Code::kNoSpace) << st.ToString();
  EXPECT_FALSE(published);
  EXPECT_TRUE(s->ListIterations()->empty());
  ASSERT_TRUE((*staged)->Abandon().ok());
  staged->reset();
  auto again = s->Stage(3);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE((*again)->Publish("{}", nullptr, &published).ok());
  EXPECT_EQ(*s->ListIterations(), std::vector<int64_t>({3}));
}

// A File that records the hints it gets.
class HintFile final : public FileWrapper {
 public:
  HintFile(std::unique_ptr<File> f, int* hints) : FileWrapper(std::move(f)), hints_(hints) {}
  void WillNeed(uint64_t, uint64_t) override { ++*hints_; }

 private:
  int* hints_;
};
class HintEnv final : public EnvWrapper {
 public:
  explicit HintEnv(Env* target) : EnvWrapper(target) {}
  Result<std::unique_ptr<File>> OpenFile(const std::string& p, OpenMode m, const OpenOptions& o) override {
    CKPT_ASSIGN_OR_RETURN(auto f, target()->OpenFile(p, m, o));
    return std::unique_ptr<File>(new HintFile(std::move(f), &hints));
  }
  int hints = 0;
};

// Decorators derive from FileWrapper: a File call they do not change (here
// the read-ahead hint) reaches the file under them. (The fault-injecting
// File used to drop it: its hand-written forwarders did not list WillNeed.)
TEST(StorageWrappers, FaultEnvForwardsWhatItDoesNotChange) {
  auto mem = NewMemEnv();
  HintEnv hinted(mem.get());
  faults::FaultEnv::Options o;
  faults::FaultEnv fault(&hinted, o);
  auto f = fault.OpenFile("/f", OpenMode::kCreate);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  (*f)->WillNeed(0, 4096);
  EXPECT_EQ(hinted.hints, 1);
  faults::PowerLossEnv::Options po{JoinPath(Scratch(), "hint_journal.bin"), JoinPath(Scratch(), "hint_cut"), 0};
  auto power = faults::PowerLossEnv::Create(&hinted, po);
  ASSERT_TRUE(power.ok());
  auto g = (*power)->OpenFile("/g", OpenMode::kCreate);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  (*g)->WillNeed(0, 4096);
  EXPECT_EQ(hinted.hints, 2);
}

}  // namespace
}  // namespace ckpt

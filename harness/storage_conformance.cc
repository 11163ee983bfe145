// The storage conformance suite (storage_conformance.h). Each test uses only
// the Storage interface and its env(): nothing here knows a backend.
#include "harness/storage_conformance.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "ckpt/storage/layout.h"

namespace ckpt::testing {
namespace {

std::atomic<int> g_roots{0};

std::span<const std::byte> Bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

// Writes `data` to `path` through env and syncs it (what a rank does with its file).
void WriteFile(Env* env, const std::string& path, std::string_view data) {
  auto f = env->OpenFile(path, OpenMode::kCreate);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE((*f)->PWrite(0, Bytes(data)).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Close().ok());
}

std::string ReadAll(Env* env, const std::string& path) {
  auto s = ReadFileToString(env, path);
  return s.ok() ? *s : "<" + s.status().ToString() + ">";
}

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = char((i * 131 + size_t(seed) * 7 + (i >> 9)) & 0xff);
  return s;
}

std::vector<int64_t> Listed(Storage* s) {
  auto l = s->ListIterations();
  if (!l.ok() && l.status().code() == Code::kNotFound) return {};  // a root not made yet
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? *l : std::vector<int64_t>{};
}

std::string ManifestText(int64_t it) { return "{\"iteration\": " + std::to_string(it) + ", \"test\": true}\n"; }

std::string IterPath(Storage* s, int64_t it, const std::string& name) {
  return JoinPath(JoinPath(s->root(), IterDirName(it)), name);
}

// Stages `it` with one shard file of `bytes` and publishes it; returns the file's content.
std::string SaveOne(Storage* s, int64_t it, size_t bytes = 4096) {
  auto staged = s->Stage(it);
  EXPECT_TRUE(staged.ok()) << staged.status().ToString();
  if (!staged.ok()) return "";
  const std::string data = Pattern(bytes, int(it));
  WriteFile(s->env(), JoinPath((*staged)->dir(), "rank_00000.h5"), data);
  bool published = false;
  Status st = (*staged)->Publish(ManifestText(it), nullptr, &published);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(published);
  return data;
}

}  // namespace

int StorageConformanceLinked() { return 1; }

void StorageConformance::SetUp() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->name()) + "_" + std::to_string(::getpid()) + "_" + std::to_string(g_roots++);
  for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(c)) : '_';
  root_name_ = name;
}

std::unique_ptr<Storage> StorageConformance::Open() {
  auto s = GetParam().open(root_name_);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

// A fresh root: nothing listed, no tracker.
TEST_P(StorageConformance, FreshRootIsEmpty) {
  auto s = Open();
  ASSERT_TRUE(s);
  EXPECT_TRUE(Listed(s.get()).empty());
  EXPECT_EQ(s->ReadTracker().status().code(), Code::kNotFound);
  EXPECT_FALSE(s->url().empty());
}

// Staged files are invisible until Publish; then the iteration is listed
// with its manifest and every staged file, byte for byte.
TEST_P(StorageConformance, StageThenPublish) {
  auto s = Open();
  ASSERT_TRUE(s);
  auto staged = s->Stage(5);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  EXPECT_EQ((*staged)->iteration(), 5);
  const std::string a = Pattern(100000, 1), b = Pattern(3, 2);
  WriteFile(s->env(), JoinPath((*staged)->dir(), "rank_00000.h5"), a);
  WriteFile(s->env(), JoinPath((*staged)->dir(), "rank_00001.h5"), b);
  EXPECT_TRUE(Listed(s.get()).empty());
  EXPECT_FALSE(s->env()->Stat(IterPath(s.get(), 5, kManifestName))->exists);
  bool published = false;
  ASSERT_TRUE((*staged)->Publish(ManifestText(5), nullptr, &published).ok());
  EXPECT_TRUE(published);
  EXPECT_EQ(Listed(s.get()), std::vector<int64_t>({5}));
  EXPECT_EQ(ReadAll(s->env(), IterPath(s.get(), 5, kManifestName)), ManifestText(5));
  EXPECT_EQ(ReadAll(s->env(), IterPath(s.get(), 5, "rank_00000.h5")), a);
  EXPECT_EQ(ReadAll(s->env(), IterPath(s.get(), 5, "rank_00001.h5")), b);
  // A second handle (another process) sees the same.
  auto other = Open();
  ASSERT_TRUE(other);
  EXPECT_EQ(Listed(other.get()), std::vector<int64_t>({5}));
}

// Several iterations list in ascending order.
TEST_P(StorageConformance, ListsAscending) {
  auto s = Open();
  ASSERT_TRUE(s);
  for (int64_t it : {20, 3, 100}) SaveOne(s.get(), it);
  EXPECT_EQ(Listed(s.get()), std::vector<int64_t>({3, 20, 100}));
}

// Byte-range reads at any offset and length; short only at the end.
TEST_P(StorageConformance, RangeReads) {
  auto s = Open();
  ASSERT_TRUE(s);
  const std::string data = SaveOne(s.get(), 1, 1 << 20);
  auto f = s->env()->OpenFile(IterPath(s.get(), 1, "rank_00000.h5"), OpenMode::kRead);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*(*f)->Size(), data.size());
  struct Range {
    uint64_t off, len;
  };
  const std::vector<Range> ranges = {{0, 1}, {0, 4096}, {4095, 2}, {123457, 65536}, {(1 << 20) - 10, 10}, {7, 1 << 19}};
  for (Range r : ranges) {
    std::string got(r.len, '\0');
    auto n = (*f)->PRead(r.off, std::as_writable_bytes(std::span(got.data(), got.size())));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, r.len) << "offset " << r.off;
    EXPECT_TRUE(got == data.substr(r.off, r.len)) << "offset " << r.off << " length " << r.len;
  }
  std::string tail(100, '\0');
  auto n = (*f)->PRead(data.size() - 40, std::as_writable_bytes(std::span(tail.data(), tail.size())));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 40u);  // short at the end of the file
  EXPECT_EQ(tail.substr(0, 40), data.substr(data.size() - 40));
  n = (*f)->PRead(data.size() + 5, std::as_writable_bytes(std::span(tail.data(), tail.size())));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  EXPECT_TRUE((*f)->Close().ok());
}

// An iteration is never replaced: staging it again is refused, naming it.
TEST_P(StorageConformance, PublishedIterationIsNotReplaced) {
  auto s = Open();
  ASSERT_TRUE(s);
  const std::string first = SaveOne(s.get(), 7);
  auto again = s->Stage(7);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists) << again.status().ToString();
  EXPECT_NE(again.status().message().find("7"), std::string::npos) << again.status().ToString();
  EXPECT_EQ(ReadAll(s->env(), IterPath(s.get(), 7, "rank_00000.h5")), first);
}

// Stage's precheck runs after the existence check and before anything is
// made; its error comes back as it is.
TEST_P(StorageConformance, StagePrecheck) {
  auto s = Open();
  ASSERT_TRUE(s);
  SaveOne(s.get(), 10);
  int calls = 0;
  auto refuse = [&]() {
    ++calls;
    return Status::FailedPrecondition("older than 10");
  };
  EXPECT_EQ(s->Stage(10, refuse).status().code(), Code::kAlreadyExists);  // existence first
  EXPECT_EQ(calls, 0);
  auto refused = s->Stage(4, refuse);
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition) << refused.status().ToString();
  EXPECT_EQ(calls, 1);
  auto ok = s->Stage(4, [&]() {
    ++calls;
    return Status::Ok();
  });
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(Listed(s.get()), std::vector<int64_t>({10}));
}

// Two writers of one iteration: while the first holds its lease, the second
// (another handle: another process) is refused; the first still publishes.
TEST_P(StorageConformance, ConcurrentSaveOfOneIterationIsRefused) {
  auto a = Open(), b = Open();
  ASSERT_TRUE(a && b);
  auto first = a->Stage(9);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = b->Stage(9);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kAlreadyExists) << second.status().ToString();
  EXPECT_NE(second.status().message().find("being saved"), std::string::npos) << second.status().ToString();
  WriteFile(a->env(), JoinPath((*first)->dir(), "rank_00000.h5"), "x");
  bool published = false;
  ASSERT_TRUE((*first)->Publish(ManifestText(9), nullptr, &published).ok());
  EXPECT_EQ(Listed(b.get()), std::vector<int64_t>({9}));
}

// A live save of another iteration survives a later Stage's cleanup.
TEST_P(StorageConformance, LiveLeaseSurvivesCleanup) {
  auto a = Open(), b = Open();
  ASSERT_TRUE(a && b);
  auto live = a->Stage(3);
  ASSERT_TRUE(live.ok());
  WriteFile(a->env(), JoinPath((*live)->dir(), "rank_00000.h5"), "live");
  SaveOne(b.get(), 4);  // its Stage cleans abandoned saves only
  EXPECT_TRUE(a->env()->Stat(JoinPath((*live)->dir(), "rank_00000.h5"))->exists);
  bool published = false;
  ASSERT_TRUE((*live)->Publish(ManifestText(3), nullptr, &published).ok());
  EXPECT_EQ(Listed(a.get()), std::vector<int64_t>({3, 4}));
  EXPECT_EQ(ReadAll(a->env(), IterPath(a.get(), 3, "rank_00000.h5")), "live");
}

// A save whose lease ended without Publish or Abandon (its process died) is
// abandoned: never listed, and the next Stage (any iteration, the same one
// included) removes its bytes.
TEST_P(StorageConformance, AbandonedSaveIsCleaned) {
  auto s = Open();
  ASSERT_TRUE(s);
  std::string dir;
  {
    auto staged = s->Stage(11);
    ASSERT_TRUE(staged.ok());
    dir = (*staged)->dir();
    WriteFile(s->env(), JoinPath(dir, "rank_00000.h5"), Pattern(5000, 3));
  }  // the lease ends here, as at a crash
  EXPECT_TRUE(Listed(s.get()).empty());
  auto other = Open();
  ASSERT_TRUE(other);
  auto again = other->Stage(11);  // the same iteration: the dead save does not block it
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(other->env()->Stat(JoinPath(dir, "rank_00000.h5"))->exists);
  bool published = false;
  ASSERT_TRUE((*again)->Publish(ManifestText(11), nullptr, &published).ok());
  EXPECT_EQ(Listed(s.get()), std::vector<int64_t>({11}));
}

// Abandon removes the staged files at once; nothing is listed.
TEST_P(StorageConformance, AbandonRemovesStagedFiles) {
  auto s = Open();
  ASSERT_TRUE(s);
  auto staged = s->Stage(2);
  ASSERT_TRUE(staged.ok());
  const std::string file = JoinPath((*staged)->dir(), "rank_00000.h5");
  WriteFile(s->env(), file, "partial");
  ASSERT_TRUE((*staged)->Abandon().ok());
  EXPECT_FALSE(s->env()->Stat(file)->exists);
  EXPECT_TRUE(Listed(s.get()).empty());
  auto again = s->Stage(2);  // and the iteration can be saved again
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

// Publish runs the four steps' hooks once each, in order; a failing hook
// before the commit point leaves nothing visible.
TEST_P(StorageConformance, PublishHooksAndFailureBeforeCommitPoint) {
  auto s = Open();
  ASSERT_TRUE(s);
  std::vector<std::string> steps;
  auto staged = s->Stage(6);
  ASSERT_TRUE(staged.ok());
  WriteFile(s->env(), JoinPath((*staged)->dir(), "rank_00000.h5"), "six");
  bool published = false;
  Status st = (*staged)->Publish(ManifestText(6),
                                 [&](std::string_view step, int) {
                                   steps.emplace_back(step);
                                   return step == "dir_rename" ? Status::IOError("injected at dir_rename")
                                                               : Status::Ok();
                                 },
                                 &published);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(published);
  EXPECT_EQ(steps, std::vector<std::string>({"manifest_write", "manifest_rename", "dir_rename"}));
  EXPECT_TRUE(Listed(s.get()).empty());
  EXPECT_FALSE(s->env()->Stat(IterPath(s.get(), 6, kManifestName))->exists);
  ASSERT_TRUE((*staged)->Abandon().ok());
  staged->reset();
  steps.clear();
  auto retry = s->Stage(6);
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  WriteFile(s->env(), JoinPath((*retry)->dir(), "rank_00000.h5"), "six");
  ASSERT_TRUE((*retry)
                  ->Publish(ManifestText(6),
                            [&](std::string_view step, int) {
                              steps.emplace_back(step);
                              return Status::Ok();
                            },
                            &published)
                  .ok());
  EXPECT_EQ(steps, std::vector<std::string>({"manifest_write", "manifest_rename", "dir_rename", "root_fsync"}));
  EXPECT_EQ(Listed(s.get()), std::vector<int64_t>({6}));
}

// The tracker: replaced whole, read back, its hook first; a failing hook
// leaves the old value.
TEST_P(StorageConformance, Tracker) {
  auto s = Open();
  ASSERT_TRUE(s);
  SaveOne(s.get(), 5);
  int hooks = 0;
  auto hook = [&](std::string_view step, int) {
    EXPECT_EQ(step, "tracker_update");
    ++hooks;
    return Status::Ok();
  };
  ASSERT_TRUE(s->WriteTracker(5, hook).ok());
  EXPECT_EQ(*s->ReadTracker(), 5);
  ASSERT_TRUE(s->WriteTracker(123456789012, hook).ok());
  EXPECT_EQ(*s->ReadTracker(), 123456789012);
  EXPECT_EQ(hooks, 2);
  Status st = s->WriteTracker(7, [](std::string_view, int) { return Status::IOError("injected"); });
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(*s->ReadTracker(), 123456789012);
}

// A tracker that does not hold a number is kCorruption naming it.
TEST_P(StorageConformance, TrackerGarbageIsCorruption) {
  auto s = Open();
  ASSERT_TRUE(s);
  SaveOne(s.get(), 1);  // the root exists
  WriteFile(s->env(), JoinPath(s->root(), kTrackerName), "not a number\x01\n");
  auto t = s->ReadTracker();
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kCorruption) << t.status().ToString();
  EXPECT_NE(t.status().message().find(kTrackerName), std::string::npos) << t.status().ToString();
}

// Retention's delete: the iteration stops being listed and its files go;
// deleting what is not there is OK; other iterations are untouched.
TEST_P(StorageConformance, DeleteIteration) {
  auto s = Open();
  ASSERT_TRUE(s);
  for (int64_t it : {1, 2, 3}) SaveOne(s.get(), it);
  bool was_link = true;
  ASSERT_TRUE(s->DeleteIteration(2, &was_link).ok());
  EXPECT_FALSE(was_link);
  EXPECT_EQ(Listed(s.get()), std::vector<int64_t>({1, 3}));
  EXPECT_FALSE(s->env()->Stat(IterPath(s.get(), 2, kManifestName))->exists);
  EXPECT_FALSE(s->env()->Stat(IterPath(s.get(), 2, "rank_00000.h5"))->exists);
  EXPECT_TRUE(s->DeleteIteration(2).ok());
  EXPECT_TRUE(s->DeleteIteration(99).ok());
  EXPECT_EQ(ReadAll(s->env(), IterPath(s.get(), 3, kManifestName)), ManifestText(3));
  SaveOne(s.get(), 4);  // a save after a delete cleans whatever the delete left
  EXPECT_EQ(Listed(s.get()), std::vector<int64_t>({1, 3, 4}));
}

// Publish atomicity under a concurrent reader: every iteration the reader
// ever lists has its complete manifest and every staged file.
TEST_P(StorageConformance, ReaderNeverSeesHalfPublished) {
  auto writer = Open(), reader = Open();
  ASSERT_TRUE(writer && reader);
  constexpr int kIterations = 12;
  std::atomic<bool> done{false};
  std::atomic<int> checked{0}, torn{0};
  std::string first_torn;
  std::mutex torn_mu;
  // Everything listed must be whole; `where` says who looked.
  auto check_all = [&](const std::string& where) {
    auto listed = reader->ListIterations();
    if (!listed.ok()) return;  // the root may not exist yet
    for (int64_t it : *listed) {
      const std::string m = ReadAll(reader->env(), IterPath(reader.get(), it, kManifestName));
      const std::string f0 = ReadAll(reader->env(), IterPath(reader.get(), it, "rank_00000.h5"));
      const std::string f1 = ReadAll(reader->env(), IterPath(reader.get(), it, "rank_00001.h5"));
      if (m != ManifestText(it) || f0 != Pattern(20000, int(it)) || f1 != Pattern(777, int(it) + 1000)) {
        std::lock_guard<std::mutex> lock(torn_mu);
        if (torn++ == 0)
          first_torn = where + ": iteration " + std::to_string(it) + ", manifest '" + m.substr(0, 80) + "'";
      }
      ++checked;
    }
  };
  std::thread t([&] {
    while (!done.load()) check_all("concurrent reader");
  });
  // Deterministically too: a look at every step of every Publish.
  const StepHook look = [&](std::string_view step, int) {
    check_all("at step " + std::string(step));
    return Status::Ok();
  };
  for (int it = 1; it <= kIterations; ++it) {
    auto staged = writer->Stage(it);
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    WriteFile(writer->env(), JoinPath((*staged)->dir(), "rank_00000.h5"), Pattern(20000, it));
    WriteFile(writer->env(), JoinPath((*staged)->dir(), "rank_00001.h5"), Pattern(777, it + 1000));
    bool published = false;
    ASSERT_TRUE((*staged)->Publish(ManifestText(it), look, &published).ok());
  }
  // Let the reader look at the final state at least once.
  const int before = checked.load();
  for (int i = 0; i < 2000 && checked.load() < before + kIterations; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  done = true;
  t.join();
  EXPECT_EQ(torn.load(), 0) << first_torn;
  EXPECT_GT(checked.load(), 0);
  EXPECT_EQ(Listed(writer.get()).size(), size_t(kIterations));
}

// Error mapping: a missing file is kNotFound naming it; creating a file where
// there is no staged save of it (under a missing iteration) fails.
TEST_P(StorageConformance, ErrorMapping) {
  auto s = Open();
  ASSERT_TRUE(s);
  SaveOne(s.get(), 1);
  const std::string missing = IterPath(s.get(), 1, "rank_00042.h5");
  auto f = s->env()->OpenFile(missing, OpenMode::kRead);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kNotFound) << f.status().ToString();
  EXPECT_NE(f.status().ToString().find("rank_00042.h5"), std::string::npos) << f.status().ToString();
  auto info = s->env()->Stat(missing);
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->exists);
  auto manifest = s->env()->OpenFile(IterPath(s.get(), 8, kManifestName), OpenMode::kRead);
  EXPECT_EQ(manifest.status().code(), Code::kNotFound) << manifest.status().ToString();
}

}  // namespace ckpt::testing

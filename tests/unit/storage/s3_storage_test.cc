// The S3 backend of the storage seam (ckpt/storage/s3/s3_storage.h) against
// s3rver: staging is invisible, the manifest object is the commit, files are
// read back at the iteration's paths, leases refuse a second writer, an
// abandoned save (a killed writer: its lease expired) is cleaned by the next
// Stage, retention unlists first. The commit race with conditional writes
// runs on radosgw (s3_radosgw_test.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "ckpt/storage/s3/s3_storage.h"
#include "harness/s3_server.h"
#include "harness/test_util.h"

namespace ckpt::s3 {
namespace {

using testing::Pattern;
using testing::S3TestServer;

class S3StorageTest : public testing::S3ServerSuite<S3TestServer::Kind::kS3rver> {
 protected:
  void SetUp() override {
    S3ServerSuite::SetUp();
    if (IsSkipped()) return;
    spool_ = testing::ScratchDir("s3spool");
  }
  std::unique_ptr<Storage> Open(const std::string& url, std::chrono::milliseconds ttl = std::chrono::hours(1)) {
    S3StorageOptions o;
    o.spool_env = DefaultEnv();
    o.spool_dir = spool_;
    o.lease_ttl = ttl;
    o.upload.part_size = 5u << 20;
    auto s = OpenS3Storage(url, server_->Config(), o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  static Status WriteFile(Storage& s, const std::string& path, const std::vector<std::byte>& data) {
    CKPT_ASSIGN_OR_RETURN(auto f, s.env()->OpenFile(path, OpenMode::kCreate));
    CKPT_RETURN_IF_ERROR(f->PWrite(0, data));
    CKPT_RETURN_IF_ERROR(f->Sync());
    return f->Close();
  }
  std::string spool_;
};

TEST_F(S3StorageTest, PublishIsTheManifestObjectAndReadsFollowIt) {
  auto s = Open("s3://ckpt-test/st1");
  ASSERT_TRUE(s);
  auto staged = s->Stage(100);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  auto data = Pattern(12u << 20, 1);  // a multipart shard
  ASSERT_TRUE(WriteFile(*s, JoinPath((*staged)->dir(), "rank_00000.h5"), data).ok());
  auto listed = s->ListIterations();
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty()) << "a staged iteration is visible";
  bool published = false;
  ASSERT_TRUE((*staged)->Publish("{\"manifest\":1}", nullptr, &published).ok());
  EXPECT_TRUE(published);
  listed = s->ListIterations();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, std::vector<int64_t>{100});
  // The loader's path, iter_N/<file>, reads the staged bytes (range GETs).
  auto f = s->env()->OpenFile(JoinPath(s->root(), "iter_0000100/rank_00000.h5"), OpenMode::kRead);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*(*f)->Size(), data.size());
  std::vector<std::byte> got(4096);
  ASSERT_EQ(*(*f)->PRead((5u << 20) - 100, got), got.size());
  EXPECT_EQ(0, std::memcmp(got.data(), data.data() + (5u << 20) - 100, got.size()));
  EXPECT_EQ(*(*f)->PRead(data.size() - 10, got), 10u);  // short only at the end
  EXPECT_EQ(s->ReadTracker().status().code(), Code::kNotFound);
  ASSERT_TRUE(s->WriteTracker(100, nullptr).ok());
  EXPECT_EQ(*s->ReadTracker(), 100);
  auto again = s->Stage(100);
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists) << again.status().ToString();
  ASSERT_TRUE(s->DeleteIteration(100).ok());
  EXPECT_TRUE(s->ListIterations()->empty());
  S3Client c(server_->Config());
  EXPECT_TRUE(c.List("ckpt-test", "st1/iter_")->empty()) << "retention left objects";
}

TEST_F(S3StorageTest, LeaseRefusesASecondWriterUntilReleased) {
  auto a = Open("s3://ckpt-test/st2");
  auto b = Open("s3://ckpt-test/st2");
  auto first = a->Stage(5);
  ASSERT_TRUE(first.ok());
  auto second = b->Stage(5);
  EXPECT_EQ(second.status().code(), Code::kAlreadyExists);
  EXPECT_NE(second.status().message().find("is being saved by host"), std::string::npos)
      << second.status().ToString();
  first->reset();  // a normal end of the first save drops its lease
  EXPECT_TRUE(b->Stage(5).ok());
}

TEST_F(S3StorageTest, AKilledWritersDataIsCleanedAfterItsLeaseExpires) {
  auto a = Open("s3://ckpt-test/st3", std::chrono::milliseconds(300));
  auto staged = a->Stage(7);
  ASSERT_TRUE(staged.ok());
  ASSERT_TRUE(WriteFile(*a, JoinPath((*staged)->dir(), "rank_00000.h5"), Pattern(1000, 2)).ok());
  // SIGKILL: no destructor, the lease stays. The object is kept (not leaked:
  // LeakSanitizer) and destroyed only at the end, after the checks.
  std::unique_ptr<StagedSave> killed = std::move(*staged);
  S3Client c(server_->Config());
  EXPECT_EQ(c.List("ckpt-test", "st3/iter_")->size(), 1u);
  auto b = Open("s3://ckpt-test/st3");
  EXPECT_EQ(b->Stage(7).status().code(), Code::kAlreadyExists);  // lease still live
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto next = b->Stage(8);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(c.List("ckpt-test", "st3/iter_")->empty()) << "the abandoned data prefix was not removed";
  EXPECT_TRUE(b->ListIterations()->empty());
}

TEST_F(S3StorageTest, ASaveThatOutlivedItsLeaseDoesNotCommit) {
  auto s = Open("s3://ckpt-test/st5", std::chrono::milliseconds(200));
  auto staged = s->Stage(11);
  ASSERT_TRUE(staged.ok());
  ASSERT_TRUE(WriteFile(*s, JoinPath((*staged)->dir(), "rank_00000.h5"), Pattern(100, 4)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  bool published = true;
  Status st = (*staged)->Publish("{}", nullptr, &published);
  EXPECT_EQ(st.code(), Code::kTimeout) << st.ToString();
  EXPECT_FALSE(published);
  EXPECT_TRUE(s->ListIterations()->empty());
}

// The server restarted while a shard uploads: the save either commits whole
// (the client retried through the restart) or fails; the previous iteration
// loads either way and nothing torn is listed.
TEST_F(S3StorageTest, ServerRestartMidSave) {
  auto s = Open("s3://ckpt-test/st6");
  auto old_data = Pattern(1000, 5);
  {
    auto staged = s->Stage(1);
    ASSERT_TRUE(staged.ok());
    ASSERT_TRUE(WriteFile(*s, JoinPath((*staged)->dir(), "rank_00000.h5"), old_data).ok());
    bool published = false;
    ASSERT_TRUE((*staged)->Publish("{}", nullptr, &published).ok());
  }
  auto new_data = Pattern(16u << 20, 6);
  auto staged = s->Stage(2);
  ASSERT_TRUE(staged.ok());
  std::thread restarter([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_TRUE(server_->Restart().ok());
  });
  Status wrote = WriteFile(*s, JoinPath((*staged)->dir(), "rank_00000.h5"), new_data);
  restarter.join();
  bool published = false;
  Status st = wrote.ok() ? (*staged)->Publish("{}", nullptr, &published) : wrote;
  auto listed = s->ListIterations();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_FALSE(listed->empty());
  EXPECT_EQ(listed->front(), 1);
  auto check = [&](int64_t n, const std::vector<std::byte>& want) {
    auto f = s->env()->OpenFile(JoinPath(s->root(), "iter_000000" + std::to_string(n) + "/rank_00000.h5"),
                                OpenMode::kRead);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    std::vector<std::byte> got(want.size());
    ASSERT_EQ(*(*f)->PRead(0, got), want.size());
    EXPECT_TRUE(got == want) << "iteration " << n << " is torn";
  };
  check(1, old_data);
  if (st.ok()) {
    EXPECT_EQ(*listed, (std::vector<int64_t>{1, 2}));
    check(2, new_data);
  } else {
    EXPECT_EQ(*listed, std::vector<int64_t>{1}) << st.ToString();
  }
}

TEST_F(S3StorageTest, AbandonRemovesStagedObjects) {
  auto s = Open("s3://ckpt-test/st4");
  auto staged = s->Stage(9);
  ASSERT_TRUE(staged.ok());
  ASSERT_TRUE(WriteFile(*s, JoinPath((*staged)->dir(), "rank_00001.h5"), Pattern(100, 3)).ok());
  ASSERT_TRUE((*staged)->Abandon().ok());
  S3Client c(server_->Config());
  EXPECT_TRUE(c.List("ckpt-test", "st4/")->empty());
}

}  // namespace
}  // namespace ckpt::s3

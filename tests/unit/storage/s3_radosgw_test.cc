// The S3 client against Ceph radosgw (a real S3 implementation: checks SigV4
// signatures, implements If-None-Match: *, lists multipart uploads). Skipped
// with the reason where radosgw is not installed or cannot start (see
// scripts/install_s3_servers.sh, CKPT_S3_RADOSGW=1).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <cstring>
#include <thread>
#include <random>

#include "ckpt/storage/s3/s3_client.h"
#include "ckpt/storage/s3/s3_multipart.h"
#include "ckpt/storage/s3/s3_storage.h"
#include "harness/test_util.h"
#include "harness/s3_server.h"

namespace ckpt::s3 {
namespace {

using testing::FaultProxy;
using testing::Pattern;
using testing::S3TestServer;

constexpr const char* kBucket = "ckpt-rgw";

class RadosgwTest : public testing::S3ServerSuite<S3TestServer::Kind::kRadosgw> {
 protected:
  static void SetUpTestSuite() {
    S3ServerSuite::SetUpTestSuite();
    if (!server_) return;
    Status st = S3Client(server_->Config()).CreateBucket(kBucket);
    if (!st.ok()) skip_reason_ = new std::string("radosgw started but bucket creation failed: " + st.ToString());
  }
};

TEST_F(RadosgwTest, WrongSecretIsRefusedAndNotPrinted) {
  S3Config bad = server_->Config();
  bad.secret_key = "TOPSECRET-wrong";
  Status st = S3Client(bad).PutObject(kBucket, "auth/x", Pattern(10, 1));
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("SignatureDoesNotMatch"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find(server_->endpoint() + "/ckpt-rgw/auth/x"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.message().find("TOPSECRET"), std::string::npos);
  // The right secret works (the refusal above was the signature).
  EXPECT_TRUE(S3Client(server_->Config()).PutObject(kBucket, "auth/x", Pattern(10, 1)).ok());
}

TEST_F(RadosgwTest, ConditionalPutNeverReplaces) {
  S3Client c(server_->Config());
  auto supported = c.SupportsConditionalPut(kBucket, "cond/probe");
  ASSERT_TRUE(supported.ok()) << supported.status().ToString();
  EXPECT_TRUE(*supported);
  ASSERT_TRUE(c.PutObject(kBucket, "cond/manifest.json", Pattern(100, 2), true).ok());
  Status second = c.PutObject(kBucket, "cond/manifest.json", Pattern(100, 3), true);
  EXPECT_EQ(second.code(), Code::kAlreadyExists) << second.ToString();
  auto got = c.GetObject(kBucket, "cond/manifest.json");
  ASSERT_TRUE(got.ok());
  auto first = Pattern(100, 2);
  EXPECT_EQ(0, std::memcmp(got->data(), first.data(), first.size())) << "the first writer's object was replaced";
}

TEST_F(RadosgwTest, FailedUploadLeavesNoPartsAndAbandonedOnesAreListed) {
  auto proxy = FaultProxy::Start(server_->endpoint(), {"PUT partNumber=2 * status:503"});
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  S3Config cfg = server_->Config();
  cfg.endpoint = (*proxy)->endpoint();
  cfg.max_attempts = 2;
  cfg.backoff_base = std::chrono::milliseconds(10);
  S3Client via_proxy(cfg);
  MultipartOptions o;
  o.part_size = 5u << 20;
  {
    S3MultipartWriter w(&via_proxy, kBucket, "mp/failed", o);
    ASSERT_TRUE(w.Append(Pattern(11u << 20, 4)).ok());
    EXPECT_FALSE(w.Finish().ok());
  }
  S3Client c(server_->Config());
  auto uploads = c.ListMultipart(kBucket, "mp/");
  ASSERT_TRUE(uploads.ok()) << uploads.status().ToString();
  EXPECT_TRUE(uploads->empty()) << "a failed upload was not aborted";
  // What a SIGKILLed writer leaves (an upload never completed nor aborted)
  // is listed, so a cleanup can abort it.
  auto id = c.CreateMultipart(kBucket, "mp/killed");
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(c.UploadPart(kBucket, "mp/killed", *id, 1, Pattern(1000, 5)).ok());
  uploads = c.ListMultipart(kBucket, "mp/");
  ASSERT_TRUE(uploads.ok());
  ASSERT_EQ(uploads->size(), 1u);
  EXPECT_EQ((*uploads)[0].key, "mp/killed");
  ASSERT_TRUE(c.AbortMultipart(kBucket, (*uploads)[0].key, (*uploads)[0].upload_id).ok());
  EXPECT_TRUE(c.ListMultipart(kBucket, "mp/")->empty());
  EXPECT_EQ(c.Head(kBucket, "mp/killed").status().code(), Code::kNotFound);
}

// Another writer's manifest arrived first: the conditional PUT (412) refuses
// to replace it, and the first commit stays as it was.
TEST_F(RadosgwTest, StorageCommitNeverReplacesAnotherWritersManifest) {
  S3StorageOptions o;
  o.spool_env = DefaultEnv();
  o.spool_dir = testing::ScratchDir("rgw_spool");
  auto s = OpenS3Storage("s3://ckpt-rgw/run", server_->Config(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto staged = (*s)->Stage(3);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  S3Client c(server_->Config());
  ASSERT_TRUE(c.PutObject(kBucket, "run/iter_0000003/manifest.json", Pattern(50, 7)).ok());
  bool published = true;
  Status st = (*staged)->Publish("{\"mine\":1}", nullptr, &published);
  EXPECT_EQ(st.code(), Code::kAlreadyExists) << st.ToString();
  EXPECT_FALSE(published);
  auto got = c.GetObject(kBucket, "run/iter_0000003/manifest.json");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->size(), 50u) << "the other writer's manifest was replaced";
}

// A rank SIGKILLed in the middle of a multipart upload: its parts stay on
// the server until the next save of the root, after the lease expired,
// aborts the upload and removes the data; the previous iteration loads.
TEST_F(RadosgwTest, SigkillMidUploadIsCleanedByTheNextSave) {
  S3StorageOptions o;
  o.spool_env = DefaultEnv();
  o.spool_dir = testing::ScratchDir("rgw_kill");
  o.upload.part_size = 5u << 20;
  o.upload.max_in_flight = 1;
  o.lease_ttl = std::chrono::milliseconds(1500);
  auto s = OpenS3Storage("s3://ckpt-rgw/kill", server_->Config(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  {
    auto first = (*s)->Stage(1);
    ASSERT_TRUE(first.ok());
    bool published = false;
    ASSERT_TRUE((*first)->Publish("{\"iter\":1}", nullptr, &published).ok());
  }
  S3Client c(server_->Config());
  const pid_t child = fork();
  if (child == 0) {  // the rank: stage 2 and upload 60 MiB, 5 MiB at a time
    auto cs = OpenS3Storage("s3://ckpt-rgw/kill", server_->Config(), o);
    if (!cs.ok()) _exit(3);
    auto staged = (*cs)->Stage(2);
    if (!staged.ok()) _exit(4);
    auto f = (*cs)->env()->OpenFile(JoinPath((*staged)->dir(), "rank_00000.h5"), OpenMode::kCreate);
    if (!f.ok() || !(*f)->PWrite(0, Pattern(60u << 20, 8)).ok()) _exit(5);
    (void)(*f)->Sync();
    _exit(6);
  }
  // Kill it once its multipart upload exists on the server.
  bool seen = false;
  for (int i = 0; i < 400 && !seen; ++i) {
    auto uploads = c.ListMultipart(kBucket, "kill/");
    seen = uploads.ok() && !uploads->empty();
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(seen) << "the child never started its upload (exit " << WEXITSTATUS(status) << ")";
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ((*s)->ListIterations().value(), std::vector<int64_t>{1});
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));  // the lease expires
  auto next = (*s)->Stage(3);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(c.ListMultipart(kBucket, "kill/")->empty()) << "the killed rank's upload was not aborted";
  auto left = c.List(kBucket, "kill/iter_0000002.");
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << "the killed rank's data prefix was not removed";
  EXPECT_EQ((*s)->ListIterations().value(), std::vector<int64_t>{1});
}

TEST_F(RadosgwTest, MultipartRoundTrip) {
  S3Client c(server_->Config());
  MultipartOptions o;
  o.part_size = 5u << 20;
  o.max_in_flight = 3;
  auto data = Pattern(16u << 20, 6);
  S3MultipartWriter w(&c, kBucket, "mp/ok", o);
  ASSERT_TRUE(w.Append(data).ok());
  ASSERT_TRUE(w.Finish().ok());
  std::vector<std::byte> got(data.size());
  ASSERT_TRUE(c.GetRange(kBucket, "mp/ok", 0, got).ok());
  EXPECT_TRUE(got == data);
}

}  // namespace
}  // namespace ckpt::s3

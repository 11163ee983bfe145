// The tools on s3:// roots (issue 32 item 5) against s3rver: the library's
// save, async save, load, latest, retention, verify and fingerprint take an
// s3://bucket/prefix root as they take a path, and `ckpt save/load/verify/
// inspect/fingerprint/diff/reshard/convert` do too. The bytes are the same
// as a POSIX save's (fingerprint equal), reshard POSIX -> S3 and S3 -> POSIX
// keeps the fingerprint, `ckpt train` saves and resumes there bitwise, and
// an unreachable endpoint fails with exit 2 naming the URL, never the secret.
// The backend's own protocol tests are s3_storage_test / s3_conformance_test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ckpt/protocol/async_save.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/fingerprint.h"
#include "ckpt/protocol/retention.h"
#include "ckpt/protocol/verify.h"
#include "ckpt/storage/s3/s3_storage.h"
#include "harness/s3_server.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;
using testing::S3TestServer;

class S3ToolsTest : public testing::S3ServerSuite<S3TestServer::Kind::kS3rver> {
 protected:
  void SetUp() override {
    S3ServerSuite::SetUp();
    if (IsSkipped()) return;
    const s3::S3Config c = server_->Config();
    setenv("AWS_ENDPOINT_URL", c.endpoint.c_str(), 1);
    setenv("AWS_ACCESS_KEY_ID", c.access_key.c_str(), 1);
    setenv("AWS_SECRET_ACCESS_KEY", c.secret_key.c_str(), 1);
    setenv("AWS_REGION", "us-east-1", 1);
    ASSERT_TRUE(s3::RegisterS3Scheme().ok());
  }
  // Two ranks' worth of a TP-split tensor and a replicated one, as one process
  // holding every shard (a single-rank save writes them all).
  static void Fill(OwnedState* s, bool fill) {
    s->Add(Desc("w", DType::kFloat32, {64, 48}, {0, 0}, {32, 48}), fill);
    s->Add(Desc("w", DType::kFloat32, {64, 48}, {32, 0}, {32, 48}), fill);
    s->Add(Desc("b", DType::kBFloat16, {300}, {0}, {300}), fill);
  }
  static std::string FirstLine(const std::string& out) { return out.substr(0, out.find('\n')); }
  // The first line of `ckpt fingerprint root` (the digest); a failed command
  // fails the test here and returns its output, which equals no digest.
  static std::string FingerprintOf(const std::string& root) {
    auto r = testing::RunCkpt("fingerprint " + root);
    EXPECT_EQ(r.code, 0) << root << ": " << r.out;
    return r.code == 0 ? FirstLine(r.out) : "failed: " + r.out;
  }
};

// SaveCheckpoint / LoadCheckpoint / LatestIteration / VerifyCheckpoint /
// FingerprintCheckpoint / ApplyRetention / AsyncSaver on an s3:// root: the
// same checkpoint as on a POSIX root (fingerprint equal), loaded back whole.
TEST_F(S3ToolsTest, LibrarySaveLoadRetentionOnS3RootMatchPosix) {
  const std::string url = "s3://ckpt-test/lib/run1";
  const std::string posix = testing::ScratchDir("s3tools_posix");
  OwnedState state;
  Fill(&state, true);
  for (const std::string& root : {posix, url}) {
    for (int64_t it : {100, 200}) {
      SaveOptions so;
      so.root = root;
      so.iteration = it;
      auto saved = SaveCheckpoint(state.dict(), so);
      ASSERT_TRUE(saved.ok()) << root << ": " << saved.status().ToString();
      EXPECT_TRUE(saved->warning.ok()) << saved->warning.ToString();
    }
  }
  auto latest = LatestIteration(DefaultEnv(), url);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, 200);

  OwnedState back;
  Fill(&back, false);
  LoadOptions lo;
  lo.root = url;
  auto loaded = LoadCheckpoint(back.dict(), lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->iteration, 200);
  EXPECT_EQ(back.CountMismatches(), 0);

  auto verified = VerifyCheckpoint(DefaultEnv(), url, VerifyOptions{});
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_TRUE(verified->ok());
  auto fp_s3 = FingerprintCheckpoint(url);
  auto fp_posix = FingerprintCheckpoint(posix);
  ASSERT_TRUE(fp_s3.ok()) << fp_s3.status().ToString();
  ASSERT_TRUE(fp_posix.ok()) << fp_posix.status().ToString();
  EXPECT_EQ(fp_s3->digest, fp_posix->digest);

  // Async save through the same URL, then retention keeps the newest only.
  AsyncSaver saver(nullptr);
  SaveOptions so;
  so.root = url;
  so.iteration = 300;
  ASSERT_TRUE(saver.Start(state.dict(), so).ok());
  auto done = saver.Wait();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  RetentionPolicy keep;
  keep.keep_last = 1;
  auto kept = ApplyRetention(DefaultEnv(), url, 300, keep);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->deleted, std::vector<int64_t>({100, 200}));
  EXPECT_EQ(kept->kept, std::vector<int64_t>({300}));

  // An iteration that is not there names the URL.
  lo.iteration = 100;
  auto gone = LoadCheckpoint(back.dict(), lo);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find(url), std::string::npos) << gone.status().ToString();
}

// The command line on s3:// roots: save, load, verify, inspect, fingerprint,
// diff, reshard both ways (fingerprint equal to the source) and convert.
TEST_F(S3ToolsTest, CliToolsTakeS3Roots) {
  using testing::RunCkpt;
  const std::string s3a = "s3://ckpt-test/cli/a", s3b = "s3://ckpt-test/cli/b";
  const std::string dir = testing::ScratchDir("s3tools_cli");
  const std::string posix = dir + "/posix", back = dir + "/back";
  auto r = RunCkpt("save --root " + s3a + " --iter 5 --model tiny --layout tp=1");
  ASSERT_EQ(r.code, 0) << r.out;
  r = RunCkpt("save --root " + posix + " --iter 5 --model tiny --layout tp=1");
  ASSERT_EQ(r.code, 0) << r.out;
  r = RunCkpt("load --root " + s3a + " --layout tp=1");
  EXPECT_EQ(r.code, 0) << r.out;
  r = RunCkpt("verify " + s3a);
  EXPECT_EQ(r.code, 0) << r.out;
  r = RunCkpt("inspect " + s3a);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("iteration 5"), std::string::npos) << r.out;
  const std::string fp = FingerprintOf(posix);
  EXPECT_EQ(FingerprintOf(s3a), fp);  // the same bytes as a POSIX save
  r = RunCkpt("diff " + s3a + " " + posix);
  EXPECT_EQ(r.code, 0) << r.out;
  // POSIX -> S3 -> POSIX through reshard, each fingerprint-equal to the source.
  r = RunCkpt("reshard " + posix + " " + s3b + " --to tp=2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(FingerprintOf(s3b), fp);
  r = RunCkpt("reshard " + s3b + " " + back + " --to tp=1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(FingerprintOf(back), fp);
  r = RunCkpt("convert " + s3a + " " + dir + "/hf --to hf");
  EXPECT_EQ(r.code, 0) << r.out;
}

// `ckpt train` on an s3:// root: a job saves at 2 and stops; a second job
// resumes from the bucket and saves at 4. Its iteration 4 is bitwise the
// iteration 4 of one uninterrupted job on a path (fingerprint equal). A fresh
// run into that bucket prefix is refused at start-up, as on a path (its saves
// would not be 'latest').
TEST_F(S3ToolsTest, TrainSavesAndResumesOnAnS3RootAsOnAPath) {
  using testing::RunCkpt;
  const std::string s3 = "s3://ckpt-test/train/a";
  const std::string posix = testing::ScratchDir("s3tools_train") + "/posix";
  const std::string train = "train --layout tp=1 --model tiny --save-every 2 --root ";
  auto r = RunCkpt(train + posix + " --steps 4");
  ASSERT_EQ(r.code, 0) << r.out;
  r = RunCkpt(train + s3 + " --steps 2");
  ASSERT_EQ(r.code, 0) << r.out;
  r = RunCkpt(train + s3 + " --steps 4 --resume");
  ASSERT_EQ(r.code, 0) << r.out;
  r = RunCkpt("inspect " + s3);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("iteration 4"), std::string::npos) << r.out;
  EXPECT_EQ(FingerprintOf(s3), FingerprintOf(posix)) << "the resumed job on S3 is not bitwise the uninterrupted one";
  r = RunCkpt(train + s3 + " --steps 2");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("already holds iteration 4"), std::string::npos) << r.out;
}

// An endpoint nobody answers: exit 2, the message names the URL and never
// the secret key.
TEST_F(S3ToolsTest, UnreachableEndpointExitsTwoNamingTheUrl) {
  const std::string url = "s3://ckpt-test/cli/nowhere";
  const std::string secret = "not-a-real-secret-x9";
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(testing::FreeTcpPort());
  setenv("AWS_ENDPOINT_URL", endpoint.c_str(), 1);  // SetUp sets it back for the next test
  setenv("AWS_SECRET_ACCESS_KEY", secret.c_str(), 1);
  // (verify/inspect open the root the same way, OpenRoot; each try waits out the retries: ~3 s)
  for (const std::string& args :
       {"load --root " + url + " --layout tp=1", "save --root " + url + " --iter 1 --model tiny --layout tp=1"}) {
    auto r = testing::RunCkpt(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(url), std::string::npos) << args << ": " << r.out;
    EXPECT_EQ(r.out.find(secret), std::string::npos) << args << ": " << r.out;
  }
}

}  // namespace
}  // namespace ckpt

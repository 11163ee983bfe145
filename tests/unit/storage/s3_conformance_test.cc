// The storage conformance suite (harness/storage_conformance.h) over
// the S3 backend, opened the way a user opens it: OpenStorage("s3://...")
// through the registered "s3" scheme with endpoint and credentials from the
// AWS_* environment variables. Server: s3rver (started once for the binary;
// every test is skipped with the reason where it cannot start). s3rver
// ignores If-None-Match, so the commit race is proved on radosgw
// (s3_radosgw_test), not here.
#include <gtest/gtest.h>

#include <cstdlib>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/commit.h"
#include "ckpt/storage/s3/s3_client.h"
#include "ckpt/storage/s3/s3_storage.h"
#include "harness/s3_server.h"
#include "harness/storage_conformance.h"

namespace ckpt::s3 {
namespace {

using testing::S3TestServer;

class S3ServerEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
#ifdef CKPT_S3_CONFORMANCE_RADOSGW
    auto s = S3TestServer::Start(S3TestServer::Kind::kRadosgw);
#else
    auto s = S3TestServer::Start(S3TestServer::Kind::kS3rver);
#endif
    if (!s.ok()) GTEST_SKIP() << s.status().ToString();
    server_ = std::move(s).value();
    const S3Config c = server_->Config();
    // The scheme reads these at each open, as a job's would.
    ::setenv("AWS_ENDPOINT_URL", c.endpoint.c_str(), 1);
    ::setenv("AWS_REGION", c.region.c_str(), 1);
    ::setenv("AWS_ACCESS_KEY_ID", c.access_key.c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", c.secret_key.c_str(), 1);
#ifdef CKPT_S3_CONFORMANCE_RADOSGW
    const Status bucket = S3Client(c).CreateBucket("ckpt-test");  // s3rver starts with it, radosgw without
    ASSERT_TRUE(bucket.ok()) << bucket.ToString();
#endif
    ASSERT_TRUE(RegisterS3Scheme().ok());
  }
  void TearDown() override { server_.reset(); }

 private:
  std::unique_ptr<S3TestServer> server_;
};
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new S3ServerEnvironment);

ckpt::testing::StorageBackend S3ByUrl() {
  return {"S3Url", [](const std::string& name) { return OpenStorage("s3://ckpt-test/conformance/" + name); }};
}

}  // namespace
}  // namespace ckpt::s3

CKPT_STORAGE_CONFORMANCE(S3, ckpt::s3::S3ByUrl());

namespace ckpt::s3 {
namespace {

// Registering twice is harmless (edges may each call it); the scheme is
// then known to OpenStorage and UrlScheme.
TEST(S3Scheme, RegistrationIsIdempotentAndOpensByUrl) {
  EXPECT_TRUE(RegisterS3Scheme().ok());
  EXPECT_TRUE(RegisterS3Scheme().ok());
  auto s = OpenStorage("s3://ckpt-test/scheme");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->url(), "s3://ckpt-test/scheme");
}

// Credentials come from the environment at open time: a missing key is an
// error naming the URL and the variable, never a secret.
TEST(S3Scheme, MissingCredentialsNameTheUrlAndVariable) {
  const std::string secret = std::getenv("AWS_SECRET_ACCESS_KEY");
  const std::string key = std::getenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  auto s = OpenStorage("s3://ckpt-test/nokey");
  ::setenv("AWS_ACCESS_KEY_ID", key.c_str(), 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  const std::string msg = s.status().ToString();
  EXPECT_NE(msg.find("s3://ckpt-test/nokey"), std::string::npos) << msg;
  EXPECT_NE(msg.find("AWS_ACCESS_KEY_ID"), std::string::npos) << msg;
  EXPECT_EQ(msg.find(secret), std::string::npos) << msg;
}


// The protocol's tracker and listing (ckpt.list_iterations / ckpt.latest,
// `ckpt inspect`'s iteration list) take an s3:// root: they go through the
// Storage alone. Save/load through the protocol still refuse it (OpenRoot).
TEST(S3Scheme, ProtocolListsAndFindsLatestOnAnS3Root) {
  const std::string url = "s3://ckpt-test/protocol_list";
  auto s = OpenStorage(url);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int64_t it : {3, 7}) {
    auto staged = (*s)->Stage(it);
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    bool published = false;
    ASSERT_TRUE((*staged)->Publish("{}", nullptr, &published).ok());
  }
  ASSERT_TRUE((*s)->WriteTracker(7, nullptr).ok());
  auto iters = ListIterations(DefaultEnv(), url);
  ASSERT_TRUE(iters.ok()) << iters.status().ToString();
  EXPECT_EQ(*iters, std::vector<int64_t>({3, 7}));
  auto tracked = ReadTracker(DefaultEnv(), url);
  ASSERT_TRUE(tracked.ok()) << tracked.status().ToString();
  EXPECT_EQ(*tracked, 7);
  auto latest = LatestIteration(DefaultEnv(), url);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, 7);
  auto opened = OpenRoot(DefaultEnv(), url);  // through the S3 backend's own Env, not the caller's
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_NE((*opened)->env(), DefaultEnv());
}

}  // namespace
}  // namespace ckpt::s3

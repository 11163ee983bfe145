// The S3 client (ckpt/storage/s3) against s3rver on 127.0.0.1, with HTTP
// faults injected by tests/s3/fault_proxy.py. s3rver is a fake: it accepts a
// wrong secret and ignores If-None-Match; the tests of signatures and
// conditional writes run against radosgw (s3_radosgw_test.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>

#include "ckpt/storage/s3/s3_client.h"
#include "ckpt/storage/s3/s3_multipart.h"
#include "ckpt/storage/s3/s3_xml.h"
#include "harness/s3_server.h"

namespace ckpt::s3 {
namespace {

using testing::FaultProxy;
using testing::Pattern;
using testing::S3TestServer;

constexpr const char* kBucket = "ckpt-test";

class S3ClientTest : public testing::S3ServerSuite<S3TestServer::Kind::kS3rver> {
 protected:
  // A client with short timeouts so fault tests stay fast.
  static S3Config FastConfig(const std::string& endpoint) {
    S3Config c = server_->Config();
    c.endpoint = endpoint;
    c.attempt_timeout = std::chrono::milliseconds(2500);  // above a 5 MiB part on a loaded machine
    c.request_deadline = std::chrono::milliseconds(60000);
    c.backoff_base = std::chrono::milliseconds(10);
    return c;
  }
};

TEST(S3Config, ParsesUrlsAndEncodesKeys) {
  auto u = S3Url::Parse("s3://bucket/run1/sub/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->bucket, "bucket");
  EXPECT_EQ(u->prefix, "run1/sub");
  EXPECT_EQ(u->Key("iter_0000100/manifest.json"), "run1/sub/iter_0000100/manifest.json");
  EXPECT_EQ(u->ToString(), "s3://bucket/run1/sub");
  EXPECT_FALSE(S3Url::Parse("s3:///x").ok());
  EXPECT_FALSE(S3Url::Parse("/tmp/x").ok());
  EXPECT_EQ(EncodeKey("a b/c+d~e"), "a%20b/c%2Bd~e");
  EXPECT_EQ(EncodeQuery("a/b=c"), "a%2Fb%3Dc");
  EXPECT_EQ(XmlFirst("<R><Key>a&amp;b</Key></R>", "Key"), "a&b");
  EXPECT_EQ(XmlAll("<L><Upload><Key>x</Key></Upload><Upload><Key>y</Key></Upload></L>", "Upload").size(), 2u);
}

TEST_F(S3ClientTest, PutGetRangeHeadListDelete) {
  S3Client c(server_->Config());
  auto data = Pattern(100000, 1);
  ASSERT_TRUE(c.PutObject(kBucket, "t1/a/obj", data).ok());
  ASSERT_TRUE(c.PutObject(kBucket, "t1/b", Pattern(10, 2)).ok());
  std::vector<std::byte> got(1000);
  ASSERT_TRUE(c.GetRange(kBucket, "t1/a/obj", 54321, got).ok());
  EXPECT_EQ(0, std::memcmp(got.data(), data.data() + 54321, got.size()));
  auto head = c.Head(kBucket, "t1/a/obj");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->size, data.size());
  auto list = c.List(kBucket, "t1/");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].key, "t1/a/obj");
  EXPECT_EQ((*list)[0].size, data.size());
  // Past the end: the server answers short or 416, never silently.
  std::vector<std::byte> past(10);
  EXPECT_FALSE(c.GetRange(kBucket, "t1/b", 5, past).ok());
  ASSERT_TRUE(c.Delete(kBucket, "t1/a/obj").ok());
  ASSERT_TRUE(c.Delete(kBucket, "t1/a/obj").ok());  // idempotent
  auto gone = c.Head(kBucket, "t1/a/obj");
  EXPECT_EQ(gone.status().code(), Code::kNotFound);
  auto missing = c.GetObject(kBucket, "t1/nope");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find(server_->endpoint() + "/ckpt-test/t1/nope"), std::string::npos)
      << missing.status().message();
}

TEST_F(S3ClientTest, MultipartInParallelWithBoundedMemory) {
  S3Client c(server_->Config());
  MultipartOptions o;
  o.part_size = 5u << 20;
  o.max_in_flight = 2;
  auto data = Pattern(23u << 20, 3);  // 4 full parts + a tail
  S3MultipartWriter w(&c, kBucket, "t2/big", o);
  for (size_t off = 0; off < data.size(); off += 777777)
    ASSERT_TRUE(w.Append(std::span(data).subspan(off, std::min<size_t>(777777, data.size() - off))).ok());
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_EQ(w.parts_uploaded(), 5);
  EXPECT_LE(w.peak_buffer_bytes(), o.part_size * (o.max_in_flight + 1));
  auto head = c.Head(kBucket, "t2/big");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->size, data.size());
  std::vector<std::byte> got(2u << 20);  // across the boundary of parts 1 and 2
  ASSERT_TRUE(c.GetRange(kBucket, "t2/big", (5u << 20) - (1u << 20), got).ok());
  EXPECT_EQ(0, std::memcmp(got.data(), data.data() + (5u << 20) - (1u << 20), got.size()));
  // s3rver does not implement ListMultipartUploads (501); radosgw does.
  auto uploads = c.ListMultipart(kBucket, "t2/");
  EXPECT_EQ(uploads.status().code(), Code::kUnimplemented) << uploads.status().ToString();
}

TEST_F(S3ClientTest, SmallObjectIsOnePut) {
  S3Client c(server_->Config());
  S3MultipartWriter w(&c, kBucket, "t3/small", MultipartOptions{});
  auto data = Pattern(1000, 4);
  ASSERT_TRUE(w.Append(data).ok());
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_EQ(w.parts_uploaded(), 0);
  auto got = c.GetObject(kBucket, "t3/small");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->size(), data.size());
}

TEST_F(S3ClientTest, RetriesServerErrorsResetsAndSlowAnswers) {
  auto proxy = FaultProxy::Start(server_->endpoint(),
                                 {"PUT partNumber=2 1 reset_mid", "PUT partNumber=3 1 status:503",
                                  "PUT partNumber=3 2 status:500", "PUT partNumber=4 1 delay_ms:4000",
                                  "GET t4/ 1 status:503"});
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  S3Client c(FastConfig((*proxy)->endpoint()));
  MultipartOptions o;
  o.part_size = 5u << 20;
  auto data = Pattern(21u << 20, 5);
  S3MultipartWriter w(&c, kBucket, "t4/obj", o);
  ASSERT_TRUE(w.Append(data).ok());
  Status st = w.Finish();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_GE(c.http().stats().retries, 4u);  // reset, 503, 500, timeout
  std::vector<std::byte> part(1u << 20);
  Status read = c.GetRange(kBucket, "t4/obj", 6u << 20, part);  // after one 503
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_EQ(0, std::memcmp(part.data(), data.data() + (6u << 20), part.size()));
  std::vector<std::byte> got(data.size());
  ASSERT_TRUE(S3Client(server_->Config()).GetRange(kBucket, "t4/obj", 0, got).ok());
  EXPECT_TRUE(got == data) << "a retried part changed the object";
}

TEST_F(S3ClientTest, PersistentFailureAbortsTheUpload) {
  auto proxy = FaultProxy::Start(server_->endpoint(), {"PUT partNumber=2 * status:503"});
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  S3Config cfg = FastConfig((*proxy)->endpoint());
  cfg.max_attempts = 3;
  S3Client c(cfg);
  MultipartOptions o;
  o.part_size = 5u << 20;
  S3MultipartWriter w(&c, kBucket, "t5/obj", o);
  ASSERT_TRUE(w.Append(Pattern(12u << 20, 6)).ok());
  Status st = w.Finish();
  EXPECT_EQ(st.code(), Code::kIOError) << st.ToString();
  EXPECT_NE(st.message().find("/ckpt-test/t5/obj: HTTP 503 InjectedFault"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("after 3 attempts"), std::string::npos) << st.ToString();
  // That the upload was aborted on the server is checked on radosgw (s3rver
  // cannot list uploads).
  S3Client direct(server_->Config());
  EXPECT_EQ(direct.Head(kBucket, "t5/obj").status().code(), Code::kNotFound);
}

TEST_F(S3ClientTest, WrongEndpointAndKeyNameTheUrlNotTheSecret) {
  S3Config cfg = FastConfig("http://127.0.0.1:" + std::to_string(testing::FreeTcpPort()));
  cfg.max_attempts = 2;
  cfg.secret_key = "TOPSECRET-do-not-print";
  S3Client nowhere(cfg);
  Status st = nowhere.PutObject(kBucket, "t6/x", Pattern(10, 7));
  EXPECT_EQ(st.code(), Code::kIOError) << st.ToString();
  EXPECT_NE(st.message().find(cfg.endpoint + "/ckpt-test/t6/x"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.message().find("TOPSECRET"), std::string::npos);
  S3Config bad = server_->Config();
  bad.access_key = "NOT-A-KEY";
  bad.secret_key = "TOPSECRET-do-not-print";
  Status denied = S3Client(bad).PutObject(kBucket, "t6/x", Pattern(10, 7));
  EXPECT_EQ(denied.code(), Code::kFailedPrecondition) << denied.ToString();
  EXPECT_NE(denied.message().find("InvalidAccessKeyId"), std::string::npos) << denied.ToString();
  EXPECT_EQ(denied.message().find("TOPSECRET"), std::string::npos);
}

// The documented limit of the fake: s3rver overwrites under If-None-Match: *.
// If this starts failing, s3rver learnt conditional writes; update README.
TEST_F(S3ClientTest, S3rverIgnoresConditionalPut) {
  S3Client c(server_->Config());
  auto supported = c.SupportsConditionalPut(kBucket, "t7/probe");
  ASSERT_TRUE(supported.ok()) << supported.status().ToString();
  EXPECT_FALSE(*supported);
}

}  // namespace
}  // namespace ckpt::s3

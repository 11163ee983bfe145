// S3-compatible servers for tests, started on 127.0.0.1 on a free port and
// stopped (process group killed) by the destructor.
//
// kS3rver: s3rver from npm (scripts/install_s3_servers.sh), ~1 s to start;
//   serves SigV4 PUT, ranged GET, LIST, multipart; does NOT check the secret
//   key (only the key id) and ignores If-None-Match (overwrites).
// kRadosgw: Ceph radosgw (Debian ceph-mon/ceph-osd/radosgw, memstore OSD,
//   scripts/s3/start_radosgw.sh); checks signatures, implements
//   If-None-Match: *; slower to start (see README "S3 test servers").
// FaultProxy: tests/s3/fault_proxy.py in front of a server: rules (method +
//   path regex, which matches, action 503/500/reset_mid/delay_ms) inject
//   HTTP-layer faults.
// Start returns the reason as kUnimplemented when the server is not
// installed or cannot start here; tests GTEST_SKIP with it.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ckpt/base/status.h"
#include "ckpt/storage/s3/s3_config.h"

namespace ckpt::testing {

int FreeTcpPort();

class S3TestServer {
 public:
  enum class Kind { kS3rver, kRadosgw };
  static Result<std::unique_ptr<S3TestServer>> Start(Kind kind);
  ~S3TestServer();

  // Endpoint, region and the server's test credentials.
  s3::S3Config Config() const;
  const std::string& endpoint() const { return endpoint_; }
  // Stops and starts the same server (same data, same port).
  Status Restart();
  void Stop();

 private:
  Status Launch();
  Kind kind_ = Kind::kS3rver;
  std::string dir_, endpoint_, access_, secret_;
  int port_ = 0;
  pid_t pid_ = -1;
};

class FaultProxy {
 public:
  // rules: "METHOD PATH_REGEX NTH ACTION" each (see fault_proxy.py); NTH is
  // the 1-based match index it applies to, or "*" for every match.
  static Result<std::unique_ptr<FaultProxy>> Start(const std::string& upstream, const std::vector<std::string>& rules);
  ~FaultProxy();
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string endpoint_;
  pid_t pid_ = -1;
};

// Seeded pseudo-random bytes: payloads whose every byte a test can check.
inline std::vector<std::byte> Pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<std::byte>(rng() & 0xff);
  return v;
}

// gtest fixture base: one server of kind K per test suite, started before the
// suite's first test and stopped after its last; every test skips with the
// reason when the server cannot start here (or when a derived suite's own
// set-up set skip_reason_).
template <S3TestServer::Kind K>
class S3ServerSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto s = S3TestServer::Start(K);
    if (!s.ok()) {
      skip_reason_ = new std::string(s.status().ToString());
      return;
    }
    server_ = std::move(s).value().release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!server_ || skip_reason_) GTEST_SKIP() << *skip_reason_;
  }
  static inline S3TestServer* server_ = nullptr;
  static inline std::string* skip_reason_ = nullptr;
};

}  // namespace ckpt::testing

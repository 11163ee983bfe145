// The storage conformance suite: one set of gtest tests every Storage backend
// (ckpt/storage/storage.h) must pass - staging, publish atomicity (a reader
// never sees a half-published iteration), listing, the lease (concurrent and
// abandoned saves), the tracker, deletion, byte-range reads, error mapping.
// In the spirit of tensorstore's shared kvstore tests and gloo's per-transport
// parameterised tests.
//
// A backend's test binary instantiates it with a factory:
//
//   #include "harness/storage_conformance.h"
//   ckpt::testing::StorageBackend S3Backend() {
//     return {"s3", [](const std::string& name) { return ckpt::OpenStorage("s3://bucket/" + name); }};
//   }
//   CKPT_STORAGE_CONFORMANCE(S3, S3Backend());
//
// `open(name)` opens the root called `name` (a fresh name per test, made of
// [a-z0-9_-]); calling it again with the same name must give a second,
// independent handle on the same root (as a second process would have: its
// own leases). The backend is done when every test passes (docs/STORAGE.md).
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include "ckpt/storage/storage.h"

namespace ckpt::testing {

struct StorageBackend {
  std::string name;  // the test-name suffix: [A-Za-z0-9_]
  std::function<Result<std::unique_ptr<Storage>>(const std::string& root_name)> open;
};

inline void PrintTo(const StorageBackend& b, std::ostream* os) { *os << b.name; }

class StorageConformance : public ::testing::TestWithParam<StorageBackend> {
 protected:
  // A handle on this test's root (a fresh name per test; same name per call).
  std::unique_ptr<Storage> Open();
  std::string root_name_;

  void SetUp() override;
};

// Referenced by the macro so the linker keeps the suite's tests (they live in
// the ckpt_test_support library).
int StorageConformanceLinked();

}  // namespace ckpt::testing

// Instantiates the suite as <prefix>/StorageConformance.<test>/<backend name>
// for each StorageBackend given.
#define CKPT_STORAGE_CONFORMANCE(prefix, ...)                                                  \
  [[maybe_unused]] static const int ckpt_storage_conformance_##prefix =                       \
      ::ckpt::testing::StorageConformanceLinked();                                            \
  using ::ckpt::testing::StorageConformance;                                                  \
  INSTANTIATE_TEST_SUITE_P(prefix, StorageConformance, ::testing::Values(__VA_ARGS__),         \
                           [](const ::testing::TestParamInfo<::ckpt::testing::StorageBackend>& i) { \
                             return i.param.name;                                             \
                           })

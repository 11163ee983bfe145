// SHA-256 through OpenSSL EVP. Thread-safe (each call owns its context).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace ckpt {

// Lower-case hex digest of the bytes.
std::string Sha256Hex(std::span<const std::byte> data);
inline std::string Sha256Hex(std::string_view s) {
  return Sha256Hex(std::as_bytes(std::span(s.data(), s.size())));
}

// Incremental hashing for data that arrives in pieces.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::span<const std::byte> data);
  std::string FinishHex();

 private:
  void* ctx_;
};

}  // namespace ckpt

// Streaming upload of one object: bytes appended in order become parts of a
// multipart upload, uploaded in parallel with bounded memory.
//
// Contract: Append copies into the part being filled; a full part is handed
// to an uploader thread, at most `max_in_flight` at once, so the writer
// holds at most part_size x (max_in_flight + 1) bytes of buffers (measured:
// peak_buffer_bytes). Append blocks while every buffer is in flight. An
// object that never fills one part is written with one PutObject (no
// multipart state on the server). Finish waits for every part and completes
// the upload; the object exists only after Finish returns OK. Any failure
// (a part that still fails after the HTTP retries) aborts the upload on the
// server; the destructor of an unfinished writer aborts too, so a failed
// save leaves no parts behind (a killed process does: the commit's cleanup
// lists and aborts those, s3_client ListMultipart). part_size >= 5 MiB
// (S3's minimum for all but the last part). Not thread-safe: one writer
// per thread; the uploader threads are internal.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/storage/s3/s3_client.h"

namespace ckpt::s3 {

struct MultipartOptions {
  size_t part_size = 8u << 20;
  int max_in_flight = 4;
  bool if_none_match = false;  // the single-PUT path only (S3 has no conditional Complete everywhere)
};

class S3MultipartWriter {
 public:
  S3MultipartWriter(S3Client* client, std::string bucket, std::string key, MultipartOptions options);
  ~S3MultipartWriter();
  S3MultipartWriter(const S3MultipartWriter&) = delete;
  S3MultipartWriter& operator=(const S3MultipartWriter&) = delete;

  Status Append(std::span<const std::byte> data);
  Status Finish();
  void Abort();  // best effort; idempotent

  uint64_t bytes_appended() const { return appended_; }
  uint64_t peak_buffer_bytes() const { return peak_buffers_ * options_.part_size; }
  int parts_uploaded() const;

 private:
  struct Part {
    int number = 0;
    std::vector<std::byte> buf;
  };
  Status SubmitCurrent();  // hands current_ to an uploader
  void Worker();  // uploads queued parts until stop_
  Status FirstError();
  void JoinAll();

  S3Client* client_;
  std::string bucket_, key_;
  MultipartOptions options_;
  std::string upload_id_;
  std::unique_ptr<Part> current_;
  int next_part_ = 1;
  uint64_t appended_ = 0;
  bool done_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;
  size_t buffers_ = 0, peak_buffers_ = 0;
  std::vector<std::vector<std::byte>> free_;
  std::vector<CompletedPart> completed_;
  Status error_;
  std::vector<std::unique_ptr<Part>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;  // max_in_flight workers, started on the first part
};

}  // namespace ckpt::s3

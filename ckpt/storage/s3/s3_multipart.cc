#include "ckpt/storage/s3/s3_multipart.h"

#include <algorithm>
#include <cstring>

namespace ckpt::s3 {

S3MultipartWriter::S3MultipartWriter(S3Client* client, std::string bucket, std::string key,
                                     MultipartOptions options)
    : client_(client), bucket_(std::move(bucket)), key_(std::move(key)), options_(options) {
  options_.max_in_flight = std::max(1, options_.max_in_flight);
}

S3MultipartWriter::~S3MultipartWriter() {
  if (!done_) Abort();
  JoinAll();
}

int S3MultipartWriter::parts_uploaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(completed_.size());
}

Status S3MultipartWriter::FirstError() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

Status S3MultipartWriter::Append(std::span<const std::byte> data) {
  if (done_) return Status::FailedPrecondition("s3 upload " + bucket_ + "/" + key_ + ": append after finish/abort");
  while (!data.empty()) {
    if (!current_) {
      std::unique_lock<std::mutex> lock(mu_);
      // A buffer is free or may be allocated: at most max_in_flight + 1.
      cv_.wait(lock, [&] {
        return !error_.ok() || !free_.empty() || buffers_ < static_cast<size_t>(options_.max_in_flight) + 1;
      });
      if (!error_.ok()) return error_;
      current_ = std::make_unique<Part>();
      if (!free_.empty()) {
        current_->buf = std::move(free_.back());
        free_.pop_back();
      } else {
        ++buffers_;
        peak_buffers_ = std::max(peak_buffers_, buffers_);
        current_->buf.reserve(options_.part_size);
      }
      current_->buf.clear();
    }
    const size_t k = std::min(data.size(), options_.part_size - current_->buf.size());
    current_->buf.insert(current_->buf.end(), data.begin(), data.begin() + k);
    data = data.subspan(k);
    appended_ += k;
    if (current_->buf.size() == options_.part_size) CKPT_RETURN_IF_ERROR(SubmitCurrent());
  }
  return Status::Ok();
}

Status S3MultipartWriter::SubmitCurrent() {
  if (upload_id_.empty()) {
    auto id = client_->CreateMultipart(bucket_, key_);
    if (!id.ok()) return id.status();
    upload_id_ = *id;
  }
  current_->number = next_part_++;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !error_.ok() || in_flight_ < options_.max_in_flight; });
    if (!error_.ok()) return error_;
    ++in_flight_;
    queue_.push_back(std::move(current_));
    cv_.notify_all();
  }
  if (threads_.empty())
    for (int i = 0; i < options_.max_in_flight; ++i) threads_.emplace_back([this] { Worker(); });
  return Status::Ok();
}

void S3MultipartWriter::Worker() {
  while (true) {
    std::unique_ptr<Part> part;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      part = std::move(queue_.front());
      queue_.erase(queue_.begin());
    }
    // After a failure the remaining parts are dropped, not sent.
    Result<std::string> etag = FirstError().ok()
                                   ? client_->UploadPart(bucket_, key_, upload_id_, part->number, part->buf)
                                   : Result<std::string>(Status::Aborted("skipped after an earlier failure"));
    std::lock_guard<std::mutex> lock(mu_);
    if (etag.ok()) {
      completed_.push_back({part->number, *etag});
    } else if (error_.ok()) {
      error_ = etag.status().WithContext("part " + std::to_string(part->number));
    }
    free_.push_back(std::move(part->buf));
    --in_flight_;
    cv_.notify_all();
  }
}

void S3MultipartWriter::JoinAll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

Status S3MultipartWriter::Finish() {
  if (done_) return Status::FailedPrecondition("s3 upload " + bucket_ + "/" + key_ + ": finished twice");
  if (upload_id_.empty()) {  // small object: one PUT
    done_ = true;
    std::span<const std::byte> body;
    if (current_) body = current_->buf;
    return client_->PutObject(bucket_, key_, body, options_.if_none_match);
  }
  Status st = Status::Ok();
  if (current_ && !current_->buf.empty()) st = SubmitCurrent();
  JoinAll();
  if (st.ok()) st = FirstError();
  if (!st.ok()) {
    Abort();
    return st;
  }
  std::vector<CompletedPart> parts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    parts = completed_;
  }
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.number < b.number; });
  st = client_->CompleteMultipart(bucket_, key_, upload_id_, parts);
  if (!st.ok()) {
    Abort();
    return st;
  }
  done_ = true;
  return Status::Ok();
}

void S3MultipartWriter::Abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = Status::Aborted("s3 upload " + bucket_ + "/" + key_ + ": aborted");
    cv_.notify_all();
  }
  JoinAll();
  if (!upload_id_.empty() && !done_) client_->AbortMultipart(bucket_, key_, upload_id_).IgnoreError();
  done_ = true;
}

}  // namespace ckpt::s3

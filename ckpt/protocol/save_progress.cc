// ProgressEnv, the round messages and VoteTally: see save_progress.h.
#include "ckpt/protocol/save_progress.h"

#include <algorithm>
#include <cstring>

#include "ckpt/base/agree.h"
#include "ckpt/base/status_wire.h"

namespace ckpt {
namespace {

// Counts each completed operation of one file; refuses writes once cancelled.
class ProgressFile final : public FileWrapper {
 public:
  ProgressFile(ProgressEnv* env, std::unique_ptr<File> f) : FileWrapper(std::move(f)), env_(env) {}
  Result<size_t> PRead(uint64_t offset, std::span<std::byte> dst) override { return Count(target()->PRead(offset, dst)); }
  Status PWrite(uint64_t offset, std::span<const std::byte> src) override {
    if (env_->cancelled()) return Status::Aborted("'" + path() + "': write stopped: the save failed on another rank");
    return Count(target()->PWrite(offset, src));
  }
  Status Truncate(uint64_t size) override { return Count(target()->Truncate(size)); }
  Status Sync() override { return Count(target()->Sync()); }
  Status Close() override { return Count(target()->Close()); }

 private:
  template <typename T>
  T Count(T r) {
    if (r.ok()) env_->Tick();
    return r;
  }
  ProgressEnv* env_;
};

constexpr char kWriting = 'W', kVote = 'V', kVoted = 'D', kGoOn = 'G', kFinal = 'F';

Status Malformed(std::string_view what, std::string_view wire) {
  std::string shown;
  for (char c : wire.substr(0, 40)) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
  return Status::Internal("malformed " + std::string(what) + " of a save's vote round: '" + shown + "'");
}

}  // namespace

Status RoundFailure(const std::vector<std::string>& outcomes, Phase phase) {
  std::vector<Status> all;
  for (int r = 0; r < int(outcomes.size()); ++r)
    all.push_back(outcomes[r].empty() ? Status::Ok() : DecodeOutcome(outcomes[r]).status().At(r, phase));
  const int r = FirstOrigin(all);
  if (r < 0) return Status::Ok();
  return Status(Code::kAborted, "rank " + std::to_string(r) + " failed: " + all[r].ToString(), all[r].origin_rank(),
                all[r].phase())
      .WithCause(all[r].cause());
}

Millis ProgressInterval(Millis timeout) { return std::clamp(timeout / 4, Millis(1), Millis(1000)); }

Result<std::unique_ptr<File>> ProgressEnv::OpenFile(const std::string& p, OpenMode m, const OpenOptions& o) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<File> f, target()->OpenFile(p, m, o));
  Tick();
  return std::unique_ptr<File>(new ProgressFile(this, std::move(f)));
}

std::string EncodeWriting(uint64_t count) {
  std::string out(1, kWriting);
  for (int i = 0; i < 8; ++i) out += char((count >> (8 * i)) & 0xff);
  return out;
}
std::string EncodeVote(std::string_view vote_outcome) { return kVote + std::string(vote_outcome); }
std::string EncodeVoted() { return std::string(1, kVoted); }
std::string EncodeGoOn() { return std::string(1, kGoOn); }
std::string EncodeFinal(std::string_view outcome) { return kFinal + std::string(outcome); }

Result<bool> DecodeGoOn(std::string_view answer, std::string* final_outcome) {
  if (answer.size() == 1 && answer[0] == kGoOn) return true;
  if (answer.empty() || answer[0] != kFinal) return Malformed("answer", answer);
  *final_outcome = std::string(answer.substr(1));
  return false;
}

VoteTally::VoteTally(int size, Millis timeout, Clock::time_point start)
    : timeout_(timeout), votes_(size_t(size)), writers_(size_t(size), Writer{0, start}) {}

void VoteTally::Add(const std::vector<std::string>& msgs, Clock::time_point now) {
  for (size_t r = 0; r < msgs.size() && r < votes_.size(); ++r) {
    const std::string& m = msgs[r];
    if (m.empty()) {
      Garbled(r, m);
    } else if (m[0] == kWriting && m.size() == 9) {
      uint64_t count = 0;
      for (int i = 0; i < 8; ++i) count |= uint64_t(uint8_t(m[1 + i])) << (8 * i);
      if (count != writers_[r].count) writers_[r] = {count, now};
    } else if (m[0] == kVote && m.size() > 1 && votes_[r].empty()) {
      votes_[r] = m.substr(1);
      failed_vote_ = failed_vote_ || votes_[r][0] != 'O';  // an outcome: 'O' payload or 'E' failure
    } else if (!(m.size() == 1 && m[0] == kVoted && !votes_[r].empty())) {
      Garbled(r, m);
    }
  }
}

void VoteTally::Garbled(size_t r, std::string_view m) {
  votes_[r] = EncodeFailure(Malformed("message of rank " + std::to_string(r), m).At(int(r), Phase::kVote));
  failed_vote_ = true;
}

bool VoteTally::Decided() const {
  return failed_vote_ || std::none_of(votes_.begin(), votes_.end(), [](const std::string& v) { return v.empty(); });
}

Status VoteTally::Stalled(Clock::time_point now, int me, const Comm* comm) const {
  MissingPeers stalled;
  std::string ranks;
  for (size_t r = 0; r < votes_.size(); ++r) {
    if (!votes_[r].empty() || now - writers_[r].since < timeout_) continue;
    ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    stalled.ranks.push_back(int(r));
    stalled.hosts.push_back(comm ? comm->host(int(r)) : "");
  }
  if (ranks.empty()) return Status::Ok();
  stalled.phase = Phase::kVote;
  return Status::Timeout("rank " + std::to_string(me) + ": no progress from rank(s) " + ranks + " within " +
                         std::to_string(timeout_.count()) + " ms in phase 'vote' (their writes stopped; " +
                         stalled.Describe() + ")")
      .WithMissing(std::move(stalled));
}

}  // namespace ckpt

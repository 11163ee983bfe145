// EncodeStatus / DecodeStatus / outcomes: see status_wire.h.
#include "ckpt/base/status_wire.h"

#include <cstdint>
#include <cstring>

namespace ckpt {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
bool Take(std::string_view* in, T* v) {
  if (in->size() < sizeof *v) return false;
  std::memcpy(v, in->data(), sizeof *v);
  in->remove_prefix(sizeof *v);
  return true;
}

Status Malformed(std::string_view what, std::string_view wire) {
  std::string shown;
  for (char c : wire.substr(0, 60)) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
  return Status::Internal("malformed " + std::string(what) + " on the wire: '" + shown + "'");
}

void PutString(std::string* out, std::string_view v) {
  Put<uint32_t>(out, uint32_t(v.size()));
  out->append(v);
}

bool TakeString(std::string_view* in, std::string* v) {
  uint32_t n = 0;
  if (!Take(in, &n) || n > in->size()) return false;
  v->assign(in->substr(0, n));
  in->remove_prefix(n);
  return true;
}

// The 'M' prefix of a Status with missing peers (status_wire.h).
std::string EncodeMissing(const MissingPeers& m) {
  std::string out = "M";
  Put<uint32_t>(&out, uint32_t(m.ranks.size()));
  for (size_t i = 0; i < m.ranks.size(); ++i) {
    Put<int32_t>(&out, int32_t(m.ranks[i]));
    PutString(&out, i < m.hosts.size() ? m.hosts[i] : "");
  }
  PutString(&out, PhaseName(m.phase));
  return out;
}

bool TakeMissing(std::string_view* in, MissingPeers* m) {
  uint32_t n = 0;
  if (in->empty() || in->front() != 'M') return false;
  in->remove_prefix(1);
  if (!Take(in, &n) || n > in->size()) return false;  // every peer takes > 1 byte
  for (uint32_t i = 0; i < n; ++i) {
    int32_t rank = -1;
    std::string host;
    if (!Take(in, &rank) || rank < 0 || !TakeString(in, &host)) return false;
    m->ranks.push_back(rank);
    m->hosts.push_back(std::move(host));
  }
  std::string phase;
  if (!TakeString(in, &phase)) return false;
  const std::optional<Phase> known = ParsePhase(phase);  // the text edge: a name no phase has is malformed
  if (!known) return false;
  m->phase = *known;
  return !m->empty();
}

}  // namespace

std::string EncodeStatus(const Status& s) {
  std::string out = s.missing().empty() ? "S" : EncodeMissing(s.missing()) + "S";
  Put<uint8_t>(&out, uint8_t(s.code()));
  Put<uint8_t>(&out, uint8_t(s.cause()));
  Put<int32_t>(&out, int32_t(s.origin_rank()));
  const std::string_view phase = PhaseName(s.phase());
  Put<uint32_t>(&out, uint32_t(phase.size()));
  out += phase;
  out += s.message();
  return out;
}

Status DecodeStatus(std::string_view wire) {
  std::string_view in = wire;
  MissingPeers missing;
  if (!in.empty() && in.front() == 'M' && !TakeMissing(&in, &missing)) return Malformed("status", wire);
  uint8_t code = 0, cause = 0;
  int32_t rank = -1;
  uint32_t phase_len = 0;
  if (in.empty() || in.front() != 'S') return Malformed("status", wire);
  in.remove_prefix(1);
  if (!Take(&in, &code) || !Take(&in, &cause) || !Take(&in, &rank) || !Take(&in, &phase_len) ||
      phase_len > in.size() || code > uint8_t(kLastCode) || cause > uint8_t(kLastCode) || rank < -1)
    return Malformed("status", wire);
  if (code == 0) return Status::Ok();
  const std::optional<Phase> phase = ParsePhase(in.substr(0, phase_len));
  if (!phase) return Malformed("status (unknown phase)", wire);
  return Status(Code(code), std::string(in.substr(phase_len)), rank, *phase)
      .WithCause(Code(cause))
      .WithMissing(std::move(missing));
}

std::string EncodeOutcome(std::string_view payload) { return "O" + std::string(payload); }

std::string EncodeFailure(const Status& failure) {
  return "E" + EncodeStatus(failure.ok() ? Status::Internal("a failure message without a failure") : failure);
}

Result<std::string> DecodeOutcome(std::string_view wire) {
  if (!wire.empty() && wire.front() == 'O') return std::string(wire.substr(1));
  if (wire.empty() || wire.front() != 'E') return Malformed("outcome", wire);
  Status st = DecodeStatus(wire.substr(1));
  if (st.ok()) return Malformed("outcome (a failure holding OK)", wire);
  return st;
}

}  // namespace ckpt

// AgreeStatus / AgreeOutcomes: see agree.h.
#include "ckpt/base/agree.h"

#include <tuple>

#include "ckpt/base/status_wire.h"

namespace ckpt {
namespace {

int RankOf(const Comm* comm) { return comm ? comm->rank() : 0; }

// Failure `s` that rank `sender` reported, as every rank returns it.
Status FromSender(int sender, const Status& s) {
  return Status(s.code(), "rank " + std::to_string(sender) + ": " + s.message(), s.origin_rank(), s.phase())
      .WithCause(s.cause())
      .WithMissing(s.missing());
}

}  // namespace

int FirstOrigin(const std::vector<Status>& all) {
  int first = -1;
  // Smaller key first: origin rank, then "not the origin's own report", then sender.
  auto key = [&](int i) { return std::make_tuple(all[i].origin_rank(), all[i].origin_rank() != i, i); };
  for (int i = 0; i < int(all.size()); ++i)
    if (!all[i].ok() && (first < 0 || key(i) < key(first))) first = i;
  return first;
}

Result<std::vector<std::string>> AgreeOutcomes(Comm* comm, const Result<std::string>& mine, Phase phase,
                                               Millis timeout) {
  const int me = RankOf(comm);
  const Status own = mine.status().At(me, phase);
  if (!comm || comm->size() == 1) {
    if (!own.ok()) return own;
    return std::vector<std::string>{*mine};
  }
  Result<std::vector<std::string>> wires =
      comm->AllGather(own.ok() ? EncodeOutcome(*mine) : EncodeFailure(own), timeout, phase);
  if (!wires.ok()) return own.ok() ? wires.status() : own;
  std::vector<Status> all;
  std::vector<std::string> payloads;
  for (int r = 0; r < int(wires->size()); ++r) {
    Result<std::string> o = DecodeOutcome((*wires)[r]);  // garbled: kInternal, without origin
    all.push_back(o.status().At(r, phase));
    payloads.push_back(o.ok() ? std::move(o).value() : std::string());
  }
  const int first = FirstOrigin(all);
  if (first >= 0) return FromSender(first, all[first]);
  return payloads;
}

Status AgreeStatus(Comm* comm, const Status& mine, Phase phase, Millis timeout) {
  const Result<std::string> outcome = mine.ok() ? Result<std::string>(std::string()) : Result<std::string>(mine);
  return AgreeOutcomes(comm, outcome, phase, timeout).status();
}

}  // namespace ckpt

// AgreeStatus / AgreeOutcomes: the one way ranks agree on how a step ended.
//
// Every rank passes its own outcome of a step (OK, with an optional payload,
// or its failure); one all-gather over `comm` within `timeout` in `phase`
// (the typed status wire, status_wire.h); every rank returns the same answer:
//  - all OK: OK (AgreeOutcomes: every rank's payload, index = rank);
//  - else the failure whose origin came first: the lowest origin rank (a
//    failure records the rank that hit it first: Status::At; one that records
//    none is its sender's own, in `phase`); among failures of that origin the
//    origin's own report before a peer's relay of it, then the lowest sender.
//    It arrives as "rank <sender>: <message>" with its code, cause, origin,
//    phase and missing peers kept, so decisions read typed fields only.
//  - the all-gather itself failing (a rank late or gone: kTimeout carrying
//    the missing peers, MissingPeers): this rank's own failure if it had one
//    (it began first), else the gather's failure.
// A peer's garbled message is its failure (kInternal naming it), never OK.
// Without `comm` or with one rank: `mine`, its origin recorded.
// Collective: every rank of `comm` calls it in the same order.
#pragma once

#include <string>
#include <vector>

#include "ckpt/base/comm.h"
#include "ckpt/base/phase.h"
#include "ckpt/base/status.h"

namespace ckpt {

Status AgreeStatus(Comm* comm, const Status& mine, Phase phase, Millis timeout);

Result<std::vector<std::string>> AgreeOutcomes(Comm* comm, const Result<std::string>& mine, Phase phase,
                                               Millis timeout);

// The index of the failure that AgreeStatus picks among `all` (index = the
// sending rank; each failure with its origin recorded), -1 if all are OK.
int FirstOrigin(const std::vector<Status>& all);

}  // namespace ckpt

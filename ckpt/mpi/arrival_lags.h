// How late each rank's messages reached a gather's root (issue 31 item 4c: a
// slow link). MpiComm's root side of every Gather (and so GatherDecide,
// AllGather, Barrier, the save's vote rounds) records, per phase and source
// rank, how long after the first message of that gather this rank's message
// completed, summed over the phase's gathers. Measured on the root's steady
// clock only (no clock of another host is read) and from the messages the
// protocol sends anyway: no extra traffic. A rank behind a slow link shows a
// large lag in the phases whose messages cross it (the vote: its manifest),
// while its own write and wait timings look like everyone's (the collectives
// make every rank wait for the slowest).
// Process-wide (every MpiComm of this process), thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ckpt/base/phase.h"

namespace ckpt {

struct ArrivalLags {
  // phase -> seconds per source rank (index = rank in the gather's communicator).
  std::map<Phase, std::vector<double>> by_phase;
};

ArrivalLags MpiArrivalLags();
void ResetMpiArrivalLags();
// Records one gather's arrivals: seconds since the gather began, per source rank.
void RecordMpiArrivals(Phase phase, const std::vector<int>& srcs, const std::vector<double>& arrived_s);

}  // namespace ckpt

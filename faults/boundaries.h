// Operation boundaries of a recorded save: where a campaign injects faults.
//
// A boundary is (rank, point, nth): "just before the nth call of `point` on
// `rank`" in the traced save. Rules:
//   kAll    every traced operation of every rank;
//   kSmart  every operation except data writes, plus the first, middle and
//           last env.pwrite of each file (HDF5 issues dozens of small writes
//           per shard file; the interesting states are nothing written, half
//           written and all written but unsynced).
// The pseudo-boundary "end" (rank -1) is after the job: every rank finished.
// Paths are normalised (run root and tmp-dir nonce stripped) so traces of
// different runs compare equal.
//
// Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "faults/fault_env.h"

namespace ckpt::faults {

enum class BoundaryRule { kSmart, kAll };

struct Boundary {
  int rank = -1;        // -1: the "end" pseudo-boundary
  std::string point;    // "env.fsync", "step.vote", "end"
  int64_t nth = 0;
  std::string path;     // normalised
  std::string why;      // "op", "first write", "middle write", "last write", "end"
  std::string Name() const;  // "r3 env.fsync#1 rank_00003.h5"
};

// Strips `root` and the tmp-dir suffix: "<root>/.iter_0000020.tmp-host-12-1f2e.../x" -> ".iter_0000020.tmp-*/x".
std::string NormalizeTracePath(const std::string& path, const std::string& root);

// `traces[r]` is rank r's trace of a save under `root`. `points` (if not
// empty) keeps only boundaries whose point is listed ("end" included);
// `ranks` (if not empty) only those ranks.
std::vector<Boundary> SelectBoundaries(const std::vector<std::vector<TraceEntry>>& traces, const std::string& root,
                                       BoundaryRule rule, const std::set<std::string>& points,
                                       const std::set<int>& ranks, bool with_end);

// True if two traces (normalised) name the same operation sequence.
bool SameTrace(const std::vector<TraceEntry>& a, const std::string& root_a, const std::vector<TraceEntry>& b,
               const std::string& root_b, std::string* first_difference);

}  // namespace ckpt::faults

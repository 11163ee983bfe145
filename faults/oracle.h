// The checker's oracle: GPT states whose expected values depend on the
// iteration, so "old checkpoint" and "new checkpoint" differ in every element
// and a load that mixes them, or returns one under the other's name, shows as
// mismatches ("torn") instead of passing.
//
// Element values are workload::ExpectedValue of the tensor key tagged with the
// iteration ("<key>#it<N>") at the element's global index: layout-independent,
// so a checkpoint saved under one layout is checked under any other; padded
// vocabulary rows stay zero as in GptLocalState::FillExpected.
//
// Pure over the state object; thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/base/status.h"
#include "reshard/megatron_gpt.h"
#include "ckpt/workload/gpt_local_state.h"

namespace ckpt::faults {

std::string TaggedKey(const std::string& key, int64_t iteration);

// Fills every shard of `state` with the values of `iteration`.
Status FillForIteration(workload::GptLocalState& state, int64_t vocab_size, int64_t iteration);

// Elements of `state` that differ bitwise from `iteration`'s values;
// `first_bad` (if non-null) gets "<key> element <i>" of the first.
Result<int64_t> MismatchesForIteration(const workload::GptLocalState& state, int64_t vocab_size, int64_t iteration,
                                       std::string* first_bad);

// Rank 0's state for a world-1 `layout`, built without MPI (a recovery load
// that starts in milliseconds).
Result<std::unique_ptr<workload::GptLocalState>> LocalGptState(const reshard::GptConfig& model, const std::string& layout);

// A load's verdict: {"ok":true,"iteration","mismatches","first_bad","elements","skipped"}
// checked against the iteration the loader returned, or {"ok":false,"error"}.
nlohmann::json LoadVerdict(const Result<LoadStats>& r, const workload::GptLocalState& state, int64_t vocab_size);
// The job's verdict from every rank's: the first failure, else summed mismatches.
nlohmann::json MergeLoadVerdicts(const std::vector<nlohmann::json>& all);

}  // namespace ckpt::faults

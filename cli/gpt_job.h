// A GPT job rank for `ckpt save` / `ckpt load`: MPI start-up, the rank's
// layout and coordinates, and its Megatron-Core model state filled with (or
// checked against) the deterministic expected values. Run under mpirun with
// as many processes as the layout's world size (or alone for world 1).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/comm_mpi.h"
#include "ckpt/parallel_state.h"
#include "reshard/megatron_gpt.h"

namespace ckpt::cli {

struct GptJob {
  std::unique_ptr<MpiSession> session;
  std::unique_ptr<MpiComm> comm;
  ParallelConfig layout;
  RankCoords coords;
  reshard::GptConfig model;
  std::string model_name;
  std::unique_ptr<reshard::GptLocalState> state;  // correct layout: filled and checked
  std::vector<reshard::GptShard> registered;        // the descriptors handed to save/load

  // The state dict over `state` with the `registered` descriptors.
  Result<ShardedStateDict> StateDict() { return state->StateDictFor(registered); }

  int rank() const { return comm->rank(); }
  // Gathers one JSON value per rank on every rank (phase "report").
  Result<std::vector<nlohmann::json>> AllGatherJson(const nlohmann::json& mine);
};

// Starts MPI, checks the world size against `layout_spec`, builds the rank's
// state for `model`. With `naive_fc1` the local memory still holds the right
// values but SwiGLU fc1 is registered as one plain axis-0 slice (the naive
// concatenation bug): loading such a checkpoint at another TP gives wrong values.
Result<std::unique_ptr<GptJob>> StartGptJob(const std::string& layout_spec, const reshard::GptConfig& model,
                                            const std::string& model_name, bool naive_fc1);

// Resolves --model: a preset name, else the "gpt" config in the checkpoint's metadata.
Result<reshard::GptConfig> ResolveModel(const std::string& model, const std::string& root, int64_t iteration,
                                        std::string* name);

// Prints on rank 0 only.
void Print0(const GptJob& job, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace ckpt::cli

// The data-plane reductions of the training workload: sums over a rank's
// data-parallel group and over its tensor-parallel group.
//
// MpiCollectives issues real MPI_Allreduce calls on sub-communicators split
// from the job's MpiComm (like NCCL all-reduces in Megatron, they block with no
// deadline: a dead rank hangs the step, while the checkpoint protocol keeps
// its own deadlines). The float sum order is whatever MPI's algorithm for that
// group size picks - that is the point of the tp-reduce mode. Integer sums are
// exact in any order.
// CommCollectives reduces over ckpt::Comm endpoints (e.g. ThreadComm in unit
// tests) by all-gather and a sum in group-rank order: deterministic for a given
// group size, and also order-dependent across sizes. Each reduction waits at
// most the job's timeout (kTimeout naming the missing rank).
// LocalCollectives: groups of size one (no-op), refuses anything larger.
//
// The DP group is the ranks with the same tp, cp and pp coordinates (CP ranks
// see the same samples, so they must not be summed).
//
// Ownership: each object owns its sub-communicators. Thread-safety: one
// thread per object, all ranks of a group call in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "ckpt/base/comm.h"
#include "ckpt/mpi/comm_mpi.h"
#include "reshard/parallel_state.h"
#include "ckpt/base/status.h"

namespace ckpt::workload {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int dp_size() const = 0;
  virtual int tp_size() const = 0;
  // In-place elementwise sums over the group (uint64 wraps mod 2^64: exact for
  // two's-complement int64 values whose true sum fits).
  virtual Status SumOverDp(std::span<uint64_t> data) = 0;
  virtual Status SumOverDp(std::span<float> data) = 0;
  virtual Status SumOverTp(std::span<float> data) = 0;
};

class LocalCollectives final : public Collectives {
 public:
  int dp_size() const override { return 1; }
  int tp_size() const override { return 1; }
  Status SumOverDp(std::span<uint64_t>) override { return Status::Ok(); }
  Status SumOverDp(std::span<float>) override { return Status::Ok(); }
  Status SumOverTp(std::span<float>) override { return Status::Ok(); }
};

class MpiCollectives final : public Collectives {
 public:
  // Splits `world` into this rank's TP and DP groups (collective over world,
  // no timeout: call at start-up). `layout` must match world's size.
  static Result<std::unique_ptr<MpiCollectives>> Create(MpiComm& world, const ParallelConfig& layout);

  int dp_size() const override { return dp_->size(); }
  int tp_size() const override { return tp_->size(); }
  Status SumOverDp(std::span<uint64_t> data) override;
  Status SumOverDp(std::span<float> data) override;
  Status SumOverTp(std::span<float> data) override;

 private:
  MpiCollectives(std::unique_ptr<MpiComm> tp, std::unique_ptr<MpiComm> dp) : tp_(std::move(tp)), dp_(std::move(dp)) {}
  std::unique_ptr<MpiComm> tp_, dp_;
};

// Over caller-owned endpoints of the rank's TP and DP groups (nullptr: size 1);
// `timeout`: the job's deadline of one reduction.
class CommCollectives final : public Collectives {
 public:
  CommCollectives(Comm* tp, Comm* dp, Millis timeout) : tp_(tp), dp_(dp), timeout_(timeout) {}
  int dp_size() const override { return dp_ ? dp_->size() : 1; }
  int tp_size() const override { return tp_ ? tp_->size() : 1; }
  Status SumOverDp(std::span<uint64_t> data) override;
  Status SumOverDp(std::span<float> data) override;
  Status SumOverTp(std::span<float> data) override;

 private:
  Comm* tp_;
  Comm* dp_;
  Millis timeout_;
};

}  // namespace ckpt::workload

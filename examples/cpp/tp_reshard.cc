// ckpt as a library: a training job's own tensors saved at TP4, loaded at TP2.
//
//   mpirun -np 4 tp_reshard save <root>   # tensor parallel 4: each rank its shards
//   mpirun -np 2 tp_reshard load <root>   # tensor parallel 2: resharded on load
//
// The state of one transformer MLP block, sharded the way Megatron does it:
//   fc1.weight  [F, H] column-parallel: rank r holds rows    [r*F/tp, (r+1)*F/tp)
//   fc2.weight  [H, F] row-parallel:    rank r holds columns [r*F/tp, (r+1)*F/tp)
//   norm.weight [H]    replicated: every rank holds all of it, rank 0's is saved
//   rng_state          one opaque blob per rank (a grid of tp cells)
// Every element has a value that depends only on its global index, so the
// loading ranks check every element they receive, and each TP2 rank checks the
// blobs of the two TP4 ranks whose columns it now holds. Uses only the
// installed headers (find_package(ckpt): ckpt::ckpt, ckpt::mpi).
#include <cmath>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"
#include "ckpt/mpi/comm_mpi.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/verify.h"

namespace {

constexpr int64_t kHidden = 8;   // H
constexpr int64_t kFfn = 32;     // F (divisible by 4 and 2)
constexpr int64_t kIteration = 100;

// The value of element `flat` (row-major global index) of tensor `id`.
float ValueAt(int id, int64_t flat) { return float(id * 100000 + flat); }

struct Local {  // one rank's tensors and the buffers behind them
  std::vector<float> fc1, fc2, norm;
  ckpt::ShardedStateDict state;
};

ckpt::ShardedTensor Meta(std::string key, ckpt::Shape global, ckpt::Shape offset, ckpt::Shape local) {
  ckpt::ShardedTensor t;
  t.key = std::move(key);
  t.dtype = ckpt::DType::kFloat32;
  t.global_shape = std::move(global);
  t.global_offset = std::move(offset);
  t.local_shape = std::move(local);
  return t;
}

std::span<std::byte> Bytes(std::vector<float>& v) { return std::as_writable_bytes(std::span(v)); }

// Rank `rank` of `tp`: descriptors and buffers; `fill` writes the expected
// values (save), otherwise the buffers start as NaN (load must overwrite all).
void Describe(Local& s, int rank, int tp, bool fill) {
  const int64_t part = kFfn / tp;
  const float init = fill ? 0.f : std::numeric_limits<float>::quiet_NaN();
  s.fc1.assign(part * kHidden, init);
  s.fc2.assign(kHidden * part, init);
  s.norm.assign(kHidden, init);
  auto fc1 = Meta("mlp.fc1.weight", {kFfn, kHidden}, {rank * part, 0}, {part, kHidden});
  auto fc2 = Meta("mlp.fc2.weight", {kHidden, kFfn}, {0, rank * part}, {kHidden, part});
  auto norm = Meta("norm.weight", {kHidden}, {0}, {kHidden});
  norm.replica_id = {rank};  // rank 0 holds the main replica
  if (fill) {
    for (int64_t i = 0; i < int64_t(s.fc1.size()); ++i) s.fc1[i] = ValueAt(1, (rank * part) * kHidden + i);
    for (int64_t r = 0; r < kHidden; ++r)
      for (int64_t c = 0; c < part; ++c) s.fc2[r * part + c] = ValueAt(2, r * kFfn + rank * part + c);
    for (int64_t i = 0; i < kHidden; ++i) s.norm[i] = ValueAt(3, i);
  }
  s.state.AddTensor(fc1, Bytes(s.fc1));
  s.state.AddTensor(fc2, Bytes(s.fc2));
  s.state.AddTensor(norm, Bytes(s.norm));
}

std::string RngBlob(int saved_rank) { return "rng state of TP4 rank " + std::to_string(saved_rank); }

std::vector<std::byte> ToBytes(const std::string& s) {
  auto b = std::as_bytes(std::span(s));
  return {b.begin(), b.end()};
}

// Compares every loaded element with ValueAt; returns the number of mismatches.
int64_t CheckTensors(const Local& s, int rank, int tp) {
  const int64_t part = kFfn / tp;
  int64_t bad = 0;
  auto expect = [&](float got, float want) { bad += (got == want) ? 0 : 1; };
  for (int64_t i = 0; i < int64_t(s.fc1.size()); ++i) expect(s.fc1[i], ValueAt(1, rank * part * kHidden + i));
  for (int64_t r = 0; r < kHidden; ++r)
    for (int64_t c = 0; c < part; ++c) expect(s.fc2[r * part + c], ValueAt(2, r * kFfn + rank * part + c));
  for (int64_t i = 0; i < kHidden; ++i) expect(s.norm[i], ValueAt(3, i));
  return bad;
}

int Fail(const char* what, const ckpt::Status& st) {
  std::fprintf(stderr, "tp_reshard: %s: %s\n", what, st.ToString().c_str());
  return 1;
}

int Save(ckpt::Comm& comm, const std::string& root) {
  Local s;
  Describe(s, comm.rank(), comm.size(), /*fill=*/true);
  ckpt::ShardedObject rng{"rng_state", {comm.size()}, {comm.rank()}, {}};
  s.state.AddObject(rng, ToBytes(RngBlob(comm.rank())));
  ckpt::SaveOptions opts;
  opts.root = root;
  opts.iteration = kIteration;
  opts.comm = &comm;
  opts.layout = {{"tp", comm.size()}};
  auto stats = ckpt::SaveCheckpoint(s.state, opts);
  if (!stats.ok()) return Fail("save", stats.status());
  std::printf("rank %d/%d saved %lld bytes of iteration %lld\n", comm.rank(), comm.size(),
              (long long)stats->bytes_written, (long long)stats->iteration);
  return 0;
}

int Load(ckpt::Comm& comm, const std::string& root) {
  auto manifest = ckpt::ReadManifest(ckpt::DefaultEnv(), root, -1);
  if (!manifest.ok()) return Fail("read manifest", manifest.status());
  const int saved_tp = manifest->layout.value("tp", 0);
  if (saved_tp % comm.size() != 0) return Fail("layout", ckpt::Status::InvalidArgument("saved tp not a multiple"));
  Local s;
  Describe(s, comm.rank(), comm.size(), /*fill=*/false);
  const int per = saved_tp / comm.size();  // saved ranks whose blobs this rank takes over
  for (int j = 0; j < per; ++j) s.state.AddObject({"rng_state", {saved_tp}, {comm.rank() * per + j}, {}});
  ckpt::LoadOptions opts;
  opts.root = root;
  opts.comm = &comm;
  auto stats = ckpt::LoadCheckpoint(s.state, opts);
  if (!stats.ok()) return Fail("load", stats.status());
  int64_t bad = CheckTensors(s, comm.rank(), comm.size());
  for (int j = 0; j < per; ++j) {
    const auto& got = s.state.objects()[j].bytes;
    bad += (got == ToBytes(RngBlob(comm.rank() * per + j))) ? 0 : 1;
  }
  std::printf("rank %d/%d loaded iteration %lld saved at TP%d: %lld elements, %d blobs, %lld mismatches\n",
              comm.rank(), comm.size(), (long long)stats->iteration, saved_tp, (long long)stats->elements, per,
              (long long)bad);
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  auto session = ckpt::MpiSession::Init(&argc, &argv);
  if (!session.ok()) return Fail("MPI init", session.status());
  auto comm = ckpt::MpiComm::Create();
  if (!comm.ok()) return Fail("MPI comm", comm.status());
  const std::string mode = argc == 3 ? argv[1] : "";
  if (mode != "save" && mode != "load") {
    std::fprintf(stderr, "usage: %s save|load <root>\n", argv[0]);
    return 2;
  }
  int rc = mode == "save" ? Save(**comm, argv[2]) : Load(**comm, argv[2]);
  if (rc == 0 && mode == "load" && (*comm)->rank() == 0) {
    auto report = ckpt::VerifyCheckpoint(ckpt::DefaultEnv(), argv[2], {});
    if (!report.ok()) return Fail("verify", report.status());
    std::printf("verify: %lld chunks, %s\n", (long long)report->chunks_checked, report->ok() ? "ok" : "FAILED");
    rc = report->ok() ? 0 : 1;
  }
  return rc;
}

// ckpt_bench async: AsyncSaver's blocking time against copies of the same
// bytes made under the same conditions (bench/run.py's "async save" rows).
//
// Why the baselines are taken in alternation with the saves: on the bench VM
// a copy into memory that was last written a second ago runs 3-30x slower
// than the same copy repeated back to back (measured 2026-12-04: 178 MB,
// 10 ms back to back, 160-540 ms with 0.6 s gaps, huge or 4 KiB pages,
// memcpy or streaming stores alike; reads are not affected the same way). A
// snapshot always writes into an arena idle since the previous save, so a
// back-to-back memcpy is not the same work. Each round therefore copies the
// rank's state bytes contiguously into a baseline buffer of the same kind of
// memory (SnapshotMemory, idle since the previous round like the arena) right
// before the save (fixed order, so both buffers are written once per round),
// every rank at once after a barrier. The back-to-back figures stay in the output as *_hot.
//
// The first save allocates the arena; its comparator is a memcpy into freshly
// mapped memory of the same byte count (first touch). Savers that call Reserve
// at set-up show what the first save costs when the arena is allocated ahead
// (the wait between Reserve and the first save = one round; the median of
// several such savers, each beside a same-moment memcpy).
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_modes.h"
#include "ckpt/base/clock.h"
#include "ckpt/mpi/comm_mpi.h"
#include "ckpt/protocol/async_save.h"
#include "ckpt/workload/gpt_local_state.h"
#include "ckpt/workload/job_setup.h"
#include "ckpt/workload/rank_report.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_family.h"
#include "reshard/megatron_gpt.h"

namespace ckpt::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
constexpr Millis kTimeout(120000);

// One buffer from a SnapshotMemory, released on scope exit.
struct Buf {
  SnapshotMemory* mem;
  std::byte* p = nullptr;
  size_t n = 0;
  ~Buf() {
    if (p) mem->Free(p, n);
  }
};

// Seconds of one memcpy of `n` bytes into memory mapped just now (first touch).
double FirstTouchMemcpy(const std::byte* src, size_t n) {
  const auto t0 = Clock::now();
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -1;
  std::memcpy(p, src, n);
  const double s = Since(t0);
  munmap(p, n);
  return s;
}

struct Ctx {
  Comm& comm;
  const ShardedStateDict& sd;
  SaveOptions opts;
};

// Barrier, then the timed save (Start; Wait outside the timing).
Result<double> TimedSave(Ctx& c, AsyncSaver& saver, int iteration) {
  CKPT_RETURN_IF_ERROR(c.comm.Barrier(kTimeout, Phase::kBench));
  SaveOptions o = c.opts;
  o.iteration = iteration;
  const auto t0 = Clock::now();
  CKPT_ASSIGN_OR_RETURN(AsyncStartStats st, saver.Start(c.sd, o));
  const double blocking = Since(t0);
  CKPT_RETURN_IF_ERROR(saver.Wait().status());
  return blocking;
}

Result<double> TimedCopy(Comm& comm, std::byte* dst, const std::byte* src, size_t n) {
  CKPT_RETURN_IF_ERROR(comm.Barrier(kTimeout, Phase::kBench));
  const auto t0 = Clock::now();
  std::memcpy(dst, src, n);
  return Since(t0);
}

// This rank's figures: rounds of (save, same-moment memcpy), first save vs
// first-touch memcpy, reserved first save, back-to-back (hot) memcpys.
// The state's bytes, contiguous: the source of the baseline memcpys.
std::vector<std::byte> ContiguousBytes(const ShardedStateDict& sd) {
  std::vector<std::byte> out(size_t(sd.TotalBytes()));
  size_t off = 0;
  for (const TensorEntry& t : sd.tensors()) {
    std::memcpy(out.data() + off, t.data.data(), t.data.size());
    off += t.data.size();
  }
  return out;
}

Result<json> MeasureRank(Ctx& c, Comm& saver_comm, int rounds, const std::vector<std::byte>& src) {
  const size_t n = src.size();
  json r = {{"bytes", n}};
  CKPT_RETURN_IF_ERROR(c.comm.Barrier(kTimeout, Phase::kBench));
  r["first_touch_memcpy_s"] = FirstTouchMemcpy(src.data(), n);
  Buf base{HostSnapshotMemory()};
  CKPT_ASSIGN_OR_RETURN(base.p, base.mem->Allocate(n));
  base.n = n;
  AsyncSaver saver(&saver_comm);
  std::vector<double> block, copy;
  const auto loop0 = Clock::now();
  for (int it = 1; it <= rounds; ++it) {
    // Fixed order (copy, then save): each buffer is written once per round,
    // so both are idle for the same time (alternating the order would put two
    // copies back to back every other round).
    CKPT_ASSIGN_OR_RETURN(double m, TimedCopy(c.comm, base.p, src.data(), n));
    CKPT_ASSIGN_OR_RETURN(double b, TimedSave(c, saver, it));
    if (it == 1) {
      r["first_blocking_s"] = b;
      continue;  // the first round's memcpy went into a buffer populated just before
    }
    block.push_back(b);
    copy.push_back(m);
  }
  r["round_s"] = Since(loop0) / rounds;
  r["blocking_s"] = Median(block);
  r["memcpy_same_moment_s"] = Median(copy);
  r["rounds"] = {{"blocking_s", block}, {"memcpy_s", copy}};
  // Hot: back to back, as the earlier baselines were taken.
  std::vector<double> hot;
  for (int i = 0; i < 5; ++i) {
    CKPT_ASSIGN_OR_RETURN(double m, TimedCopy(c.comm, base.p, src.data(), n));
    hot.push_back(m);
  }
  r["memcpy_hot_s"] = Median(hot);
  return r;
}

// Savers that reserve their arena at set-up, each saving for the first time
// one round later; several trials, because one sample of a copy after idle
// varies 3-5x on this VM (see the top of this file). Beside each first save, a
// memcpy of the same bytes into memory mapped at the same moment as the arena
// and idle as long (the same-moment comparator of the steady rounds).
Result<json> ReservedFirstSaves(Ctx& c, Comm& saver_comm, double round_gap_s, int trials,
                                const std::vector<std::byte>& src) {
  const size_t n = src.size();
  std::vector<double> first, copy;
  for (int t = 0; t < trials; ++t) {
    AsyncSaver saver(&saver_comm);
    CKPT_RETURN_IF_ERROR(saver.Reserve(AsyncSaver::ArenaBytes(c.sd)));
    Buf base{HostSnapshotMemory()};
    CKPT_ASSIGN_OR_RETURN(base.p, base.mem->Allocate(n));
    base.n = n;
    std::this_thread::sleep_for(std::chrono::duration<double>(round_gap_s));
    CKPT_ASSIGN_OR_RETURN(double m, TimedCopy(c.comm, base.p, src.data(), n));
    CKPT_ASSIGN_OR_RETURN(double b, TimedSave(c, saver, 100 + t));
    first.push_back(b);
    copy.push_back(m);
  }
  return json{{"reserved_first_s", Median(first)},
              {"reserved_memcpy_s", Median(copy)},
              {"reserved_rounds", {{"blocking_s", first}, {"memcpy_s", copy}}}};
}

// Rank 0 prints the worst rank (highest steady blocking / same-moment memcpy).
void PrintWorst(const std::vector<json>& all, const std::string& layout) {
  size_t w = 0;
  auto ratio = [](const json& j) { return j["blocking_s"].get<double>() / j["memcpy_same_moment_s"].get<double>(); };
  for (size_t i = 1; i < all.size(); ++i)
    if (ratio(all[i]) > ratio(all[w])) w = i;
  const json& j = all[w];
  const double steady = j["blocking_s"];
  std::printf("%s\n", json{{"op", "async"}, {"layout", layout}, {"rank", w}, {"rank_bytes", j["bytes"]},
                            {"blocking_s", steady}, {"memcpy_contig_s", j["memcpy_same_moment_s"]},
                            {"blocking_over_contig", ratio(j)}, {"memcpy_hot_s", j["memcpy_hot_s"]},
                            {"first_blocking_s", j["first_blocking_s"]},
                            {"first_touch_memcpy_s", j["first_touch_memcpy_s"]},
                            {"first_over_steady", j["first_blocking_s"].get<double>() / steady},
                            {"reserved_first_blocking_s", j["reserved_first_s"]},
                            {"reserved_first_over_steady", j["reserved_first_s"].get<double>() / steady},
                            {"reserved_memcpy_s", j["reserved_memcpy_s"]},
                            {"reserved_rounds", j["reserved_rounds"]},
                            {"round_s", j["round_s"]}, {"rounds", j["rounds"]}}
                          .dump()
                          .c_str());
}

Result<ShardedStateDict> RankState(const std::string& model_name, const ParallelConfig& pc, int rank, const std::string& root,
                                   std::unique_ptr<workload::GptLocalState>* keep, SaveOptions* opts) {
  std::string preset;
  CKPT_ASSIGN_OR_RETURN(reshard::GptConfig model, workload::ResolveModel(model_name, root, -1, &preset));
  CKPT_ASSIGN_OR_RETURN(auto coords, CoordsOf(pc, rank));
  CKPT_ASSIGN_OR_RETURN(auto shards, reshard::GptShards(model, pc, coords));
  CKPT_ASSIGN_OR_RETURN(workload::GptLocalState state, workload::GptLocalState::Create(std::move(shards)));
  CKPT_RETURN_IF_ERROR(state.FillExpected(model.vocab_size));
  *keep = std::make_unique<workload::GptLocalState>(std::move(state));
  opts->root = root;
  opts->layout = reshard::LayoutToJson(pc);
  opts->metadata = {{"model", reshard::GptModelMetadata(model, model_name)}};
  return (*keep)->StateDict();
}

Status RunAsync(const std::string& model_name, const std::string& layout, const std::string& root, int rounds) {
  CKPT_ASSIGN_OR_RETURN(auto session, MpiSession::Init(nullptr, nullptr));
  CKPT_ASSIGN_OR_RETURN(auto comm, MpiComm::Create());
  CKPT_ASSIGN_OR_RETURN(auto saver_comm, MpiComm::Create());  // the background thread's own communicator
  CKPT_ASSIGN_OR_RETURN(ParallelConfig pc, ParallelConfig::Parse(layout));
  std::unique_ptr<workload::GptLocalState> state;
  SaveOptions opts;
  CKPT_ASSIGN_OR_RETURN(ShardedStateDict sd, RankState(model_name, pc, comm->rank(), root, &state, &opts));
  Ctx c{*comm, sd, opts};
  const std::vector<std::byte> src = ContiguousBytes(sd);
  CKPT_ASSIGN_OR_RETURN(json mine, MeasureRank(c, *saver_comm, rounds, src));
  CKPT_ASSIGN_OR_RETURN(json reserved, ReservedFirstSaves(c, *saver_comm, mine["round_s"].get<double>(),
                                                          std::max(3, rounds / 2), src));
  mine.update(reserved);
  CKPT_ASSIGN_OR_RETURN(auto all, workload::AllGatherJson(*comm, mine, kTimeout, Phase::kReport));
  if (comm->rank() == 0) PrintWorst(all, pc.ToString());
  return Status::Ok();
}

}  // namespace

int AsyncBlocking(const std::string& model, const std::string& layout, const std::string& root, int rounds) {
  Status st = RunAsync(model, layout, root, rounds);
  if (st.ok()) return 0;
  std::fprintf(stderr, "ckpt_bench async: %s\n", st.ToString().c_str());
  return 2;
}

}  // namespace ckpt::bench

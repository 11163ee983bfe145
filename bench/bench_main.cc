// ckpt_bench: baselines and async-save timing for bench/run.sh.
//   ckpt_bench memcpy [MiB]                       memory bandwidth (best of 5)
//   ckpt_bench async <model> <layout> <root>      under mpirun: per-rank memcpy of
//       the rank's state (tensor by tensor, and one contiguous memcpy of the
//       same byte count) vs AsyncSaver blocking time vs total save time
//   ckpt_bench sha256 [MiB]                       SHA-256 MB/s of one core, 4 MiB chunks
//   ckpt_bench codec [MiB]                        shuffle+zstd settings: ratio,
//       encode/decode MB/s, 1 thread, bf16 normal(0,0.02) (table on stderr)
//   ckpt_bench shard <MiB> <threads> <none|zstd> <dir>   ShardFileWriter MB/s
//       with <threads> encode workers (fsync included)
// Each prints JSON lines (rank 0 for async).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_modes.h"
#include "ckpt/protocol/async_save.h"
#include "ckpt/mpi/comm_mpi.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_gpt.h"
#include "ckpt/workload/gpt_local_state.h"
#include "ckpt/workload/job_setup.h"
#include "ckpt/workload/rank_report.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Memcpy(int64_t mib) {
  const size_t n = size_t(mib) << 20;
  std::vector<std::byte> a(n, std::byte{1}), b(n, std::byte{0});
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::min(best, Since(t0));
  }
  std::printf("%s\n", nlohmann::json{{"op", "memcpy"}, {"bytes", n}, {"seconds", best},
                                     {"mb_per_s", double(n) / 1e6 / best}}.dump().c_str());
  return 0;
}

// One contiguous memcpy of `src` into `dst` on every rank at once after a
// barrier, median of `reps`: the copy a snapshot into one arena could reach
// (MedianStateMemcpySeconds copies tensor by tensor).
ckpt::Result<double> ContiguousMemcpySeconds(const std::vector<std::byte>& src, std::vector<std::byte>& dst,
                                             ckpt::Comm& comm, int reps) {
  std::vector<double> runs;
  for (int i = 0; i < reps; ++i) {
    CKPT_RETURN_IF_ERROR(comm.Barrier(ckpt::Millis(60000), "contiguous memcpy"));
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), std::min(src.size(), dst.size()));
    runs.push_back(Since(t0));
  }
  return Median(runs);
}

int Fail(const ckpt::Status& s) {
  std::fprintf(stderr, "ckpt_bench: %s\n", s.ToString().c_str());
  return 2;
}

// The 5 async saves of `sd` (the first allocates the snapshot buffers; later
// ones reuse them), each after a barrier: blocking, snapshot and total seconds.
ckpt::Result<nlohmann::json> AsyncRuns(ckpt::AsyncSaver& saver, ckpt::Comm& comm, const ckpt::ShardedStateDict& sd,
                                       ckpt::SaveOptions o) {
  using namespace ckpt;
  nlohmann::json rows = nlohmann::json::array();
  for (int it = 1; it <= 5; ++it) {
    o.iteration = it;
    CKPT_RETURN_IF_ERROR(comm.Barrier(Millis(60000), "bench"));
    auto t0 = Clock::now();
    CKPT_ASSIGN_OR_RETURN(AsyncStartStats started, saver.Start(sd, o));
    const double blocking = Since(t0);
    CKPT_RETURN_IF_ERROR(saver.Wait().status());
    rows.push_back({{"iteration", it}, {"blocking_s", blocking}, {"snapshot_s", started.snapshot_seconds},
                    {"total_s", Since(t0)}});
  }
  return rows;
}

// Rank 0: the worst rank decides; steady state = the median of runs 2..5 (buffers reused).
void PrintWorstAsync(const std::vector<nlohmann::json>& all, const std::string& layout) {
  double worst_ratio = 0, worst_block = 0, worst_total = 0, worst_memcpy = 0, worst_memcpy_after = 0, worst_contig = 0;
  int64_t bytes = 0;
  for (const auto& j : all) {
    std::vector<double> block, total;
    for (size_t r = 1; r < j["runs"].size(); ++r) {
      block.push_back(j["runs"][r]["blocking_s"]);
      total.push_back(j["runs"][r]["total_s"]);
    }
    double ratio = Median(block) / j["memcpy_s"].get<double>();
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst_block = Median(block);
      worst_total = Median(total);
      worst_memcpy = j["memcpy_s"];
      worst_memcpy_after = j["memcpy_after_s"];
      worst_contig = j["memcpy_contig_s"];
      bytes = j["bytes"];
    }
  }
  std::printf("%s\n", nlohmann::json{{"op", "async"}, {"layout", layout}, {"rank_bytes", bytes},
                                     {"memcpy_s", worst_memcpy}, {"memcpy_after_s", worst_memcpy_after},
                                     {"memcpy_contig_s", worst_contig},
                                     {"blocking_over_contig", worst_block / worst_contig},
                                     {"blocking_s", worst_block},
                                     {"total_s", worst_total}, {"blocking_over_memcpy", worst_ratio},
                                     {"blocking_over_total", worst_block / worst_total},
                                     {"first_run", all[0]["runs"][0]}}
                          .dump()
                          .c_str());
}

int Async(const std::string& model_name, const std::string& layout, const std::string& root) {
  using namespace ckpt;
  auto session = MpiSession::Init(nullptr, nullptr);
  if (!session.ok()) return Fail(session.status());
  auto comm = MpiComm::Create();
  auto saver_comm = MpiComm::Create();  // the background thread's own communicator
  auto pc = ParallelConfig::Parse(layout);
  std::string preset;
  auto model = workload::ResolveModel(model_name, root, -1, &preset);  // "demo:num_layers=2" as the CLI takes it
  if (!comm.ok() || !saver_comm.ok() || !pc.ok() || !model.ok()) return Fail(Status::InvalidArgument("bad setup"));
  auto coords = CoordsOf(*pc, (*comm)->rank());
  auto shards = reshard::GptShards(*model, *pc, *coords);
  if (!shards.ok()) return Fail(shards.status());
  auto state = workload::GptLocalState::Create(std::move(shards).value());
  if (!state.ok()) return Fail(state.status());
  if (Status st = state->FillExpected(model->vocab_size); !st.ok()) return Fail(st);
  ShardedStateDict sd = state->StateDict();

  // Baseline: one memcpy of the rank's whole state into a second buffer (warm,
  // median of 5), every rank at once after a barrier - as the snapshots run,
  // so both share the machine's memory bandwidth the same way.
  std::vector<std::byte> copy(size_t(sd.TotalBytes()));
  auto measure_memcpy = [&] { return MedianStateMemcpySeconds(sd, copy, 5, comm->get()); };
  auto memcpy_before = measure_memcpy();
  if (!memcpy_before.ok()) return Fail(memcpy_before.status());
  const double memcpy_s = *memcpy_before;
  double contig_s = 0;
  {
    const std::vector<std::byte> src(copy.size(), std::byte{1});
    auto contig = ContiguousMemcpySeconds(src, copy, **comm, 5);
    if (!contig.ok()) return Fail(contig.status());
    contig_s = *contig;
  }
  AsyncSaver saver(saver_comm->get());
  SaveOptions o;
  o.root = root;
  o.layout = reshard::LayoutToJson(*pc);
  o.metadata = {{"model", model_name}, {"gpt", reshard::GptConfigToJson(*model)}};
  auto rows = AsyncRuns(saver, **comm, sd, o);
  if (!rows.ok()) return Fail(rows.status());
  // The same baseline after the saves: a machine whose page cache now holds
  // the written files may copy slower than before them.
  auto memcpy_after = measure_memcpy();
  if (!memcpy_after.ok()) return Fail(memcpy_after.status());
  nlohmann::json mine = {{"bytes", sd.TotalBytes()}, {"memcpy_s", memcpy_s}, {"memcpy_after_s", *memcpy_after},
                         {"memcpy_contig_s", contig_s}, {"runs", *rows}};
  auto all = workload::AllGatherJson(**comm, mine, Millis(60000), "report");
  if (!all.ok()) return Fail(all.status());
  if ((*comm)->rank() == 0) PrintWorstAsync(*all, pc->ToString());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "memcpy") return Memcpy(argc > 2 ? std::stoll(argv[2]) : 1024);
  if (mode == "async" && argc == 5) return Async(argv[2], argv[3], argv[4]);
  if (mode == "sha256") return ckpt::bench::Sha256Rate(argc > 2 ? std::stoll(argv[2]) : 256);
  if (mode == "codec") return ckpt::bench::CodecTable(argc > 2 ? std::stoll(argv[2]) : 256);
  if (mode == "shard" && argc == 6) return ckpt::bench::ShardWrite(std::stoll(argv[2]), std::stoi(argv[3]), argv[4], argv[5]);
  std::fprintf(stderr,
               "usage: ckpt_bench memcpy [MiB] | async <model> <layout> <root> | codec [MiB] | sha256 [MiB] |\n"
               "       shard <MiB> <threads> <none|zstd> <dir>\n");
  return 2;
}

// ckpt_fuzz: a seeded, time-bounded mutation fuzzer over the untrusted inputs
// of a checkpoint (issue 16 item 2): manifests (re-hashed after mutation, so
// the body parser and ValidateManifest see them, not only the self-hash
// check), tracker files and HDF5 shard files, each fed to the real readers
// (ParseManifest, VerifyCheckpoint, LoadCheckpoint with hashes on and off,
// ReadTracker / LatestIteration, ShardFileReader).
//
// Usage: ckpt_fuzz --work DIR [--seconds N] [--seed S] [--seeds DIR] [--corpus DIR]
//                  [--crashes DIR] [--max-rss-mb M] [--hang-seconds H] [--verbose 1]
// Every seed file (--seeds, --corpus) is first replayed verbatim down every path;
// then mutated inputs run until --seconds have passed since the start.
// --seeds: read-only seed inputs (files named *.json are manifests, *.tracker
// trackers, *.h5 shard files; tests/fuzz/corpus holds the hostile-manifest
// corpus and crash inputs); --corpus: read too, and where new interesting
// inputs are written.
// A crash (signal, sanitizer report) writes the input to --crashes before the
// process dies; an execution longer than --hang-seconds is written as a hang
// and aborts. Exit 0 iff no crash, no hang and peak RSS <= --max-rss-mb.
// Interesting = an outcome (input kind, status code, message shape) not seen
// before. Single-threaded (plus the watchdog thread).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/base/clock.h"
#include "ckpt/base/sha256.h"
#include "ckpt/format/file_meta_hash.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/verify.h"
#include "harness/state_util.h"

namespace fs = std::filesystem;
using ckpt::testing::Desc;

namespace {

enum Kind { kManifest, kTracker, kShard, kKinds };
const char* kKindName[] = {"manifest", "tracker", "shard"};
const char* kKindExt[] = {".json", ".tracker", ".h5"};

// The input under execution, for the crash handler (async-signal-safe write).
std::string g_crash_dir;
const std::string* g_current = nullptr;
int g_current_kind = 0;
std::atomic<int64_t> g_exec_started_ms{0};

void WriteCurrent(const char* tag) {
  if (!g_current || g_crash_dir.empty()) return;
  char path[4096];
  std::snprintf(path, sizeof path, "%s/%s-%s-%d%s", g_crash_dir.c_str(), tag, kKindName[g_current_kind], int(getpid()),
                kKindExt[g_current_kind]);
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  ssize_t n = ::write(fd, g_current->data(), g_current->size());
  (void)n;
  ::close(fd);
  const char msg[] = "ckpt_fuzz: crash input written to --crashes\n";
  n = ::write(2, msg, sizeof msg - 1);
}

void OnCrash(int sig) {
  WriteCurrent("crash");
  signal(sig, SIG_DFL);
  raise(sig);
}

extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));
void OnSanitizerDeath() { WriteCurrent("crash"); }

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(s.data(), std::streamsize(s.size()));
}

// ---- the checkpoint the inputs are fed against ----
struct Fixture {
  std::string root;
  std::vector<std::pair<ckpt::ShardedTensor, bool>> tensors;  // descriptors a load requests
  std::map<int64_t, ckpt::Manifest> manifests;  // the fixture's own, by iteration (read once)
};

void AddState(ckpt::testing::OwnedState& s, bool fill) {
  using ckpt::DType;
  s.Add(Desc("w", DType::kFloat32, {64, 33}, {0, 0}, {64, 33}), fill);
  s.Add(Desc("b", DType::kBFloat16, {1000}, {0}, {1000}), fill);
  s.Add(Desc("t.0", DType::kFloat32, {16, 8}, {0, 0}, {8, 8}), fill);
  s.Add(Desc("t.0", DType::kFloat32, {16, 8}, {8, 0}, {8, 8}), fill);
  s.Add(Desc("flat", DType::kFloat32, {40, 10}, {0, 0}, {40, 10}, {}, ckpt::FlatRange{0, 150}), fill);
  s.Add(Desc("flat", DType::kFloat32, {40, 10}, {0, 0}, {40, 10}, {}, ckpt::FlatRange{150, 400}), fill);
  s.Add(Desc("scalar", DType::kInt64, {}, {}, {}), fill);
  s.AddObject({"rng", {2}, {0}, {}}, fill ? "rng-state-0" : "");
  s.AddObject({"rng", {2}, {1}, {}}, fill ? "rng-state-1" : "");
}

ckpt::Status MakeFixture(const std::string& root) {
  fs::remove_all(root);
  for (int it = 1; it <= 2; ++it) {
    ckpt::testing::OwnedState s;
    AddState(s, true);
    ckpt::SaveOptions o;
    o.root = root;
    o.iteration = it;
    o.write.chunk_bytes = 512;  // several chunks per tensor
    o.write.codec.compression = it == 2 ? ckpt::Compression::kZstd : ckpt::Compression::kNone;
    o.metadata = {{"model", "fuzz"}};
    auto r = ckpt::SaveCheckpoint(s.dict(), o);
    if (!r.ok()) return r.status();
  }
  return ckpt::Status::Ok();
}

// ---- mutations ----
class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}
  uint64_t Next(uint64_t n) { return n ? std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_) : 0; }

  std::string Mutate(std::string s, Kind kind) {
    const int rounds = 1 + int(Next(4));
    for (int i = 0; i < rounds; ++i) {
      switch (Next(kind == kManifest ? 9 : 6)) {
        case 0: if (!s.empty()) s[Next(s.size())] ^= char(1 << Next(8)); break;
        case 1: if (!s.empty()) s[Next(s.size())] = char(Next(256)); break;
        case 2: if (!s.empty()) { size_t a = Next(s.size()); s.erase(a, Next(std::min<size_t>(64, s.size() - a) + 1)); } break;
        case 3: if (!s.empty()) { size_t a = Next(s.size()), n = Next(std::min<size_t>(64, s.size() - a) + 1); s.insert(Next(s.size()), s.substr(a, n)); } break;
        case 4: s.resize(Next(s.size() + 1)); break;
        case 5: if (!s.empty()) { size_t a = Next(s.size()); s.insert(a, Interesting()); } break;
        case 6: case 7: s = ReplaceNumber(s); break;
        case 8: s = Nest(s); break;
      }
    }
    return s;
  }

 private:
  std::string Interesting() {
    static const char* kValues[] = {"0", "-1", "1", "2147483648", "4294967296", "9223372036854775807",
                                    "18446744073709551615", "-9223372036854775808", "1e308", "17179869184",
                                    "1099511627776", "\"\"", "null", "[]", "{}", "\"../x\"", "true", "65.5"};
    return kValues[Next(sizeof kValues / sizeof *kValues)];
  }
  // Replaces one JSON number token with an interesting value.
  std::string ReplaceNumber(const std::string& s) {
    std::vector<size_t> starts;
    for (size_t i = 0; i < s.size(); ++i)
      if ((s[i] >= '0' && s[i] <= '9') && (i == 0 || !(std::isalnum(static_cast<unsigned char>(s[i - 1])) || s[i - 1] == '_' || s[i - 1] == '.')))
        starts.push_back(i);
    if (starts.empty()) return s;
    size_t a = starts[Next(starts.size())], b = a;
    while (b < s.size() && ((s[b] >= '0' && s[b] <= '9') || s[b] == '-' || s[b] == 'e' || s[b] == '.')) ++b;
    return s.substr(0, a) + Interesting() + s.substr(b);
  }
  std::string Nest(const std::string& s) {
    const size_t pos = s.find("\"metadata\":");
    if (pos == std::string::npos) return s;
    const size_t depth = 1 + Next(2000);
    return s.substr(0, pos) + "\"deep\":" + std::string(depth, '[') + std::string(depth, ']') + "," + s.substr(pos);
  }
  std::mt19937_64 rng_;
};

std::string Rehash(const std::string& manifest) {
  const size_t nl = manifest.find('\n');
  const std::string body = nl == std::string::npos ? manifest : manifest.substr(nl + 1);
  return "{\"manifest_sha256\":\"" + ckpt::Sha256Hex(body) + "\",\n" + body;
}

// ---- executions: the outcome's signature ----
std::string Signature(int kind, const ckpt::Status& st) {
  std::string m = st.message();
  std::string shape;
  for (char c : m) {
    if (shape.size() >= 48) break;
    if (c >= '0' && c <= '9') { if (shape.empty() || shape.back() != '#') shape += '#'; }
    else if (c == '\'') break;
    else shape += c;
  }
  return std::string(kKindName[kind]) + ":" + std::string(ckpt::CodeName(st.code())) + ":" + shape;
}

ckpt::Status LoadAll(const std::string& root, int64_t iteration, bool verify_hashes) {
  ckpt::testing::OwnedState s;
  AddState(s, false);
  ckpt::LoadOptions o;
  o.root = root;
  o.iteration = iteration;
  o.verify_hashes = verify_hashes;
  o.threads = 1;
  auto r = ckpt::LoadCheckpoint(s.dict(), o);
  return r.ok() ? ckpt::Status::Ok() : r.status();
}

// Which paths one execution takes: drawn by the mutator in the fuzz loop, all
// of them in turn when a seed is replayed verbatim.
struct Choice {
  int64_t it = 1;              // the fixture iteration the input replaces a file of
  bool verify_hashes = true;   // LoadAll with or without chunk hashes
  int64_t chunk = -1;          // ShardFileReader: which chunk to read, -1 = all
};

std::string RunOne(const Fixture& fx, const std::string& scratch, int kind, const std::string& input, const Choice& c) {
  ckpt::Env* env = ckpt::DefaultEnv();
  const int64_t it = c.it;
  const std::string dir = ckpt::JoinPath(scratch, ckpt::IterDirName(it));
  ckpt::Status st;
  if (kind == kManifest) {
    WriteAll(fs::path(dir) / ckpt::kManifestName, input);
    auto parsed = ckpt::ParseManifest(input, "fuzz");
    st = parsed.status();
    if (parsed.ok() && parsed->iteration == it) {
      ckpt::VerifyOptions vo;
      vo.iteration = it;
      auto v = ckpt::VerifyCheckpoint(env, scratch, vo);
      ckpt::Status lst = LoadAll(scratch, it, c.verify_hashes);
      st = !v.ok() ? v.status() : lst;
    }
    WriteAll(fs::path(dir) / ckpt::kManifestName, ReadAll(fs::path(fx.root) / ckpt::IterDirName(it) / ckpt::kManifestName));
  } else if (kind == kTracker) {
    WriteAll(fs::path(scratch) / ckpt::kTrackerName, input);
    auto t = ckpt::ReadTracker(env, scratch);
    auto latest = ckpt::LatestIteration(env, scratch);
    st = t.ok() ? latest.status() : t.status();
    if (st.ok()) st = LoadAll(scratch, -1, true);
  } else {
    const fs::path file = fs::path(dir) / ckpt::ShardFileName(0);
    WriteAll(file, input);
    ckpt::VerifyOptions vo;
    vo.iteration = it;
    auto v = ckpt::VerifyCheckpoint(env, scratch, vo);
    st = v.ok() ? (v->ok() ? ckpt::Status::Ok() : ckpt::Status::Corruption(v->issues[0].problem)) : v.status();
    ckpt::Status lst = LoadAll(scratch, it, c.verify_hashes);
    if (st.ok()) st = lst;
    // Like `verify`, hand HDF5 only metadata the writer produced (format v2's
    // meta_sha256): libhdf5 does not bound its loops over damaged metadata
    // (known_hangs/README.md). Mutations inside chunk bytes still reach it.
    const ckpt::Manifest& man = fx.manifests.at(it);
    bool authentic = man.files.size() == 1 && input.size() == man.files[0].size;
    if (authentic) {
      auto meta = ckpt::HashOutsideChunks(env, file.string(), input.size(), ckpt::ChunkRangesOfFile(man, 0));
      authentic = meta.ok() && *meta == man.files[0].meta_sha256;
    }
    // Open only then: Open() itself is where libhdf5 parses the superblock
    // and root group (an init-statement would run it for every input).
    auto r = authentic ? ckpt::ShardFileReader::Open(env, file.string()) : ckpt::Status::Corruption("not authentic");
    if (r.ok()) {
      if (auto l = (*r)->List(); l.ok())
        for (const auto& d : *l) {
          const int64_t n = int64_t(d.record.chunks.size());
          for (int64_t k = 0; k <= n; ++k)  // k == n: one past the end
            if (c.chunk < 0 || k == c.chunk % (n + 1)) (*r)->ReadChunk(d.dataset, k).status().IgnoreError();
        }
    }
    fs::copy_file(fs::path(fx.root) / ckpt::IterDirName(it) / ckpt::ShardFileName(0), file,
                  fs::copy_options::overwrite_existing);
  }
  return Signature(kind, st);
}

struct Args {
  std::string work, seeds, corpus, crashes;
  double seconds = 60;
  uint64_t seed = 1;
  int64_t max_rss_mb = 1024;
  double hang_seconds = 20;
  bool verbose = false;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--work") a.work = v;
    else if (k == "--seconds") a.seconds = std::stod(v);
    else if (k == "--seed") a.seed = std::stoull(v);
    else if (k == "--corpus") a.corpus = v;
    else if (k == "--seeds") a.seeds = v;
    else if (k == "--crashes") a.crashes = v;
    else if (k == "--max-rss-mb") a.max_rss_mb = std::stoll(v);
    else if (k == "--hang-seconds") a.hang_seconds = std::stod(v);
    else if (k == "--verbose") a.verbose = v == "1";
    else { std::fprintf(stderr, "ckpt_fuzz: unknown option %s\n", k.c_str()); return 2; }
  }
  if (a.work.empty()) { std::fprintf(stderr, "usage: ckpt_fuzz --work DIR [--seconds N] [--seed S] [--corpus DIR] [--crashes DIR]\n"); return 2; }
  g_crash_dir = a.crashes.empty() ? a.work + "/crashes" : a.crashes;
  fs::create_directories(g_crash_dir);
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) signal(sig, OnCrash);
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(OnSanitizerDeath);

  Fixture fx;
  fx.root = a.work + "/fixture";
  if (auto st = MakeFixture(fx.root); !st.ok()) { std::fprintf(stderr, "ckpt_fuzz: fixture: %s\n", st.ToString().c_str()); return 2; }
  for (int64_t it = 1; it <= 2; ++it) {
    auto m = ckpt::ParseManifest(ReadAll(fs::path(fx.root) / ckpt::IterDirName(it) / ckpt::kManifestName), "fixture");
    if (!m.ok()) { std::fprintf(stderr, "ckpt_fuzz: fixture manifest: %s\n", m.status().ToString().c_str()); return 2; }
    fx.manifests[it] = std::move(m).value();
  }
  const std::string scratch = a.work + "/scratch";
  fs::remove_all(scratch);
  fs::copy(fx.root, scratch, fs::copy_options::recursive);

  std::vector<std::string> corpus[kKinds];
  for (int it = 1; it <= 2; ++it) {
    corpus[kManifest].push_back(ReadAll(fs::path(fx.root) / ckpt::IterDirName(it) / ckpt::kManifestName));
    corpus[kShard].push_back(ReadAll(fs::path(fx.root) / ckpt::IterDirName(it) / ckpt::ShardFileName(0)));
  }
  corpus[kTracker] = {"2\n", "1", " 2 \r\n", "", "99999999999999999999\n"};
  size_t seeds_loaded = 0;
  std::vector<std::pair<int, fs::path>> seed_files;
  for (const std::string& dir : {a.seeds, a.corpus})
    if (!dir.empty() && fs::is_directory(dir))
      for (const auto& e : fs::directory_iterator(dir))
        for (int k = 0; k < kKinds; ++k)
          if (e.path().extension() == kKindExt[k]) {
            corpus[k].push_back(ReadAll(e.path()));
            seed_files.emplace_back(k, e.path());
            ++seeds_loaded;
          }
  std::sort(seed_files.begin(), seed_files.end());

  std::thread watchdog([&] {
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const int64_t t = g_exec_started_ms.load();
      if (t < 0) return;
      if (t > 0 && NowMs() - t > int64_t(a.hang_seconds * 1000)) {
        WriteCurrent("hang");
        std::fprintf(stderr, "ckpt_fuzz: an execution ran longer than %.0f s: hang\n", a.hang_seconds);
        std::_Exit(3);
      }
    }
  });

  std::set<std::string> seen;
  int64_t execs = 0, per_kind[kKinds] = {0, 0, 0};
  const auto t0 = std::chrono::steady_clock::now();
  // Every seed verbatim first, down every path (both iterations, hashes on and
  // off, every chunk): checked-in crash and hang inputs are regression tests.
  for (const auto& [kind, file] : seed_files) {
    const std::string input = ReadAll(file);
    for (int64_t it = 1; it <= 2; ++it)
      for (bool hashes : {true, false}) {
        std::fprintf(stderr, "%s", a.verbose ? ("replay " + file.string() + "\n").c_str() : "");
        g_current = &input;
        g_current_kind = kind;
        g_exec_started_ms = NowMs();
        seen.insert(RunOne(fx, scratch, kind, input, Choice{it, hashes, -1}));
        g_exec_started_ms = 0;
        g_current = nullptr;
        ++execs;
        ++per_kind[kind];
      }
  }
  const int64_t replayed = execs;

  Mutator m(a.seed);
  std::vector<std::pair<int, std::string>> fresh;
  while (ckpt::Since(t0) < a.seconds) {
    const uint64_t r = m.Next(10);
    const int kind = r < 7 ? kManifest : r < 8 ? kTracker : kShard;
    std::string input = m.Mutate(corpus[kind][m.Next(corpus[kind].size())], Kind(kind));
    if (kind == kManifest && m.Next(10) != 0) input = Rehash(input);
    g_current = &input;
    g_current_kind = kind;
    g_exec_started_ms = NowMs();
    const Choice choice{1 + int64_t(m.Next(2)), m.Next(2) == 0, int64_t(m.Next(1 << 20))};
    const std::string sig = RunOne(fx, scratch, kind, input, choice);
    g_exec_started_ms = 0;
    g_current = nullptr;
    ++execs;
    ++per_kind[kind];
    if (seen.insert(sig).second && input.size() < (1 << 20)) {
      corpus[kind].push_back(input);
      fresh.emplace_back(kind, input);
    }
  }
  g_exec_started_ms = -1;
  watchdog.join();
  const double secs = ckpt::Since(t0);
  if (!a.corpus.empty()) {
    fs::create_directories(a.corpus);
    int n = 0;
    for (const auto& [kind, input] : fresh)
      WriteAll(fs::path(a.corpus) / ("found-" + std::to_string(a.seed) + "-" + std::to_string(n++) + kKindExt[kind]), input);
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const int64_t rss_mb = ru.ru_maxrss / 1024;
  std::printf("ckpt_fuzz: seed %llu, %lld executions in %.1f s (%.0f/s; manifests %lld, trackers %lld, shard files %lld), "
              "corpus %zu inputs (%zu seeds loaded and replayed verbatim in %lld executions, %zu new outcomes), crashes 0, hangs 0, peak RSS %lld MB\n",
              static_cast<unsigned long long>(a.seed), static_cast<long long>(execs), secs, execs / secs,
              static_cast<long long>(per_kind[0]), static_cast<long long>(per_kind[1]),
              static_cast<long long>(per_kind[2]), corpus[0].size() + corpus[1].size() + corpus[2].size(),
              seeds_loaded, static_cast<long long>(replayed), fresh.size(), static_cast<long long>(rss_mb));
  // LeakSanitizer checks at exit and ends the process with _exit on a leak:
  // flush so the summary is not lost with the stdio buffer.
  std::fflush(stdout);
  if (rss_mb > a.max_rss_mb) {
    std::fprintf(stderr, "ckpt_fuzz: peak RSS %lld MB exceeds --max-rss-mb %lld\n", static_cast<long long>(rss_mb),
                 static_cast<long long>(a.max_rss_mb));
    return 1;
  }
  return 0;
}

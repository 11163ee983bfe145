// ckpt scenario: the Level 8 question bank's evidence (seeds/level8/M1xx.md).
//
//   ckpt scenario list [--json]
//   ckpt scenario run <id>... | --all  [--out DIR] [--reduced] [--json]
//
// A scenario is the script scripts/scenarios/<id>.sh (id = M followed by three
// digits). The runner is deliberately thin: it runs `bash <script>` in its own
// process group with a wall-clock limit and this environment
//   CKPT         absolute path of this ckpt binary
//   MPIRUN       the mpirun prefix before "-np N" (--mpirun, else $MPIRUN, else
//                mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader)
//   SCRATCH      an empty scratch directory of its own (removed afterwards unless --keep)
//   REDUCED      1 under --reduced (CI size), else 0
//   SCENARIO_ID  the id; SCENARIO_LIB  scripts/scenarios/lib.sh; PYTHON  /usr/bin/python3
// and takes the last non-empty stdout line as the evidence object
//   {"id", "title", "setup", "numbers": {...}, "verdict": "PASS"|"FAIL", "claim",
//    "negative_control": {"what", "numbers": {...}, "shows_failure": bool},
//    optional "headline", "checks": [{"name", "ok"}], "negative_control.headline",
//    "gaps": [text] - measured shortfalls reported but not judged}.
// A scenario passes iff the script exits 0 within the limit, the object is well
// formed and names the same id, verdict is PASS, no check is false, and the
// negative control still shows the failure (shows_failure true). Headline, claim
// and "what" texts may cite measured values as {name} / {name:.2f} (numbers) or
// {nc.name} (negative-control numbers); the runner substitutes them, so every
// figure in evidence.md comes from the evidence of this run.
//
// With --out (always with --all; default ./scenario-evidence) the runner writes
// DIR/evidence.md (the seed's table: 实验 | 核心数字 | 可支持的回答, plus the
// negative controls), DIR/evidence.json (every evidence object, the runner's
// verdict and problems, wall seconds) and DIR/logs/<id>.{out,err}.
// Exit: 0 every scenario passed; 1 some scenario failed or its negative control
// stopped showing the failure; 2 usage error (unknown id, no scripts dir).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/base/status.h"
#include "cli/commands.h"

namespace ckpt::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kDefaultMpirun =
    "mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader";

struct ScenarioFlags {
  std::vector<std::string> ids;
  bool all = false, reduced = false, json = false, keep = false;
  std::string out, scripts, mpirun;
  double timeout_s = 180;  // hard kill
  double budget_s = 60;    // the issue's per-scenario limit on 2 cores
};

struct Scenario {
  std::string id, title, question;
  fs::path script;
};

struct Outcome {
  Scenario sc;
  json evidence;  // null if none was produced
  std::vector<std::string> problems;
  double seconds = 0;
  int exit_code = -1;
  bool passed() const { return problems.empty(); }
};

std::string SelfExe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

bool IsScenarioDir(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p / "lib.sh", ec);
}

// The scripts directory: --scripts, $CKPT_SCENARIO_DIR, the source tree this
// file was compiled from, or next to the binary (build dir inside the tree,
// the source dir recorded in the build's CMakeCache.txt, an install prefix).
Result<fs::path> FindScriptsDir(const std::string& flag) {
  std::vector<fs::path> tried;
  auto consider = [&](const fs::path& p) {
    tried.push_back(p);
    return IsScenarioDir(p);
  };
  if (!flag.empty()) {
    if (consider(flag)) return fs::absolute(flag);
    return Status::NotFound("--scripts '" + flag + "' has no lib.sh");
  }
  if (const char* env = std::getenv("CKPT_SCENARIO_DIR"); env && *env && consider(env)) return fs::absolute(env);
#ifdef CKPT_SOURCE_DIR
  if (consider(fs::path(CKPT_SOURCE_DIR) / "scripts/scenarios")) return fs::path(CKPT_SOURCE_DIR) / "scripts/scenarios";
#endif
  const fs::path here = fs::path(__FILE__).parent_path().parent_path() / "scripts/scenarios";
  if (here.is_absolute() && consider(here)) return here;
  const fs::path exe_dir = fs::path(SelfExe()).parent_path();
  for (fs::path up = exe_dir; !up.empty() && up != up.root_path(); up = up.parent_path()) {
    if (consider(up / "scripts/scenarios")) return up / "scripts/scenarios";
    if (consider(up / "share/ckpt/scenarios")) return up / "share/ckpt/scenarios";
    std::ifstream cache(up / "CMakeCache.txt");
    for (std::string line; cache && std::getline(cache, line);) {
      const std::string key = "ckpt_SOURCE_DIR:STATIC=";
      if (line.rfind(key, 0) == 0 && consider(fs::path(line.substr(key.size())) / "scripts/scenarios"))
        return fs::path(line.substr(key.size())) / "scripts/scenarios";
    }
  }
  std::string why = "no scenario scripts directory (with lib.sh) found; tried";
  for (const auto& t : tried) why += " " + t.string();
  return Status::NotFound(why + "; pass --scripts DIR");
}

// "# title: ..." and "# question: ..." header lines of a script.
Scenario ReadHeader(const fs::path& script) {
  Scenario sc{.id = script.stem().string(), .title = "", .question = "", .script = script};
  std::ifstream in(script);
  std::string line;
  for (int n = 0; n < 30 && std::getline(in, line); ++n) {
    auto field = [&](const std::string& name, std::string* into) {
      const std::string key = "# " + name + ":";
      if (line.rfind(key, 0) == 0) {
        *into = line.substr(key.size());
        while (!into->empty() && into->front() == ' ') into->erase(0, 1);
      }
    };
    field("title", &sc.title);
    field("question", &sc.question);
  }
  return sc;
}

Result<std::vector<Scenario>> ListScenarios(const fs::path& dir) {
  static const std::regex kId("M[0-9]{3}");
  std::vector<Scenario> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file() || e.path().extension() != ".sh") continue;
    if (!std::regex_match(e.path().stem().string(), kId)) continue;
    out.push_back(ReadHeader(e.path()));
  }
  if (ec) return Status::IOError("cannot list '" + dir.string() + "': " + ec.message());
  std::sort(out.begin(), out.end(), [](const Scenario& a, const Scenario& b) { return a.id < b.id; });
  return out;
}

struct Proc {
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
  double seconds = 0;
};

// Runs `bash script` in its own process group, stdout/stderr to files; kills
// the whole group (mpirun and its ranks) past the limit.
Result<Proc> RunScript(const fs::path& script, const std::vector<std::pair<std::string, std::string>>& env,
                       const fs::path& out_path, const fs::path& err_path, double timeout_s) {
  const auto t0 = Clock::now();
  pid_t pid = fork();
  if (pid < 0) return Status::Internal("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    int o = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int n = open("/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || n < 0) _exit(127);
    dup2(n, 0);
    dup2(o, 1);
    dup2(e, 2);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    execlp("bash", "bash", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);  // also here: no race with the child's own call
  Proc r;
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0) return Status::Internal("waitpid failed");
    if (std::chrono::duration<double>(Clock::now() - t0).count() > timeout_s) {
      r.timed_out = true;
      kill(-pid, SIGTERM);
      for (int i = 0; i < 40 && waitpid(pid, &status, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(-pid, SIGKILL);  // strays of the group (a rank that outlived mpirun)
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

template <typename T>
T Or(const Result<T>& r, T fallback) {
  return r.ok() ? *r : std::move(fallback);
}

std::string ReadText(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin == std::string::npos ? 0 : begin + 1));
}

// The last `lines` lines of `text` (all of it if it has fewer).
std::string Tail(const std::string& text, size_t lines) {
  size_t pos = text.size();
  for (size_t n = 0; n <= lines; ++n) {
    if (pos == 0) return text;
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) return text;
  }
  return text.substr(pos + 1);
}

std::string WithCommas(long long v) {
  std::string s = std::to_string(v < 0 ? -v : v);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return v < 0 ? "-" + s : s;
}

// A measured value as text: integers with thousands separators (the seed's
// "84,626"), floats from 1000 up rounded the same way, smaller ones with 3
// significant digits (always a decimal point), unless `spec` is ".Nf" / ".Ne".
Result<std::string> FormatValue(const json& v, const std::string& spec) {
  char buf[64];
  if (v.is_boolean()) return std::string(v.get<bool>() ? "true" : "false");
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_number()) return Status::InvalidArgument("not a number, string or bool: " + v.dump());
  if (spec.empty()) {
    if (v.is_number_integer()) return WithCommas(v.get<long long>());
    const double d = v.get<double>();
    if (std::abs(d) >= 1000 && std::abs(d) < 1e15) return WithCommas(std::llround(d));
    std::snprintf(buf, sizeof buf, "%.3g", d);
    std::string s = buf;
    if (s.find_first_of(".e") == std::string::npos && s.find("n") == std::string::npos) s += ".0";
    return s;
  }
  static const std::regex kSpec(R"(\.([0-9])([fe]))");
  std::smatch m;
  if (!std::regex_match(spec, m, kSpec)) return Status::InvalidArgument("format spec '" + spec + "' (use .Nf or .Ne)");
  const std::string fmt = "%." + m[1].str() + m[2].str();
  std::snprintf(buf, sizeof buf, fmt.c_str(), v.get<double>());
  return std::string(buf);
}

// Replaces {name[:spec]} / {nc.name[:spec]} by values from the evidence.
Result<std::string> Substitute(const std::string& text, const json& ev) {
  static const std::regex kRef(R"(\{([A-Za-z0-9_.]+)(?::([^}]*))?\})");
  std::string out;
  auto begin = std::sregex_iterator(text.begin(), text.end(), kRef);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    out += text.substr(last, size_t(m.position(0)) - last);
    std::string name = m[1].str();
    const json* table = &ev["numbers"];
    if (name.rfind("nc.", 0) == 0) {
      table = &ev["negative_control"]["numbers"];
      name = name.substr(3);
    }
    if (!table->is_object() || !table->contains(name))
      return Status::InvalidArgument("'" + m[0].str() + "' names no measured value");
    CKPT_ASSIGN_OR_RETURN(std::string v, FormatValue((*table)[name], m[2].str()));
    out += v;
    last = size_t(m.position(0) + m.length(0));
  }
  out += text.substr(last);
  return out;
}

// Problems with an evidence object; empty when it passes.
std::vector<std::string> Judge(const std::string& id, const json& ev) {
  std::vector<std::string> p;
  if (!ev.is_object()) return {"evidence is not a JSON object"};
  for (const char* k : {"id", "title", "setup", "verdict", "claim"})
    if (!ev.contains(k) || !ev[k].is_string()) p.push_back(std::string("field '") + k + "' missing or not a string");
  if (!ev.contains("numbers") || !ev["numbers"].is_object() || ev["numbers"].empty())
    p.push_back("field 'numbers' missing or empty");
  const json nc = ev.value("negative_control", json());
  if (!nc.is_object() || !nc.contains("what") || !nc.contains("numbers") || !nc["numbers"].is_object() ||
      !nc.contains("shows_failure") || !nc["shows_failure"].is_boolean()) {
    p.push_back("negative_control must have what, numbers and a boolean shows_failure");
  } else if (!nc["shows_failure"].get<bool>()) {
    p.push_back("negative control no longer shows the failure: " + nc.value("what", std::string()));
  }
  if (!p.empty()) return p;
  if (ev["id"] != id) p.push_back("evidence names id " + ev["id"].dump());
  if (ev["verdict"] != "PASS") p.push_back("verdict " + ev["verdict"].get<std::string>());
  for (const auto& c : ev.value("checks", json::array()))
    if (c.is_object() && c.value("ok", false) == false) p.push_back("check failed: " + c.value("name", c.dump()));
  for (const char* k : {"headline", "claim"})
    if (ev.contains(k) && ev[k].is_string()) {
      auto s = Substitute(ev[k].get<std::string>(), ev);
      if (!s.ok()) p.push_back(std::string(k) + ": " + s.status().message());
    }
  return p;
}

Outcome RunOne(const Scenario& sc, const ScenarioFlags& f, const fs::path& scripts, const fs::path& out_dir,
               const std::string& mpirun) {
  Outcome o{.sc = sc, .evidence = json(), .problems = {}, .seconds = 0, .exit_code = -1};
  const fs::path scratch = out_dir / "scratch" / sc.id;
  const fs::path logs = out_dir / "logs";
  std::error_code ec;
  fs::remove_all(scratch, ec);
  fs::create_directories(scratch, ec);
  fs::create_directories(logs, ec);
  if (ec) {
    o.problems.push_back("cannot create " + scratch.string() + ": " + ec.message());
    return o;
  }
  std::vector<std::pair<std::string, std::string>> env = {
      {"CKPT", SelfExe()},
      {"MPIRUN", mpirun},
      {"SCRATCH", fs::absolute(scratch).string()},
      {"REDUCED", f.reduced ? "1" : "0"},
      {"SCENARIO_ID", sc.id},
      {"SCENARIO_LIB", (scripts / "lib.sh").string()},
      {"OMPI_ALLOW_RUN_AS_ROOT", "1"},
      {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
      {"OMPI_MCA_rmaps_base_oversubscribe", "1"}};
  if (!std::getenv("PYTHON")) env.emplace_back("PYTHON", "/usr/bin/python3");
  const fs::path out_log = logs / (sc.id + ".out"), err_log = logs / (sc.id + ".err");
  auto r = RunScript(sc.script, env, out_log, err_log, f.timeout_s);
  if (!r.ok()) {
    o.problems.push_back(r.status().ToString());
    return o;
  }
  o.seconds = r->seconds;
  o.exit_code = r->exit_code;
  const std::string out = ReadText(out_log);
  try {
    o.evidence = json::parse(LastLine(out));
  } catch (const json::exception&) {
    o.evidence = json();
  }
  if (r->timed_out) o.problems.push_back("killed after the " + std::to_string(int(f.timeout_s)) + " s limit");
  else if (r->signal) o.problems.push_back("script killed by signal " + std::to_string(r->signal));
  else if (r->exit_code != 0) o.problems.push_back("script exited " + std::to_string(r->exit_code));
  if (o.evidence.is_null()) {
    o.problems.push_back("no evidence JSON on the last stdout line");
  } else {
    for (auto& p : Judge(sc.id, o.evidence)) o.problems.push_back(std::move(p));
  }
  if (o.seconds > f.budget_s)
    o.problems.push_back("took " + std::to_string(int(o.seconds)) + " s, over the " + std::to_string(int(f.budget_s)) +
                         " s budget");
  if (!o.passed()) {
    std::fprintf(stderr, "---- %s failed; stderr tail (%s):\n%s\n", sc.id.c_str(), err_log.c_str(),
                 Tail(ReadText(err_log), 15).c_str());
  }
  if (!f.keep && o.passed()) fs::remove_all(scratch, ec);
  return o;
}

std::string Cell(std::string s) {  // one markdown table cell
  for (auto& c : s)
    if (c == '\n' || c == '|') c = c == '|' ? '/' : ' ';
  return s;
}

std::string Text(const json& ev, const char* key, const std::string& fallback = "") {
  if (!ev.is_object() || !ev.contains(key) || !ev[key].is_string()) return fallback;
  auto s = Substitute(ev[key].get<std::string>(), ev);
  return s.ok() ? *s : ev[key].get<std::string>();
}

// "k=v, k=v" of a numbers table (all its values, formatted).
std::string AllNumbers(const json& numbers) {
  std::string s;
  for (auto it = numbers.begin(); it != numbers.end(); ++it) {
    auto v = FormatValue(it.value(), "");
    s += (s.empty() ? "" : ", ") + it.key() + "=" + (v.ok() ? *v : it.value().dump());
  }
  return s;
}

std::string Headline(const json& ev) {
  if (ev.is_object() && ev.contains("headline")) return Text(ev, "headline");
  return ev.is_object() && ev.contains("numbers") ? AllNumbers(ev["numbers"]) : "";
}

std::string NcText(const json& ev) {
  if (!ev.is_object() || !ev.contains("negative_control")) return "";
  const json& nc = ev["negative_control"];
  std::string what = nc.value("what", std::string());
  auto s = Substitute(what, ev);
  if (s.ok()) what = *s;
  std::string nums = nc.contains("headline") && nc["headline"].is_string()
                         ? Or(Substitute(nc["headline"].get<std::string>(), ev), AllNumbers(nc["numbers"]))
                         : AllNumbers(nc.value("numbers", json::object()));
  return what + ": " + nums;
}

std::string UtcNow() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

Status WriteEvidence(const fs::path& dir, const std::vector<Outcome>& outs, const ScenarioFlags& f, double total_s) {
  const unsigned cores = std::thread::hardware_concurrency();
  int passed = 0;
  for (const auto& o : outs) passed += o.passed();
  std::ostringstream md;
  md << "# Level 8 本机证据（`ckpt scenario run" << (f.all ? " --all" : "") << (f.reduced ? " --reduced" : "")
     << "`）\n\n"
     << "生成于 " << UtcNow() << "，" << cores << " 核，" << (f.reduced ? "缩减规模（CI）" : "完整规模") << "，"
     << passed << "/" << outs.size() << " 个场景通过，总耗时 " << Or<std::string>(FormatValue(total_s, ".1f"), "?")
     << " s。表中每个数字都由本次运行测得（同一数据见 evidence.json）；题目见 seeds/level8/。\n\n"
     << "| 实验 | 核心数字 | 可支持的回答 |\n|---|---|---|\n";
  for (const auto& o : outs) {
    const json& ev = o.evidence;
    std::string exp = o.sc.id + " " + Text(ev, "title", o.sc.title);
    if (ev.is_object() && ev.contains("setup")) exp += "（" + Text(ev, "setup") + "）";
    std::string nums = Headline(ev);
    if (!o.passed()) nums = "**未通过**：" + o.problems.front() + (nums.empty() ? "" : "；" + nums);
    md << "| " << Cell(exp) << " | " << Cell(nums) << " | " << Cell(Text(ev, "claim")) << " |\n";
  }
  bool any_gap = false;
  for (const auto& o : outs) any_gap = any_gap || (o.evidence.is_object() && o.evidence.contains("gaps"));
  if (any_gap) {
    md << "\n## 已知缺口（本次测得，未计入判定）\n\n";
    for (const auto& o : outs)
      if (o.evidence.is_object() && o.evidence.contains("gaps"))
        for (const auto& g : o.evidence["gaps"]) md << "- " << o.sc.id << "：" << Cell(g.is_string() ? g.get<std::string>() : g.dump()) << "\n";
  }
  md << "\n## 负对照（去掉机制后会出什么错）\n\n| 题号 | 负对照与数字 | 仍显示失败 | 耗时 |\n|---|---|---|---|\n";
  for (const auto& o : outs) {
    const json& ev = o.evidence;
    bool shows = ev.is_object() && ev.contains("negative_control") &&
                 ev["negative_control"].value("shows_failure", false);
    md << "| " << o.sc.id << " | " << Cell(NcText(ev)) << " | " << (shows ? "是" : "**否**") << " | "
       << Or<std::string>(FormatValue(o.seconds, ".1f"), "?") << " s |\n";
  }
  json j = {{"generated_at", UtcNow()}, {"cores", cores},          {"reduced", f.reduced},
            {"total_seconds", total_s}, {"passed", passed},        {"scenarios", json::array()}};
  for (const auto& o : outs)
    j["scenarios"].push_back({{"id", o.sc.id},
                              {"question", o.sc.question},
                              {"runner_verdict", o.passed() ? "PASS" : "FAIL"},
                              {"problems", o.problems},
                              {"wall_seconds", o.seconds},
                              {"exit_code", o.exit_code},
                              {"evidence", o.evidence}});
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::ofstream mdf(dir / "evidence.md"), jf(dir / "evidence.json");
  mdf << md.str();
  jf << j.dump(2) << "\n";
  if (!mdf || !jf) return Status::IOError("cannot write evidence into '" + dir.string() + "'");
  return Status::Ok();
}

int RunList(const ScenarioFlags& f) {
  auto dir = FindScriptsDir(f.scripts);
  if (!dir.ok()) {
    std::fprintf(stderr, "ckpt scenario: %s\n", dir.status().ToString().c_str());
    return kExitError;
  }
  auto all = ListScenarios(*dir);
  if (!all.ok()) {
    std::fprintf(stderr, "ckpt scenario: %s\n", all.status().ToString().c_str());
    return kExitError;
  }
  if (f.json) {
    json j = json::array();
    for (const auto& s : *all)
      j.push_back({{"id", s.id}, {"title", s.title}, {"question", s.question}, {"script", s.script.string()}});
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    for (const auto& s : *all) std::printf("%s  %s  (%s)\n", s.id.c_str(), s.title.c_str(), s.question.c_str());
  }
  return kExitOk;
}

int RunScenarios(const ScenarioFlags& f) {
  auto dir = FindScriptsDir(f.scripts);
  if (!dir.ok()) {
    std::fprintf(stderr, "ckpt scenario: %s\n", dir.status().ToString().c_str());
    return kExitError;
  }
  auto all = ListScenarios(*dir);
  if (!all.ok()) {
    std::fprintf(stderr, "ckpt scenario: %s\n", all.status().ToString().c_str());
    return kExitError;
  }
  std::vector<Scenario> chosen;
  if (f.all) {
    chosen = *all;
  } else {
    for (const auto& id : f.ids) {
      auto it = std::find_if(all->begin(), all->end(), [&](const Scenario& s) { return s.id == id; });
      if (it == all->end()) {
        std::fprintf(stderr, "ckpt scenario: unknown scenario '%s' (see ckpt scenario list)\n", id.c_str());
        return kExitError;
      }
      chosen.push_back(*it);
    }
  }
  if (chosen.empty()) {
    std::fprintf(stderr, "ckpt scenario run: name scenarios or pass --all\n");
    return kExitError;
  }
  std::string mpirun = f.mpirun;
  if (mpirun.empty()) mpirun = std::getenv("MPIRUN") && *std::getenv("MPIRUN") ? std::getenv("MPIRUN") : kDefaultMpirun;
  const fs::path out_dir = fs::absolute(f.out.empty() ? "scenario-evidence" : f.out);
  std::vector<Outcome> outs;
  const auto t0 = Clock::now();
  for (const auto& sc : chosen) {
    if (!f.json) std::fprintf(stderr, "%s %s ...\n", sc.id.c_str(), sc.title.c_str());
    outs.push_back(RunOne(sc, f, *dir, out_dir, mpirun));
    const Outcome& o = outs.back();
    if (!f.json) {
      std::printf("%-5s %-4s %5.1f s  %s\n", o.sc.id.c_str(), o.passed() ? "PASS" : "FAIL", o.seconds,
                  Headline(o.evidence).c_str());
      std::printf("      negative control (%s): %s\n",
                  o.evidence.is_object() && o.evidence.contains("negative_control") &&
                          o.evidence["negative_control"].value("shows_failure", false)
                      ? "shows the failure"
                      : "DOES NOT show the failure",
                  NcText(o.evidence).c_str());
      for (const auto& p : o.problems) std::printf("      problem: %s\n", p.c_str());
      if (o.evidence.is_object() && o.evidence.contains("gaps"))
        for (const auto& g : o.evidence["gaps"])
          std::printf("      gap (not judged): %s\n", g.is_string() ? g.get<std::string>().c_str() : g.dump().c_str());
      std::fflush(stdout);
    }
  }
  const double total = std::chrono::duration<double>(Clock::now() - t0).count();
  int passed = 0;
  for (const auto& o : outs) passed += o.passed();
  if (f.all || !f.out.empty()) {
    Status st = WriteEvidence(out_dir, outs, f, total);
    if (!st.ok()) {
      std::fprintf(stderr, "ckpt scenario: %s\n", st.ToString().c_str());
      return kExitError;
    }
    if (!f.json) std::printf("evidence: %s/evidence.md, %s/evidence.json\n", out_dir.c_str(), out_dir.c_str());
  }
  if (f.json) {
    json j = json::array();
    for (const auto& o : outs)
      j.push_back({{"id", o.sc.id}, {"runner_verdict", o.passed() ? "PASS" : "FAIL"}, {"problems", o.problems},
                   {"wall_seconds", o.seconds}, {"evidence", o.evidence}});
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%d/%zu scenarios passed in %.1f s\n", passed, outs.size(), total);
  }
  return passed == int(outs.size()) ? kExitOk : kExitCheckFailed;
}

}  // namespace

void RegisterScenario(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("scenario", "Level 8 question-bank scenarios: measured evidence with negative controls");
  cmd->require_subcommand(1);
  auto f = std::make_shared<ScenarioFlags>();
  auto* list = cmd->add_subcommand("list", "List the scenarios (scripts/scenarios/M1xx.sh)");
  list->add_flag("--json", f->json, "machine-readable output");
  list->add_option("--scripts", f->scripts, "scenario scripts directory (default: found from the binary)");
  list->callback([=]() { *exit_code = RunList(*f); });
  auto* run = cmd->add_subcommand("run", "Run scenarios; print their evidence; --all also writes evidence.md/.json");
  run->add_option("ids", f->ids, "scenario ids, e.g. M111 M113");
  run->add_flag("--all", f->all, "every listed scenario");
  run->add_option("--out", f->out, "evidence, logs and scratch directory (default ./scenario-evidence)");
  run->add_flag("--reduced", f->reduced, "CI size (REDUCED=1 for the scripts)");
  run->add_flag("--json", f->json, "print the outcomes as one JSON line");
  run->add_flag("--keep", f->keep, "keep every scenario's scratch directory");
  run->add_option("--scripts", f->scripts, "scenario scripts directory (default: found from the binary)");
  run->add_option("--mpirun", f->mpirun, "mpirun prefix before -np (default: $MPIRUN or the built-in one)");
  run->add_option("--timeout-s", f->timeout_s, "kill a scenario after this many seconds");
  run->add_option("--budget-s", f->budget_s, "a scenario slower than this fails");
  run->callback([=]() { *exit_code = RunScenarios(*f); });
}

}  // namespace ckpt::cli

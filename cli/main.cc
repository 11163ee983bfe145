// ckpt: sharded checkpoints for Megatron-style training jobs. CliMain, the
// shared main of `ckpt` and `ckpt-lab` (cli/flags.h).
//
// Every command returns a Status (cli/commands.h); main maps it to the exit
// code once (ExitCodeOf). main catches everything a command lets escape
// (std::exception - bad_alloc, a JSON type error - or anything else) and
// exits kExitError with a message naming the command, never an abort (exit 134).
// The command without options of its own (gpu) is registered here, and the
// product's command set (RegisterProduct). The programs' main functions:
// cli/ckpt_main.cc (ckpt) and harness/lab/lab_main.cc (ckpt-lab).
#include <charconv>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "ckpt/base/timeout.h"
#include "ckpt/mpi/comm_mpi.h"
#include "ckpt/mpi/launcher_term.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/storage/s3/s3_storage.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/suggest.h"

namespace ckpt::cli {

int ExitCodeOf(const Status& st) {
  if (st.ok()) return kExitOk;
  if (st.code() == Code::kCorruption) return kExitCheckFailed;  // damaged data
  if (st.code() == Code::kOutcomeUnknown) return kExitOutcomeUnknown;  // maybe committed: look first
  if (st.phase() == Phase::kNonFiniteGuard) return kExitCheckFailed;  // the NaN/Inf guard refused the state
  if (st.phase() == Phase::kCheckFailed) return kExitCheckFailed;     // the command's check failed
  return kExitError;
}

// --timeout-ms of every command: a whole number of milliseconds in the range
// CheckTimeoutMillis accepts (ckpt/base/timeout.h), refused with the range.
CLI::Option* AddTimeoutMs(CLI::App* cmd, int64_t* timeout_ms, const std::string& what) {
  auto check = [](const std::string& text) -> std::string {
    int64_t ms = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
    if (ec != std::errc() || end != text.data() + text.size())
      return "value " + text + ": not a whole number of milliseconds in " + TimeoutRangeText();
    auto checked = CheckTimeoutMillis(ms, "value");  // CLI11 prefixes "--timeout-ms: "
    return checked.ok() ? std::string() : checked.status().message();
  };
  return cmd->add_option("--timeout-ms", *timeout_ms, what + " (" + TimeoutRangeText() + ")")
      ->check(CLI::Validator(check, "MS", "timeout"));
}

void AddTargetFlags(CLI::App* cmd, std::string* gpt_to, RuleTargetFlags* rules) {
  cmd->add_option("--to", *gpt_to, "target GPT layout, e.g. tp=2,pp=1,dp=1 (GPT checkpoints; else --ranks/--shard)");
  cmd->add_option("--ranks", rules->ranks, "target ranks of a by-rules layout (any checkpoint; default 1)");
  cmd->add_option("--shard", rules->shard,
                  "KEY_GLOB:axis=A:parts=P: cut matching tensors into P parts along axis A (rank r holds part "
                  "r % P; first matching rule wins; unmatched keys stay whole); repeatable");
  cmd->add_flag("--to-unsharded", rules->to_unsharded,
                "consolidate: one rank, every tensor whole (any checkpoint; same as --ranks 1 without --shard)");
}

void AddJsonFlags(CLI::App* cmd, bool* json, bool* no_progress, const std::string& what) {
  cmd->add_flag("--json", *json, what);
  cmd->add_flag("--no-progress", *no_progress,
                "no progress on stderr (default: one updating line when stderr is a terminal; JSON lines with --json)");
}

namespace {

void RegisterGpu(CLI::App& app, Status* outcome) {
  auto* cmd = app.add_subcommand("gpu", "GPU path of this build: CUDA/NCCL versions and devices (exit 1: no usable GPU)");
  auto as_json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *as_json, "print as JSON");
  cmd->callback([=]() { *outcome = RunGpu(*as_json); });
}

std::string CommandName(const std::string& program, const CLI::App& app, int argc, char** argv) {
  for (const CLI::App* sub : app.get_subcommands()) return program + " " + sub->get_name();
  return argc > 1 ? program + " " + std::string(argv[1]) : program;
}

}  // namespace

ProductFlags RegisterProduct(CLI::App& app, Status* outcome) {
  ProductFlags f;
  RegisterInspect(app, outcome);
  RegisterVerify(app, outcome);
  f.save = RegisterSave(app, outcome);
  f.load = RegisterLoad(app, outcome);
  RegisterReshard(app, outcome);
  RegisterPlan(app, outcome);
  f.train = RegisterTrain(app, outcome);
  RegisterFingerprint(app, outcome);
  RegisterDiff(app, outcome);
  RegisterGpu(app, outcome);
  f.convert = RegisterConvert(app, outcome);
  return f;
}

int CliMain(int argc, char** argv, const Program& program) {
  CLI::App app{program.about};
  // mpirun's SIGTERM after a node loss waits for the command's own deadlines,
  // which name the lost ranks and host (launcher_term.h). First: before MPI starts threads.
  ckpt::DeferLauncherTermination();
  app.require_subcommand(1);
  app.set_version_flag("--version", program.name + " " CKPT_VERSION);
  // A collective that failed by its deadline ends the whole job (comm_mpi.h).
  ckpt::SetEndJobOnDeadline(true);
  ckpt::Status outcome;  // the command's (printed by the command itself)
  std::string why;
  try {
    // Backends are made at this edge: --root and the other roots take
    // s3://bucket/prefix URLs (ckpt/storage/storage.h) besides plain paths.
    if (ckpt::Status st = ckpt::s3::RegisterS3Scheme(); !st.ok()) {
      std::fprintf(stderr, "ckpt: %s\n", st.ToString().c_str());
      return ExitCodeOf(st);
    }
    program.register_commands(app, &outcome);
    app.parse(argc, argv);
    const int exit_code = ExitCodeOf(outcome);
    ckpt::EndJobIfHung(exit_code);  // MPI_Abort(exit_code) if a peer may hang; else returns
    return exit_code;
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    if (rc != 0) std::fputs(SuggestFlags(app, argc, argv).c_str(), stderr);  // "did you mean --keep-last?"
    return rc == 0 ? kExitOk : kExitError;
  } catch (const std::exception& e) {
    why = e.what();
  } catch (...) {
    why = "an unknown exception";
  }
  std::fprintf(stderr, "%s: internal error: %s (uncaught; exit %d)\n",
               CommandName(program.name, app, argc, argv).c_str(), why.c_str(), kExitError);
  ckpt::EndJobIfHung(kExitError);  // a peer may still wait in a collective
  return kExitError;
}

}  // namespace ckpt::cli

// ckpt: sharded checkpoints for Megatron-style training jobs.
//
// main catches everything a command lets escape (std::exception - bad_alloc,
// a JSON type error - or anything else) and exits kExitError with a message
// naming the command, never an abort (exit 134).
#include <cstdio>
#include <exception>
#include <string>

#include "ckpt/mpi/comm_mpi.h"
#include "ckpt/protocol/checkpoint.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/suggest.h"

namespace ckpt::cli {

int ExitCodeOf(const Status& st) {
  if (st.ok()) return kExitOk;
  if (st.code() == Code::kCorruption) return kExitCheckFailed;  // damaged data
  if (st.code() == Code::kOutcomeUnknown) return kExitOutcomeUnknown;  // maybe committed: look first
  if (st.phase() == kNonFinitePhase) return kExitCheckFailed;    // the NaN/Inf guard refused the state
  return kExitError;
}

namespace {

void Register(CLI::App& app, int* exit_code) {
  RegisterInspect(app, exit_code);
  RegisterVerify(app, exit_code);
  RegisterSave(app, exit_code);
  RegisterLoad(app, exit_code);
  RegisterFaults(app, exit_code);
  RegisterReshard(app, exit_code);
  RegisterPlan(app, exit_code);
  RegisterTrain(app, exit_code);
  RegisterFingerprint(app, exit_code);
  RegisterDiff(app, exit_code);
  RegisterScenario(app, exit_code);
  RegisterGpu(app, exit_code);
  RegisterConvert(app, exit_code);
}

std::string CommandName(const CLI::App& app, int argc, char** argv) {
  for (const CLI::App* sub : app.get_subcommands()) return "ckpt " + sub->get_name();
  return argc > 1 ? "ckpt " + std::string(argv[1]) : "ckpt";
}

}  // namespace
}  // namespace ckpt::cli

int main(int argc, char** argv) {
  using namespace ckpt::cli;
  CLI::App app{"ckpt: sharded checkpoint, reshard and reliability tool for Megatron-style training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ckpt " CKPT_VERSION);
  // A collective that failed by its deadline ends the whole job (comm_mpi.h).
  ckpt::SetEndJobOnDeadline(true);
  int exit_code = kExitOk;
  std::string why;
  try {
    Register(app, &exit_code);
    app.parse(argc, argv);
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
  std::fprintf(stderr, "%s: internal error: %s (uncaught; exit %d)\n", CommandName(app, argc, argv).c_str(),
               why.c_str(), kExitError);
  ckpt::EndJobIfHung(kExitError);  // a peer may still wait in a collective
  return kExitError;
}

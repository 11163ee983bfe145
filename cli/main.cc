// ckpt: sharded checkpoints for Megatron-style training jobs.
#include <cstdio>

#include "ckpt/mpi/comm_mpi.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"ckpt: sharded checkpoint, reshard and reliability tool for Megatron-style training"};
  app.require_subcommand(1);
  // A collective that failed by its deadline ends the whole job (comm_mpi.h).
  ckpt::SetEndJobOnDeadline(true);
  int exit_code = ckpt::cli::kExitOk;
  ckpt::cli::RegisterInspect(app, &exit_code);
  ckpt::cli::RegisterVerify(app, &exit_code);
  ckpt::cli::RegisterSave(app, &exit_code);
  ckpt::cli::RegisterLoad(app, &exit_code);
  ckpt::cli::RegisterFaults(app, &exit_code);
  ckpt::cli::RegisterReshard(app, &exit_code);
  ckpt::cli::RegisterPlan(app, &exit_code);
  ckpt::cli::RegisterTrain(app, &exit_code);
  ckpt::cli::RegisterFingerprint(app, &exit_code);
  ckpt::cli::RegisterDiff(app, &exit_code);
  ckpt::cli::RegisterScenario(app, &exit_code);
  ckpt::cli::RegisterGpu(app, &exit_code);
  ckpt::cli::RegisterConvert(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : ckpt::cli::kExitError;
  }
  ckpt::EndJobIfHung(exit_code);  // MPI_Abort(exit_code) if a peer may hang; else returns
  return exit_code;
}

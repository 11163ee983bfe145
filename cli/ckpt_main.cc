// The installed `ckpt` command: the product's commands only (RegisterProduct,
// cli/main.cc). No harness switch is registered and no harness function is
// installed (cli/harness_seam.h), so this program links no test or harness
// code; the harness program is ckpt-lab (harness/lab/lab_main.cc).
#include "cli/flags.h"

int main(int argc, char** argv) {
  using namespace ckpt::cli;
  return CliMain(argc, argv,
                 Program{"ckpt", "ckpt: sharded checkpoint, reshard and reliability tool for Megatron-style training",
                         RegisterProduct});
}

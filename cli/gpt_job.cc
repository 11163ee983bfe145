#include "cli/gpt_job.h"

#include <cstdarg>
#include <cstdio>

namespace ckpt::cli {

void Print0(const GptJob& job, const char* fmt, ...) {
  if (job.rank() != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stdout, fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

}  // namespace ckpt::cli

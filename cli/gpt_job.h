// The CLI side of a GPT job (the job itself is library code,
// ckpt/workload/gpt_job.h): printing on rank 0.
#pragma once

#include "ckpt/workload/gpt_job.h"
#include "ckpt/workload/job_setup.h"

namespace ckpt::cli {

using workload::GptJob;
using workload::LoadOptimizerSpec;
using workload::MemoryProbe;
using workload::OptimizerMetadata;
using workload::OptimizerSpec;
using workload::PrecheckBucketLayout;
using workload::ResolveLoadIteration;
using workload::ResolveModel;
using workload::SaveOptimizerSpec;
using workload::StartGptJob;

// Prints on rank 0 only.
void Print0(const GptJob& job, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace ckpt::cli

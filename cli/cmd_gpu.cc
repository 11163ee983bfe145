// `ckpt gpu`: what the GPU path of this build can use here - whether it was
// compiled, the CUDA runtime/driver and NCCL versions, the devices, and the
// device this process would take (local rank % count). Exit 0 when compiled
// and at least one device is visible, 1 otherwise (scripts branch on it).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "ckpt/gpu/gpu.h"
#include "cli/commands.h"

namespace ckpt::cli {
namespace {

std::string Version(int v, int major_div) {
  if (v <= 0) return "none";
  return std::to_string(v / major_div) + "." + std::to_string(v % major_div / (major_div / 100));
}

}  // namespace

Status RunGpu(bool as_json) {
  const gpu::GpuInfo g = gpu::QueryGpu();
  if (as_json) {
    nlohmann::json j = {{"compiled", g.compiled},         {"cuda_runtime", g.cuda_runtime},
                        {"cuda_driver", g.cuda_driver},   {"nccl", g.nccl},
                        {"device_count", g.device_count}, {"device_error", g.device_error},
                        {"devices", g.devices},           {"local_device", g.local_device}};
    std::printf("%s\n", j.dump().c_str());
  } else if (!g.compiled) {
    std::printf("GPU path: not compiled (CUDA toolkit or NCCL not found at configure time)\n");
  } else {
    std::printf("GPU path: compiled; CUDA runtime %s, driver %s, NCCL %d.%d.%d\n", Version(g.cuda_runtime, 1000).c_str(),
                Version(g.cuda_driver, 1000).c_str(), g.nccl / 10000, g.nccl / 100 % 100, g.nccl % 100);
    if (g.device_count == 0)
      std::printf("devices: none%s%s\n", g.device_error.empty() ? "" : " - ", g.device_error.c_str());
    for (int d = 0; d < g.device_count; ++d)
      std::printf("device %d: %s%s\n", d, g.devices[d].c_str(), d == g.local_device ? "  (this process)" : "");
  }
  if (g.compiled && g.device_count > 0) return Status::Ok();
  return CheckFailed(g.compiled ? "no usable GPU" : "the GPU path is not compiled");
}

}  // namespace ckpt::cli

// ProgressSession: see progress_session.h.
#include "ckpt/protocol/progress_session.h"

#include "ckpt/protocol/checkpoint.h"

namespace ckpt {

void ProgressSession::Attach(std::unique_ptr<ProgressSink> sink, bool count_writes, std::string file_suffix) {
  sink_ = std::move(sink);
  progress_.SetPhase(count_writes ? "write" : "read");  // what the byte counts measure
  meter_ = std::make_unique<MeterEnv>(target_, &progress_, !count_writes, count_writes, std::move(file_suffix));
}

void ProgressSession::Start() {
  if (meter_ && !reporter_)
    reporter_ = std::make_unique<ProgressReporter>(&progress_, sink_.get(), ProgressIntervalFromEnvironment());
}

void ProgressSession::SetTotalsFromManifests(const std::vector<std::pair<std::string, int64_t>>& iterations) {
  if (!active()) return;
  int64_t bytes = 0, files = 0;
  for (const auto& [root, iteration] : iterations) {
    auto m = ReadManifest(target_, root, iteration);  // unmetered; an error is the operation's to report
    if (!m.ok()) return;
    for (const ManifestFile& f : m->files) bytes += int64_t(f.size);
    files += int64_t(m->files.size());
  }
  SetTotals(bytes, files);
}

}  // namespace ckpt

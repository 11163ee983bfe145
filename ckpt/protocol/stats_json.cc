// SaveStatsJson / LoadStatsJson: see stats_json.h.
#include "ckpt/protocol/stats_json.h"

namespace ckpt {

nlohmann::json SaveStatsJson(const SaveStats& s) {
  const DirectIoStats& d = s.direct_io;
  return {{"iteration", s.iteration},
          {"bytes_written", s.bytes_written},
          {"file_bytes", s.file_bytes},
          {"shards_written", s.shards_written},
          {"bytes_per_rank", s.bytes_per_rank},
          {"phase_seconds", s.phase_seconds},
          {"seconds", s.seconds},
          {"direct_io", d.requested},
          {"direct_io_active", d.active},
          {"direct_write_bytes", int64_t(d.direct_bytes)},
          {"buffered_write_bytes", int64_t(d.buffered_bytes)},
          {"direct_io_fallback", d.fallback},
          {"warning", s.warning.ok() ? nlohmann::json(nullptr) : nlohmann::json(s.warning.ToString())},
          {"direct_bytes", int64_t(d.direct_bytes)}};  // deprecated alias (stats_json.h)
}

nlohmann::json LoadStatsJson(const LoadStats& s) {
  return {{"iteration", s.iteration},
          {"bytes_read", s.bytes_read},
          {"chunks_read", s.chunks_read},
          {"elements", s.elements},
          {"zero_filled", s.zero_filled},
          {"files_touched", s.files_touched},
          {"bytes_received", s.bytes_received},
          {"bytes_sent", s.bytes_sent},
          {"chunks_received", s.chunks_received},
          {"share_rounds", s.share_rounds},
          {"direct_read_bytes", s.direct_read_bytes},
          {"direct_io_fallback", s.direct_io_fallback},
          {"files_cached", s.files_cached},
          {"seconds", s.seconds},
          {"skipped", s.skipped},
          {"missing_keys", s.missing_keys},
          {"unexpected_keys", s.unexpected_keys}};
}

nlohmann::json LocalSaveStatsJson(const LocalSaveStats& s) {
  return {{"write_seconds", s.write_seconds},   {"replicate_seconds", s.replicate_seconds},
          {"commit_seconds", s.commit_seconds}, {"own_bytes", s.own_bytes},
          {"network_bytes_sent", s.sent_bytes}, {"network_bytes_received", s.received_bytes},
          {"buffer_bytes", s.buffer_bytes}};
}

}  // namespace ckpt

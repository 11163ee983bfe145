// SaveStatsJson / LoadStatsJson: the one JSON form of a rank's SaveStats and
// LoadStats, with one set of key names. Python's stats dicts
// (ckpt.save/ckpt.load) are these objects; the CLI gathers them from every
// rank for its --json report (cli/cmd_save.cc, cli/cmd_load.cc), which sums
// them under the same names. Adding a field = one line here.
//
// Keys: save - iteration, bytes_written, file_bytes, shards_written,
// bytes_per_rank, phase_seconds (keyed by PhaseName), seconds, direct_io
// (O_DIRECT requested), direct_io_active, direct_write_bytes,
// buffered_write_bytes, direct_io_fallback, warning (null or text).
// Load - iteration, bytes_read, chunks_read, elements, zero_filled,
// files_touched, bytes_received, bytes_sent, chunks_received, share_rounds,
// direct_read_bytes, direct_io_fallback, files_cached, seconds, skipped,
// missing_keys, unexpected_keys.
// Deprecated alias, kept for one release: save's "direct_bytes" (=
// direct_write_bytes; the Python key before the names were unified).
// Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/local_tier.h"

namespace ckpt {

nlohmann::json SaveStatsJson(const SaveStats& s);
nlohmann::json LoadStatsJson(const LoadStats& s);
// A local-tier save's figures (LocalSaveStats, local_tier.h): write_seconds,
// replicate_seconds, commit_seconds, own_bytes, network_bytes_sent,
// network_bytes_received, buffer_bytes. The callers add the iteration and the
// total under their own names (CLI rows: blocking_/save_seconds; Python: seconds).
nlohmann::json LocalSaveStatsJson(const LocalSaveStats& s);

}  // namespace ckpt

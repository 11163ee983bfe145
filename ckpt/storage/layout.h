// The names under a checkpoint root (docs/FORMAT.md "Layout"), the same on
// every storage backend: the tracker, iter_N directories (prefixes on an
// object store) with their manifest, and the staging names of saves in
// progress. Pure; moved here from ckpt/format/manifest.h (which still
// includes it) so that backends, a layer below the format, can use them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ckpt/base/status.h"

namespace ckpt {

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kTrackerName = "latest_checkpointed_iteration.txt";

// Iteration directory name "iter_0000042" and the temporary one
// ".iter_0000042.tmp-<nonce>".
std::string IterDirName(int64_t iteration);
std::string TmpIterDirName(int64_t iteration, const std::string& nonce);
// Parses "iter_0000042" -> 42; anything else -> kInvalidArgument.
Result<int64_t> ParseIterDirName(std::string_view name);
bool IsTmpIterDirName(std::string_view name);

// The tracker's text ("N\n", trailing blanks allowed) -> N. kCorruption naming
// `path` when it is empty or not a number (its start quoted, escaped).
Result<int64_t> ParseTrackerText(const std::string& path, std::string_view text);

}  // namespace ckpt

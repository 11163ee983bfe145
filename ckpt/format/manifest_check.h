// Internal to ckpt_format (manifest.cc, manifest_check.cc): the manifest checks
// ParseManifest runs on every manifest it parses, partial ones included (a
// rank's vote describes only that rank's shards). ValidateManifest (manifest.h)
// adds coverage, for committed manifests (ReadManifest).
#pragma once

#include "ckpt/format/manifest.h"

namespace ckpt {

// Every check of ValidateManifest except coverage. kCorruption naming the field.
Status ValidateManifestFields(const Manifest& m);

}  // namespace ckpt

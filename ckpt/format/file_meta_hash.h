// The shard file's metadata hash (format_version 2, docs/FORMAT.md §3):
// SHA-256 over every byte of a shard file that no chunk of the manifest
// covers - the HDF5 superblock, object headers, B-trees and heaps - read in
// file order, gaps concatenated. Chunk bytes have their own per-chunk hashes,
// so together the two authenticate the whole file.
//
// Why: libhdf5 parses metadata it is given without bounds on its own loops
// (a damaged local-heap free list or a cyclic symbol-table B-tree allocates
// until the process dies; tests/fuzz/corpus/hang-shard-5108.h5). `verify`
// checks this hash before handing a file to HDF5, so HDF5 only ever parses
// metadata the writer produced.
//
// Failure: NotFound / IOError from the Env (naming the path); the ranges are
// the manifest's, already validated (in the file, non-overlapping).
// Thread safety: none needed (pure function of the file's bytes).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/status.h"
#include "ckpt/format/manifest.h"

namespace ckpt {

// [offset, length) ranges of one file's chunks in `m` (tensor and object
// datasets), sorted by offset.
std::vector<std::pair<uint64_t, uint64_t>> ChunkRangesOfFile(const Manifest& m, int file);

// SHA-256 (hex) of the bytes of `path` (of `file_size` bytes) outside `chunks`.
[[nodiscard]] Result<std::string> HashOutsideChunks(Env* env, const std::string& path, uint64_t file_size,
                                                    const std::vector<std::pair<uint64_t, uint64_t>>& chunks);

// OK when the bytes of file `file` of `m` (at `path`) outside its chunks
// hash to m.files[file].meta_sha256, or when the manifest records none (v1);
// kCorruption naming the path and both hashes otherwise; the Env's error when
// the file cannot be read.
[[nodiscard]] Status CheckMetaHash(Env* env, const std::string& path, const Manifest& m, int file);

// Sets m->files[file].meta_sha256 from the file at `path` (written and closed;
// m's records of that file complete). Writers call it after Finish().
[[nodiscard]] Status RecordMetaHash(Env* env, const std::string& path, int file, Manifest* m);

}  // namespace ckpt

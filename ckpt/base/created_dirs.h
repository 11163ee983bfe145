// CreatedDirs: the directories a command creates for its output, so that a
// failed command removes them again - and only them. A failed `ckpt convert`
// or a refused `ckpt reshard` must not leave an empty destination behind, nor
// remove anything that was there before it ran.
//
// Create(path) notes which of `path` and its parents do not exist yet, then
// creates them (CreateDirs: mkdir -p, parents synced). RemoveIfEmpty()
// removes the noted directories, deepest first, each only while it is empty:
// one that something else filled meanwhile stops the removal there. Every
// call goes through the Env. Thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/status.h"

namespace ckpt {

class CreatedDirs {
 public:
  explicit CreatedDirs(Env* env) : env_(env) {}

  // Creates `path` and its missing parents, noting the ones it created.
  Status Create(const std::string& path);
  // Best effort (a cleanup path): removes the noted directories that are
  // empty, deepest first; errors are ignored. Forgets them.
  void RemoveIfEmpty();
  // The directories noted so far, in creation order (parents first).
  const std::vector<std::string>& dirs() const { return dirs_; }

 private:
  Env* env_;
  std::vector<std::string> dirs_;
};

}  // namespace ckpt

// Helpers over the Env interface (no OS calls here).
#include "ckpt/base/env.h"

namespace ckpt {

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

std::string DirName(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

std::string BaseName(const std::string& path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

const char* FileKindName(FileKind kind) {
  switch (kind) {
    case FileKind::kNone: return "nothing";
    case FileKind::kFile: return "a regular file";
    case FileKind::kDir: return "a directory";
    case FileKind::kSymlink: return "a symbolic link";
    case FileKind::kOther: return "a FIFO, device or socket";
  }
  return "?";
}

Result<std::string> ReadFileToString(Env* env, const std::string& path, const OpenOptions& opts) {
  CKPT_ASSIGN_OR_RETURN(auto file, env->OpenFile(path, OpenMode::kRead, opts));
  CKPT_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  std::string data(size, '\0');
  CKPT_ASSIGN_OR_RETURN(size_t n, file->PRead(0, std::as_writable_bytes(std::span(data))));
  data.resize(n);
  CKPT_RETURN_IF_ERROR(file->Close());
  return data;
}

Status WriteStringToFileSync(Env* env, const std::string& path, std::string_view data) {
  CKPT_ASSIGN_OR_RETURN(auto file, env->OpenFile(path, OpenMode::kCreate));
  CKPT_RETURN_IF_ERROR(file->PWrite(0, std::as_bytes(std::span(data.data(), data.size()))));
  CKPT_RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

Status WriteFileAtomic(Env* env, const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  // A stale tmp is ours by name, but a link there must not be written through
  // (OpenFile would refuse it anyway): remove the link itself, keep its target.
  CKPT_ASSIGN_OR_RETURN(FileInfo stale, env->Stat(tmp));
  if (stale.kind == FileKind::kSymlink) {
    CKPT_RETURN_IF_ERROR(env->RemoveFile(tmp));
  } else if (stale.exists && stale.kind != FileKind::kFile) {
    return Status::FailedPrecondition("'" + tmp + "' is " + FileKindName(stale.kind) +
                                      ", not a file this write left: refusing to replace it");
  }
  CKPT_RETURN_IF_ERROR(WriteStringToFileSync(env, tmp, data));
  CKPT_RETURN_IF_ERROR(env->Rename(tmp, path));
  return env->SyncDir(DirName(path));
}

Status CreateDirs(Env* env, const std::string& path) {
  CKPT_ASSIGN_OR_RETURN(FileInfo info, env->Stat(path));
  if (info.exists) {
    if (!info.IsDirOrLinkToDir())
      return Status::AlreadyExists("'" + path + "' exists and is " + FileKindName(info.kind) + ", not a directory");
    return Status::Ok();
  }
  const std::string parent = DirName(path);
  if (parent != path) CKPT_RETURN_IF_ERROR(CreateDirs(env, parent));
  Status st = env->CreateDir(path);
  if (st.code() == Code::kAlreadyExists) return Status::Ok();  // raced with another creator
  CKPT_RETURN_IF_ERROR(st);
  return env->SyncDir(parent);
}

Status RemoveTree(Env* env, const std::string& path) {
  CKPT_ASSIGN_OR_RETURN(FileInfo info, env->Stat(path));
  if (!info.exists) return Status::Ok();
  if (!info.is_dir) return env->RemoveFile(path);  // a link: the link itself, never its target
  CKPT_ASSIGN_OR_RETURN(auto names, env->ListDir(path));
  for (const auto& n : names) CKPT_RETURN_IF_ERROR(RemoveTree(env, JoinPath(path, n)));
  return env->RemoveDir(path);
}

}  // namespace ckpt

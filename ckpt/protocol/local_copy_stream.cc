// StreamCopies (local_copy_stream.h): round 0 carries each copy's file list
// (names and sizes), rounds 1..R the files' bytes end to end, R agreed up
// front from every rank's largest copy.
#include "ckpt/protocol/local_copy_stream.h"

#include <algorithm>
#include <memory>

#include <nlohmann/json.hpp>

namespace ckpt {
namespace {

using nlohmann::json;

// One direction of one copy: its files and how far the stream has got.
struct Stream {
  Stream(int p, std::string d) : peer(p), dir(std::move(d)) {}
  int peer = -1;
  std::string dir;
  std::vector<std::unique_ptr<File>> files;
  std::vector<uint64_t> sizes;
  size_t file = 0;
  uint64_t offset = 0;  // within files[file]
  uint64_t total() const {
    uint64_t t = 0;
    for (uint64_t s : sizes) t += s;
    return t;
  }
  bool done() const { return file >= files.size(); }
  void Advance(uint64_t n) {
    offset += n;
    while (file < files.size() && offset == sizes[file]) ++file, offset = 0;
  }
};

Result<Stream> OpenSend(Env* env, const CopySend& s) {
  Stream st(s.to, s.dir);
  CKPT_ASSIGN_OR_RETURN(auto names, env->ListDir(s.dir));
  for (const auto& n : names) {
    CKPT_ASSIGN_OR_RETURN(st.files.emplace_back(), env->OpenFile(JoinPath(s.dir, n), OpenMode::kRead));
    CKPT_ASSIGN_OR_RETURN(st.sizes.emplace_back(), st.files.back()->Size());
  }
  st.Advance(0);
  return st;
}

json FileList(Env* env, const std::string& dir) {
  json list = json::array();
  auto names = env->ListDir(dir);
  for (const auto& n : names.ok() ? *names : std::vector<std::string>{}) {
    auto info = env->Stat(JoinPath(dir, n));
    list.push_back({n, info.ok() ? info->size : 0});
  }
  return list;
}

// Opens a receiver's files from the sender's list (plain names only).
Status OpenRecv(Env* env, const std::string& header, Stream* st) {
  json list = json::parse(header, nullptr, false);
  if (!list.is_array()) return Status::Corruption("malformed copy header from rank " + std::to_string(st->peer));
  CKPT_RETURN_IF_ERROR(CreateDirs(env, st->dir));
  for (const auto& f : list) {
    const std::string name = f.at(0).get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name[0] == '.')
      return Status::Corruption("malformed copy from rank " + std::to_string(st->peer) + ": file name '" + name + "'");
    CKPT_ASSIGN_OR_RETURN(st->files.emplace_back(), env->OpenFile(JoinPath(st->dir, name), OpenMode::kCreate));
    st->sizes.push_back(f.at(1).get<uint64_t>());
  }
  st->Advance(0);
  return Status::Ok();
}

// The sender's next piece (at most `cap` bytes, across file ends).
Status NextPiece(Stream* st, int64_t cap, std::string* piece) {
  piece->clear();
  while (!st->done() && int64_t(piece->size()) < cap) {
    const uint64_t n = std::min<uint64_t>(uint64_t(cap) - piece->size(), st->sizes[st->file] - st->offset);
    const size_t at = piece->size();
    piece->resize(at + n);
    CKPT_ASSIGN_OR_RETURN(
        size_t got, st->files[st->file]->PRead(st->offset, std::as_writable_bytes(std::span(piece->data() + at, n))));
    if (got != n) return Status::IOError("'" + st->files[st->file]->path() + "' shrank while it was sent");
    st->Advance(n);
  }
  return Status::Ok();
}

Status WritePiece(Stream* st, std::string_view piece) {
  while (!piece.empty()) {
    if (st->done())
      return Status::Corruption("copy from rank " + std::to_string(st->peer) + " is longer than its files");
    const uint64_t n = std::min<uint64_t>(piece.size(), st->sizes[st->file] - st->offset);
    CKPT_RETURN_IF_ERROR(st->files[st->file]->PWrite(st->offset, std::as_bytes(std::span(piece.data(), n))));
    st->Advance(n);
    piece.remove_prefix(n);
  }
  return Status::Ok();
}

Status FinishRecv(Env* env, Stream* st) {
  if (!st->done()) return Status::Corruption("copy from rank " + std::to_string(st->peer) + " ended early");
  for (auto& f : st->files) {
    CKPT_RETURN_IF_ERROR(f->Sync());
    CKPT_RETURN_IF_ERROR(f->Close());
  }
  return env->SyncDir(st->dir);
}

}  // namespace

Result<StreamStats> StreamCopies(Env* env, Comm* comm, const std::vector<CopySend>& sends,
                                 const std::vector<CopyRecv>& recvs, int64_t round_bytes, Millis timeout, Phase phase) {
  const int world = comm->size();
  StreamStats stats;
  Status mine = Status::Ok();
  std::vector<Stream> out, in;
  std::vector<std::string> msgs(world);
  uint64_t longest = 0;
  for (const auto& s : sends) {
    auto st = OpenSend(env, s);
    if (!st.ok()) {
      mine = st.status();
      break;
    }
    msgs[s.to] = FileList(env, s.dir).dump();
    longest = std::max(longest, st->total());
    out.push_back(std::move(*st));
  }
  if (!mine.ok()) out.clear(), msgs.assign(world, "");
  const int64_t cap = std::max<int64_t>(round_bytes, 1);
  CKPT_ASSIGN_OR_RETURN(auto counts, comm->AllGather(std::to_string((longest + cap - 1) / cap), timeout, phase));
  for (const auto& n : counts) stats.rounds = std::max(stats.rounds, std::stoi(n));
  CKPT_ASSIGN_OR_RETURN(auto headers, comm->AllToAll(std::move(msgs), timeout, phase));
  for (const auto& r : recvs) {
    in.emplace_back(r.from, r.dir);
    if (mine.ok()) mine = OpenRecv(env, headers[r.from], &in.back());
  }
  stats.buffer_bytes = cap * int64_t(out.size() + in.size());
  for (int round = 0; round < stats.rounds; ++round) {
    std::vector<std::string> pieces(world);
    for (auto& s : out) {
      if (mine.ok()) mine = NextPiece(&s, cap, &pieces[s.peer]);
      stats.sent_bytes += int64_t(pieces[s.peer].size());
    }
    CKPT_ASSIGN_OR_RETURN(auto got, comm->AllToAll(std::move(pieces), timeout, phase));
    for (auto& r : in) {
      stats.received_bytes += int64_t(got[r.peer].size());
      if (mine.ok()) mine = WritePiece(&r, got[r.peer]);
    }
  }
  for (auto& r : in)
    if (mine.ok()) mine = FinishRecv(env, &r).WithContext("copy from rank " + std::to_string(r.peer));
  if (!mine.ok()) return mine;
  return stats;
}

}  // namespace ckpt

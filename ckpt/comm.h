// Comm: the control-plane collectives the checkpoint protocol needs.
//
// Every call carries a deadline and a phase name. A rank that does not answer
// in time turns into Status::Timeout naming the missing rank(s) and the phase,
// so a hung or dead rank never makes the others wait forever.
//
// Implementations: LocalComm (one rank), ThreadComm (threads as ranks, for
// unit tests), MpiComm (comm_mpi.h, OpenMPI point-to-point with polling).
// A Comm object is used by one thread (its rank) at a time; all ranks must
// issue the same sequence of calls.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/status.h"

namespace ckpt {

using Millis = std::chrono::milliseconds;

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Root receives every rank's message (index = rank); others get an empty vector.
  virtual Result<std::vector<std::string>> Gather(const std::string& mine, int root, Millis timeout,
                                                  std::string_view phase) = 0;
  // Every rank returns root's message.
  virtual Result<std::string> Broadcast(const std::string& msg, int root, Millis timeout,
                                        std::string_view phase) = 0;

  // Gather to rank 0 then broadcast of the concatenation: every rank gets all messages.
  Result<std::vector<std::string>> AllGather(const std::string& mine, Millis timeout,
                                             std::string_view phase);
  Status Barrier(Millis timeout, std::string_view phase);
};

class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Result<std::vector<std::string>> Gather(const std::string& mine, int, Millis,
                                          std::string_view) override {
    return std::vector<std::string>{mine};
  }
  Result<std::string> Broadcast(const std::string& msg, int, Millis, std::string_view) override {
    return msg;
  }
};

// Creates `n` connected ThreadComm endpoints; endpoint i is rank i and must be
// used by one thread. The group lives as long as any endpoint.
std::vector<std::unique_ptr<Comm>> MakeThreadComms(int n);

// Encodes a list of strings into one (length-prefixed) and back.
std::string PackStrings(const std::vector<std::string>& parts);
Result<std::vector<std::string>> UnpackStrings(std::string_view packed);

}  // namespace ckpt

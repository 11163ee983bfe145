// A recursive mutex that hands itself over in arrival order (a ticket lock).
//
// Why: std::mutex and std::recursive_mutex make no promise of fairness, and
// on Linux a thread that unlocks and locks again at once almost always wins
// against a waiter that must first be woken. The process-wide HDF5 lock
// (format/hdf5_vfd.h) is held across each chunk's pwrite; a thread whose
// storage is slow (250 ms per write) then kept the lock for seconds in a row
// while another thread of the same process, the other rank of a threads-as-
// ranks save, never got it, and the save rightly named that starved rank as
// stalled (CI, SaveProgress.SlowButSteadyNonRootWriterCommits, twice). With
// tickets a waiter waits for at most the holds queued before it.
//
// Contract: BasicLockable (lock/unlock), usable with std::unique_lock and
// std::lock_guard. The owning thread may lock again; each lock needs its
// unlock. unlock by a thread that does not hold it is undefined, as for the
// std mutexes. Waiters are served first come, first served; a re-entrant lock
// by the owner does not queue.
// Thread-safety: all members are guarded by an internal std::mutex.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace ckpt {

class FairRecursiveMutex {
 public:
  FairRecursiveMutex() = default;
  FairRecursiveMutex(const FairRecursiveMutex&) = delete;
  FairRecursiveMutex& operator=(const FairRecursiveMutex&) = delete;

  void lock() {
    std::unique_lock<std::mutex> guard(mu_);
    const std::thread::id me = std::this_thread::get_id();
    if (depth_ > 0 && owner_ == me) {
      ++depth_;
      return;
    }
    const uint64_t ticket = next_ticket_++;
    turn_.wait(guard, [&] { return serving_ == ticket; });
    owner_ = me;
    depth_ = 1;
  }

  void unlock() {
    std::lock_guard<std::mutex> guard(mu_);
    if (--depth_ > 0) return;
    owner_ = std::thread::id();
    ++serving_;
    turn_.notify_all();  // few waiters: the one whose ticket is served goes on
  }

 private:
  std::mutex mu_;
  std::condition_variable turn_;
  uint64_t next_ticket_ = 0;  // the ticket the next waiter draws
  uint64_t serving_ = 0;      // the ticket that may hold the lock now
  std::thread::id owner_;
  int depth_ = 0;  // locks owner_ holds, the first one included; 0: free (owner_ unset)
};

}  // namespace ckpt

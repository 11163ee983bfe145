// AsyncSaveControls: see async_controls.h.
#include "harness/async_controls.h"

#include <thread>

namespace ckpt::testing {

void AsyncSaveControls::DelayBeforeSave(AsyncSaver& saver, std::chrono::milliseconds delay) {
  if (delay.count() <= 0) {
    saver.before_save_ = nullptr;
    return;
  }
  saver.before_save_ = [delay] { std::this_thread::sleep_for(delay); };
}

}  // namespace ckpt::testing

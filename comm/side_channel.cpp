// LocalSideChannel and the default Communicator::make_side_channel; see
// comm/side_channel.h.
#include "comm/side_channel.h"

#include <cstdlib>

#include "comm/communicator.h"
#include "core/error.h"

namespace zeroshard {

void LocalSideChannel::abort(int code) {
  std::_Exit(code);
}

std::unique_ptr<SideChannel> Communicator::make_side_channel(double /*setup_timeout_s*/) {
  if (world_size() == 1) return std::make_unique<LocalSideChannel>();
  throw CommError("the " + backend() +
                  " communicator has no side channel; collective timeouts need the MPI backend "
                  "(or a world of one process)");
}

}  // namespace zeroshard

// make_world_communicator(): the one place that chooses the communicator
// backend at build time (ZS_HAVE_MPI from the generated zs_config.h).
#include "comm/communicator.h"
#include "zs_config.h"

#if ZS_HAVE_MPI
#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/mpi_environment.h"
#else
#include "comm/self/self_communicator.h"
#endif

namespace zeroshard {

std::unique_ptr<Communicator> make_world_communicator() {
#if ZS_HAVE_MPI
  mpi_init_once();
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, MpiCommunicator::Ownership::borrowed);
#else
  return std::make_unique<SelfCommunicator>();
#endif
}

}  // namespace zeroshard

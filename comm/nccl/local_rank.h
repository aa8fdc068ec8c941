// The rank of a process among the processes of its node: what picks its GPU.
#pragma once

#include "comm/communicator.h"

namespace zeroshard {

/// This process's rank among the ranks of `comm` that run on the same host,
/// counted in rank order (0 for the lowest rank on the host). Collective
/// over `comm`: every rank all-gathers its host name (gethostname, sent as
/// f32 words, bytes unchanged) and counts the lower ranks with the same
/// name. If the launcher exports the node-local rank (OpenMPI's
/// OMPI_COMM_WORLD_LOCAL_RANK, MVAPICH's MV2_COMM_WORLD_LOCAL_RANK, Intel
/// MPI's MPI_LOCALRANKID, Slurm's SLURM_LOCALID, torchrun's LOCAL_RANK, in
/// that order) that value wins, but the all-gather still happens so every
/// rank joins the same collectives. Throws CommError if the exchange fails
/// or an exported value is not a non-negative integer. Thread safety: a
/// collective; one thread at a time per communicator.
int node_local_rank(Communicator& comm);

}  // namespace zeroshard

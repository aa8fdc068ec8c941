// NcclCommunicator at world size 1 (bootstrapped over the self
// communicator): every collective for every dtype and the standard counts,
// in-place all-gather, non-blocking handles, ordering after a compute
// stream, split, argument errors, and the node-local rank.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "comm/nccl/local_rank.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/self/self_communicator.h"
#include "core/cuda_stream.h"
#include "kernels/cuda/convert.h"
#include "tests/cuda/cuda_test_util.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

// A fresh world-size-1 NCCL communicator per test case (not a static: it
// must be destroyed before the CUDA runtime shuts down at exit).
struct World {
  SelfCommunicator bootstrap;
  NcclCommunicator comm{bootstrap};
};

// count elements of dtype with distinct, exactly representable values.
std::vector<std::uint8_t> pattern(std::size_t count, DType dtype, int salt) {
  std::vector<std::uint8_t> bytes(count * dtype_size(dtype));
  for (std::size_t i = 0; i < count; ++i) {
    const float x = static_cast<float>(static_cast<int>(i % 251) - 125 + salt);
    switch (dtype) {
      case DType::f32: std::memcpy(&bytes[i * 4], &x, 4); break;
      case DType::f64: {
        const double d = x;
        std::memcpy(&bytes[i * 8], &d, 8);
        break;
      }
      case DType::bf16: {
        const std::uint16_t h = float_to_bf16(x);
        std::memcpy(&bytes[i * 2], &h, 2);
        break;
      }
      case DType::f16: {
        const std::uint16_t h = float_to_f16(x);
        std::memcpy(&bytes[i * 2], &h, 2);
        break;
      }
      case DType::u8: bytes[i] = static_cast<std::uint8_t>(x); break;
    }
  }
  return bytes;
}

constexpr DType kDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

}  // namespace

TEST_CASE("nccl: world of one rank on one device") {
  World world;
  NcclCommunicator& comm = world.comm;
  CHECK(comm.rank() == 0);
  CHECK(comm.world_size() == 1);
  CHECK(comm.backend() == "nccl");
  CHECK(comm.native() != nullptr);
  CHECK(comm.device() >= 0);
  CHECK(comm.all_gather_stream() != comm.reduce_scatter_stream());
}

TEST_CASE("nccl: every collective, dtype and count") {
  World world;
  NcclCommunicator& comm = world.comm;
  for (const DType dtype : kDtypes) {
    for (const std::size_t count : kSizes) {
      INFO(dtype_name(dtype) << " count " << count);
      const std::vector<std::uint8_t> data = pattern(count, dtype, 0);
      for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
        DeviceBuffer buf = upload(data);
        comm.all_reduce(buf.data(), count, dtype, op);
        CHECK(download<std::uint8_t>(buf.data(), data.size()) == data);
      }
      {
        DeviceBuffer send = upload(data);
        DeviceBuffer recv(data.size());
        comm.reduce_scatter(send.data(), recv.data(), count, dtype, ReduceOp::sum);
        CHECK(download<std::uint8_t>(recv.data(), data.size()) == data);
      }
      {
        DeviceBuffer send = upload(data);
        DeviceBuffer recv(data.size());
        comm.all_gather(send.data(), recv.data(), count, dtype);
        CHECK(download<std::uint8_t>(recv.data(), data.size()) == data);
        comm.all_gather(recv.data(), recv.data(), count, dtype);  // in place
        CHECK(download<std::uint8_t>(recv.data(), data.size()) == data);
      }
      {
        DeviceBuffer buf = upload(data);
        comm.broadcast(buf.data(), count, dtype, 0);
        CHECK(download<std::uint8_t>(buf.data(), data.size()) == data);
      }
    }
  }
  comm.barrier();
}

TEST_CASE("nccl: non-blocking handles complete and order after the compute stream") {
  World world;
  NcclCommunicator& comm = world.comm;
  CudaStream compute = CudaStream::create();
  comm.set_compute_stream(compute.get());
  const std::size_t n = 1 << 20;
  const std::vector<float> src = random_floats(n, 9, 10.0f);
  const std::vector<std::uint16_t> src16 = to_16bit(src, DType::bf16);
  DeviceBuffer d16 = upload(src16);
  DeviceBuffer d32(n * 4);
  // The cast runs on the compute stream; the all-reduce must see its output.
  kernels::gpu::convert(d16.data(), DType::bf16, d32.data(), DType::f32, n, compute.get());
  CommWork work = comm.iall_reduce(d32.data(), n, DType::f32, ReduceOp::sum);
  CHECK(work.pending());
  while (!work.test()) {
  }
  CHECK(!work.pending());
  CHECK(download<float>(d32.data(), n) == from_16bit(src16, DType::bf16));

  CommWork gather = comm.iall_gather(d32.data(), d32.data(), n, DType::f32);
  comm.stream_wait_all_gathers();
  comm.stream_wait_reductions();
  gather.wait();
  CommWork barrier = comm.ibarrier();
  barrier.wait();
  compute.synchronize();
  comm.set_compute_stream(nullptr);
  CHECK(comm.compute_stream() == nullptr);
}

TEST_CASE("nccl: split and argument errors") {
  World world;
  NcclCommunicator& comm = world.comm;
  std::unique_ptr<Communicator> sub = comm.split(0, 0);
  CHECK(sub->world_size() == 1);
  CHECK(sub->rank() == 0);
  CHECK(sub->backend() == "nccl");
  DeviceBuffer buf = upload(std::vector<float>{1, 2, 3});
  sub->all_reduce(buf.data(), 3, DType::f32, ReduceOp::sum);
  CHECK(download<float>(buf.data(), 3) == std::vector<float>{1, 2, 3});

  CHECK_THROWS_AS(comm.split(-1, 0), CommError);
  CHECK_THROWS_AS(comm.broadcast(buf.data(), 3, DType::f32, 1), CommError);
  CHECK_THROWS_AS(comm.all_reduce(nullptr, 3, DType::f32, ReduceOp::sum), InvariantError);
  DeviceBuffer big(64);
  // recv overlapping send (not the in-place form) is rejected.
  CHECK_THROWS_AS(comm.reduce_scatter(big.data(), big.as<float>() + 1, 4, DType::f32,
                                      ReduceOp::sum),
                  InvariantError);
}

TEST_CASE("node_local_rank of a single process") {
  SelfCommunicator self;
  bool exported = false;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                          "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
    exported = exported || std::getenv(var) != nullptr;
  }
  const int local = node_local_rank(self);
  CHECK(local >= 0);
  if (!exported) CHECK(local == 0);
}

// Datatype and reduction-operator mapping for MPI; see comm/mpi/mpi_types.h,
// in particular [Note: 16-bit reductions].
#include "comm/mpi/mpi_types.h"

#include <cmath>
#include <cstring>
#include <mutex>

#include "comm/mpi/mpi_check.h"
#include "core/error.h"

namespace zeroshard {

namespace {

template <DType T>
float widen(std::uint16_t h) {
  if constexpr (T == DType::bf16) {
    return bf16_to_float(h);
  } else {
    return f16_to_float(h);
  }
}

template <DType T>
std::uint16_t narrow(float f) {
  if constexpr (T == DType::bf16) {
    return float_to_bf16(f);
  } else {
    return float_to_f16(f);
  }
}

template <ReduceOp Op>
float combine(float a, float b) {
  if constexpr (Op == ReduceOp::sum) {
    return a + b;
  } else {
    if (std::isnan(a) || std::isnan(b)) return a + b;
    if constexpr (Op == ReduceOp::max) {
      return b > a ? b : a;
    } else {
      return b < a ? b : a;
    }
  }
}

// inout[i] = combine(in[i], inout[i]); byte buffers because MPI hands us
// void pointers and makes no alignment promise for its temporaries.
template <DType T, ReduceOp Op>
void reduce_bytes(const unsigned char* in, unsigned char* inout, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    std::uint16_t a;
    std::uint16_t b;
    std::memcpy(&a, in + 2 * i, 2);
    std::memcpy(&b, inout + 2 * i, 2);
    const std::uint16_t r = narrow<T>(combine<Op>(widen<T>(a), widen<T>(b)));
    std::memcpy(inout + 2 * i, &r, 2);
  }
}

// MPI_User_function for one (type, op) pair.
template <DType T, ReduceOp Op>
void user_op(void* in, void* inout, int* len, MPI_Datatype* /*datatype*/) {
  reduce_bytes<T, Op>(static_cast<const unsigned char*>(in), static_cast<unsigned char*>(inout),
                      static_cast<std::size_t>(*len));
}

constexpr int kOps = 3;  // ReduceOp::sum, max, min, in enum order

template <DType T>
constexpr MPI_User_function* user_ops[kOps] = {
    &user_op<T, ReduceOp::sum>, &user_op<T, ReduceOp::max>, &user_op<T, ReduceOp::min>};

int op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return 0;
    case ReduceOp::max: return 1;
    case ReduceOp::min: return 2;
  }
  ZS_CHECK(false, "unknown ReduceOp {}", static_cast<int>(op));
  return 0;
}

// The lazily created 16-bit datatypes and ops; index 0 is bf16, 1 is f16.
struct Registry {
  std::mutex mutex;
  bool created = false;
  bool released = false;
  MPI_Datatype types[2] = {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL};
  MPI_Op ops[2][kOps] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                         {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};
  int keyval = MPI_KEYVAL_INVALID;
};

Registry& registry() {
  static Registry r;
  return r;
}

// Delete callback of the MPI_COMM_SELF attribute: runs at the start of
// MPI_Finalize and frees what create_locked made. Must not throw.
int release_at_finalize(MPI_Comm /*comm*/, int /*keyval*/, void* /*value*/, void* /*extra*/) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& row : r.ops) {
    for (MPI_Op& op : row) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
  }
  for (MPI_Datatype& t : r.types) {
    if (t != MPI_DATATYPE_NULL) MPI_Type_free(&t);
  }
  if (r.keyval != MPI_KEYVAL_INVALID) MPI_Comm_free_keyval(&r.keyval);
  r.created = false;
  r.released = true;
  return MPI_SUCCESS;
}

void create_locked(Registry& r) {
  for (int t = 0; t < 2; ++t) {
    ZS_MPI_CALL(-1, MPI_Type_contiguous, 2, MPI_BYTE, &r.types[t]);
    ZS_MPI_CALL(-1, MPI_Type_commit, &r.types[t]);
  }
  for (int o = 0; o < kOps; ++o) {
    ZS_MPI_CALL(-1, MPI_Op_create, user_ops<DType::bf16>[o], 1, &r.ops[0][o]);
    ZS_MPI_CALL(-1, MPI_Op_create, user_ops<DType::f16>[o], 1, &r.ops[1][o]);
  }
  ZS_MPI_CALL(-1, MPI_Comm_create_keyval, MPI_COMM_NULL_COPY_FN, &release_at_finalize, &r.keyval,
              nullptr);
  ZS_MPI_CALL(-1, MPI_Comm_set_attr, MPI_COMM_SELF, r.keyval, nullptr);
  r.created = true;
}

Registry& ready_registry() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.created) return r;
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (r.released || finalized) {
    throw CommError("bf16/f16 MPI types requested after MPI_Finalize; finish collectives first");
  }
  if (!initialized) {
    throw CommError(
        "bf16/f16 MPI types requested before MPI_Init; create the communicator with "
        "make_world_communicator() first");
  }
  create_locked(r);
  return r;
}

int half_index(DType dtype) {
  return dtype == DType::bf16 ? 0 : 1;
}

}  // namespace

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::bf16:
    case DType::f16: return ready_registry().types[half_index(dtype)];
    case DType::u8: return MPI_UNSIGNED_CHAR;
  }
  ZS_CHECK(false, "unknown DType {}", static_cast<int>(dtype));
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  const int o = op_index(op);
  switch (dtype) {
    case DType::f32:
    case DType::f64: {
      const MPI_Op builtin[kOps] = {MPI_SUM, MPI_MAX, MPI_MIN};
      return builtin[o];
    }
    case DType::bf16:
    case DType::f16: return ready_registry().ops[half_index(dtype)][o];
    case DType::u8: break;  // bytes are moved, never reduced
  }
  ZS_CHECK(false, "unknown DType {}", static_cast<int>(dtype));
  return MPI_OP_NULL;
}

void reduce_16bit(DType dtype, ReduceOp op, const std::uint16_t* in, std::uint16_t* inout,
                  std::size_t count) {
  ZS_CHECK(dtype == DType::bf16 || dtype == DType::f16, "reduce_16bit needs bf16 or f16, got {}",
           dtype_name(dtype));
  using Kernel = void (*)(const unsigned char*, unsigned char*, std::size_t);
  constexpr Kernel kernels[2][kOps] = {
      {&reduce_bytes<DType::bf16, ReduceOp::sum>, &reduce_bytes<DType::bf16, ReduceOp::max>,
       &reduce_bytes<DType::bf16, ReduceOp::min>},
      {&reduce_bytes<DType::f16, ReduceOp::sum>, &reduce_bytes<DType::f16, ReduceOp::max>,
       &reduce_bytes<DType::f16, ReduceOp::min>}};
  kernels[half_index(dtype)][op_index(op)](reinterpret_cast<const unsigned char*>(in),
                                           reinterpret_cast<unsigned char*>(inout), count);
}

}  // namespace zeroshard

// The C ABI: each entry point converts arguments, calls the C++ API, and turns
// a braid::Error into its braid_result_t with the message kept per thread for
// braid_last_error(). No exception crosses this boundary.
#include "braid/braid.h"

#include <algorithm>
#include <array>
#include <memory>
#include <vector>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "braid/braid.hpp"
#include "core/device.hpp"
#include "core/reduce.hpp"
#include "group.hpp"
#include "core/text.hpp"

static_assert(BRAID_SPLIT_NOCOLOR == braid::Comm::kNoColor);

// A pre-multiplied sum made by braid_red_op_create_pre_mul_sum.
struct PreMulSum {
  braid::DataType type;
  std::array<std::byte, 8> scalar{};  // one value of `type`
};

struct braid_comm {
  braid::Comm comm;
  std::vector<std::optional<PreMulSum>> pre_mul_sums;  // braid_redop_t kFirstCustomOp + index
};

struct braid_work {
  braid::Work work;
};

namespace {

thread_local std::string t_last_error;

template <typename Body>
braid_result_t guarded(Body&& body) {
  try {
    body();
    return braid_success;
  } catch (const braid::Error& e) {
    t_last_error = e.what();
    return static_cast<braid_result_t>(e.code());
  } catch (const std::bad_alloc&) {
    t_last_error = "out of memory";
    return braid_system_error;
  } catch (const std::exception& e) {
    t_last_error = braid::cat("unexpected error: ", e.what());
    return braid_internal_error;
  } catch (...) {
    t_last_error = "unexpected error of an unknown kind";
    return braid_internal_error;
  }
}

// C lets an enum variable hold any int, but in C++ loading a value outside
// the range of an enum without a fixed underlying type is undefined (UBSan's
// -fsanitize=enum traps it). The C enums crossing this boundary are read as
// their raw bits instead, never loaded as the enum type.
template <typename Enum>
int raw_value(const Enum& e) {
  std::underlying_type_t<Enum> v;
  std::memcpy(&v, &e, sizeof v);
  return static_cast<int>(v);
}

// The C values are NCCL's (braid.h); the C++ enums keep their own order.
constexpr braid::DataType kCTypes[] = {braid::DataType::i8,  braid::DataType::u8,  braid::DataType::i32,
                                       braid::DataType::u32, braid::DataType::i64, braid::DataType::u64,
                                       braid::DataType::f16, braid::DataType::f32, braid::DataType::f64,
                                       braid::DataType::bf16};
constexpr braid::ReduceOp kCOps[] = {braid::ReduceOp::sum, braid::ReduceOp::prod, braid::ReduceOp::max,
                                     braid::ReduceOp::min, braid::ReduceOp::avg};
static_assert(std::size(kCTypes) == braid::kDataTypeCount && std::size(kCOps) == braid::kReduceOpCount);

braid::DataType to_type(const braid_datatype_t& t) {
  int v = raw_value(t);
  if (v < 0 || v >= braid::kDataTypeCount)
    throw braid::InvalidArgument(braid::cat("unknown braid_datatype_t value ", v, " (braid_i8 .. braid_bf16 are 0 .. ",
                                            braid::kDataTypeCount - 1, ", as NCCL's ncclDataType_t)"));
  return kCTypes[v];
}

braid::ReduceOp to_op(const braid_redop_t& op) {
  int v = raw_value(op);
  if (v < 0 || v >= braid::kReduceOpCount)
    throw braid::InvalidArgument(braid::cat("unknown braid_redop_t value ", v, " (braid_sum .. braid_avg are 0 .. ",
                                            braid::kReduceOpCount - 1, ", as NCCL's ncclRedOp_t)"));
  return kCOps[v];
}

braid::Comm& comm_of(braid_comm_t comm) {
  if (comm == nullptr) throw braid::InvalidArgument("the communicator handle is NULL");
  return comm->comm;
}

template <typename Pointer>
void require(Pointer* p, const char* name) {
  if (p == nullptr) throw braid::InvalidArgument(braid::cat(name, " is NULL"));
}

braid::Work& work_of(braid_work_t work) {
  if (work == nullptr) throw braid::InvalidArgument("the work handle is NULL");
  return work->work;
}

// The *_async entry points: `start` submits the operation and returns its
// Work, which becomes a handle only once the operation is queued, so *work is
// NULL after any failure.
template <typename Start>
braid_result_t started(braid_work_t* work, Start&& start) {
  return guarded([&] {
    require(work, "the work handle pointer");
    *work = nullptr;
    braid::Work w = start();
    *work = new braid_work{std::move(w)};
  });
}

// Custom reductions (pre-multiplied sums) take braid_redop_t values from here
// on, as NCCL's take ncclNumOps and up.
constexpr int kFirstCustomOp = 5;
static_assert(kFirstCustomOp == braid::kReduceOpCount);

// What a reducing call runs: the operator, and the input to give it. For a
// pre-multiplied sum that is a scaled copy of the caller's input (kept alive
// by `keep` until the operation is done) and the operator is sum.
struct Reduction {
  braid::ReduceOp op;
  const void* send;
  std::shared_ptr<std::vector<std::byte>> keep;
};

Reduction reduction_of(braid_comm_t comm, const braid_redop_t& op, braid::DataType type, const void* send,
                       std::size_t elements) {
  const int v = raw_value(op);
  if (v < kFirstCustomOp) return Reduction{to_op(op), send, nullptr};
  const auto index = static_cast<std::size_t>(v - kFirstCustomOp);
  if (comm == nullptr || index >= comm->pre_mul_sums.size() || !comm->pre_mul_sums[index])
    return Reduction{to_op(op), send, nullptr};  // names the bad value
  const PreMulSum& pre = *comm->pre_mul_sums[index];
  if (pre.type != type)
    throw braid::InvalidArgument(braid::cat("braid_redop_t ", v, " is a pre-multiplied sum of ", braid::name_of(pre.type),
                                            " but the call's datatype is ", braid::name_of(type)));
  if (elements > 0 && send == nullptr) throw braid::InvalidArgument("sendbuf is NULL");
  if (braid::device::count() > 0 && braid::device::locate(send).kind == braid::MemKind::cuda)
    throw braid::Error(braid::ErrorCode::unsupported,
                       "pre-multiplied sums scale on the host: device buffers are not supported with them yet");
  auto scaled = std::make_shared<std::vector<std::byte>>(elements * braid::size_of(type));
  braid::scale(type, scaled->data(), send, elements, pre.scalar.data());
  return Reduction{braid::ReduceOp::sum, scaled->data(), std::move(scaled)};
}

// Runs `start` (an *_async call on r's input): with a scaled copy, holds it
// until the operation is done, and for a blocking call outside a group
// waits.
template <typename Start>
braid::Work run_reduction(const Reduction& r, bool blocking, Start&& start) {
  braid::Work w = start();
  if (r.keep) w.then([keep = r.keep](std::exception_ptr) {});
  if (blocking && !braid::group_open()) w.wait();
  return w;
}

// n entries of a C array of counts or displacements (n: the communicator's
// size), or none for NULL.
std::span<const std::size_t> per_rank(const size_t* p, braid::Comm& comm) {
  return p ? std::span<const std::size_t>(p, static_cast<std::size_t>(comm.size())) : std::span<const std::size_t>();
}

braid::CommOptions options_of(const braid_config_t* config) {
  braid::CommOptions options;
  if (config == nullptr) return options;
  if (config->size != sizeof(braid_config_t))
    throw braid::InvalidArgument(braid::cat("braid_config_t.size is ", config->size, " but this braid's is ",
                                            sizeof(braid_config_t), ": start from BRAID_CONFIG_INITIALIZER"));
  if (config->timeout_ms < 0)
    throw braid::InvalidArgument(braid::cat("braid_config_t.timeout_ms is ", config->timeout_ms, "; give 0 for the default"));
  if (config->timeout_ms > 0) options.timeout = std::chrono::milliseconds(config->timeout_ms);
  if (config->transport) options.transport = config->transport;
  if (config->algorithm) options.algorithm = config->algorithm;
  if (config->blocking != 1)
    throw braid::Error(braid::ErrorCode::unsupported,
                       braid::cat("braid_config_t.blocking is ", config->blocking,
                                  ": only blocking communicators (1) exist so far; start operations in the background "
                                  "with the *_async calls instead"));
  return options;
}

}  // namespace

extern "C" {

braid_result_t braid_get_unique_id(braid_unique_id_t* id) {
  return guarded([&] {
    require(id, "the unique id pointer");
    braid::UniqueId made = braid::UniqueId::create();
    std::memcpy(id->internal, made.bytes.data(), sizeof id->internal);
  });
}

braid_result_t braid_comm_init_rank(braid_comm_t* comm, int nranks, braid_unique_id_t id, int rank) {
  return guarded([&] {
    require(comm, "the communicator pointer");
    *comm = nullptr;
    braid::UniqueId uid;
    std::memcpy(uid.bytes.data(), id.internal, uid.bytes.size());
    *comm = new braid_comm{braid::Comm::init(uid, rank, nranks)};
  });
}

braid_result_t braid_comm_init_env(braid_comm_t* comm) {
  return guarded([&] {
    require(comm, "the communicator pointer");
    *comm = nullptr;
    *comm = new braid_comm{braid::Comm::from_env()};
  });
}

braid_result_t braid_comm_init_rank_config(braid_comm_t* comm, int nranks, braid_unique_id_t id, int rank,
                                           const braid_config_t* config) {
  return guarded([&] {
    require(comm, "the communicator pointer");
    *comm = nullptr;
    const braid::CommOptions options = options_of(config);
    braid::UniqueId uid;
    std::memcpy(uid.bytes.data(), id.internal, uid.bytes.size());
    *comm = new braid_comm{braid::Comm::init(uid, rank, nranks, options)};
  });
}

braid_result_t braid_unique_id_to_hex(const braid_unique_id_t* id, char* buf, size_t len) {
  return guarded([&] {
    require(id, "the unique id pointer");
    require(buf, "the buffer");
    if (len < BRAID_UNIQUE_ID_HEX_BYTES)
      throw braid::InvalidArgument(braid::cat("braid_unique_id_to_hex: the buffer holds ", len, " bytes; it needs ",
                                              BRAID_UNIQUE_ID_HEX_BYTES, " (BRAID_UNIQUE_ID_HEX_BYTES)"));
    braid::UniqueId uid;
    std::memcpy(uid.bytes.data(), id->internal, uid.bytes.size());
    const std::string hex = uid.to_hex();
    std::memcpy(buf, hex.c_str(), hex.size() + 1);
  });
}

braid_result_t braid_unique_id_from_hex(const char* hex, braid_unique_id_t* id) {
  return guarded([&] {
    require(hex, "the hex text");
    require(id, "the unique id pointer");
    const braid::UniqueId uid = braid::UniqueId::from_hex(hex);
    std::memcpy(id->internal, uid.bytes.data(), sizeof id->internal);
  });
}

braid_result_t braid_comm_finalize(braid_comm_t comm) {
  return guarded([&] {
    comm_of(comm).finalize();
  });
}

braid_result_t braid_red_op_create_pre_mul_sum(braid_redop_t* op, void* scalar, braid_datatype_t datatype,
                                               braid_scalar_residence_t residence, braid_comm_t comm) {
  return guarded([&] {
    require(op, "the operator pointer");
    require(scalar, "the scalar pointer");
    comm_of(comm);
    const braid::DataType t = to_type(datatype);
    const int where = raw_value(residence);
    if (where != braid_scalar_host_immediate)
      throw braid::Error(braid::ErrorCode::unsupported,
                         braid::cat("braid_red_op_create_pre_mul_sum: residence ", where,
                                    ": only braid_scalar_host_immediate (the scalar read now, from host memory) is "
                                    "supported"));
    PreMulSum pre{t, {}};
    std::memcpy(pre.scalar.data(), scalar, braid::size_of(t));
    auto& table = comm->pre_mul_sums;
    auto free_slot = std::find_if(table.begin(), table.end(), [](const auto& e) { return !e.has_value(); });
    if (free_slot == table.end()) free_slot = table.insert(table.end(), std::nullopt);
    *free_slot = pre;
    const int value = kFirstCustomOp + static_cast<int>(free_slot - table.begin());
    std::memcpy(op, &value, sizeof value);
  });
}

braid_result_t braid_red_op_destroy(braid_redop_t op, braid_comm_t comm) {
  return guarded([&] {
    comm_of(comm);
    const int v = raw_value(op);
    const auto index = static_cast<std::size_t>(v - kFirstCustomOp);
    if (v < kFirstCustomOp || index >= comm->pre_mul_sums.size() || !comm->pre_mul_sums[index])
      throw braid::InvalidArgument(braid::cat("braid_red_op_destroy: ", v,
                                              " is not an operator made by braid_red_op_create_pre_mul_sum on this "
                                              "communicator"));
    comm->pre_mul_sums[index].reset();
  });
}

braid_result_t braid_comm_user_rank(braid_comm_t comm, int* rank) { return braid_comm_rank(comm, rank); }

braid_result_t braid_mem_alloc(void** ptr, size_t size) {
  return guarded([&] {
    require(ptr, "the pointer for the allocation");
    *ptr = nullptr;
    *ptr = braid::mem_alloc(size);
  });
}

braid_result_t braid_mem_free(void* ptr) {
  return guarded([&] { braid::mem_free(ptr); });
}

braid_result_t braid_comm_register(braid_comm_t comm, void* buff, size_t size, void** handle) {
  return guarded([&] {
    require(handle, "the handle pointer");
    *handle = nullptr;
    *handle = comm_of(comm).register_buffer(buff, size);
  });
}

braid_result_t braid_comm_deregister(braid_comm_t comm, void* handle) {
  return guarded([&] { comm_of(comm).deregister_buffer(handle); });
}

braid_result_t braid_sendrecv(const void* sendbuf, size_t sendcount, int dest, void* recvbuf, size_t recvcount,
                              int source, braid_datatype_t datatype, braid_comm_t comm) {
  return guarded(
      [&] { comm_of(comm).sendrecv(sendbuf, sendcount, dest, recvbuf, recvcount, source, to_type(datatype)); });
}

braid_result_t braid_group_start(void) {
  return guarded([] { braid::group_start(); });
}

braid_result_t braid_group_end(void) {
  return guarded([] { braid::group_end(); });
}

braid_result_t braid_all_to_allv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls, void* recvbuf,
                                 const size_t* recvcounts, const size_t* rdispls, braid_datatype_t datatype,
                                 braid_comm_t comm) {
  return guarded([&] {
    braid::Comm& c = comm_of(comm);
    c.all_to_allv(sendbuf, per_rank(sendcounts, c), per_rank(sdispls, c), recvbuf, per_rank(recvcounts, c),
                  per_rank(rdispls, c), to_type(datatype));
  });
}

braid_result_t braid_all_gatherv(const void* sendbuf, size_t sendcount, void* recvbuf, const size_t* recvcounts,
                                 const size_t* displs, braid_datatype_t datatype, braid_comm_t comm) {
  return guarded([&] {
    braid::Comm& c = comm_of(comm);
    c.all_gatherv(sendbuf, sendcount, recvbuf, per_rank(recvcounts, c), per_rank(displs, c), to_type(datatype));
  });
}

braid_result_t braid_reduce_scatterv(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                     braid_datatype_t datatype, braid_redop_t op, braid_comm_t comm) {
  return guarded([&] {
    braid::Comm& c = comm_of(comm);
    c.reduce_scatterv(sendbuf, recvbuf, per_rank(recvcounts, c), to_type(datatype), to_op(op));
  });
}

braid_result_t braid_gatherv(const void* sendbuf, size_t sendcount, void* recvbuf, const size_t* recvcounts,
                             const size_t* displs, braid_datatype_t datatype, int root, braid_comm_t comm) {
  return guarded([&] {
    braid::Comm& c = comm_of(comm);
    c.gatherv(sendbuf, sendcount, recvbuf, per_rank(recvcounts, c), per_rank(displs, c), to_type(datatype), root);
  });
}

braid_result_t braid_scatterv(const void* sendbuf, const size_t* sendcounts, const size_t* displs, void* recvbuf,
                              size_t recvcount, braid_datatype_t datatype, int root, braid_comm_t comm) {
  return guarded([&] {
    braid::Comm& c = comm_of(comm);
    c.scatterv(sendbuf, per_rank(sendcounts, c), per_rank(displs, c), recvbuf, recvcount, to_type(datatype), root);
  });
}

braid_result_t braid_all_to_allv_async(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                                       void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                                       braid_datatype_t datatype, braid_comm_t comm, braid_work_t* work) {
  return started(work, [&] {
    braid::Comm& c = comm_of(comm);
    return c.all_to_allv_async(sendbuf, per_rank(sendcounts, c), per_rank(sdispls, c), recvbuf,
                               per_rank(recvcounts, c), per_rank(rdispls, c), to_type(datatype));
  });
}

braid_result_t braid_all_gatherv_async(const void* sendbuf, size_t sendcount, void* recvbuf, const size_t* recvcounts,
                                       const size_t* displs, braid_datatype_t datatype, braid_comm_t comm,
                                       braid_work_t* work) {
  return started(work, [&] {
    braid::Comm& c = comm_of(comm);
    return c.all_gatherv_async(sendbuf, sendcount, recvbuf, per_rank(recvcounts, c), per_rank(displs, c),
                               to_type(datatype));
  });
}

braid_result_t braid_reduce_scatterv_async(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                           braid_datatype_t datatype, braid_redop_t op, braid_comm_t comm,
                                           braid_work_t* work) {
  return started(work, [&] {
    braid::Comm& c = comm_of(comm);
    return c.reduce_scatterv_async(sendbuf, recvbuf, per_rank(recvcounts, c), to_type(datatype), to_op(op));
  });
}

braid_result_t braid_gatherv_async(const void* sendbuf, size_t sendcount, void* recvbuf, const size_t* recvcounts,
                                   const size_t* displs, braid_datatype_t datatype, int root, braid_comm_t comm,
                                   braid_work_t* work) {
  return started(work, [&] {
    braid::Comm& c = comm_of(comm);
    return c.gatherv_async(sendbuf, sendcount, recvbuf, per_rank(recvcounts, c), per_rank(displs, c),
                           to_type(datatype), root);
  });
}

braid_result_t braid_scatterv_async(const void* sendbuf, const size_t* sendcounts, const size_t* displs,
                                    void* recvbuf, size_t recvcount, braid_datatype_t datatype, int root,
                                    braid_comm_t comm, braid_work_t* work) {
  return started(work, [&] {
    braid::Comm& c = comm_of(comm);
    return c.scatterv_async(sendbuf, per_rank(sendcounts, c), per_rank(displs, c), recvbuf, recvcount,
                            to_type(datatype), root);
  });
}

braid_result_t braid_comm_destroy(braid_comm_t comm) {
  return guarded([&] { delete comm; });
}

braid_result_t braid_comm_rank(braid_comm_t comm, int* rank) {
  return guarded([&] {
    require(rank, "the rank pointer");
    *rank = comm_of(comm).rank();
  });
}

braid_result_t braid_comm_count(braid_comm_t comm, int* count) {
  return guarded([&] {
    require(count, "the count pointer");
    *count = comm_of(comm).size();
  });
}

braid_result_t braid_comm_local_rank(braid_comm_t comm, int* local_rank) {
  return guarded([&] {
    require(local_rank, "the local rank pointer");
    *local_rank = comm_of(comm).local_rank();
  });
}

braid_result_t braid_comm_local_size(braid_comm_t comm, int* local_size) {
  return guarded([&] {
    require(local_size, "the local size pointer");
    *local_size = comm_of(comm).local_size();
  });
}

braid_result_t braid_comm_split(braid_comm_t comm, int color, int key, braid_comm_t* newcomm) {
  return guarded([&] {
    require(newcomm, "the new communicator pointer");
    *newcomm = nullptr;
    braid::Comm child = comm_of(comm).split(color, key);
    if (child.valid()) *newcomm = new braid_comm{std::move(child)};
  });
}

braid_result_t braid_comm_shrink(braid_comm_t comm, const int* exclude_ranks, int exclude_count,
                                 braid_comm_t* newcomm, int flags) {
  return guarded([&] {
    require(newcomm, "the new communicator pointer");
    *newcomm = nullptr;
    if (exclude_count < 0)
      throw braid::InvalidArgument(braid::cat("braid_comm_shrink: exclude_count ", exclude_count, " is negative"));
    if (exclude_count > 0) require(exclude_ranks, "the list of ranks to exclude");
    if (flags != BRAID_SHRINK_DEFAULT && flags != BRAID_SHRINK_ABORT)
      throw braid::InvalidArgument(braid::cat("braid_comm_shrink: flags ", flags, " are neither BRAID_SHRINK_DEFAULT (",
                                              BRAID_SHRINK_DEFAULT, ") nor BRAID_SHRINK_ABORT (", BRAID_SHRINK_ABORT,
                                              ")"));
    braid::Comm child = comm_of(comm).shrink(
        std::span<const int>(exclude_ranks, static_cast<std::size_t>(exclude_count)),
        flags == BRAID_SHRINK_ABORT ? braid::Comm::Shrink::abort : braid::Comm::Shrink::finish);
    *newcomm = new braid_comm{std::move(child)};
  });
}

braid_result_t braid_comm_shrink_lost(braid_comm_t comm, braid_comm_t* newcomm, int flags) {
  return guarded([&] {
    require(newcomm, "the new communicator pointer");
    *newcomm = nullptr;
    if (flags != BRAID_SHRINK_DEFAULT && flags != BRAID_SHRINK_ABORT)
      throw braid::InvalidArgument(braid::cat("braid_comm_shrink_lost: flags ", flags, " are neither "
                                              "BRAID_SHRINK_DEFAULT (", BRAID_SHRINK_DEFAULT, ") nor BRAID_SHRINK_ABORT (",
                                              BRAID_SHRINK_ABORT, ")"));
    braid::Comm child = comm_of(comm).shrink_lost(flags == BRAID_SHRINK_ABORT ? braid::Comm::Shrink::abort
                                                                              : braid::Comm::Shrink::finish);
    *newcomm = new braid_comm{std::move(child)};
  });
}

braid_result_t braid_comm_grow(braid_comm_t comm, braid_comm_t* newcomm) {
  return guarded([&] {
    require(newcomm, "the new communicator pointer");
    *newcomm = nullptr;
    braid::Comm grown = comm_of(comm).grow();
    if (grown.valid()) *newcomm = new braid_comm{std::move(grown)};
  });
}

braid_result_t braid_comm_join(const char* store_addr, braid_comm_t* comm) {
  return guarded([&] {
    require(comm, "the communicator pointer");
    *comm = nullptr;
    require(store_addr, "the store address");
    *comm = new braid_comm{braid::Comm::join(store_addr)};
  });
}

braid_result_t braid_comm_abort(braid_comm_t comm) {
  return guarded([&] { comm_of(comm).abort(); });
}

braid_result_t braid_comm_get_async_error(braid_comm_t comm, braid_result_t* error) {
  return guarded([&] {
    require(error, "the error pointer");
    *error = braid_success;
    if (std::exception_ptr failure = comm_of(comm).async_error()) {
      try {
        std::rethrow_exception(failure);
      } catch (const braid::Error& e) {
        t_last_error = e.what();
        *error = static_cast<braid_result_t>(e.code());
      }
    }
  });
}

braid_result_t braid_comm_dump_state(braid_comm_t comm, char* buf, size_t len) {
  return guarded([&] {
    require(buf, "the buffer");
    if (len == 0) throw braid::InvalidArgument("braid_comm_dump_state: the buffer length is 0");
    std::string text = comm_of(comm).dump_state();
    std::size_t n = std::min(text.size(), len - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  });
}

braid_result_t braid_comm_get_stats(braid_comm_t comm, braid_op_stats_t* rows, size_t capacity, size_t* count) {
  return guarded([&] {
    require(count, "count");
    if (capacity > 0) require(rows, "rows");
    const std::vector<braid::OpStats> stats = comm_of(comm).stats();
    *count = stats.size();
    for (std::size_t i = 0; i < stats.size() && i < capacity; ++i) {
      const braid::OpStats& s = stats[i];
      braid_op_stats_t& r = rows[i];
      r = braid_op_stats_t{};
      std::snprintf(r.collective, sizeof r.collective, "%s", s.collective.c_str());
      std::snprintf(r.algorithm, sizeof r.algorithm, "%s", s.algorithm.c_str());
      r.band_min_bytes = s.band_min_bytes;
      r.band_max_bytes = s.band_max_bytes;
      r.count = s.count;
      r.bytes = s.bytes;
      r.total_us = s.total_us;
      r.min_us = s.min_us;
      r.max_us = s.max_us;
      r.p50_us = s.p50_us;
      r.p99_us = s.p99_us;
    }
  });
}

braid_result_t braid_all_reduce(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                braid_redop_t op, braid_comm_t comm) {
  return guarded([&] {
    const braid::DataType t = to_type(datatype);
    const Reduction r = reduction_of(comm, op, t, sendbuf, count);
    if (!r.keep) return comm_of(comm).all_reduce(sendbuf, recvbuf, count, t, r.op);
    run_reduction(r, true, [&] { return comm_of(comm).all_reduce_async(r.send, recvbuf, count, t, r.op); });
  });
}

braid_result_t braid_broadcast(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype, int root,
                               braid_comm_t comm) {
  return guarded([&] { comm_of(comm).broadcast(sendbuf, recvbuf, count, to_type(datatype), root); });
}

braid_result_t braid_reduce(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                            braid_redop_t op, int root, braid_comm_t comm) {
  return guarded([&] {
    const braid::DataType t = to_type(datatype);
    const Reduction r = reduction_of(comm, op, t, sendbuf, count);
    if (!r.keep) return comm_of(comm).reduce(sendbuf, recvbuf, count, t, r.op, root);
    run_reduction(r, true, [&] { return comm_of(comm).reduce_async(r.send, recvbuf, count, t, r.op, root); });
  });
}

braid_result_t braid_all_gather(const void* sendbuf, void* recvbuf, size_t sendcount, braid_datatype_t datatype,
                                braid_comm_t comm) {
  return guarded([&] { comm_of(comm).all_gather(sendbuf, recvbuf, sendcount, to_type(datatype)); });
}

braid_result_t braid_reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, braid_datatype_t datatype,
                                    braid_redop_t op, braid_comm_t comm) {
  return guarded([&] {
    const braid::DataType t = to_type(datatype);
    const Reduction r = reduction_of(comm, op, t, sendbuf, recvcount * static_cast<std::size_t>(comm_of(comm).size()));
    if (!r.keep) return comm_of(comm).reduce_scatter(sendbuf, recvbuf, recvcount, t, r.op);
    run_reduction(r, true, [&] { return comm_of(comm).reduce_scatter_async(r.send, recvbuf, recvcount, t, r.op); });
  });
}

braid_result_t braid_all_to_all(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                braid_comm_t comm) {
  return guarded([&] { comm_of(comm).all_to_all(sendbuf, recvbuf, count, to_type(datatype)); });
}

// The *_stream forms: wait for the stream's work, then the blocking call.
namespace {
braid_result_t wait_for_stream(braid_comm_t comm, void* stream, const void* sendbuf, const void* recvbuf,
                               const char* what) {
  return guarded([&] {
    braid::device::wait_stream(stream, recvbuf ? recvbuf : sendbuf,
                               braid::cat("rank ", comm_of(comm).rank(), ": ", what));
  });
}
}  // namespace

braid_result_t braid_all_reduce_stream(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                       braid_redop_t op, braid_comm_t comm, void* stream) {
  const braid_result_t waited = wait_for_stream(comm, stream, sendbuf, recvbuf, "braid_all_reduce_stream");
  return waited != braid_success ? waited : braid_all_reduce(sendbuf, recvbuf, count, datatype, op, comm);
}

braid_result_t braid_broadcast_stream(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                      int root, braid_comm_t comm, void* stream) {
  const braid_result_t waited = wait_for_stream(comm, stream, sendbuf, recvbuf, "braid_broadcast_stream");
  return waited != braid_success ? waited : braid_broadcast(sendbuf, recvbuf, count, datatype, root, comm);
}

braid_result_t braid_reduce_stream(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                   braid_redop_t op, int root, braid_comm_t comm, void* stream) {
  const braid_result_t waited = wait_for_stream(comm, stream, sendbuf, recvbuf, "braid_reduce_stream");
  return waited != braid_success ? waited : braid_reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
}

braid_result_t braid_all_gather_stream(const void* sendbuf, void* recvbuf, size_t sendcount,
                                       braid_datatype_t datatype, braid_comm_t comm, void* stream) {
  const braid_result_t waited = wait_for_stream(comm, stream, sendbuf, recvbuf, "braid_all_gather_stream");
  return waited != braid_success ? waited : braid_all_gather(sendbuf, recvbuf, sendcount, datatype, comm);
}

braid_result_t braid_reduce_scatter_stream(const void* sendbuf, void* recvbuf, size_t recvcount,
                                           braid_datatype_t datatype, braid_redop_t op, braid_comm_t comm,
                                           void* stream) {
  const braid_result_t waited = wait_for_stream(comm, stream, sendbuf, recvbuf, "braid_reduce_scatter_stream");
  return waited != braid_success ? waited
                                 : braid_reduce_scatter(sendbuf, recvbuf, recvcount, datatype, op, comm);
}

braid_result_t braid_gather(const void* sendbuf, void* recvbuf, size_t sendcount, braid_datatype_t datatype, int root,
                            braid_comm_t comm) {
  return guarded([&] { comm_of(comm).gather(sendbuf, recvbuf, sendcount, to_type(datatype), root); });
}

braid_result_t braid_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, braid_datatype_t datatype, int root,
                             braid_comm_t comm) {
  return guarded([&] { comm_of(comm).scatter(sendbuf, recvbuf, recvcount, to_type(datatype), root); });
}

braid_result_t braid_barrier(braid_comm_t comm) {
  return guarded([&] { comm_of(comm).barrier(); });
}

braid_result_t braid_send(const void* buf, size_t count, braid_datatype_t datatype, int peer, braid_comm_t comm) {
  return guarded([&] { comm_of(comm).send(buf, count, to_type(datatype), peer); });
}

braid_result_t braid_recv(void* buf, size_t count, braid_datatype_t datatype, int peer, braid_comm_t comm) {
  return guarded([&] { comm_of(comm).recv(buf, count, to_type(datatype), peer); });
}

// ---- started in the background ----------------------------------------------------

braid_result_t braid_all_reduce_async(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                      braid_redop_t op, braid_comm_t comm, braid_work_t* work) {
  return started(work, [&] {
    const braid::DataType t = to_type(datatype);
    const Reduction r = reduction_of(comm, op, t, sendbuf, count);
    return run_reduction(r, false, [&] { return comm_of(comm).all_reduce_async(r.send, recvbuf, count, t, r.op); });
  });
}

braid_result_t braid_broadcast_async(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                     int root, braid_comm_t comm, braid_work_t* work) {
  return started(work, [&] { return comm_of(comm).broadcast_async(sendbuf, recvbuf, count, to_type(datatype), root); });
}

braid_result_t braid_reduce_async(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                  braid_redop_t op, int root, braid_comm_t comm, braid_work_t* work) {
  return started(work, [&] {
    const braid::DataType t = to_type(datatype);
    const Reduction r = reduction_of(comm, op, t, sendbuf, count);
    return run_reduction(r, false, [&] { return comm_of(comm).reduce_async(r.send, recvbuf, count, t, r.op, root); });
  });
}

braid_result_t braid_all_gather_async(const void* sendbuf, void* recvbuf, size_t sendcount,
                                      braid_datatype_t datatype, braid_comm_t comm, braid_work_t* work) {
  return started(work, [&] { return comm_of(comm).all_gather_async(sendbuf, recvbuf, sendcount, to_type(datatype)); });
}

braid_result_t braid_reduce_scatter_async(const void* sendbuf, void* recvbuf, size_t recvcount,
                                          braid_datatype_t datatype, braid_redop_t op, braid_comm_t comm,
                                          braid_work_t* work) {
  return started(work, [&] {
    const braid::DataType t = to_type(datatype);
    const Reduction r = reduction_of(comm, op, t, sendbuf, recvcount * static_cast<std::size_t>(comm_of(comm).size()));
    return run_reduction(
        r, false, [&] { return comm_of(comm).reduce_scatter_async(r.send, recvbuf, recvcount, t, r.op); });
  });
}

braid_result_t braid_all_to_all_async(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                      braid_comm_t comm, braid_work_t* work) {
  return started(work, [&] { return comm_of(comm).all_to_all_async(sendbuf, recvbuf, count, to_type(datatype)); });
}

braid_result_t braid_gather_async(const void* sendbuf, void* recvbuf, size_t sendcount, braid_datatype_t datatype,
                                  int root, braid_comm_t comm, braid_work_t* work) {
  return started(work, [&] { return comm_of(comm).gather_async(sendbuf, recvbuf, sendcount, to_type(datatype), root); });
}

braid_result_t braid_scatter_async(const void* sendbuf, void* recvbuf, size_t recvcount, braid_datatype_t datatype,
                                   int root, braid_comm_t comm, braid_work_t* work) {
  return started(work, [&] { return comm_of(comm).scatter_async(sendbuf, recvbuf, recvcount, to_type(datatype), root); });
}

braid_result_t braid_barrier_async(braid_comm_t comm, braid_work_t* work) {
  return started(work, [&] { return comm_of(comm).barrier_async(); });
}

braid_result_t braid_send_async(const void* buf, size_t count, braid_datatype_t datatype, int peer, braid_comm_t comm,
                                braid_work_t* work) {
  return started(work, [&] { return comm_of(comm).send_async(buf, count, to_type(datatype), peer); });
}

braid_result_t braid_recv_async(void* buf, size_t count, braid_datatype_t datatype, int peer, braid_comm_t comm,
                                braid_work_t* work) {
  return started(work, [&] { return comm_of(comm).recv_async(buf, count, to_type(datatype), peer); });
}

braid_result_t braid_work_wait(braid_work_t work, long timeout_ms, int* done) {
  return guarded([&] {
    if (done != nullptr) *done = 0;
    braid::Work& w = work_of(work);
    // Clamped so that now + timeout cannot overflow the clock; any operation
    // fails on its own BRAID_TIMEOUT long before.
    constexpr long long kLongestMs = 30LL * 24 * 3600 * 1000;
    std::optional<std::chrono::milliseconds> timeout;
    if (timeout_ms >= 0) timeout = std::chrono::milliseconds(std::min<long long>(timeout_ms, kLongestMs));
    bool finished = w.wait(timeout);
    if (done != nullptr) *done = finished ? 1 : 0;
    else if (!finished)
      throw braid::Timeout(braid::cat("braid_work_wait: the operation was not done within ", timeout_ms, " ms"));
  });
}

braid_result_t braid_work_test(braid_work_t work, int* done) {
  return guarded([&] {
    require(done, "the done pointer");
    *done = 0;
    *done = work_of(work).test() ? 1 : 0;
  });
}

braid_result_t braid_work_free(braid_work_t work) {
  return guarded([&] { delete work; });
}

// The header's numbers are the project's (meson.build passes its version).
#define BRAID_STRINGIFY2(x) #x
#define BRAID_STRINGIFY(x) BRAID_STRINGIFY2(x)
static_assert(std::string_view(BRAID_STRINGIFY(BRAID_VERSION_MAJOR) "." BRAID_STRINGIFY(BRAID_VERSION_MINOR) "." BRAID_STRINGIFY(
                  BRAID_VERSION_PATCH)) == BRAID_PROJECT_VERSION,
              "braid.h's BRAID_VERSION_* differ from meson.build's project version");

braid_result_t braid_get_version(int* version) {
  return guarded([&] {
    if (version == nullptr) throw braid::InvalidArgument("braid_get_version: version is NULL");
    *version = BRAID_VERSION_CODE;
  });
}

const char* braid_get_error_string(braid_result_t result) {
  switch (raw_value(result)) {
    case braid_success: return "success";
    case braid_invalid_argument: return "invalid argument";
    case braid_invalid_usage: return "invalid usage";
    case braid_in_progress: return "in progress";
    case braid_timeout: return "timeout";
    case braid_peer_lost: return "peer lost";
    case braid_protocol_error: return "protocol mismatch";
    case braid_system_error: return "system error";
    case braid_aborted: return "aborted";
    case braid_internal_error: return "internal error";
    case braid_unsupported: return "unsupported";
  }
  return "unknown result code";
}

const char* braid_last_error(void) { return t_last_error.c_str(); }

}  // extern "C"

// The C ABI: each entry point converts arguments, calls the C++ API, and turns
// a braid::Error into its braid_result_t with the message kept per thread for
// braid_last_error(). No exception crosses this boundary.
#include "braid/braid.h"

#include <cstring>
#include <new>
#include <string>

#include "braid/braid.hpp"
#include "core/text.hpp"

struct braid_comm {
  braid::Comm comm;
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
  }
}

braid::DataType to_type(braid_datatype_t t) {
  int v = static_cast<int>(t);
  if (v < 0 || v >= braid::kDataTypeCount) throw braid::InvalidArgument(braid::cat("unknown braid_datatype_t value ", v));
  return static_cast<braid::DataType>(v);
}

braid::ReduceOp to_op(braid_redop_t op) {
  int v = static_cast<int>(op);
  if (v < 0 || v >= braid::kReduceOpCount) throw braid::InvalidArgument(braid::cat("unknown braid_redop_t value ", v));
  return static_cast<braid::ReduceOp>(v);
}

braid::Comm& comm_of(braid_comm_t comm) {
  if (comm == nullptr) throw braid::InvalidArgument("the communicator handle is NULL");
  return comm->comm;
}

template <typename Pointer>
void require(Pointer* p, const char* name) {
  if (p == nullptr) throw braid::InvalidArgument(braid::cat(name, " is NULL"));
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

braid_result_t braid_all_reduce(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                braid_redop_t op, braid_comm_t comm) {
  return guarded([&] { comm_of(comm).all_reduce(sendbuf, recvbuf, count, to_type(datatype), to_op(op)); });
}

braid_result_t braid_broadcast(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype, int root,
                               braid_comm_t comm) {
  return guarded([&] { comm_of(comm).broadcast(sendbuf, recvbuf, count, to_type(datatype), root); });
}

braid_result_t braid_barrier(braid_comm_t comm) {
  return guarded([&] { comm_of(comm).barrier(); });
}

const char* braid_get_error_string(braid_result_t result) {
  switch (result) {
    case braid_success: return "success";
    case braid_invalid_argument: return "invalid argument";
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

/* braid — the C ABI, shaped like NCCL's, for embedding braid in programs and
 * languages that speak C.
 *
 *   braid_unique_id_t id;
 *   if (rank == 0) braid_get_unique_id(&id);
 *   ... hand id to every rank (file, MPI_Bcast, command line) ...
 *   braid_comm_t comm;
 *   braid_comm_init_rank(&comm, nranks, id, rank);
 *   braid_all_reduce(send, recv, count, braid_f32, braid_sum, comm);
 *   braid_comm_destroy(comm);
 *
 * Every function returns braid_success or an error code; braid_last_error()
 * then returns a message naming the rank, the peer and the operation. No call
 * blocks longer than BRAID_TIMEOUT.
 */
#ifndef BRAID_BRAID_H
#define BRAID_BRAID_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  braid_success = 0,
  braid_invalid_argument = 1,
  braid_timeout = 2,
  braid_peer_lost = 3,
  braid_protocol_error = 4,
  braid_system_error = 5,
  braid_aborted = 6,
  braid_internal_error = 7,
  braid_unsupported = 8,
} braid_result_t;

typedef enum {
  braid_f16 = 0,
  braid_bf16 = 1,
  braid_f32 = 2,
  braid_f64 = 3,
  braid_i8 = 4,
  braid_u8 = 5,
  braid_i32 = 6,
  braid_u32 = 7,
  braid_i64 = 8,
  braid_u64 = 9,
} braid_datatype_t;

typedef enum {
  braid_sum = 0,
  braid_prod = 1,
  braid_min = 2,
  braid_max = 3,
  braid_avg = 4,
} braid_redop_t;

#define BRAID_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[BRAID_UNIQUE_ID_BYTES];
} braid_unique_id_t;

typedef struct braid_comm* braid_comm_t;

/** Creates a rendezvous point hosted by this process (see braid::UniqueId). */
braid_result_t braid_get_unique_id(braid_unique_id_t* id);
/** Joins communicator `id` as `rank` of `nranks`. */
braid_result_t braid_comm_init_rank(braid_comm_t* comm, int nranks, braid_unique_id_t id, int rank);
/** Joins the communicator described by BRAID_RANK, BRAID_WORLD_SIZE, BRAID_STORE_ADDR. */
braid_result_t braid_comm_init_env(braid_comm_t* comm);
/** Frees the communicator. Accepts NULL. */
braid_result_t braid_comm_destroy(braid_comm_t comm);
braid_result_t braid_comm_rank(braid_comm_t comm, int* rank);
braid_result_t braid_comm_count(braid_comm_t comm, int* count);

/** recvbuf[i] = op over ranks of sendbuf[i]; sendbuf == recvbuf works in place. */
braid_result_t braid_all_reduce(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                braid_redop_t op, braid_comm_t comm);
/** Copies root's sendbuf into every rank's recvbuf (sendbuf is read on root only). */
braid_result_t braid_broadcast(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                               int root, braid_comm_t comm);
braid_result_t braid_barrier(braid_comm_t comm);

/** A fixed description of a result code ("timeout"). */
const char* braid_get_error_string(braid_result_t result);
/** The message of the last error on this thread, or "" if none. */
const char* braid_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_BRAID_H */

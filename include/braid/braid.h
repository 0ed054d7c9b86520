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
 *
 * Buffers may be host memory or, in a braid built with CUDA, CUDA device
 * memory (told apart by braid; see docs/gpu.md). Calls are
 * synchronous with respect to the GPU: finish the work that writes a buffer
 * before the call; the result is in place when it returns.
 */
#ifndef BRAID_BRAID_H
#define BRAID_BRAID_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes carry NCCL's numbers (ncclResult_t) where the meaning is the
 * same, so code that casts NCCL's values compares them rightly; the codes
 * braid alone has start at 16, clear of NCCL's present and next ones. */
typedef enum {
  braid_success = 0,          /* ncclSuccess */
  braid_system_error = 2,     /* ncclSystemError: an operating-system call failed */
  braid_internal_error = 3,   /* ncclInternalError: a broken invariant inside braid (a bug) */
  braid_invalid_argument = 4, /* ncclInvalidArgument: the caller passed something wrong */
  braid_invalid_usage = 5,    /* ncclInvalidUsage: a call in the wrong state (an empty
                                 communicator, a group not open, a grouped work waited for
                                 before the group ends) */
  braid_peer_lost = 6,        /* ncclRemoteError: a peer closed, reset or stopped answering */
  braid_remote_error = braid_peer_lost,
  braid_in_progress = 7,      /* ncclInProgress: not returned by this braid, which refuses
                                 nonblocking communicators (use the _async calls) */
  braid_timeout = 16,         /* a wait passed its deadline (BRAID_TIMEOUT) */
  braid_protocol_error = 17,  /* bytes that are not braid's, or another job's */
  braid_aborted = 18,         /* the communicator was aborted */
  braid_unsupported = 19,     /* valid, but not built or not implemented here */
} braid_result_t;

/* Element types and reductions carry NCCL's numbers (ncclDataType_t,
 * ncclRedOp_t), so code written against NCCL's enums can cast them:
 * (braid_datatype_t)ncclFloat32 is braid_f32. Any other value is refused
 * with braid_invalid_argument. */
typedef enum {
  braid_i8 = 0,   /* ncclInt8, ncclChar */
  braid_u8 = 1,   /* ncclUint8 */
  braid_i32 = 2,  /* ncclInt32, ncclInt */
  braid_u32 = 3,  /* ncclUint32 */
  braid_i64 = 4,  /* ncclInt64 */
  braid_u64 = 5,  /* ncclUint64 */
  braid_f16 = 6,  /* ncclFloat16, ncclHalf */
  braid_f32 = 7,  /* ncclFloat32, ncclFloat */
  braid_f64 = 8,  /* ncclFloat64, ncclDouble */
  braid_bf16 = 9, /* ncclBfloat16 */
} braid_datatype_t;

typedef enum {
  braid_sum = 0,  /* ncclSum */
  braid_prod = 1, /* ncclProd */
  braid_max = 2,  /* ncclMax */
  braid_min = 3,  /* ncclMin */
  braid_avg = 4,  /* ncclAvg */
} braid_redop_t;

/* Where the scalar of a pre-multiplied sum lives (ncclScalarResidence_t). */
typedef enum {
  braid_scalar_device = 0,         /* not supported yet */
  braid_scalar_host_immediate = 1, /* host memory, read when the operator is made */
} braid_scalar_residence_t;
#define BRAID_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[BRAID_UNIQUE_ID_BYTES];
} braid_unique_id_t;

typedef struct braid_comm* braid_comm_t;

/** A collective or point-to-point operation started by one of the *_async
 * calls. Operations of one communicator run one after another in the order
 * they were started, in the background, while the caller computes; the
 * buffers must stay valid until the operation is done. Free every handle with
 * braid_work_free, waited for or not: freeing does not cancel the operation
 * (the communicator finishes it). A handle may outlive its communicator:
 * braid_comm_destroy finishes every queued operation first. */
typedef struct braid_work* braid_work_t;

/** Creates a rendezvous point hosted by this process (see braid::UniqueId). */
braid_result_t braid_get_unique_id(braid_unique_id_t* id);
/** Joins communicator `id` as `rank` of `nranks`. */
braid_result_t braid_comm_init_rank(braid_comm_t* comm, int nranks, braid_unique_id_t id, int rank);
/** Settings of a communicator made by braid_comm_init_rank_config (NCCL's
 * ncclConfig_t). Start from BRAID_CONFIG_INITIALIZER: a zero or NULL field
 * keeps braid's default (the BRAID_* environment). */
typedef struct {
  size_t size;           /* sizeof(braid_config_t), set by the initializer */
  long timeout_ms;       /* bound on every wait (BRAID_TIMEOUT); 0: default */
  const char* transport; /* "shm,tcp" (BRAID_TRANSPORT); NULL: default */
  const char* algorithm; /* "ring" or "all_reduce:tree,broadcast:binomial" (BRAID_ALGO); NULL: default */
  int blocking;          /* 1: calls block until done (the only mode so far; 0 is refused
                            with braid_unsupported: use the *_async calls) */
} braid_config_t;
#define BRAID_CONFIG_INITIALIZER {sizeof(braid_config_t), 0, NULL, NULL, 1}
/** braid_comm_init_rank with settings from `config` (NULL: all defaults). */
braid_result_t braid_comm_init_rank_config(braid_comm_t* comm, int nranks, braid_unique_id_t id, int rank,
                                           const braid_config_t* config);
/** The unique id as 2 x BRAID_UNIQUE_ID_BYTES hex digits and a NUL, into buf
 * (len at least BRAID_UNIQUE_ID_HEX_BYTES), to pass on a command line. */
#define BRAID_UNIQUE_ID_HEX_BYTES (2 * BRAID_UNIQUE_ID_BYTES + 1)
braid_result_t braid_unique_id_to_hex(const braid_unique_id_t* id, char* buf, size_t len);
braid_result_t braid_unique_id_from_hex(const char* hex, braid_unique_id_t* id);
/** Joins the communicator described by BRAID_RANK, BRAID_WORLD_SIZE, BRAID_STORE_ADDR,
 * or, when BRAID_RANK is not set, by TensorFlow's TF_CONFIG (see braid::ClusterSpec). */
braid_result_t braid_comm_init_env(braid_comm_t* comm);
/** The color that takes part in braid_comm_split without joining a new
 * communicator (NCCL_SPLIT_NOCOLOR, MPI_UNDEFINED). */
#define BRAID_SPLIT_NOCOLOR (-1)
/** Splits `comm` (a collective call: every rank of `comm` calls it). Ranks
 * passing the same `color` form a new communicator, ordered by `key`, then by
 * rank in `comm`; it has its own connections and runs independently of
 * `comm`, which stays usable. A color used by one rank only makes a
 * communicator of size 1. A rank passing BRAID_SPLIT_NOCOLOR takes part but
 * gets `*newcomm` = NULL and braid_success. Any other negative color fails
 * on the ranks that passed it. `*newcomm` is NULL after a failure. */
braid_result_t braid_comm_split(braid_comm_t comm, int color, int key, braid_comm_t* newcomm);
/** braid_comm_shrink's flags (NCCL_SHRINK_DEFAULT, NCCL_SHRINK_ABORT). */
#define BRAID_SHRINK_DEFAULT 0
#define BRAID_SHRINK_ABORT 1
/** A new communicator of `comm`'s ranks less the `exclude_count` ranks in
 * `exclude_ranks`, in the same order (NCCL's ncclCommShrink). Every rank that
 * is not excluded calls it with the same list; an excluded rank does not (it
 * may be dead): no message goes to it, so this works after a rank died.
 * BRAID_SHRINK_DEFAULT first waits for the operations started on `comm`,
 * which stays usable; BRAID_SHRINK_ABORT aborts `comm` first (after an
 * operation failed with braid_peer_lost). braid_invalid_argument for a rank
 * out of range, listed twice or the caller's own, or unknown flags.
 * `*newcomm` is NULL after a failure. */
braid_result_t braid_comm_shrink(braid_comm_t comm, const int* exclude_ranks, int exclude_count,
                                 braid_comm_t* newcomm, int flags);
/* Elastic jobs (BRAID_ELASTIC=1, braid-run --elastic; docs/elastic.md). */
/** braid_comm_shrink without a list, after an operation failed because a rank
 * died or became unreachable: every member still alive calls it, and they
 * agree through the job's store which ranks came forward within
 * BRAID_ELASTIC_GRACE of the first; the others are left out. `flags` as for
 * braid_comm_shrink. braid_peer_lost on a member that came too late (the
 * others went on without it: it may braid_comm_join again) and when the
 * store is gone. `*newcomm` is NULL after a failure. */
braid_result_t braid_comm_shrink_lost(braid_comm_t comm, braid_comm_t* newcomm, int flags);
/** Admits the processes waiting in braid_comm_join (a collective of `comm`'s
 * members, at a point all reach, such as a step boundary): `*newcomm` is the
 * grown communicator (`comm`'s ranks first, in order, then the newcomers), or
 * NULL when nobody waits. `comm` stays usable. */
braid_result_t braid_comm_grow(braid_comm_t comm, braid_comm_t* newcomm);
/** Joins the running elastic job whose store is at `store_addr` ("host:port"):
 * waits, bounded by BRAID_TIMEOUT, until its members' next braid_comm_grow
 * admits this process. */
braid_result_t braid_comm_join(const char* store_addr, braid_comm_t* comm);
/** Gives up on the communicator, from any thread, within milliseconds (it
 * never waits for a peer or a connection in progress): every pending and
 * later operation here fails with braid_aborted (never success, never
 * braid_timeout). The notice reaches every rank, linked to this one or not
 * (through the links and the rendezvous store): a peer's next operation that
 * needs this rank fails promptly with braid_peer_lost naming it. A peer's
 * operation that had already received everything it needed from this rank may
 * complete successfully. Destroy the communicator afterwards. */
braid_result_t braid_comm_abort(braid_comm_t comm);
/** *error = braid_success, or the code of the failure that made the
 * communicator unusable (for example in an asynchronous operation nobody
 * waited for yet); its message is then in braid_last_error(). */
braid_result_t braid_comm_get_async_error(braid_comm_t comm, braid_result_t* error);
/** Writes the flight recorder (recent operations, their state, whom a stuck
 * one waits on) into buf as a NUL-terminated string, cut to len bytes. */
braid_result_t braid_comm_dump_state(braid_comm_t comm, char* buf, size_t len);
/** One row of a communicator's statistics, as braid::OpStats: the
 * operations of one collective, size band and algorithm completed so far. */
typedef struct {
  char collective[32]; /* "all_reduce", ..., "send", "recv", "group" */
  char algorithm[32];  /* "ring", "tree", ... */
  uint64_t band_min_bytes, band_max_bytes; /* sizes (count x element size) in this band */
  uint64_t count;      /* operations */
  uint64_t bytes;      /* their sizes, summed */
  double total_us, min_us, max_us, p50_us, p99_us;
} braid_op_stats_t;
/** Copies up to `capacity` rows of the communicator's statistics into `rows`
 * and sets *count to the number of rows there are (more than capacity: call
 * again with room for *count). rows may be NULL when capacity is 0. */
braid_result_t braid_comm_get_stats(braid_comm_t comm, braid_op_stats_t* rows, size_t capacity, size_t* count);
/** Ends this rank's part in the communicator in order, as
 * braid::Comm::finalize: finishes every operation queued on it (each bounded
 * by BRAID_TIMEOUT), tells its peers, lets its links go (without waiting for
 * a peer, and without making a slower peer fail), and returns the first
 * error among those operations. Later calls on it return
 * braid_invalid_argument; braid_comm_abort does nothing; free it with
 * braid_comm_destroy. As ncclCommFinalize. */
braid_result_t braid_comm_finalize(braid_comm_t comm);
/** Frees the communicator, finalizing it first if braid_comm_finalize was
 * not called (errors are then logged, not returned). Accepts NULL. */
braid_result_t braid_comm_destroy(braid_comm_t comm);
braid_result_t braid_comm_rank(braid_comm_t comm, int* rank);
braid_result_t braid_comm_count(braid_comm_t comm, int* count);
/** A reduction that multiplies every rank's input by *scalar (one value of
 * `datatype`, read now) and sums, as ncclRedOpCreatePreMulSum: *op (a value
 * from 5 up) works on `comm` with all_reduce, reduce and reduce_scatter (and
 * their _async forms) of that datatype, on host buffers, until
 * braid_red_op_destroy. Each rank may pass its own scalar. */
braid_result_t braid_red_op_create_pre_mul_sum(braid_redop_t* op, void* scalar, braid_datatype_t datatype,
                                               braid_scalar_residence_t residence, braid_comm_t comm);
braid_result_t braid_red_op_destroy(braid_redop_t op, braid_comm_t comm);
/** The same as braid_comm_rank (NCCL's name). */
braid_result_t braid_comm_user_rank(braid_comm_t comm, int* rank);
/** This rank's index among the ranks of its host, in rank order, and their number. */
braid_result_t braid_comm_local_rank(braid_comm_t comm, int* local_rank);
braid_result_t braid_comm_local_size(braid_comm_t comm, int* local_size);

/* Collectives. Every rank calls each one with the same datatype, count, op
 * and root. Counts are in elements; n is the communicator's size. Each call
 * blocks until this rank's part is done. */

/** recvbuf[i] = op over ranks of sendbuf[i]; sendbuf == recvbuf works in place. */
braid_result_t braid_all_reduce(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                braid_redop_t op, braid_comm_t comm);
/** Copies root's sendbuf into every rank's recvbuf (sendbuf is read on root only). */
braid_result_t braid_broadcast(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                               int root, braid_comm_t comm);
/** recvbuf[i] on root = op over ranks of sendbuf[i]; recvbuf is ignored on the
 * other ranks (may be NULL). sendbuf == recvbuf works in place on root. */
braid_result_t braid_reduce(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                            braid_redop_t op, int root, braid_comm_t comm);
/** recvbuf (n x sendcount) = every rank's sendbuf (sendcount) in rank order.
 * In place: sendbuf == recvbuf + rank x sendcount elements. */
braid_result_t braid_all_gather(const void* sendbuf, void* recvbuf, size_t sendcount, braid_datatype_t datatype,
                                braid_comm_t comm);
/** recvbuf (recvcount) = block `rank` of op over ranks of sendbuf
 * (n x recvcount). In place: recvbuf == sendbuf + rank x recvcount elements. */
braid_result_t braid_reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, braid_datatype_t datatype,
                                    braid_redop_t op, braid_comm_t comm);
/* The same five on a CUDA stream, shaped like NCCL's: `stream` is a
 * cudaStream_t (NULL: the legacy default stream), passed as void* so that
 * this header needs no CUDA header. braid first waits for the work queued on
 * the stream (kernels writing sendbuf), then runs the collective, and returns
 * when the result is in recvbuf, so work queued on the stream afterwards
 * sees it. The call blocks the host meanwhile (braid enqueues nothing on the
 * stream itself). Device buffers must be on the stream's device
 * (braid_invalid_argument naming both otherwise); without CUDA or a usable
 * device a non-NULL stream is refused (braid_unsupported). */
braid_result_t braid_all_reduce_stream(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                       braid_redop_t op, braid_comm_t comm, void* stream);
braid_result_t braid_broadcast_stream(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                      int root, braid_comm_t comm, void* stream);
braid_result_t braid_reduce_stream(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                   braid_redop_t op, int root, braid_comm_t comm, void* stream);
braid_result_t braid_all_gather_stream(const void* sendbuf, void* recvbuf, size_t sendcount,
                                       braid_datatype_t datatype, braid_comm_t comm, void* stream);
braid_result_t braid_reduce_scatter_stream(const void* sendbuf, void* recvbuf, size_t recvcount,
                                           braid_datatype_t datatype, braid_redop_t op, braid_comm_t comm,
                                           void* stream);
/** Block p (count elements) of sendbuf goes to rank p; block p of recvbuf
 * comes from rank p. Both hold n x count. In place: sendbuf == recvbuf. */
braid_result_t braid_all_to_all(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                braid_comm_t comm);
/** root's recvbuf (n x sendcount) = every rank's sendbuf (sendcount) in rank
 * order; recvbuf is ignored elsewhere. In place on root: sendbuf == recvbuf +
 * root x sendcount elements. */
braid_result_t braid_gather(const void* sendbuf, void* recvbuf, size_t sendcount, braid_datatype_t datatype, int root,
                            braid_comm_t comm);
/** Every rank's recvbuf (recvcount) = block `rank` of root's sendbuf
 * (n x recvcount); sendbuf is ignored elsewhere. In place on root: recvbuf ==
 * sendbuf + root x recvcount elements. */
braid_result_t braid_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, braid_datatype_t datatype, int root,
                             braid_comm_t comm);
/** Returns once every rank has entered the barrier. */
braid_result_t braid_barrier(braid_comm_t comm);

/* Point to point. `peer` must post the matching braid_recv (braid_send) with
 * the same count and datatype; operations between two ranks match in the
 * order they are issued. A communicator runs its operations one at a time in
 * the order they were started (the _async ones too), and a send may wait
 * until the peer receives, so in an exchange one side must send first and
 * the other receive first (for a ring: even ranks send then receive, odd
 * ranks receive then send); otherwise both wait until BRAID_TIMEOUT. */

/** Sends count elements of buf to `peer`. */
braid_result_t braid_send(const void* buf, size_t count, braid_datatype_t datatype, int peer, braid_comm_t comm);
/** Receives count elements from `peer` into buf. */
braid_result_t braid_recv(void* buf, size_t count, braid_datatype_t datatype, int peer, braid_comm_t comm);

/** Sends sendcount elements to `dest` and receives recvcount from `source`
 * at once (a group of the two), so a ring shift cannot deadlock. */
braid_result_t braid_sendrecv(const void* sendbuf, size_t sendcount, int dest, void* recvbuf, size_t recvcount,
                              int source, braid_datatype_t datatype, braid_comm_t comm);
/* Groups, as ncclGroupStart/ncclGroupEnd: between the calling thread's
 * outermost braid_group_start and its braid_group_end, calls on any
 * communicator return braid_success at once without running. At the end,
 * each communicator's sends and receives run as one operation whose
 * transfers progress together (a ring of receive-then-send or an all-to-all
 * of sends and receives cannot deadlock), followed by its collectives in call
 * order; braid_group_end then waits for the blocking calls among them and
 * returns the first error. Handles of *_async calls in a group can be waited
 * for only after the end. Groups nest; the outermost end issues. Device
 * buffers cannot be grouped yet. */
braid_result_t braid_group_start(void);
braid_result_t braid_group_end(void);
/* Uneven collectives (MPI's *v forms): counts and displacements in elements,
 * n entries each; displacements NULL means blocks packed in rank order.
 * Blocks written by different ranks must not overlap; counts may be 0. What
 * rank a sends to rank b must be what b receives from a, else both fail with
 * a size mismatch naming each other. */
/** sendcounts[p] elements at sdispls[p] go to rank p; recvcounts[p] from rank p
 * land at rdispls[p]. Not in place. */
braid_result_t braid_all_to_allv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls, void* recvbuf,
                                 const size_t* recvcounts, const size_t* rdispls, braid_datatype_t datatype,
                                 braid_comm_t comm);
/** Block p of recvbuf (recvcounts[p] at displs[p]) = rank p's sendbuf
 * (sendcount == recvcounts[rank]). In place: sendbuf == recvbuf + displs[rank]. */
braid_result_t braid_all_gatherv(const void* sendbuf, size_t sendcount, void* recvbuf, const size_t* recvcounts,
                                 const size_t* displs, braid_datatype_t datatype, braid_comm_t comm);
/** recvbuf (recvcounts[rank]) = op over ranks of their block `rank` of
 * sendbuf, whose blocks are packed in rank order (MPI_Reduce_scatter). */
braid_result_t braid_reduce_scatterv(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                     braid_datatype_t datatype, braid_redop_t op, braid_comm_t comm);
/** root's recvbuf block p (recvcounts[p] at displs[p]) = rank p's sendbuf
 * (sendcount); recvbuf, recvcounts and displs are read at the root only. */
braid_result_t braid_gatherv(const void* sendbuf, size_t sendcount, void* recvbuf, const size_t* recvcounts,
                             const size_t* displs, braid_datatype_t datatype, int root, braid_comm_t comm);
/** Rank p's recvbuf (recvcount) = root's sendbuf block p (sendcounts[p] at
 * displs[p]); sendbuf, sendcounts and displs are read at the root only. */
braid_result_t braid_scatterv(const void* sendbuf, const size_t* sendcounts, const size_t* displs, void* recvbuf,
                              size_t recvcount, braid_datatype_t datatype, int root, braid_comm_t comm);
/* The same, started in the background: each returns at once with a handle in
 * *work (NULL if the call fails) for braid_work_wait / braid_work_test. The
 * buffers must stay valid and untouched until the operation is done. */

braid_result_t braid_all_reduce_async(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                      braid_redop_t op, braid_comm_t comm, braid_work_t* work);
braid_result_t braid_broadcast_async(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                     int root, braid_comm_t comm, braid_work_t* work);
braid_result_t braid_reduce_async(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                  braid_redop_t op, int root, braid_comm_t comm, braid_work_t* work);
braid_result_t braid_all_gather_async(const void* sendbuf, void* recvbuf, size_t sendcount,
                                      braid_datatype_t datatype, braid_comm_t comm, braid_work_t* work);
braid_result_t braid_reduce_scatter_async(const void* sendbuf, void* recvbuf, size_t recvcount,
                                          braid_datatype_t datatype, braid_redop_t op, braid_comm_t comm,
                                          braid_work_t* work);
braid_result_t braid_all_to_all_async(const void* sendbuf, void* recvbuf, size_t count, braid_datatype_t datatype,
                                      braid_comm_t comm, braid_work_t* work);
braid_result_t braid_gather_async(const void* sendbuf, void* recvbuf, size_t sendcount, braid_datatype_t datatype,
                                  int root, braid_comm_t comm, braid_work_t* work);
braid_result_t braid_scatter_async(const void* sendbuf, void* recvbuf, size_t recvcount, braid_datatype_t datatype,
                                   int root, braid_comm_t comm, braid_work_t* work);
braid_result_t braid_barrier_async(braid_comm_t comm, braid_work_t* work);
braid_result_t braid_send_async(const void* buf, size_t count, braid_datatype_t datatype, int peer, braid_comm_t comm,
                                braid_work_t* work);
braid_result_t braid_recv_async(void* buf, size_t count, braid_datatype_t datatype, int peer, braid_comm_t comm,
                                braid_work_t* work);

braid_result_t braid_all_to_allv_async(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                                       void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                                       braid_datatype_t datatype, braid_comm_t comm, braid_work_t* work);
braid_result_t braid_all_gatherv_async(const void* sendbuf, size_t sendcount, void* recvbuf, const size_t* recvcounts,
                                       const size_t* displs, braid_datatype_t datatype, braid_comm_t comm,
                                       braid_work_t* work);
braid_result_t braid_reduce_scatterv_async(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                           braid_datatype_t datatype, braid_redop_t op, braid_comm_t comm,
                                           braid_work_t* work);
braid_result_t braid_gatherv_async(const void* sendbuf, size_t sendcount, void* recvbuf, const size_t* recvcounts,
                                   const size_t* displs, braid_datatype_t datatype, int root, braid_comm_t comm,
                                   braid_work_t* work);
braid_result_t braid_scatterv_async(const void* sendbuf, const size_t* sendcounts, const size_t* displs,
                                    void* recvbuf, size_t recvcount, braid_datatype_t datatype, int root,
                                    braid_comm_t comm, braid_work_t* work);
/** Waits until the operation is done or `timeout_ms` milliseconds pass
 * (timeout_ms < 0: until done, which the communicator's BRAID_TIMEOUT bounds;
 * 0: just look). Sets *done to 1 when done, else 0, and returns braid_success.
 * `done` may be NULL: then an operation not done in time returns
 * braid_timeout. A failed operation returns its error code (again at every
 * later wait or test), and braid_last_error() its message. */
braid_result_t braid_work_wait(braid_work_t work, long timeout_ms, int* done);
/** Never blocks: sets *done to 1 if the operation is done, else 0 (and moves
 * it forward if no other thread is doing so). A failed operation returns its
 * error code. */
braid_result_t braid_work_test(braid_work_t work, int* done);
/** Frees the handle; the operation itself still runs to completion. Accepts NULL. */
braid_result_t braid_work_free(braid_work_t work);

/** Shared memory for buffers (NCCL's ncclMemAlloc): `size` bytes (rounded up
 * to whole pages) of zeroed host memory that the other ranks of this host map,
 * so that a message above 64K from it is copied or reduced by the receiver
 * straight out of it instead of through braid's shared ring. Any buffer
 * inside it is recognised by every call. braid_invalid_argument for size 0,
 * braid_system_error when the kernel refuses the memory. */
braid_result_t braid_mem_alloc(void** ptr, size_t size);
/** Frees what braid_mem_alloc returned (NULL: nothing); braid_invalid_argument
 * for any other pointer and for memory still registered with a communicator. */
braid_result_t braid_mem_free(void* ptr);
/** Registers `size` bytes at `buff` with `comm` (NCCL's ncclCommRegister); the
 * range must lie in memory from braid_mem_alloc (braid_invalid_argument
 * otherwise), which stays allocated until deregistered. Memory from
 * braid_mem_alloc is read in place registered or not: registering is how code
 * written for NCCL says the buffer stays. Destroying `comm` ends its
 * registrations. */
braid_result_t braid_comm_register(braid_comm_t comm, void* buff, size_t size, void** handle);
/** Ends a registration braid_comm_register returned for `comm`. */
braid_result_t braid_comm_deregister(braid_comm_t comm, void* handle);

/** The version of these headers; braid_get_version() gives the library's,
 * coded major * 10000 + minor * 100 + patch, as NCCL codes its own. */
#define BRAID_VERSION_MAJOR 0
#define BRAID_VERSION_MINOR 1
#define BRAID_VERSION_PATCH 0
#define BRAID_VERSION_CODE (BRAID_VERSION_MAJOR * 10000 + BRAID_VERSION_MINOR * 100 + BRAID_VERSION_PATCH)
/** Sets *version to the linked library's BRAID_VERSION_CODE. */
braid_result_t braid_get_version(int* version);

/** A fixed description of a result code ("timeout"). */
const char* braid_get_error_string(braid_result_t result);
/** The message of the last error on this thread, or "" if none. */
const char* braid_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_BRAID_H */

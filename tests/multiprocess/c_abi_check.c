/* The C ABI from C: every entry point of braid/braid.h, run under braid-run
 * (3 ranks in the test suite, any number >= 2 works):
 *
 *   braid-run -n 3 c_abi_check
 *
 * Blocking collectives, point to point, every *_async call with several
 * operations in flight waited in reverse order, braid_work_test polling,
 * braid_work_wait with a timeout, split (BRAID_SPLIT_NOCOLOR and a group of
 * one included), a second communicator made from a
 * unique id, and the error codes: bad arguments, a timed-out operation and
 * the communicator refusing work after it. NCCL's enum numbers: every
 * braid_datatype_t and braid_redop_t value is pinned, and all-reduces called
 * with NCCL's values cast to braid's types give the right results. Compiled
 * as C11 and includes nothing of braid but braid/braid.h.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "braid/braid.h"

static int g_rank = -1;
static int g_failed = 0;
static int g_cases = 0;

static void expect(int ok, const char* what, int line) {
  ++g_cases;
  if (!ok) {
    ++g_failed;
    fprintf(stderr, "rank %d: FAILED line %d: %s (last error: %s)\n", g_rank, line, what, braid_last_error());
  }
}
#define EXPECT(cond) expect((cond) ? 1 : 0, #cond, __LINE__)
#define EXPECT_OK(call) expect((call) == braid_success, #call, __LINE__)
#define EXPECT_CODE(call, code) expect((call) == (code), #call " == " #code, __LINE__)

static void sleep_ms(long ms) {
  struct timespec t;
  t.tv_sec = ms / 1000;
  t.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&t, NULL);
}

/* Values every rank can compute for every other rank. */
static int32_t value(int rank, int i) { return (int32_t)(rank * 1000 + i % 997); }

static void blocking_collectives(braid_comm_t comm, int rank, int n) {
  enum { kCount = 257 };
  int32_t send[kCount * 8], recv[kCount * 8];
  int i, r, wrong;

  /* reduce to the last rank; all_reduce in place. */
  for (i = 0; i < kCount; ++i) send[i] = value(rank, i);
  memset(recv, 0, sizeof recv);
  EXPECT_OK(braid_reduce(send, rank == n - 1 ? recv : NULL, kCount, braid_i32, braid_sum, n - 1, comm));
  if (rank == n - 1) {
    for (wrong = 0, i = 0; i < kCount; ++i) {
      int32_t want = 0;
      for (r = 0; r < n; ++r) want += value(r, i);
      wrong += recv[i] != want;
    }
    EXPECT(wrong == 0);
  }
  EXPECT_OK(braid_all_reduce(send, send, kCount, braid_i32, braid_max, comm));
  for (wrong = 0, i = 0; i < kCount; ++i) wrong += send[i] != value(n - 1, i);
  EXPECT(wrong == 0);

  /* broadcast from rank 1. */
  for (i = 0; i < kCount; ++i) send[i] = rank == 1 ? value(1, i) : -1;
  EXPECT_OK(braid_broadcast(send, send, kCount, braid_i32, 1, comm));
  for (wrong = 0, i = 0; i < kCount; ++i) wrong += send[i] != value(1, i);
  EXPECT(wrong == 0);

  /* all_gather, then gather to rank 0. */
  for (i = 0; i < kCount; ++i) send[i] = value(rank, i);
  EXPECT_OK(braid_all_gather(send, recv, kCount, braid_i32, comm));
  for (wrong = 0, r = 0; r < n; ++r)
    for (i = 0; i < kCount; ++i) wrong += recv[r * kCount + i] != value(r, i);
  EXPECT(wrong == 0);
  memset(recv, 0, sizeof recv);
  EXPECT_OK(braid_gather(send, rank == 0 ? recv : NULL, kCount, braid_i32, 0, comm));
  if (rank == 0) {
    for (wrong = 0, r = 0; r < n; ++r)
      for (i = 0; i < kCount; ++i) wrong += recv[r * kCount + i] != value(r, i);
    EXPECT(wrong == 0);
  }

  /* reduce_scatter: block r of every rank's input is value(rank, r * kCount + i). */
  for (r = 0; r < n; ++r)
    for (i = 0; i < kCount; ++i) send[r * kCount + i] = value(rank, r * kCount + i);
  EXPECT_OK(braid_reduce_scatter(send, recv, kCount, braid_i32, braid_sum, comm));
  for (wrong = 0, i = 0; i < kCount; ++i) {
    int32_t want = 0;
    for (r = 0; r < n; ++r) want += value(r, rank * kCount + i);
    wrong += recv[i] != want;
  }
  EXPECT(wrong == 0);

  /* all_to_all in place: block p goes to rank p, tagged with both ranks. */
  for (r = 0; r < n; ++r)
    for (i = 0; i < kCount; ++i) send[r * kCount + i] = value(rank * 10 + r, i);
  EXPECT_OK(braid_all_to_all(send, send, kCount, braid_i32, comm));
  for (wrong = 0, r = 0; r < n; ++r)
    for (i = 0; i < kCount; ++i) wrong += send[r * kCount + i] != value(r * 10 + rank, i);
  EXPECT(wrong == 0);

  /* scatter from the last rank. */
  for (r = 0; r < n; ++r)
    for (i = 0; i < kCount; ++i) send[r * kCount + i] = value(r + 50, i);
  EXPECT_OK(braid_scatter(rank == n - 1 ? send : NULL, recv, kCount, braid_i32, n - 1, comm));
  for (wrong = 0, i = 0; i < kCount; ++i) wrong += recv[i] != value(rank + 50, i);
  EXPECT(wrong == 0);

  /* send/recv around the ring: even ranks send first (operations run in order). */
  {
    int next = (rank + 1) % n, previous = (rank + n - 1) % n;
    for (i = 0; i < kCount; ++i) send[i] = value(rank, i);
    if (rank % 2 == 0) {
      EXPECT_OK(braid_send(send, kCount, braid_i32, next, comm));
      EXPECT_OK(braid_recv(recv, kCount, braid_i32, previous, comm));
    } else {
      EXPECT_OK(braid_recv(recv, kCount, braid_i32, previous, comm));
      EXPECT_OK(braid_send(send, kCount, braid_i32, next, comm));
    }
    for (wrong = 0, i = 0; i < kCount; ++i) wrong += recv[i] != value(previous, i);
    EXPECT(wrong == 0);
  }
  EXPECT_OK(braid_barrier(comm));
}

static void async_operations(braid_comm_t comm, int rank, int n) {
  enum { kCount = 1001, kMaxRanks = 16, kWorks = 12 };
  static float ar[kCount];
  static double bc[kCount], rd[kCount], rd_out[kCount];
  static int32_t ag[kCount], ag_out[kCount * kMaxRanks], rs[kCount * kMaxRanks], rs_out[kCount];
  static int64_t a2a[kCount * kMaxRanks], a2a_out[kCount * kMaxRanks];
  static uint8_t ga[kCount], ga_out[kCount * kMaxRanks], sc[kCount * kMaxRanks], sc_out[kCount];
  static int32_t p2p_out[kCount], p2p_in[kCount];
  braid_work_t works[kWorks];
  int w = 0, i, r, wrong = 0, done = 0;
  const int next = (rank + 1) % n, previous = (rank + n - 1) % n;

  for (i = 0; i < kCount; ++i) {
    ar[i] = (float)(rank + i % 7);
    bc[i] = rank == 0 ? 0.5 * i : -1.0;
    rd[i] = (double)(rank * 3 - i % 5);
    ag[i] = value(rank, i);
    ga[i] = (uint8_t)(rank * 31 + i);
    p2p_out[i] = value(rank + 20, i);
  }
  for (r = 0; r < n; ++r)
    for (i = 0; i < kCount; ++i) {
      rs[r * kCount + i] = value(rank, r * kCount + i);
      a2a[r * kCount + i] = (int64_t)value(rank * 10 + r, i) << 20;
      sc[r * kCount + i] = (uint8_t)(r * 7 + i);
    }

  EXPECT_OK(braid_all_reduce_async(ar, ar, kCount, braid_f32, braid_sum, comm, &works[w++]));
  EXPECT_OK(braid_broadcast_async(bc, bc, kCount, braid_f64, 0, comm, &works[w++]));
  EXPECT_OK(braid_reduce_async(rd, rd_out, kCount, braid_f64, braid_min, n - 1, comm, &works[w++]));
  EXPECT_OK(braid_all_gather_async(ag, ag_out, kCount, braid_i32, comm, &works[w++]));
  if (rank % 2 == 0) EXPECT_OK(braid_send_async(p2p_out, kCount, braid_i32, next, comm, &works[w++]));
  EXPECT_OK(braid_recv_async(p2p_in, kCount, braid_i32, previous, comm, &works[w++]));
  if (rank % 2 == 1) EXPECT_OK(braid_send_async(p2p_out, kCount, braid_i32, next, comm, &works[w++]));
  EXPECT_OK(braid_reduce_scatter_async(rs, rs_out, kCount, braid_i32, braid_sum, comm, &works[w++]));
  EXPECT_OK(braid_all_to_all_async(a2a, a2a_out, kCount, braid_i64, comm, &works[w++]));
  EXPECT_OK(braid_gather_async(ga, rank == 1 ? ga_out : NULL, kCount, braid_u8, 1, comm, &works[w++]));
  EXPECT_OK(braid_scatter_async(rank == 0 ? sc : NULL, sc_out, kCount, braid_u8, 0, comm, &works[w++]));
  EXPECT_OK(braid_barrier_async(comm, &works[w++]));
  EXPECT(w == 11);

  /* The first half polled with braid_work_test, the rest waited in reverse. */
  for (i = 0; i < 5; ++i) {
    braid_result_t rc = braid_success;
    int spins = 0;
    done = 0;
    while (!done && rc == braid_success && spins++ < 10000000) rc = braid_work_test(works[i], &done);
    EXPECT(rc == braid_success && done == 1);
  }
  for (i = w - 1; i >= 5; --i) {
    EXPECT_OK(braid_work_wait(works[i], -1, &done));
    EXPECT(done == 1);
  }
  /* Waiting again for a finished operation is fine, with or without done. */
  EXPECT_OK(braid_work_wait(works[0], 0, NULL));
  for (i = 0; i < w; ++i) EXPECT_OK(braid_work_free(works[i]));

  for (i = 0; i < kCount; ++i) {
    float want_ar = 0;
    double want_rd = 1e300;
    for (r = 0; r < n; ++r) {
      want_ar += (float)(r + i % 7);
      if ((double)(r * 3 - i % 5) < want_rd) want_rd = (double)(r * 3 - i % 5);
    }
    wrong += ar[i] != want_ar;
    wrong += bc[i] != 0.5 * i;
    if (rank == n - 1) wrong += rd_out[i] != want_rd;
    wrong += p2p_in[i] != value(previous + 20, i);
    wrong += sc_out[i] != (uint8_t)(rank * 7 + i);
    {
      int32_t want_rs = 0;
      for (r = 0; r < n; ++r) want_rs += value(r, rank * kCount + i);
      wrong += rs_out[i] != want_rs;
    }
    for (r = 0; r < n; ++r) {
      wrong += ag_out[r * kCount + i] != value(r, i);
      wrong += a2a_out[r * kCount + i] != (int64_t)value(r * 10 + rank, i) << 20;
      if (rank == 1) wrong += ga_out[r * kCount + i] != (uint8_t)(r * 31 + i);
    }
  }
  EXPECT(wrong == 0);

  /* A handle freed unwaited: the operation still completes, in order. */
  {
    int32_t a = rank + 1, b = 1;
    braid_work_t dropped = NULL;
    EXPECT_OK(braid_all_reduce_async(&a, &a, 1, braid_i32, braid_sum, comm, &dropped));
    EXPECT_OK(braid_work_free(dropped));
    EXPECT_OK(braid_all_reduce(&b, &b, 1, braid_i32, braid_sum, comm));
    EXPECT(a == n * (n + 1) / 2);
    EXPECT(b == n);
  }

  /* braid_work_wait with a timeout on an operation that cannot finish yet:
   * rank 1 sends only after 300 ms. */
  if (rank == 0 || rank == 1) {
    int32_t x = rank == 1 ? 4242 : 0;
    braid_work_t pending = NULL;
    if (rank == 0) {
      EXPECT_OK(braid_recv_async(&x, 1, braid_i32, 1, comm, &pending));
      done = 1;
      EXPECT_OK(braid_work_wait(pending, 0, &done));
      EXPECT(done == 0);
      EXPECT_OK(braid_work_wait(pending, 20, &done));
      EXPECT(done == 0);
      EXPECT_CODE(braid_work_wait(pending, 0, NULL), braid_timeout);
      EXPECT(strlen(braid_last_error()) > 0);
      EXPECT_OK(braid_work_wait(pending, -1, &done));
      EXPECT(done == 1);
      EXPECT(x == 4242);
      EXPECT_OK(braid_work_free(pending));
    } else {
      sleep_ms(300);
      EXPECT_OK(braid_send(&x, 1, braid_i32, 0, comm));
    }
  }
  EXPECT_OK(braid_barrier(comm));
}

static void argument_errors(braid_comm_t comm, int rank, int n) {
  float v[8] = {0};
  braid_work_t work = (braid_work_t)&v; /* must come back NULL */
  braid_comm_t child = (braid_comm_t)&v;
  int done = 0, count = 0;

  EXPECT_CODE(braid_all_reduce(v, v, 8, braid_f32, braid_sum, NULL), braid_invalid_argument);
  EXPECT(strstr(braid_last_error(), "NULL") != NULL);
  EXPECT_CODE(braid_all_reduce(v, v, 8, (braid_datatype_t)99, braid_sum, comm), braid_invalid_argument);
  EXPECT_CODE(braid_all_reduce(v, v, 8, braid_f32, (braid_redop_t)-3, comm), braid_invalid_argument);
  EXPECT_CODE(braid_reduce(v, v, 8, braid_f32, braid_sum, n, comm), braid_invalid_argument);
  EXPECT_CODE(braid_broadcast(v, v, 8, braid_f32, -1, comm), braid_invalid_argument);
  EXPECT_CODE(braid_all_gather(v, NULL, 1, braid_f32, comm), braid_invalid_argument);
  EXPECT_CODE(braid_gather(NULL, v, 1, braid_f32, 0, comm), braid_invalid_argument);
  EXPECT_CODE(braid_scatter(v, v, 1, braid_f32, n + 5, comm), braid_invalid_argument);
  EXPECT_CODE(braid_all_to_all(v, v + 1, 1, braid_f32, comm), braid_invalid_argument);
  EXPECT_CODE(braid_send(v, 1, braid_f32, rank, comm), braid_invalid_argument);
  EXPECT_CODE(braid_recv(v, 1, braid_f32, n, comm), braid_invalid_argument);
  EXPECT_CODE(braid_comm_rank(comm, NULL), braid_invalid_argument);
  EXPECT_CODE(braid_comm_count(NULL, &count), braid_invalid_argument);

  EXPECT_CODE(braid_all_reduce_async(v, v, 8, braid_f32, braid_sum, comm, NULL), braid_invalid_argument);
  EXPECT_CODE(braid_reduce_scatter_async(v, NULL, 1, braid_f32, braid_sum, comm, &work), braid_invalid_argument);
  EXPECT(work == NULL);
  work = (braid_work_t)&v;
  EXPECT_CODE(braid_recv_async(v, 1, braid_f32, -1, comm, &work), braid_invalid_argument);
  EXPECT(work == NULL);
  EXPECT_CODE(braid_barrier_async(NULL, &work), braid_invalid_argument);
  EXPECT_CODE(braid_work_wait(NULL, -1, &done), braid_invalid_argument);
  EXPECT_CODE(braid_work_test(NULL, &done), braid_invalid_argument);
  EXPECT_OK(braid_barrier_async(comm, &work));
  EXPECT_CODE(braid_work_test(work, NULL), braid_invalid_argument);
  EXPECT_OK(braid_work_wait(work, -1, NULL));
  EXPECT_OK(braid_work_free(work));
  EXPECT_OK(braid_work_free(NULL));
  EXPECT_OK(braid_comm_destroy(NULL));

  child = (braid_comm_t)&v;
  EXPECT_CODE(braid_comm_split(comm, -2, 0, &child), braid_invalid_argument);
  EXPECT(child == NULL);
  EXPECT(strstr(braid_last_error(), "color -2") != NULL);
  EXPECT_CODE(braid_comm_split(comm, 0, 0, NULL), braid_invalid_argument);

  EXPECT(strcmp(braid_get_error_string(braid_success), "success") == 0);
  EXPECT(strcmp(braid_get_error_string(braid_timeout), "timeout") == 0);
  EXPECT(strcmp(braid_get_error_string(braid_unsupported), "unsupported") == 0);
  EXPECT(strcmp(braid_get_error_string((braid_result_t)1234), "unknown result code") == 0);
  EXPECT_OK(braid_barrier(comm)); /* still usable */
}

/* The numbers of NCCL's ncclDataType_t and ncclRedOp_t (nccl.h), as a
 * program written against NCCL holds them. */
#define kNcclInt8 0
#define kNcclUint8 1
#define kNcclInt32 2
#define kNcclUint32 3
#define kNcclInt64 4
#define kNcclUint64 5
#define kNcclFloat16 6
#define kNcclFloat32 7
#define kNcclFloat64 8
#define kNcclBfloat16 9
#define kNcclSum 0
#define kNcclProd 1
#define kNcclMax 2
#define kNcclMin 3
#define kNcclAvg 4
_Static_assert(braid_i8 == kNcclInt8 && braid_u8 == kNcclUint8 && braid_i32 == kNcclInt32 &&
                   braid_u32 == kNcclUint32 && braid_i64 == kNcclInt64 && braid_u64 == kNcclUint64 &&
                   braid_f16 == kNcclFloat16 && braid_f32 == kNcclFloat32 && braid_f64 == kNcclFloat64 &&
                   braid_bf16 == kNcclBfloat16,
               "braid_datatype_t carries NCCL's numbers");
_Static_assert(braid_sum == kNcclSum && braid_prod == kNcclProd && braid_max == kNcclMax && braid_min == kNcclMin &&
                   braid_avg == kNcclAvg,
               "braid_redop_t carries NCCL's numbers");

/* An all-reduce called with NCCL's numbers cast to braid's enums: float32,
 * float64, int32 and int64 with max, min, sum and prod (bf16 and f16 have
 * their own checks in C++), each against the values every rank can compute. */
static void nccl_numbers(braid_comm_t comm, int rank, int n) {
  enum { kCount = 37 };
  int ops[4] = {kNcclMax, kNcclMin, kNcclSum, kNcclProd};
  int k, i, r;
  for (k = 0; k < 4; ++k) {
    float f[kCount];
    double d[kCount];
    int32_t w[kCount];
    int64_t q[kCount];
    int wrong = 0;
    for (i = 0; i < kCount; ++i) {
      f[i] = (float)(rank + 1);
      d[i] = (double)(rank + 1);
      w[i] = rank + 1;
      q[i] = rank + 1;
    }
    EXPECT_OK(braid_all_reduce(f, f, kCount, (braid_datatype_t)kNcclFloat32, (braid_redop_t)ops[k], comm));
    EXPECT_OK(braid_all_reduce(d, d, kCount, (braid_datatype_t)kNcclFloat64, (braid_redop_t)ops[k], comm));
    EXPECT_OK(braid_all_reduce(w, w, kCount, (braid_datatype_t)kNcclInt32, (braid_redop_t)ops[k], comm));
    EXPECT_OK(braid_all_reduce(q, q, kCount, (braid_datatype_t)kNcclInt64, (braid_redop_t)ops[k], comm));
    {
      /* ranks contribute 1..n */
      int64_t want = ops[k] == kNcclMax ? n : ops[k] == kNcclMin ? 1 : ops[k] == kNcclSum ? (int64_t)n * (n + 1) / 2 : 1;
      if (ops[k] == kNcclProd)
        for (r = 1; r <= n; ++r) want *= r;
      for (i = 0; i < kCount; ++i)
        wrong += f[i] != (float)want || d[i] != (double)want || w[i] != (int32_t)want || q[i] != want;
    }
    EXPECT(wrong == 0);
  }
}

static void split(braid_comm_t comm, int rank, int n) {
  braid_comm_t child = NULL;
  int child_rank = -1, child_size = -1, sum = rank, i;
  /* Everyone, in reverse key order. */
  EXPECT_OK(braid_comm_split(comm, 3, n - rank, &child));
  EXPECT_OK(braid_comm_rank(child, &child_rank));
  EXPECT_OK(braid_comm_count(child, &child_size));
  EXPECT(child_rank == n - 1 - rank && child_size == n);
  EXPECT_OK(braid_all_reduce(&sum, &sum, 1, braid_i32, braid_sum, child));
  EXPECT(sum == n * (n - 1) / 2);
  {
    int32_t parents[64] = {0}, me = rank;
    EXPECT_OK(braid_all_gather(&me, parents, 1, braid_i32, child));
    for (i = 0; i < n && i < 64; ++i) EXPECT(parents[i] == n - 1 - i);
  }
  EXPECT_OK(braid_comm_destroy(child));
  /* Rank 0 joins nothing (NULL, success); rank n - 1 alone makes a
   * communicator of one; the others, if any, form a group. */
  child = (braid_comm_t)&sum;
  EXPECT_OK(braid_comm_split(comm, rank == 0 ? BRAID_SPLIT_NOCOLOR : rank == n - 1 ? 9 : 4, 0, &child));
  if (rank == 0) {
    EXPECT(child == NULL);
    EXPECT_CODE(braid_barrier(child), braid_invalid_argument);
  } else {
    int expected_size = rank == n - 1 ? 1 : n - 2;
    sum = 1;
    EXPECT(child != NULL);
    EXPECT_OK(braid_comm_count(child, &child_size));
    EXPECT_OK(braid_comm_rank(child, &child_rank));
    EXPECT(child_size == expected_size && child_rank == (rank == n - 1 ? 0 : rank - 1));
    EXPECT_OK(braid_all_reduce(&sum, &sum, 1, braid_i32, braid_sum, child));
    EXPECT(sum == expected_size);
    EXPECT_OK(braid_comm_destroy(child));
  }
  EXPECT_OK(braid_barrier(comm));
}

/* braid_comm_shrink without rank 0 (the rank hosting the store): the others
 * make a communicator of n - 1 ranks and all-reduce on it; rank 0 does not
 * call it. The old communicator stays usable (BRAID_SHRINK_DEFAULT). Bad
 * lists and flags are refused with braid_invalid_argument. */
static void shrink(braid_comm_t comm, int rank, int n) {
  braid_comm_t child = (braid_comm_t)&n;
  int excluded[2] = {0, 0}, bad_rank = n, child_rank = -1, child_size = -1, sum = rank;
  EXPECT_CODE(braid_comm_shrink(comm, &bad_rank, 1, &child, BRAID_SHRINK_DEFAULT), braid_invalid_argument);
  EXPECT(child == NULL);
  EXPECT(strstr(braid_last_error(), "is not a rank of this communicator") != NULL);
  EXPECT_CODE(braid_comm_shrink(comm, excluded, 2, &child, BRAID_SHRINK_DEFAULT), braid_invalid_argument);
  EXPECT(strstr(braid_last_error(), "excluded twice") != NULL);
  EXPECT_CODE(braid_comm_shrink(comm, excluded, 1, &child, 7), braid_invalid_argument);
  EXPECT_CODE(braid_comm_shrink(comm, NULL, 1, &child, BRAID_SHRINK_DEFAULT), braid_invalid_argument);
  if (rank == 0) {
    EXPECT_CODE(braid_comm_shrink(comm, excluded, 1, &child, BRAID_SHRINK_DEFAULT), braid_invalid_argument);
    EXPECT(strstr(braid_last_error(), "an excluded rank does not call shrink") != NULL);
  } else {
    EXPECT_OK(braid_comm_shrink(comm, excluded, 1, &child, BRAID_SHRINK_DEFAULT));
    EXPECT_OK(braid_comm_rank(child, &child_rank));
    EXPECT_OK(braid_comm_count(child, &child_size));
    EXPECT(child_rank == rank - 1 && child_size == n - 1);
    EXPECT_OK(braid_all_reduce(&sum, &sum, 1, braid_i32, braid_sum, child));
    EXPECT(sum == n * (n - 1) / 2);
    EXPECT_OK(braid_comm_destroy(child));
  }
  EXPECT_OK(braid_barrier(comm)); /* the old one goes on, rank 0 included */
}

/* The elastic calls outside an elastic job: braid_comm_grow is refused,
 * naming BRAID_ELASTIC, and a bad argument of any of them is named. The
 * elastic job itself: tests/faults/elastic_matrix.py. */
static void elastic_refusals(braid_comm_t comm) {
  braid_comm_t other = (braid_comm_t)&other;
  EXPECT_CODE(braid_comm_grow(comm, &other), braid_invalid_argument);
  EXPECT(other == NULL);
  EXPECT(strstr(braid_last_error(), "BRAID_ELASTIC=1") != NULL);
  EXPECT_CODE(braid_comm_grow(comm, NULL), braid_invalid_argument);
  EXPECT_CODE(braid_comm_shrink_lost(comm, &other, 7), braid_invalid_argument);
  EXPECT(strstr(braid_last_error(), "BRAID_SHRINK_ABORT") != NULL);
  EXPECT_CODE(braid_comm_join(NULL, &other), braid_invalid_argument);
  EXPECT(other == NULL);
  EXPECT_CODE(braid_comm_join("127.0.0.1:1", NULL), braid_invalid_argument);
  EXPECT_OK(braid_barrier(comm));
}

/* A second communicator from a unique id made by rank 0 and broadcast over
 * the first, with a 1 s timeout: rank 0 receives from rank 1, which never
 * sends. The wait returns the timeout; the communicator then refuses work. */
static void unique_id_and_timeout(braid_comm_t comm, int rank, int n) {
  braid_unique_id_t id;
  braid_comm_t second = NULL;
  int second_rank = -1, second_size = -1, done = 1;
  memset(&id, 0, sizeof id);
  if (rank == 0) EXPECT_OK(braid_get_unique_id(&id));
  EXPECT_OK(braid_broadcast(&id, &id, sizeof id, braid_u8, 0, comm));
  setenv("BRAID_TIMEOUT", "1s", 1);
  EXPECT_OK(braid_comm_init_rank(&second, n, id, rank));
  EXPECT_OK(braid_comm_rank(second, &second_rank));
  EXPECT_OK(braid_comm_count(second, &second_size));
  EXPECT(second_rank == rank && second_size == n);
  if (rank == 0) {
    int32_t x = 0;
    braid_work_t never = NULL;
    braid_result_t rc;
    EXPECT_OK(braid_recv_async(&x, 1, braid_i32, 1, second, &never));
    rc = braid_work_wait(never, -1, &done);
    EXPECT(rc == braid_timeout);
    EXPECT(strstr(braid_last_error(), "timed out") != NULL);
    EXPECT(braid_work_wait(never, -1, &done) == braid_timeout); /* the same error again */
    EXPECT_CODE(braid_barrier(second), braid_aborted);
    EXPECT_OK(braid_work_free(never));
  }
  EXPECT_OK(braid_barrier(comm)); /* on the first communicator, unaffected */
  EXPECT_OK(braid_comm_destroy(second));
}

/* A ring in which every rank receives before it sends, grouped (it deadlocks
 * ungrouped); a nested group with a collective; sendrecv. */
static void groups(braid_comm_t comm, int rank, int n) {
  int left = (rank + n - 1) % n, right = (rank + 1) % n, i;
  int32_t out[100], in[100], sum = rank + 1;
  braid_work_t w = NULL;
  for (i = 0; i < 100; ++i) {
    out[i] = value(rank, i);
    in[i] = -1;
  }
  EXPECT_OK(braid_group_start());
  EXPECT_OK(braid_recv(in, 100, braid_i32, left, comm));
  EXPECT_OK(braid_group_start());
  EXPECT_OK(braid_send_async(out, 100, braid_i32, right, comm, &w));
  EXPECT_CODE(braid_work_wait(w, 0, NULL), braid_invalid_usage); /* not issued before the end */
  EXPECT_OK(braid_group_end());
  EXPECT_OK(braid_all_reduce(&sum, &sum, 1, braid_i32, braid_sum, comm));
  EXPECT_OK(braid_group_end());
  EXPECT_OK(braid_work_wait(w, -1, NULL));
  EXPECT_OK(braid_work_free(w));
  EXPECT(sum == n * (n + 1) / 2);
  for (i = 0; i < 100; ++i) EXPECT(in[i] == value(left, i));
  EXPECT_CODE(braid_group_end(), braid_invalid_usage);
  for (i = 0; i < 100; ++i) in[i] = -1;
  EXPECT_OK(braid_sendrecv(out, 100, right, in, 100, left, braid_i32, comm));
  for (i = 0; i < 100; ++i) EXPECT(in[i] == value(left, i));
}

/* all_to_allv with random uneven counts (zeros included): the same matrix on
 * every rank from a shared seed; counts[a][b] is what a sends b. */
static void uneven(braid_comm_t comm, int rank, int n) {
  size_t counts[8][8], sc[8], sd[8], rc[8], rd[8], at_s = 0, at_r = 0, total = 0;
  int32_t *send, *recv;
  unsigned seed = 77;
  int a, b, round;
  for (round = 0; round < 4; ++round) {
    at_s = at_r = 0;
    for (a = 0; a < n; ++a)
      for (b = 0; b < n; ++b) {
        seed = seed * 1103515245u + 12345u;
        counts[a][b] = (seed >> 16) % 4 == 0 ? 0 : (seed >> 16) % 300;
      }
    for (b = 0; b < n; ++b) {
      sc[b] = counts[rank][b];
      sd[b] = at_s;
      at_s += sc[b] + 1; /* a gap after every block */
      rc[b] = counts[b][rank];
      rd[b] = at_r;
      at_r += rc[b];
    }
    send = malloc((at_s + 1) * sizeof *send);
    recv = malloc((at_r + 1) * sizeof *recv);
    for (b = 0; b < n; ++b)
      for (total = 0; total < sc[b]; ++total) send[sd[b] + total] = value(rank * 8 + b, (int)total);
    if (round % 2 == 0) {
      EXPECT_OK(braid_all_to_allv(send, sc, sd, recv, rc, rd, braid_i32, comm));
    } else {
      braid_work_t w = NULL;
      /* rdispls NULL: packed in rank order, as rd is */
      EXPECT_OK(braid_all_to_allv_async(send, sc, sd, recv, rc, NULL, braid_i32, comm, &w));
      EXPECT_OK(braid_work_wait(w, -1, NULL));
      EXPECT_OK(braid_work_free(w));
    }
    for (a = 0; a < n; ++a)
      for (total = 0; total < rc[a]; ++total)
        if (recv[rd[a] + total] != value(a * 8 + rank, (int)total)) {
          EXPECT(recv[rd[a] + total] == value(a * 8 + rank, (int)total));
          break;
        }
    free(send);
    free(recv);
  }
  {
    /* The wrong number of entries cannot be told in C, but overlapping
     * receive blocks and a negative count can. */
    size_t ones[8], zero_displs[8] = {0};
    int32_t x[16], y[16];
    for (b = 0; b < n; ++b) ones[b] = 1;
    EXPECT_CODE(braid_all_to_allv(x, ones, NULL, y, ones, zero_displs, braid_i32, comm), braid_invalid_argument);
    EXPECT(strstr(braid_last_error(), "overlap") != NULL);
    ones[0] = (size_t)-1;
    EXPECT_CODE(braid_all_to_allv(x, ones, NULL, y, ones, NULL, braid_i32, comm), braid_invalid_argument);
  }
}

/* Config init, hex ids, finalize. */
static void config_and_ids(braid_comm_t comm, int rank, int n) {
  braid_unique_id_t id, back;
  braid_comm_t third = NULL;
  braid_config_t config = BRAID_CONFIG_INITIALIZER;
  char hex[BRAID_UNIQUE_ID_HEX_BYTES];
  int user_rank = -1;
  float x = 1.f;
  memset(&id, 0, sizeof id);
  if (rank == 0) EXPECT_OK(braid_get_unique_id(&id));
  EXPECT_OK(braid_unique_id_to_hex(&id, hex, sizeof hex));
  EXPECT(strlen(hex) == 2 * BRAID_UNIQUE_ID_BYTES);
  EXPECT_CODE(braid_unique_id_to_hex(&id, hex, 10), braid_invalid_argument);
  EXPECT_OK(braid_broadcast(hex, hex, sizeof hex, braid_u8, 0, comm));
  EXPECT_OK(braid_unique_id_from_hex(hex, &back));
  EXPECT_CODE(braid_unique_id_from_hex("xyz", &back), braid_invalid_argument);
  config.timeout_ms = 20000;
  config.transport = "tcp";
  config.algorithm = "all_reduce:tree";
  config.blocking = 0;
  EXPECT_CODE(braid_comm_init_rank_config(&third, n, back, rank, &config), braid_unsupported);
  config.blocking = 1;
  config.size = 3;
  EXPECT_CODE(braid_comm_init_rank_config(&third, n, back, rank, &config), braid_invalid_argument);
  config.size = sizeof config;
  EXPECT_OK(braid_comm_init_rank_config(&third, n, back, rank, &config));
  EXPECT_OK(braid_comm_user_rank(third, &user_rank));
  EXPECT(user_rank == rank);
  EXPECT_OK(braid_all_reduce(&x, &x, 1, braid_f32, braid_sum, third));
  EXPECT(x == (float)n);
  {
    char description[512];
    braid_work_t w = NULL;
    EXPECT_OK(braid_comm_dump_state(third, description, sizeof description));
    EXPECT_OK(braid_all_reduce_async(&x, &x, 1, braid_f32, braid_sum, third, &w));
    EXPECT_OK(braid_comm_finalize(third)); /* finishes w */
    EXPECT_OK(braid_work_test(w, &user_rank));
    EXPECT(user_rank == 1);
    EXPECT(x == (float)(n * n));
    EXPECT_OK(braid_work_free(w));
  }
  EXPECT_OK(braid_comm_destroy(third));
}

/* braid_comm_get_stats on a fresh split: the operations just run, by
 * collective and size band. */
static void stats(braid_comm_t comm, int rank, int n) {
  braid_comm_t child = NULL;
  braid_op_stats_t rows[16];
  size_t count = 99, i;
  float x[256] = {0};
  uint64_t small = 0, large = 0, broadcasts = 0;
  (void)n;
  EXPECT_OK(braid_comm_split(comm, 0, rank, &child));
  EXPECT_OK(braid_comm_get_stats(child, NULL, 0, &count));
  EXPECT(count == 0);
  for (i = 0; i < 5; ++i) EXPECT_OK(braid_all_reduce(x, x, 2, braid_f32, braid_sum, child)); /* 8 bytes */
  for (i = 0; i < 3; ++i) EXPECT_OK(braid_all_reduce(x, x, 256, braid_f32, braid_sum, child)); /* 1 KiB */
  EXPECT_OK(braid_broadcast(x, x, 4, braid_f32, 0, child));
  EXPECT_OK(braid_comm_get_stats(child, NULL, 0, &count));
  EXPECT(count >= 3);
  EXPECT(braid_comm_get_stats(child, NULL, 1, &count) == braid_invalid_argument);
  EXPECT_OK(braid_comm_get_stats(child, rows, 16, &count));
  for (i = 0; i < count && i < 16; ++i) {
    const braid_op_stats_t* r = &rows[i];
    EXPECT(r->band_min_bytes <= r->bytes / r->count && r->bytes / r->count <= r->band_max_bytes);
    EXPECT(0 < r->min_us && r->min_us <= r->p50_us && r->p50_us <= r->p99_us && r->p99_us <= r->max_us);
    EXPECT(r->algorithm[0] != '\0');
    if (strcmp(r->collective, "all_reduce") == 0 && r->band_min_bytes == 8) small += r->count;
    if (strcmp(r->collective, "all_reduce") == 0 && r->band_min_bytes == 1024) large += r->count;
    if (strcmp(r->collective, "broadcast") == 0) broadcasts += r->count;
  }
  EXPECT(small == 5 && large == 3 && broadcasts == 1);
  EXPECT_OK(braid_comm_destroy(child));
}

/* Pre-multiplied sums: every rank scales by its own rank + 1. */
static void pre_mul_sums(braid_comm_t comm, int rank, int n) {
  braid_redop_t op, iop;
  float scalar = (float)(rank + 1), x[5], y[5];
  int32_t iscalar = rank + 1, in[16], out[2];
  braid_work_t w = NULL;
  int i;
  EXPECT_OK(braid_red_op_create_pre_mul_sum(&op, &scalar, braid_f32, braid_scalar_host_immediate, comm));
  EXPECT((int)op >= 5);
  EXPECT_OK(braid_red_op_create_pre_mul_sum(&iop, &iscalar, braid_i32, braid_scalar_host_immediate, comm));
  EXPECT(op != iop);
  for (i = 0; i < 5; ++i) x[i] = 2.f * (float)i;
  EXPECT_OK(braid_all_reduce(x, y, 5, braid_f32, op, comm));
  for (i = 0; i < 5; ++i) EXPECT(y[i] == (float)(i * n * (n + 1)));       /* sum of 2i (r + 1) */
  for (i = 0; i < 5; ++i) EXPECT(x[i] == 2.f * (float)i);                  /* input untouched */
  EXPECT_OK(braid_all_reduce_async(x, x, 5, braid_f32, op, comm, &w));     /* in place, async */
  EXPECT_OK(braid_work_wait(w, -1, NULL));
  EXPECT_OK(braid_work_free(w));
  for (i = 0; i < 5; ++i) EXPECT(x[i] == (float)(i * n * (n + 1)));
  for (i = 0; i < 2 * n; ++i) in[i] = i;
  EXPECT_OK(braid_reduce_scatter(in, out, 2, braid_i32, iop, comm));
  for (i = 0; i < 2; ++i) EXPECT(out[i] == (2 * rank + i) * n * (n + 1) / 2);
  EXPECT_CODE(braid_all_reduce(x, y, 5, braid_f64, op, comm), braid_invalid_argument); /* made for f32 */
  EXPECT_CODE(braid_red_op_create_pre_mul_sum(&op, &scalar, braid_f32, braid_scalar_device, comm), braid_unsupported);
  EXPECT_OK(braid_red_op_destroy(iop, comm));
  EXPECT_CODE(braid_red_op_destroy(iop, comm), braid_invalid_argument);
  EXPECT_CODE(braid_all_reduce(in, out, 1, braid_i32, iop, comm), braid_invalid_argument);
  EXPECT_OK(braid_red_op_destroy(op, comm));
}

/* braid_mem_alloc's shared memory: collectives on it (messages above 64K are
 * read in place by the ranks of this host), registration, and the refusals. */
static void shared_memory(braid_comm_t comm, int rank, int n) {
  enum { kCount = (1 << 20) / 4 + 3 };
  int32_t *send = NULL, *recv = NULL;
  int32_t heap[16];
  void *handle = NULL, *other = NULL;
  int i, r, wrong = 0;
  EXPECT_CODE(braid_mem_alloc(NULL, 64), braid_invalid_argument);
  EXPECT_CODE(braid_mem_alloc((void**)&send, 0), braid_invalid_argument);
  EXPECT(send == NULL);
  EXPECT_OK(braid_mem_alloc((void**)&send, kCount * sizeof(int32_t)));
  EXPECT_OK(braid_mem_alloc((void**)&recv, kCount * sizeof(int32_t)));
  if (send == NULL || recv == NULL) return;
  for (i = 0; i < kCount; ++i) send[i] = value(rank, i);
  EXPECT_OK(braid_all_reduce(send, recv, kCount, braid_i32, braid_sum, comm));
  for (i = 0; i < kCount; ++i) {
    int32_t expected = 0;
    for (r = 0; r < n; ++r) expected += value(r, i);
    wrong += recv[i] != expected || send[i] != value(rank, i);
  }
  EXPECT(wrong == 0);
  /* Broadcast in place from the last rank, registered. */
  EXPECT_OK(braid_comm_register(comm, send, kCount * sizeof(int32_t), &handle));
  EXPECT(handle != NULL);
  if (rank != n - 1) memset(send, 0, kCount * sizeof(int32_t));
  EXPECT_OK(braid_broadcast(send, send, kCount, braid_i32, n - 1, comm));
  wrong = 0;
  for (i = 0; i < kCount; ++i) wrong += send[i] != value(n - 1, i);
  EXPECT(wrong == 0);
  EXPECT_CODE(braid_mem_free(send), braid_invalid_argument); /* still registered */
  EXPECT_CODE(braid_comm_register(comm, heap, sizeof heap, &other), braid_invalid_argument);
  EXPECT(strstr(braid_last_error(), "braid_mem_alloc") != NULL);
  EXPECT(other == NULL);
  EXPECT_CODE(braid_comm_register(comm, send, kCount * sizeof(int32_t), NULL), braid_invalid_argument);
  EXPECT_OK(braid_comm_deregister(comm, handle));
  EXPECT_CODE(braid_comm_deregister(comm, handle), braid_invalid_argument);
  EXPECT_OK(braid_mem_free(send));
  EXPECT_CODE(braid_mem_free(send), braid_invalid_argument);
  EXPECT_CODE(braid_mem_free(heap), braid_invalid_argument);
  EXPECT_OK(braid_mem_free(recv));
  EXPECT_OK(braid_mem_free(NULL));
}

int main(void) {
  braid_comm_t comm = NULL;
  int rank = -1, n = 0;
  braid_result_t rc = braid_comm_init_env(&comm);
  if (rc != braid_success) {
    fprintf(stderr, "c_abi_check: braid_comm_init_env: %s: %s\n", braid_get_error_string(rc), braid_last_error());
    return 1;
  }
  {
    int version = -1;
    EXPECT_OK(braid_get_version(&version));
    EXPECT(version == BRAID_VERSION_CODE);
    EXPECT_CODE(braid_get_version(NULL), braid_invalid_argument);
  }
  EXPECT_OK(braid_comm_rank(comm, &rank));
  EXPECT_OK(braid_comm_count(comm, &n));
  {
    /* One host: the local rank is the rank. */
    int local_rank = -1, local_size = -1;
    EXPECT_OK(braid_comm_local_rank(comm, &local_rank));
    EXPECT_OK(braid_comm_local_size(comm, &local_size));
    EXPECT(local_rank == rank);
    EXPECT(local_size == n);
    EXPECT_CODE(braid_comm_local_rank(comm, NULL), braid_invalid_argument);
  }
  g_rank = rank;
  if (n < 2 || n > 8) {
    fprintf(stderr, "c_abi_check: run it with 2 to 8 ranks (got %d)\n", n);
    braid_comm_destroy(comm);
    return 2;
  }
  blocking_collectives(comm, rank, n);
  async_operations(comm, rank, n);
  argument_errors(comm, rank, n);
  nccl_numbers(comm, rank, n);
  split(comm, rank, n);
  shrink(comm, rank, n);
  elastic_refusals(comm);
  groups(comm, rank, n);
  pre_mul_sums(comm, rank, n);
  stats(comm, rank, n);
  uneven(comm, rank, n);
  shared_memory(comm, rank, n);
  config_and_ids(comm, rank, n);
  unique_id_and_timeout(comm, rank, n);
  EXPECT_OK(braid_comm_destroy(comm));
  printf("rank %d of %d: %d C ABI cases right, %d wrong\n", rank, n, g_cases - g_failed, g_failed);
  return g_failed == 0 ? 0 : 1;
}

/* Embedding braid from C through include/braid/braid.h only.
 *
 *   embed_c [N]      (default 3)
 *
 * The parent forks N ranks, then makes a unique id (so it hosts the
 * rendezvous store; it forks first because a process must not fork while
 * braid's threads run) and hands the id to each rank through a pipe. Each
 * rank joins with braid_comm_init_rank, all-reduces, broadcasts and meets the
 * others at a barrier. The same calls work in N separate processes on N hosts
 * if the id travels by file or MPI_Bcast.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "braid/braid.h"

#define COUNT 4096

static int fail(int rank, const char* what, braid_result_t rc) {
  fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, what, braid_get_error_string(rc), braid_last_error());
  return 1;
}

static int run_rank(braid_unique_id_t id, int rank, int nranks) {
  braid_comm_t comm;
  braid_result_t rc = braid_comm_init_rank(&comm, nranks, id, rank);
  if (rc != braid_success) return fail(rank, "braid_comm_init_rank", rc);

  static float grad[COUNT];
  for (int i = 0; i < COUNT; ++i) grad[i] = (float)(rank + 1);
  rc = braid_all_reduce(grad, grad, COUNT, braid_f32, braid_sum, comm);
  if (rc != braid_success) return fail(rank, "braid_all_reduce", rc);
  float expected = (float)nranks * (float)(nranks + 1) / 2.0f;
  int wrong = 0;
  for (int i = 0; i < COUNT; ++i) wrong += grad[i] != expected;

  static double weights[COUNT];
  for (int i = 0; i < COUNT; ++i) weights[i] = rank == 0 ? 0.5 * i : -1.0;
  rc = braid_broadcast(weights, weights, COUNT, braid_f64, 0, comm);
  if (rc != braid_success) return fail(rank, "braid_broadcast", rc);
  for (int i = 0; i < COUNT; ++i) wrong += weights[i] != 0.5 * i;

  rc = braid_barrier(comm);
  if (rc != braid_success) return fail(rank, "braid_barrier", rc);

  /* Bad input is an error code with a message, not a crash. */
  rc = braid_all_reduce(NULL, grad, COUNT, braid_f32, braid_sum, comm);
  if (rc != braid_invalid_argument) {
    fprintf(stderr, "rank %d: a NULL send buffer was not rejected\n", rank);
    ++wrong;
  }
  printf("rank %d of %d: all-reduce sum = %g (expected %g), broadcast ok, %d wrong\n", rank, nranks, grad[0], expected,
         wrong);
  braid_comm_destroy(comm);
  return wrong == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  int nranks = argc > 1 ? atoi(argv[1]) : 3;
  if (nranks < 1 || nranks > 64) {
    fprintf(stderr, "usage: embed_c [N]   (1 <= N <= 64)\n");
    return 2;
  }
  int pipes[64][2];
  fflush(stdout);
  for (int r = 0; r < nranks; ++r) {
    if (pipe(pipes[r]) != 0) {
      perror("pipe");
      return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 1;
    }
    if (pid == 0) {
      braid_unique_id_t id;
      close(pipes[r][1]);
      size_t got = 0;
      while (got < sizeof id) {
        ssize_t n = read(pipes[r][0], (char*)&id + got, sizeof id - got);
        if (n <= 0) _exit(fail(r, "reading the unique id from the parent", braid_system_error));
        got += (size_t)n;
      }
      int rc_rank = run_rank(id, r, nranks);
      fflush(stdout);
      _exit(rc_rank);
    }
    close(pipes[r][0]);
  }
  braid_unique_id_t id;
  braid_result_t rc = braid_get_unique_id(&id);
  if (rc != braid_success) return fail(-1, "braid_get_unique_id", rc);
  for (int r = 0; r < nranks; ++r) {
    if (write(pipes[r][1], &id, sizeof id) != (ssize_t)sizeof id) perror("write");
    close(pipes[r][1]);
  }
  int failed = 0;
  for (int r = 0; r < nranks; ++r) {
    int status = 0;
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  printf("embed_c: %d of %d ranks succeeded\n", nranks - failed, nranks);
  return failed == 0 ? 0 : 1;
}

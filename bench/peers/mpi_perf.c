/* The Open MPI side of bench/compare: MPI_Allreduce or MPI_Bcast timed the
 * way braid-perf times braid (warm-up, a barrier, back-to-back iterations,
 * each rank's average, the mean over ranks as braid-perf's default -a 1),
 * float32 (sum), out of place, printing braid-perf's --csv lines so that
 * bench/compare reads every library alike.
 *
 *   mpirun -np 2 [--mca ...] mpi_perf all_reduce|broadcast -b 8 -e 64M -f 4
 *          [-n ITERS (0: scaled to the size, as braid-perf -n 0)] [-w WARMUP]
 *          [--transport LABEL]   (the transport column: MPI cannot say which it used)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_size(const char* text) {
  char* end = NULL;
  double v = strtod(text, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  else if (*end == 'M') v *= 1024 * 1024;
  else if (*end == 'G') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

/* braid-perf's auto_iterations() and auto_warmup() (bench/perf_report.cpp). */
static int auto_iterations(size_t bytes) {
  size_t n = ((size_t)256 << 20) / (bytes ? bytes : 1);
  return n < 5 ? 5 : n > 200 ? 200 : (int)n;
}
static int auto_warmup(size_t bytes) {
  int w = auto_iterations(bytes) / 10;
  return w < 2 ? 2 : w > 20 ? 20 : w;
}

int main(int argc, char** argv) {
  size_t min_bytes = 8, max_bytes = 64 << 20, factor = 2;
  int iters = 20, warmup = 5, bcast = 0;
  const char* transport = "mpi";
  MPI_Init(&argc, &argv);
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(a, "all_reduce")) bcast = 0;
    else if (!strcmp(a, "broadcast")) bcast = 1;
    else if (!strcmp(a, "-b")) min_bytes = parse_size(v), ++i;
    else if (!strcmp(a, "-e")) max_bytes = parse_size(v), ++i;
    else if (!strcmp(a, "-f")) factor = parse_size(v), ++i;
    else if (!strcmp(a, "-n")) iters = atoi(v), ++i;
    else if (!strcmp(a, "-w")) warmup = atoi(v), ++i;
    else if (!strcmp(a, "--transport")) transport = v, ++i;
    else {
      fprintf(stderr, "mpi_perf: unknown argument '%s'\n", a);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (factor < 2) factor = 2;
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t max_count = max_bytes / sizeof(float) ? max_bytes / sizeof(float) : 1;
  float* send = malloc(max_count * sizeof(float));
  float* recv = malloc(max_count * sizeof(float));
  if (rank == 0)
    printf("collective,algorithm,transport,ranks,hosts,size,count,type,redop,root,in_place,time_us,algbw_gbps,"
           "busbw_gbps,wrong\n");
  for (size_t bytes = min_bytes; bytes <= max_bytes;) {
    size_t count = bytes / sizeof(float) ? bytes / sizeof(float) : 1;
    size_t size = count * sizeof(float);
    int it = iters > 0 ? iters : auto_iterations(size);
    int wu = iters > 0 ? warmup : auto_warmup(size);
    for (size_t i = 0; i < count; ++i) send[i] = (float)(rank + 1);
    for (int i = 0; i < wu; ++i) {
      if (bcast) MPI_Bcast(send, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
      else MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < it; ++i) {
      if (bcast) MPI_Bcast(send, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
      else MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double local_us = (MPI_Wtime() - start) * 1e6 / it, sum_us = 0;
    MPI_Allreduce(&local_us, &sum_us, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    /* One checked run: all-reduce gives n(n+1)/2, broadcast the root's 1. */
    const float* result = bcast ? send : recv;
    float expected = bcast ? 1.0f : (float)n * (float)(n + 1) / 2.0f;
    for (size_t i = 0; i < count; ++i) send[i] = (float)(rank + 1);
    if (bcast) MPI_Bcast(send, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long wrong = 0, total_wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += result[i] != expected;
    MPI_Allreduce(&wrong, &total_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    double time_us = sum_us / n;
    double algbw = (double)size / (time_us * 1e3);
    double busbw = bcast ? algbw : algbw * 2.0 * (n - 1) / n;
    if (rank == 0)
      printf("%s,openmpi,%s,%d,1,%zu,%zu,f32,%s,%d,false,%.3f,%.6f,%.6f,%ld\n", bcast ? "broadcast" : "all_reduce",
             transport, n, size, count, bcast ? "none" : "sum", bcast ? 0 : -1, time_us, algbw, busbw, total_wrong);
    fflush(stdout);
    if (bytes > max_bytes / factor) break;
    bytes = bytes ? bytes * factor : 1;
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}

/* How long one small MPI_Iallreduce takes when ranks wait for it in a
 * test-and-sleep loop, for several waiting policies, on P ranks (more
 * ranks than cores is the case that matters). Arrival patterns: all ranks
 * together; ranks 1 ms apart; ranks 8 ms apart (a wait of tens of ms).
 * Prints the time per operation beyond the arrival spread and the CPU all
 * ranks used.
 *
 *   mpicc.mpich -O2 -o allreduce allreduce.c && mpiexec.mpich -n 8 ./allreduce */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
  const char *name;
  int yields;         /* test and sched_yield this many times first */
  double yield_s;     /* test and sched_yield for this long first */
  double first_s;     /* then sleep this long, doubling ... */
  double cap_s;       /* ... up to this */
  double cap_share;   /* ... or up to this share of the time waited, if larger */
  double cap_max_s;   /* ... but never above this */
} policy;

static void wait_for(MPI_Request *r, const policy *p) {
  double t0 = now(), pause = p->first_s;
  for (int tests = 1;; tests++) {
    int done = 0;
    MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    double waited = now() - t0;
    if (tests <= p->yields || waited < p->yield_s) {
      sched_yield();
      continue;
    }
    struct timespec ts = {0, (long)(pause * 1e9)};
    nanosleep(&ts, 0);
    double cap = p->cap_s;
    if (p->cap_share > 0 && waited * p->cap_share > cap) cap = waited * p->cap_share;
    if (p->cap_share > 0 && cap > p->cap_max_s) cap = p->cap_max_s;
    pause *= 2;
    if (pause > cap) pause = cap;
  }
}

int main(int argc, char **argv) {
  int provided, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const policy policies[] = {
      {"yield 200us, then 20us..500us (fifth round)", 0, 200e-6, 20e-6, 500e-6, 0, 0},
      {"20us..100us", 0, 0, 20e-6, 100e-6, 0, 0},
      {"20us, constant", 0, 0, 20e-6, 20e-6, 0, 0},
      {"20us..max(100us, waited/20), <= 1ms (kept)", 0, 0, 20e-6, 100e-6, 0.05, 1e-3},
      {"16 yields, 20us..max(100us, waited/50), <= 500us", 16, 0, 20e-6, 100e-6, 0.02, 500e-6},
  };
  const int n = sizeof policies / sizeof policies[0], ops = 60;
  const double spreads_ms[] = {0, 1, 8};
  long v = 1, out;
  for (int s = 0; s < 3; s++) {
    for (int c = 0; c < n; c++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now(), cpu0 = (double)clock() / CLOCKS_PER_SEC;
      for (int i = 0; i < ops; i++) {
        long delay_ns = (long)(((rank + i) % size) * spreads_ms[s] * 1e6);
        if (delay_ns) {
          struct timespec ts = {delay_ns / 1000000000L, delay_ns % 1000000000L};
          nanosleep(&ts, 0);
        }
        MPI_Request r;
        MPI_Iallreduce(&v, &out, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD, &r);
        wait_for(&r, &policies[c]);
      }
      double per_op = (now() - t0) / ops * 1e6 - spreads_ms[s] * (size - 1) * 1e3;
      double cpu = (double)clock() / CLOCKS_PER_SEC - cpu0, all_cpu;
      MPI_Reduce(&cpu, &all_cpu, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
      if (rank == 0)
        printf("arrivals %.0f ms apart | %-40s | %7.0f us per op beyond the spread | CPU %6.1f ms\n",
               spreads_ms[s], policies[c].name, per_op, all_cpu * 1e3);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now();
  for (int i = 0; i < ops; i++) MPI_Allreduce(&v, &out, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) printf("blocking MPI_Allreduce, arrivals together: %.0f us per op\n", (now() - t0) / ops * 1e6);
  MPI_Finalize();
  return 0;
}

// 8 processes: each a reader thread (pread 4 MiB into a 256 MiB ring, blocking
// handoff) and a consumer that checksums step by step (STEP bytes) and, after
// each step, meets the other processes at a barrier: none, polling with the
// engine's polite pause schedule, or futex (blocking).
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define REQ (4u << 20)
#define STEP (12500000ul)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int fd, procs, barrier_mode; static off_t lo, hi; static char *ring; static size_t ring_len = 256u << 20;
static _Atomic uint64_t produced, consumed;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
struct shared { _Atomic uint32_t count, gen; _Atomic uint64_t wakeups; };
static struct shared *sh;
static void waitfor(_Atomic uint64_t *v, uint64_t above) { pthread_mutex_lock(&mu); while (atomic_load(v) <= above) pthread_cond_wait(&cv, &mu); pthread_mutex_unlock(&mu); }
static void publish(_Atomic uint64_t *v, uint64_t x) { pthread_mutex_lock(&mu); atomic_store(v, x); pthread_cond_broadcast(&cv); pthread_mutex_unlock(&mu); }
static void barrier(void) {
  if (barrier_mode == 0) return;
  uint32_t g = atomic_load(&sh->gen);
  if (atomic_fetch_add(&sh->count, 1) == (uint32_t)procs - 1) {
    atomic_store(&sh->count, 0); atomic_fetch_add(&sh->gen, 1);
    if (barrier_mode == 2) syscall(SYS_futex, &sh->gen, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
    return;
  }
  if (barrier_mode == 2) { while (atomic_load(&sh->gen) == g) syscall(SYS_futex, &sh->gen, FUTEX_WAIT, g, NULL, NULL, 0); return; }
  double t0 = now(); double pause = 20e-6;
  while (atomic_load(&sh->gen) == g) {
    struct timespec ts = {0, (long)(pause * 1e9)}; nanosleep(&ts, NULL); atomic_fetch_add(&sh->wakeups, 1);
    double cap = (now() - t0) / 20; if (cap < 100e-6) cap = 100e-6; if (cap > 1e-3) cap = 1e-3;
    pause = pause * 2 < cap ? pause * 2 : cap;
  }
}
static void *reader(void *arg) {
  (void)arg; uint64_t k = 0; size_t slots = ring_len / REQ;
  for (off_t at = lo; at < hi; at += REQ, k++) {
    size_t n = (hi - at) < REQ ? (size_t)(hi - at) : REQ;
    if (k >= slots) waitfor(&consumed, k - slots);
    if (pread(fd, ring + (k % slots) * REQ, n, at) != (ssize_t)n) { perror("pread"); exit(1); }
    publish(&produced, k + 1);
  }
  return NULL;
}
static uint64_t sum(const char *p, size_t n) { uint64_t s = 0; const uint64_t *q = (const uint64_t *)p; for (size_t i = 0; i < n / 8; i++) s += q[i]; return s; }
int main(int argc, char **argv) {
  const char *path = argv[1]; procs = atoi(argv[2]); barrier_mode = atoi(argv[3]);
  sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int f0 = open(path, O_RDONLY); off_t len = lseek(f0, 0, SEEK_END); close(f0);
  int ready[2], go[2]; if (pipe(ready) || pipe(go)) return 1;
  for (int p = 0; p < procs; p++) if (fork() == 0) {
    fd = open(path, O_RDONLY); lo = len * p / procs; hi = len * (p + 1) / procs;
    ring = aligned_alloc(4096, ring_len); memset(ring, 1, ring_len);
    close(go[1]); char c = 1; if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) < 0) return 1;
    pthread_t th; pthread_create(&th, NULL, reader, NULL);
    uint64_t total = hi - lo, s = 0, slots = ring_len / REQ;
    // consume in steps; all procs take the same number of steps
    uint64_t steps = (len / procs + STEP - 1) / STEP + 1;
    uint64_t at = 0;
    for (uint64_t st = 0; st < steps; st++) {
      uint64_t end = at + STEP < total ? at + STEP : total;
      while (at < end) {
        uint64_t k = at / REQ; waitfor(&produced, k);
        uint64_t chunk_end = (k + 1) * REQ < end ? (k + 1) * REQ : end;
        s += sum(ring + (k % slots) * REQ + at % REQ, chunk_end - at);
        at = chunk_end; if (at % REQ == 0 || at == total) publish(&consumed, at / REQ + (at == total));
      }
      barrier();
    }
    pthread_join(th, NULL);
    if (s == 42) printf("!");
    _exit(0);
  }
  close(go[0]); for (int p = 0; p < procs; p++) { char c; if (read(ready[0], &c, 1) != 1) return 1; }
  double t0 = now(); close(go[1]);
  for (int p = 0; p < procs; p++) wait(NULL);
  double t = now() - t0;
  printf("barrier %d procs %d: %.0f MB/s  poll wakeups %lu\n", barrier_mode, procs, len / 1e6 / t, (unsigned long)atomic_load(&sh->wakeups));
  return 0;
}

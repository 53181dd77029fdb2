// N processes each read 1/N of a file in 4 MiB preads.
// mode 0: pread into a 4 MiB buffer, checksum in the same thread (raw).
// mode 1: a reader thread preads into a ring of RING bytes; the main thread checksums behind it.
// mode 2: like 1 but the reader waits until the consumer is within one request (no run-ahead).
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define REQ (4u << 20)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int fd; static off_t lo, hi; static char *ring; static size_t ring_len; static int mode;
static _Atomic uint64_t produced, consumed;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static void waitfor(_Atomic uint64_t *v, uint64_t above) { if (mode == 4) { pthread_mutex_lock(&mu); while (atomic_load(v) <= above) pthread_cond_wait(&cv, &mu); pthread_mutex_unlock(&mu); } else while (atomic_load(v) <= above) usleep(50); }
static void publish(_Atomic uint64_t *v, uint64_t x) { if (mode == 4) { pthread_mutex_lock(&mu); atomic_store(v, x); pthread_cond_broadcast(&cv); pthread_mutex_unlock(&mu); } else atomic_store(v, x); }
static _Atomic int stop_poll; static long poll_us;
static void *poller(void *a) { (void)a; while (!atomic_load(&stop_poll)) { struct timespec ts = {0, poll_us * 1000}; nanosleep(&ts, NULL); } return NULL; }
static uint64_t sum(const char *p, size_t n) { uint64_t s = 0; const uint64_t *q = (const uint64_t *)p; for (size_t i = 0; i < n / 8; i++) s += q[i]; return s; }
static void *reader(void *arg) {
  (void)arg; uint64_t k = 0;
  for (off_t at = lo; at < hi; at += REQ, k++) {
    size_t n = (hi - at) < REQ ? (size_t)(hi - at) : REQ;
    size_t slots = ring_len / REQ;
    if (k >= (mode == 2 ? 2 : slots)) waitfor(&consumed, k - (mode == 2 ? 2 : slots));
    if (pread(fd, ring + (k % slots) * REQ, n, at) != (ssize_t)n) { perror("pread"); exit(1); }
    publish(&produced, k + 1);
  }
  return NULL;
}
int main(int argc, char **argv) {
  const char *path = argv[1]; int procs = atoi(argv[2]); mode = atoi(argv[3]); ring_len = (size_t)atol(argv[4]) << 20; poll_us = argc > 5 ? atol(argv[5]) : 0;
  int f0 = open(path, O_RDONLY); off_t len = lseek(f0, 0, SEEK_END); close(f0);
  int ready[2], go[2]; pipe(ready); pipe(go);
  for (int p = 0; p < procs; p++) if (fork() == 0) {
    fd = open(path, O_RDONLY); lo = len * p / procs; hi = len * (p + 1) / procs;
    uint64_t s = 0;
    char *buf = aligned_alloc(4096, REQ); memset(buf, 1, REQ);
    if (mode) { ring = aligned_alloc(4096, ring_len); memset(ring, 1, ring_len); }
    close(go[1]); char c = 1; write(ready[1], &c, 1); read(go[0], &c, 1);
    pthread_t pt; if (poll_us) pthread_create(&pt, NULL, poller, NULL);
    if (mode == 0) {
      for (off_t at = lo; at < hi; at += REQ) { size_t n = (hi - at) < REQ ? (size_t)(hi - at) : REQ; if (pread(fd, buf, n, at) != (ssize_t)n) return 1; s += sum(buf, n); }
    } else if (mode == 3) {
      size_t slots = ring_len / REQ; uint64_t k = 0;
      for (off_t at = lo; at < hi; at += REQ, k++) { size_t n = (hi - at) < REQ ? (size_t)(hi - at) : REQ; char *d = ring + (k % slots) * REQ; if (pread(fd, d, n, at) != (ssize_t)n) return 1; s += sum(d, n); }
    } else {
      pthread_t th; pthread_create(&th, NULL, reader, NULL);
      uint64_t total = (hi - lo + REQ - 1) / REQ, slots = ring_len / REQ;
      for (uint64_t k = 0; k < total; k++) {
        waitfor(&produced, k);
        size_t n = k == total - 1 ? (size_t)(hi - lo - k * REQ) : REQ;
        s += sum(ring + (k % slots) * REQ, n); publish(&consumed, k + 1);
      }
      pthread_join(th, NULL);
    }
    if (poll_us) { atomic_store(&stop_poll, 1); pthread_join(pt, NULL); }
    if (s == 42) printf("!");
    _exit(0);
  }
  close(go[0]); for (int p = 0; p < procs; p++) { char c; read(ready[0], &c, 1); }
  double t0 = now(); close(go[1]);
  for (int p = 0; p < procs; p++) wait(NULL);
  double t = now() - t0;
  printf("mode %d procs %d ring %zu MiB poll %ld us: %.0f MB/s\n", mode, procs, ring_len >> 20, poll_us, len / 1e6 / t);
  return 0;
}

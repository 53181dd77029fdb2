/* Replays the reads lmdbio's readers made (recorded with strace, see
 * commands.sh) from P processes at once, without the engine, to tell
 * what the tree scan's page reads do to the value reads that follow.
 *
 *   replay DATA_FILE MODE P     (reads ops/ops.R, "OFFSET LENGTH" lines)
 *
 * Each process replays its rank's reads in order with pread into a buffer
 * of its own and sums every byte. Reads under 4 KiB (the meta pages) are
 * left out in every mode, so that the modes differ only in the tree.
 *   0  every read through one plain descriptor (what lmdbio did)
 *   1  the tree's page reads (4 KiB) left out
 *   2  the tree's pages through a second descriptor opened with O_DIRECT
 *   3  the tree's pages with O_DIRECT switched on by fcntl for them
 *   4  one descriptor opened with O_DIRECT, switched off by fcntl before
 *      the first value read
 *   5  one descriptor opened with O_DIRECT for every read (the values
 *      read directly, through FUSE, by the brick too)
 * Caches are dropped by the caller before each run.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_OPS 65536
#define PAGE 4096

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t sum(const unsigned char *p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; i++) s += p[i];
  return s;
}

static void die(const char *what) {
  perror(what);
  exit(1);
}

static void replay(const char *path, int mode, int rank) {
  static long long off[MAX_OPS], len[MAX_OPS];
  char name[64];
  snprintf(name, sizeof name, "ops/ops.%d", rank);
  FILE *f = fopen(name, "r");
  if (!f) die(name);
  int n = 0;
  long long a, b;
  while (n < MAX_OPS && fscanf(f, "%lld %lld", &a, &b) == 2) {
    if (b < PAGE) continue;
    if (mode == 1 && b == PAGE) continue;
    off[n] = a, len[n++] = b;
  }
  fclose(f);
  int fd = open(path, O_RDONLY | (mode == 4 || mode == 5 ? O_DIRECT : 0));
  int dfd = mode == 2 ? open(path, O_RDONLY | O_DIRECT) : -1;
  if (fd < 0 || (mode == 2 && dfd < 0)) die("open");
  size_t cap = 0;
  for (int i = 0; i < n; i++)
    if ((size_t)len[i] > cap) cap = len[i];
  unsigned char *buf = aligned_alloc(PAGE, (cap + PAGE - 1) / PAGE * PAGE);
  uint64_t s = 0;
  for (int i = 0; i < n; i++) {
    int tree = len[i] == PAGE && off[i] % PAGE == 0;
    int use = fd;
    if (tree && mode == 2) use = dfd;
    if (tree && mode == 3 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_DIRECT)) die("F_SETFL");
    if (!tree && mode == 4 && (fcntl(fd, F_GETFL) & O_DIRECT) &&
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_DIRECT))
      die("F_SETFL");
    if (pread(use, buf, len[i], off[i]) != len[i]) die("pread");
    if (tree && mode == 3 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_DIRECT)) die("F_SETFL");
    s += sum(buf, len[i]);
  }
  if (s == 42) puts("");  /* keep the sum */
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: replay DATA_FILE MODE P\n");
    return 2;
  }
  int mode = atoi(argv[2]), P = atoi(argv[3]);
  pthread_barrier_t *bar = mmap(0, sizeof *bar, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pthread_barrierattr_t ba;
  pthread_barrierattr_init(&ba);
  pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(bar, &ba, P + 1);
  for (int p = 0; p < P; p++)
    if (fork() == 0) {
      pthread_barrier_wait(bar);
      replay(argv[1], mode, p);
      _exit(0);
    }
  pthread_barrier_wait(bar);
  double t0 = now();
  int status, failed = 0;
  while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status);
  printf("mode %d P %d %.3f s\n", mode, P, now() - t0);
  return failed;
}

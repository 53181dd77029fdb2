/* What the C test programs share: start-up, the status check, and the manifest of
 * liblmdb's records (key hex, value length, FNV-1a 64 of the value) that
 * every delivered record is checked against. */
#ifndef LMDBIO_TEST_MANIFEST_H
#define LMDBIO_TEST_MANIFEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lmdbio.h"

#define CHECK(call)                                                              \
  do {                                                                           \
    int rc_ = (call);                                                            \
    if (rc_ != LMDBIO_OK) {                                                      \
      fprintf(stderr, "%s failed (%d): %s\n", #call, rc_, lmdbio_last_error());  \
      MPI_Abort(MPI_COMM_WORLD, 2);                                              \
    }                                                                            \
  } while (0)

/* MPI_Init, this rank and the rank count; aborts with a usage line unless
 * the program got DB and MANIFEST. */
static inline void start_mpi(int *argc, char ***argv, const char *program, int *rank,
                             int *size) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  if (*argc != 3) {
    if (*rank == 0) fprintf(stderr, "usage: %s DB MANIFEST\n", program);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

/* Longest key the checks handle (LMDB's default limit is 511). */
#define MANIFEST_MAX_KEY 1024

typedef struct {
  char *key_hex;
  uint64_t len;
  uint64_t fnv;
} entry;

static inline uint64_t fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 14695981039346656037ULL;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

/* Reads the manifest at path; aborts the job if it cannot be opened. */
static inline entry *load_manifest(const char *path, size_t *count) {
  FILE *f = fopen(path, "r");
  if (!f) MPI_Abort(MPI_COMM_WORLD, 4);
  size_t cap = 1024, n = 0;
  entry *manifest = malloc(cap * sizeof(entry));
  char key[2048];
  uint64_t len, fnv;
  while (fscanf(f, "%2047s %" SCNu64 " %" SCNx64, key, &len, &fnv) == 3) {
    if (n == cap) manifest = realloc(manifest, (cap *= 2) * sizeof(entry));
    manifest[n].key_hex = strdup(key);
    manifest[n].len = len;
    manifest[n].fnv = fnv;
    n++;
  }
  fclose(f);
  *count = n;
  return manifest;
}

/* Aborts the job unless record r is the manifest's record r->ordinal. */
static inline void check_record(const entry *manifest, size_t count, const lmdbio_record *r) {
  static const char digits[] = "0123456789abcdef";
  char hex[2 * MANIFEST_MAX_KEY + 1];
  if (r->ordinal >= count || r->key_len > MANIFEST_MAX_KEY) MPI_Abort(MPI_COMM_WORLD, 6);
  const unsigned char *k = r->key;
  for (size_t j = 0; j < r->key_len; j++) {
    hex[2 * j] = digits[k[j] >> 4];
    hex[2 * j + 1] = digits[k[j] & 15];
  }
  hex[2 * r->key_len] = 0;
  const entry *e = &manifest[r->ordinal];
  if (strcmp(hex, e->key_hex) != 0 || r->value_len != e->len || fnv1a(r->value, r->value_len) != e->fnv) {
    fprintf(stderr, "record %" PRIu64 " differs from the manifest\n", r->ordinal);
    MPI_Abort(MPI_COMM_WORLD, 7);
  }
}

#endif

/* A database damaged while a job reads it: rank 0 either overwrites an
 * overflow page's flags (the engine sees it when the record's value
 * arrives) or truncates the data file (the node readers' reads past the new
 * end fail). Every rank must get an error with the same code, every record
 * delivered before must match the manifest, and closing must still work on
 * every rank. With collective reads every rank fails at the same step. With
 * independent reads a rank that cannot serve a step fails there and the
 * others where the ranks next meet, at the next round's start: within one
 * round's steps (prefetch) of the first.
 * Prints "FAILED_AT FIRST_STEP LAST_STEP CODE" on rank 0.
 *
 * When: "damage" and "truncate" after every rank's step 0, "truncate-late"
 * after every rank's step 1, "truncate-first" before step 0 (its reads
 * start after the cut: some nodes fail step 0, the others serve it),
 * "truncate-racing" as soon as rank 0's own step 0 is in, while other
 * nodes may still be reading theirs. The program
 * meets the others (MPI_Barrier) around the damage only when every rank has
 * its step in hand: with independent reads a rank whose step fails waits
 * for the others' next engine call, so a collective of the program's own
 * that such a rank does not reach would never end.
 *
 * usage: mpiexec -n P damaged_mid_job DB MANIFEST MODE OFFSET
 *            RANKS_PER_NODE READERS_PER_NODE COLLECTIVE */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <unistd.h>

#include "manifest.h"

int main(int argc, char **argv) {
  int rank, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 8) {
    if (rank == 0)
      fprintf(stderr,
              "usage: %s DB MANIFEST damage|truncate|truncate-late|truncate-first|truncate-racing "
              "OFFSET K READERS COLLECTIVE\n",
              argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char *mode = argv[3];
  int damage = strcmp(mode, "damage") == 0;
  int racing = strcmp(mode, "truncate-racing") == 0;
  /* The step before which the file changes. */
  uint64_t damage_at = strcmp(mode, "truncate-late") == 0    ? 2
                       : strcmp(mode, "truncate-first") == 0 ? 0
                                                             : 1;
  long long offset = atoll(argv[4]);
  size_t n;
  entry *manifest = load_manifest(argv[2], &n);

  lmdbio_options *opts;
  CHECK(lmdbio_options_new(&opts));
  CHECK(lmdbio_options_set_batch_size(opts, 4));
  CHECK(lmdbio_options_set_tail(opts, LMDBIO_TAIL_SHORT));
  CHECK(lmdbio_options_set_ranks_per_node(opts, (size_t)atoi(argv[5])));
  CHECK(lmdbio_options_set_readers_per_node(opts, (size_t)atoi(argv[6])));
  CHECK(lmdbio_options_set_collective(opts, atoi(argv[7])));
  /* Short rounds: most of the file is read after the damage. */
  const long long prefetch = 2;
  CHECK(lmdbio_options_set_prefetch(opts, (size_t)prefetch));
  CHECK(lmdbio_options_set_epoch_limit(opts, 1));
  lmdbio_engine *engine;
  CHECK(lmdbio_open(MPI_COMM_WORLD, argv[1], opts, &engine));
  uint64_t steps;
  CHECK(lmdbio_step_limit(engine, &steps));

  char data[4096];
  snprintf(data, sizeof data, "%s/data.mdb", argv[1]);
  long long failed_at = -1;
  int code = LMDBIO_OK;
  for (uint64_t step = 0; step < steps; step++) {
    if (step == damage_at) {
      /* Every rank has its steps before in hand before the file changes,
       * unless racing (see above). */
      if (!racing) MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0) {
        int fd = open(data, O_WRONLY);
        if (fd < 0) MPI_Abort(MPI_COMM_WORLD, 4);
        if (damage) {
          /* mp_flags of the page header: a leaf, not an overflow page. */
          unsigned char leaf[2] = {0x02, 0x00};
          if (pwrite(fd, leaf, 2, (off_t)offset + 10) != 2) MPI_Abort(MPI_COMM_WORLD, 4);
        } else if (ftruncate(fd, (off_t)offset) != 0) {
          MPI_Abort(MPI_COMM_WORLD, 4);
        }
        close(fd);
      }
      if (!racing) MPI_Barrier(MPI_COMM_WORLD);
    }
    lmdbio_batch batch;
    int rc = lmdbio_next_batch(engine, &batch);
    if (rc != LMDBIO_OK) {
      failed_at = (long long)step;
      code = rc;
      if (strlen(lmdbio_last_error()) == 0) {
        fprintf(stderr, "rank %d: error %d without a message\n", rank, rc);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
      if (rank == 0) fprintf(stderr, "rank 0 at step %llu: %s\n", (unsigned long long)step,
                             lmdbio_last_error());
      break;
    }
    for (size_t i = 0; i < batch.count; i++) check_record(manifest, n, &batch.records[i]);
  }
  /* Every rank failed, with the same code, within a round of the first. */
  long long mine[2] = {failed_at, code}, lo[2], hi[2];
  MPI_Allreduce(mine, lo, 2, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(mine, hi, 2, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  long long spread = atoi(argv[7]) ? 0 : prefetch;
  if ((lo[0] < 0) != (hi[0] < 0) || hi[0] - lo[0] > spread || lo[1] != hi[1]) {
    fprintf(stderr, "rank %d: failed at step %lld with %d; steps %lld..%lld, codes %lld..%lld\n",
            rank, failed_at, code, lo[0], hi[0], lo[1], hi[1]);
    MPI_Abort(MPI_COMM_WORLD, 5);
  }
  /* A failed engine stays failed. */
  if (failed_at >= 0) {
    lmdbio_batch again;
    if (lmdbio_next_batch(engine, &again) != LMDBIO_ERR_INVALID_ARGUMENT) {
      fprintf(stderr, "rank %d: a failed engine served another step\n", rank);
      MPI_Abort(MPI_COMM_WORLD, 5);
    }
  }
  CHECK(lmdbio_close(engine));
  lmdbio_options_free(opts);
  if (rank == 0) printf("FAILED_AT %lld %lld %d\n", lo[0], hi[0], code);
  MPI_Finalize();
  return 0;
}

/* Re-partitioning through the C ABI: a job on all P ranks reads part of
 * epoch 0 and saves its job cursor; a job on Q = max(1, P - 1) ranks
 * resumes from it with repartition on and reads to the end of epoch 1.
 * Epochs are globally shuffled (MODE global-after-first: epoch 0 chunked,
 * so the re-partitioned rest of it is too, and epoch 1 global). Every
 * record must be delivered exactly
 * once per epoch across both jobs, and match the manifest (key hex,
 * length, FNV-1a 64 of the value).
 * Resuming on Q != P ranks without asking to re-partition must fail on
 * every rank of the new job.
 *
 * usage: mpiexec -n P repartition DB MANIFEST [MODE] */
#define _POSIX_C_SOURCE 200809L
#include "manifest.h"

static entry *manifest;
static size_t records;
static int *seen; /* [epoch * records + ordinal], epochs 0 and 1 */

/* Checks a batch against the manifest and counts its records of epochs 0
 * and 1. Returns the epoch of its first record, or UINT64_MAX if empty. */
static uint64_t take(const lmdbio_batch *batch) {
  for (size_t i = 0; i < batch->count; i++) {
    const lmdbio_record *r = &batch->records[i];
    check_record(manifest, records, r);
    if (r->epoch < 2) seen[r->epoch * records + r->ordinal]++;
  }
  return batch->count > 0 ? batch->records[0].epoch : UINT64_MAX;
}

int main(int argc, char **argv) {
  int rank, size;
  /* MODE is taken off before start_mpi checks for DB and MANIFEST. */
  const int after_first = argc == 4 && strcmp(argv[3], "global-after-first") == 0;
  if (after_first) argc = 3;
  start_mpi(&argc, &argv, "repartition", &rank, &size);
  manifest = load_manifest(argv[2], &records);
  seen = calloc(2 * records + 1, sizeof(int));

  lmdbio_options *opts;
  CHECK(lmdbio_options_new(&opts));
  CHECK(lmdbio_options_set_batch_size(opts, 6));
  CHECK(lmdbio_options_set_tail(opts, LMDBIO_TAIL_SHORT));
  CHECK(lmdbio_options_set_partition(opts, LMDBIO_PARTITION_STRIDED));
  CHECK(lmdbio_options_set_shuffle(opts, 21, 30));
  /* The global shuffle: one permutation of all records per epoch, which
   * the cursor carries like the chunked one. */
  if (lmdbio_options_set_shuffle_mode(opts, 9) != LMDBIO_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "shuffle mode 9 was accepted\n");
    MPI_Abort(MPI_COMM_WORLD, 11);
  }
  CHECK(lmdbio_options_set_shuffle_mode(opts, after_first ? LMDBIO_SHUFFLE_GLOBAL_AFTER_FIRST : LMDBIO_SHUFFLE_GLOBAL));
  CHECK(lmdbio_options_set_window_bytes(opts, 4 << 20));
  /* Collective reads; MPI_Init gives no MPI_THREAD_MULTIPLE, so each round
   * is read when it starts. */
  CHECK(lmdbio_options_set_collective(opts, 1));

  /* Job 1: all ranks, a third of epoch 0's steps. */
  lmdbio_engine *engine;
  CHECK(lmdbio_open(MPI_COMM_WORLD, argv[1], opts, &engine));
  uint64_t share = (records + size - 1) / size, steps = (share + 5) / 6 / 3 + 1;
  for (uint64_t t = 0; t < steps; t++) {
    lmdbio_batch batch;
    CHECK(lmdbio_next_batch(engine, &batch));
    take(&batch);
  }
  size_t job_len = 0, written = 0;
  CHECK(lmdbio_job_cursor_size(engine, &job_len));
  unsigned char *job = malloc(job_len);
  CHECK(lmdbio_job_cursor_get(engine, job, job_len, &written));
  if (written != job_len) MPI_Abort(MPI_COMM_WORLD, 9);
  CHECK(lmdbio_close(engine));

  /* Job 2: the first Q ranks. */
  int q = size > 1 ? size - 1 : 1;
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < q ? 0 : MPI_UNDEFINED, rank, &sub);
  if (sub != MPI_COMM_NULL) {
    if (q != size) {
      CHECK(lmdbio_options_set_resume_job(opts, job, job_len, 0));
      lmdbio_engine *refused = NULL;
      int rc = lmdbio_open(sub, argv[1], opts, &refused);
      if (rc != LMDBIO_ERR_INVALID_ARGUMENT || refused != NULL || !strstr(lmdbio_last_error(), "re-partition")) {
        fprintf(stderr, "rank %d: resuming on %d of %d ranks without re-partitioning gave %d (%s)\n", rank, q,
                size, rc, lmdbio_last_error());
        MPI_Abort(MPI_COMM_WORLD, 10);
      }
    }
    CHECK(lmdbio_options_set_resume_job(opts, job, job_len, 1));
    CHECK(lmdbio_open(sub, argv[1], opts, &engine));
    /* Short tails keep ranks in step: stop when every rank's batch is
     * past epoch 1 (empty batches say nothing). */
    for (uint64_t t = 0;; t++) {
      if (t > 4 * records + 16) MPI_Abort(MPI_COMM_WORLD, 11);
      lmdbio_batch batch;
      CHECK(lmdbio_next_batch(engine, &batch));
      uint64_t first = take(&batch);
      MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_UINT64_T, MPI_MIN, sub);
      if (first >= 2 && first != UINT64_MAX) break;
    }
    CHECK(lmdbio_close(engine));
    MPI_Comm_free(&sub);
  }
  free(job);
  lmdbio_options_free(opts);

  MPI_Allreduce(MPI_IN_PLACE, seen, (int)(2 * records), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  for (size_t i = 0; i < 2 * records; i++) {
    if (seen[i] != 1) {
      fprintf(stderr, "epoch %zu record %zu delivered %d times\n", i / records, i % records, seen[i]);
      MPI_Abort(MPI_COMM_WORLD, 8);
    }
  }
  if (rank == 0)
    printf("OK %zu records x 2 epochs, %d ranks then %d, %s\n", records, size, q,
           after_first ? "global-after-first" : "global");
  MPI_Finalize();
  return 0;
}

/* Kept leaf pages when the node's window is too small for them
 * (docs/design/inline-records.md): a first engine keeps a few pages and
 * leaves a small window behind; the second keeps as many as it can, so
 * its masters read leaf pages into that window during the scan, find it
 * too small for the index beside them, and make it anew (setup_made says
 * so), moving the pages they read out first. Both engines must deliver
 * every record of one epoch exactly once, as the manifest has it.
 *
 * usage: mpiexec -n P kept_window_grows DB MANIFEST */
#define _POSIX_C_SOURCE 200809L
#include "manifest.h"

static entry *manifest;
static size_t records;

/* One epoch on `engine`: every record checked, each delivered once. */
static void one_epoch(lmdbio_engine *engine, int *seen) {
  memset(seen, 0, records * sizeof(int));
  for (;;) {
    lmdbio_batch batch;
    int rc = lmdbio_next_batch(engine, &batch);
    if (rc == LMDBIO_END) break;
    CHECK(rc);
    for (size_t i = 0; i < batch.count; i++) {
      check_record(manifest, records, &batch.records[i]);
      seen[batch.records[i].ordinal]++;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, seen, (int)records, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  for (size_t i = 0; i < records; i++) {
    if (seen[i] != 1) {
      fprintf(stderr, "record %zu delivered %d times\n", i, seen[i]);
      MPI_Abort(MPI_COMM_WORLD, 8);
    }
  }
}

int main(int argc, char **argv) {
  int rank, size;
  start_mpi(&argc, &argv, "kept_window_grows", &rank, &size);
  manifest = load_manifest(argv[2], &records);
  int *seen = calloc(records + 1, sizeof(int));

  lmdbio_options *opts;
  CHECK(lmdbio_options_new(&opts));
  CHECK(lmdbio_options_set_batch_size(opts, 7));
  CHECK(lmdbio_options_set_tail(opts, LMDBIO_TAIL_SHORT));
  CHECK(lmdbio_options_set_ranks_per_node(opts, size > 2 ? 2 : 1));
  CHECK(lmdbio_options_set_window_bytes(opts, 1 << 20));
  CHECK(lmdbio_options_set_epoch_limit(opts, 1));
  /* Both engines must scan: the first one's saved index would spare the
   * second its scan, and the kept pages with it. */
  CHECK(lmdbio_options_set_saved_index(opts, 0));

  /* Four pages kept: the window made after the scan is small. */
  CHECK(lmdbio_options_set_inline_pages(opts, 16384));
  lmdbio_engine *engine;
  CHECK(lmdbio_open(MPI_COMM_WORLD, argv[1], opts, &engine));
  one_epoch(engine, seen);
  CHECK(lmdbio_close(engine));

  /* As many as the window holds: read into it, then moved out of it. */
  CHECK(lmdbio_options_set_inline_pages(opts, 1 << 30));
  CHECK(lmdbio_open(MPI_COMM_WORLD, argv[1], opts, &engine));
  lmdbio_counters counters;
  CHECK(lmdbio_counters_get(engine, &counters));
  if (counters.setup_made != 1) {
    fprintf(stderr, "rank %d: the second open made %llu set-ups, not the window alone\n", rank,
            (unsigned long long)counters.setup_made);
    MPI_Abort(MPI_COMM_WORLD, 9);
  }
  one_epoch(engine, seen);
  CHECK(lmdbio_close(engine));

  lmdbio_options_free(opts);
  free(seen);
  if (rank == 0) printf("OK %zu records, %d ranks, window made anew\n", records, size);
  MPI_Finalize();
  return 0;
}

/* Options no job can use are refused when set, without allocating for
 * them (the test runs under an address-space limit), a batch larger than
 * the database is refused at open, and a cursor taken on another database
 * with the same entry count, txnid and page size is refused on resume.
 *
 * usage: mpiexec -n P absurd_options DB OTHER_DB */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>

#include "manifest.h"

static void expect(int rc, int want, const char *what, int rank) {
  if (rc != want || strlen(lmdbio_last_error()) == 0) {
    fprintf(stderr, "rank %d: %s gave %d, expected %d (%s)\n", rank, what, rc, want,
            lmdbio_last_error());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  if (rank == 0) printf("%s: %s\n", what, lmdbio_last_error());
}

int main(int argc, char **argv) {
  int rank, size;
  start_mpi(&argc, &argv, "absurd_options", &rank, &size);

  lmdbio_options *opts;
  CHECK(lmdbio_options_new(&opts));
  expect(lmdbio_options_set_batch_size(opts, 100000000), LMDBIO_ERR_RESOURCE_LIMIT,
         "batch 1e8", rank);
  expect(lmdbio_options_set_batch_size(opts, SIZE_MAX), LMDBIO_ERR_RESOURCE_LIMIT,
         "batch SIZE_MAX", rank);
  expect(lmdbio_options_set_prefetch(opts, SIZE_MAX), LMDBIO_ERR_RESOURCE_LIMIT,
         "prefetch SIZE_MAX", rank);
  expect(lmdbio_options_set_window_bytes(opts, SIZE_MAX), LMDBIO_ERR_RESOURCE_LIMIT,
         "window SIZE_MAX", rank);
  expect(lmdbio_options_set_readers_per_node(opts, SIZE_MAX), LMDBIO_ERR_RESOURCE_LIMIT,
         "readers SIZE_MAX", rank);
  expect(lmdbio_options_set_coalesce(opts, UINT64_MAX, 0), LMDBIO_ERR_RESOURCE_LIMIT,
         "coalesce UINT64_MAX", rank);

  /* The refused values were not kept: these options still open. */
  lmdbio_engine *engine = NULL;
  CHECK(lmdbio_options_set_window_bytes(opts, 4 << 20));
  CHECK(lmdbio_options_set_batch_size(opts, 4));
  CHECK(lmdbio_open(MPI_COMM_WORLD, argv[2], opts, &engine));
  lmdbio_batch batch;
  CHECK(lmdbio_next_batch(engine, &batch));
  unsigned char cursor[LMDBIO_CURSOR_BYTES];
  size_t len = 0;
  CHECK(lmdbio_cursor_get(engine, cursor, sizeof cursor, &len));
  CHECK(lmdbio_close(engine));

  /* Allowed when set, but larger than the database it is opened on. */
  CHECK(lmdbio_options_set_batch_size(opts, 1 << 20));
  engine = NULL;
  expect(lmdbio_open(MPI_COMM_WORLD, argv[1], opts, &engine), LMDBIO_ERR_INVALID_ARGUMENT,
         "batch larger than the database", rank);
  if (!strstr(lmdbio_last_error(), "larger than the database")) MPI_Abort(MPI_COMM_WORLD, 4);

  /* OTHER_DB's cursor on DB: same entries, txnid and page size. */
  CHECK(lmdbio_options_set_batch_size(opts, 4));
  CHECK(lmdbio_options_set_resume(opts, cursor, len));
  expect(lmdbio_open(MPI_COMM_WORLD, argv[1], opts, &engine), LMDBIO_ERR_INVALID_ARGUMENT,
         "cursor of another database", rank);
  if (!strstr(lmdbio_last_error(), "another database")) MPI_Abort(MPI_COMM_WORLD, 4);

  lmdbio_options_free(opts);
  MPI_Finalize();
  return 0;
}

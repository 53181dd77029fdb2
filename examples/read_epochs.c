/* Reads every record of an LMDB twice (two epochs), shared among the ranks.
 * mpiexec -n 3 ./read_epochs train_lmdb */
#include <lmdbio.h>
#include <stdio.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, rc;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  lmdbio_options *opts = NULL;
  lmdbio_engine *db = NULL;
  lmdbio_batch batch;
  if ((rc = lmdbio_options_new(&opts)) || (rc = lmdbio_options_set_batch_size(opts, 16)) ||
      (rc = lmdbio_options_set_epoch_limit(opts, 2)) ||
      (rc = lmdbio_open(MPI_COMM_WORLD, argc > 1 ? argv[1] : "train_lmdb", opts, &db)))
    goto done;
  while ((rc = lmdbio_next_batch(db, &batch)) == LMDBIO_OK)
    for (size_t i = 0; i < batch.count; i++)
      printf("rank %d epoch %llu record %llu: %zu bytes\n", rank,
             (unsigned long long)batch.records[i].epoch,
             (unsigned long long)batch.records[i].ordinal, batch.records[i].value_len);
done:
  if (rc != LMDBIO_END) fprintf(stderr, "rank %d: error %d: %s\n", rank, rc, lmdbio_last_error());
  lmdbio_close(db);
  lmdbio_options_free(opts);
  MPI_Finalize();
  return rc == LMDBIO_END ? 0 : 1;
}

/* Reads a database through the C ABI on every rank: two epochs, every
 * record checked against a manifest (key hex, length, FNV-1a 64 of the
 * value), and each record delivered exactly once per epoch across ranks.
 * The second epoch runs in a new engine resumed from each rank's cursor,
 * after the kept window's memory was given back.
 * Then one epoch with the wrap tail and an epoch limit: every record once,
 * nothing of the next epoch, the step count from lmdbio_step_limit, the
 * loop ending with LMDBIO_END at that step on every rank, and no cursor
 * where the limit cut a rank's last batch short.
 * Also checks that a bad path fails on every rank with a message.
 *
 * usage: mpiexec -n P read_two_epochs DB MANIFEST */
#define _POSIX_C_SOURCE 200809L
#include "manifest.h"

/* This process's resident memory in KiB (VmRSS). */
static long resident_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

int main(int argc, char **argv) {
  int rank, size;
  start_mpi(&argc, &argv, "read_two_epochs", &rank, &size);

  /* A missing database fails on every rank, with a message. */
  lmdbio_engine *bad = NULL;
  int rc = lmdbio_open(MPI_COMM_WORLD, "/nonexistent/lmdbio", NULL, &bad);
  if (rc != LMDBIO_ERR_NOT_FOUND || bad != NULL || strlen(lmdbio_last_error()) == 0) {
    fprintf(stderr, "rank %d: bad path gave %d (%s)\n", rank, rc, lmdbio_last_error());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }

  size_t n;
  entry *manifest = load_manifest(argv[2], &n);

  lmdbio_options *opts;
  CHECK(lmdbio_options_new(&opts));
  CHECK(lmdbio_options_set_batch_size(opts, 5));
  CHECK(lmdbio_options_set_tail(opts, LMDBIO_TAIL_SHORT));
  CHECK(lmdbio_options_set_ranks_per_node(opts, 2));
  CHECK(lmdbio_options_set_window_bytes(opts, 4 << 20));
  /* Independent reads (the default) on three streams; zero streams is
   * refused. */
  CHECK(lmdbio_options_set_read_streams(opts, 3));
  if (lmdbio_options_set_read_streams(opts, 0) != LMDBIO_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "rank %d: zero read streams was accepted\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  /* Direct reads wherever the file system allows them (an unknown
   * setting is refused); where it does not, opening says so and the test
   * goes on through the page cache. */
  if (lmdbio_options_set_direct_io(opts, 7) != LMDBIO_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "rank %d: direct I/O setting 7 was accepted\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  CHECK(lmdbio_options_set_direct_io(opts, LMDBIO_DIRECT_IO_ALWAYS));
  /* With LMDBIO_TEST_STAGE=DIR the epochs go through a node stage there. */
  const char *stage = getenv("LMDBIO_TEST_STAGE");
  if (stage != NULL) CHECK(lmdbio_options_set_stage(opts, stage, UINT64_MAX, 0));
  /* The node set-up made ahead; the opens below (and the resumed one) take
   * it instead of making their own. */
  CHECK(lmdbio_prepare(MPI_COMM_WORLD, opts));
  lmdbio_engine *engine;
  int direct = 1;
  rc = lmdbio_open(MPI_COMM_WORLD, argv[1], opts, &engine);
  if (rc == LMDBIO_ERR_INVALID_ARGUMENT && strstr(lmdbio_last_error(), "does not support direct reads")) {
    direct = 0;
    CHECK(lmdbio_options_set_direct_io(opts, LMDBIO_DIRECT_IO_NEVER));
    rc = lmdbio_open(MPI_COMM_WORLD, argv[1], opts, &engine);
  }
  CHECK(rc);
  lmdbio_counters setup;
  CHECK(lmdbio_counters_get(engine, &setup));
  if (setup.setup_made != 0) {
    fprintf(stderr, "open after lmdbio_prepare made %llu MPI set-ups\n",
            (unsigned long long)setup.setup_made);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }

  uint64_t records;
  CHECK(lmdbio_record_count(engine, &records));
  if (records != n) {
    fprintf(stderr, "record count %" PRIu64 ", manifest %zu\n", records, n);
    MPI_Abort(MPI_COMM_WORLD, 5);
  }
  /* Contiguous shares, short tail: every rank takes the same number of
   * steps per epoch, ceil(ceil(N/P)/B). */
  uint64_t share = (n + size - 1) / size, steps_per_epoch = (share + 4) / 5;
  int *seen = calloc(2 * n + 1, sizeof(int));
  uint64_t mine_by_epoch[2] = {0, 0};
  for (uint64_t step = 0; step < 2 * steps_per_epoch; step++) {
    if (step == steps_per_epoch) {
      /* Checkpoint after the first epoch, close, and resume from the
       * cursor in a fresh engine: the second epoch must continue exactly. */
      unsigned char cursor[LMDBIO_CURSOR_BYTES];
      size_t cursor_len = 0;
      CHECK(lmdbio_cursor_get(engine, cursor, sizeof cursor, &cursor_len));
      /* Epoch 0 was delivered by this engine only (the resumed one starts
       * at epoch 1): its counters hold exactly this rank's epoch-0 records. */
      lmdbio_epoch_counters e0;
      CHECK(lmdbio_epoch_counters_get(engine, 0, &e0));
      if (e0.epoch != 0 || e0.records != mine_by_epoch[0]) {
        fprintf(stderr, "rank %d: epoch 0 counted %" PRIu64 " records, %" PRIu64 " delivered\n",
                rank, e0.records, mine_by_epoch[0]);
        MPI_Abort(MPI_COMM_WORLD, 17);
      }
      CHECK(lmdbio_close(engine));
      /* The closed engine's window (4 MiB of values, mapped on every rank
       * by lmdbio_prepare) stays mapped until its memory is given back;
       * the resumed engine then reads into fresh pages. */
      long kept = resident_kib();
      MPI_Barrier(MPI_COMM_WORLD);
      CHECK(lmdbio_release_memory());
      MPI_Barrier(MPI_COMM_WORLD);
      long released = resident_kib();
      if (kept - released < 3 * 1024) {
        fprintf(stderr, "rank %d: resident %ld KiB before lmdbio_release_memory, %ld after\n",
                rank, kept, released);
        MPI_Abort(MPI_COMM_WORLD, 11);
      }
      CHECK(lmdbio_options_set_resume(opts, cursor, cursor_len));
      CHECK(lmdbio_open(MPI_COMM_WORLD, argv[1], opts, &engine));
    }
    lmdbio_batch batch;
    CHECK(lmdbio_next_batch(engine, &batch));
    for (size_t i = 0; i < batch.count; i++) {
      const lmdbio_record *r = &batch.records[i];
      if (r->epoch > 1) MPI_Abort(MPI_COMM_WORLD, 6);
      check_record(manifest, n, r);
      seen[r->epoch * n + r->ordinal]++;
      mine_by_epoch[r->epoch]++;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, seen, (int)(2 * n), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  for (size_t i = 0; i < 2 * n; i++) {
    if (seen[i] != 1) {
      fprintf(stderr, "epoch %zu record %zu delivered %d times\n", i / n, i % n, seen[i]);
      MPI_Abort(MPI_COMM_WORLD, 8);
    }
  }
  /* The resumed engine took one epoch's steps: the first took an
   * agreement, and no step took more than one. */
  lmdbio_counters own;
  CHECK(lmdbio_counters_get(engine, &own));
  if (own.step_agreements < 1 || own.step_agreements > steps_per_epoch) {
    fprintf(stderr, "rank %d: %" PRIu64 " step agreements in %" PRIu64 " steps\n", rank,
            own.step_agreements, steps_per_epoch);
    MPI_Abort(MPI_COMM_WORLD, 12);
  }
  /* Counters by name, the epoch's counters and their refusals. The
   * resumed engine may still be reading ahead, so only what cannot move is
   * compared here (bytes_read exactly on the finished engine below). */
  double value = -1;
  CHECK(lmdbio_counter_get(engine, "records_delivered", &value));
  lmdbio_epoch_counters e1;
  CHECK(lmdbio_epoch_counters_get(engine, 1, &e1));
  if (value != (double)own.records_delivered || e1.epoch != 1 ||
      e1.records != mine_by_epoch[1] || e1.records != own.records_delivered) {
    fprintf(stderr, "rank %d: records_delivered %g, epoch 1 %" PRIu64 ", delivered %" PRIu64 "\n",
            rank, value, e1.records, mine_by_epoch[1]);
    MPI_Abort(MPI_COMM_WORLD, 17);
  }
  value = -1;
  CHECK(lmdbio_counter_get(engine, "stage_bytes_read", &value));
  if (!(value >= 0)) MPI_Abort(MPI_COMM_WORLD, 17);
  value = 42;
  if (lmdbio_counter_get(engine, "no_such_counter", &value) != LMDBIO_ERR_INVALID_ARGUMENT ||
      strstr(lmdbio_last_error(), "no_such_counter") == NULL || value != 42 ||
      lmdbio_counter_get(engine, NULL, &value) != LMDBIO_ERR_INVALID_ARGUMENT ||
      lmdbio_counter_get(engine, "bytes_read", NULL) != LMDBIO_ERR_INVALID_ARGUMENT ||
      lmdbio_counter_get(NULL, "bytes_read", &value) != LMDBIO_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "rank %d: a bad counter name or NULL was accepted (%s)\n", rank,
            lmdbio_last_error());
    MPI_Abort(MPI_COMM_WORLD, 17);
  }
  if (lmdbio_epoch_counters_get(engine, 1000000, &e1) != LMDBIO_ERR_INVALID_ARGUMENT ||
      strstr(lmdbio_last_error(), "1000000") == NULL ||
      lmdbio_epoch_counters_get(engine, 1, NULL) != LMDBIO_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "rank %d: epoch 1000000 or NULL was accepted (%s)\n", rank,
            lmdbio_last_error());
    MPI_Abort(MPI_COMM_WORLD, 17);
  }
  lmdbio_counters node;
  CHECK(lmdbio_node_counters(engine, &node));
  /* A stage may hold every run before the first is read (its filler
   * copies the file while the job opens): then nothing is read directly. */
  const int any_direct = direct && stage == NULL;
  if (any_direct ? node.direct_read_requests == 0 : direct ? 0 : node.direct_read_requests != 0) {
    fprintf(stderr, "rank %d: %" PRIu64 " direct reads with direct I/O %s\n", rank,
            node.direct_read_requests, direct ? "always" : "never");
    MPI_Abort(MPI_COMM_WORLD, 10);
  }
  CHECK(lmdbio_close(engine));
  CHECK(lmdbio_close(NULL));
  if (rank == 0)
    printf("OK %zu records x 2 epochs on %d ranks; node read %" PRIu64 " bytes in %" PRIu64
           " requests (%" PRIu64 " direct)\n",
           n, size, node.bytes_read, node.read_requests, node.direct_read_requests);

  /* Exactly one epoch under the wrap tail: the batch that would run on
   * into epoch 1 comes short, and the engine says how many steps to take
   * (rank 0's contiguous share is the largest). */
  lmdbio_options *one;
  CHECK(lmdbio_options_new(&one));
  CHECK(lmdbio_options_set_batch_size(one, 5));
  CHECK(lmdbio_options_set_ranks_per_node(one, 2));
  CHECK(lmdbio_options_set_window_bytes(one, 4 << 20));
  CHECK(lmdbio_options_set_epoch_limit(one, 1));
  lmdbio_engine *limited;
  CHECK(lmdbio_open(MPI_COMM_WORLD, argv[1], one, &limited));
  uint64_t limit = 0;
  CHECK(lmdbio_step_limit(limited, &limit));
  if (limit != steps_per_epoch) {
    fprintf(stderr, "rank %d: step limit %" PRIu64 ", expected %" PRIu64 "\n", rank, limit,
            steps_per_epoch);
    MPI_Abort(MPI_COMM_WORLD, 12);
  }
  /* The natural loop: the end of the bounded job is LMDBIO_END, with an
   * empty batch, after exactly the limit's steps on every rank. */
  memset(seen, 0, n * sizeof(int));
  uint64_t taken = 0;
  lmdbio_batch batch;
  while ((rc = lmdbio_next_batch(limited, &batch)) == LMDBIO_OK) {
    taken++;
    for (size_t i = 0; i < batch.count; i++) {
      const lmdbio_record *r = &batch.records[i];
      if (r->epoch != 0) MPI_Abort(MPI_COMM_WORLD, 13);
      check_record(manifest, n, r);
      seen[r->ordinal]++;
    }
  }
  if (rc != LMDBIO_END || taken != limit || batch.count != 0 || batch.step != limit) {
    fprintf(stderr, "rank %d: loop ended with %d (%s) after %" PRIu64 " of %" PRIu64
            " steps, count %zu, step %" PRIu64 "\n",
            rank, rc, lmdbio_last_error(), taken, limit, batch.count, batch.step);
    MPI_Abort(MPI_COMM_WORLD, 15);
  }
  MPI_Allreduce(MPI_IN_PLACE, seen, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  for (size_t i = 0; i < n; i++) {
    if (seen[i] != 1) {
      fprintf(stderr, "epoch-limited: record %zu delivered %d times\n", i, seen[i]);
      MPI_Abort(MPI_COMM_WORLD, 14);
    }
  }
  /* The end stays the end, and is not an error. */
  lmdbio_batch past;
  if (lmdbio_next_batch(limited, &past) != LMDBIO_END || past.count != 0 ||
      strlen(lmdbio_last_error()) != 0) {
    fprintf(stderr, "rank %d: a step past the end was not LMDBIO_END\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 15);
  }
  /* This rank's contiguous share; its last batch was cut if the steps'
   * batches hold more than the share. */
  uint64_t mine = n / size + ((uint64_t)rank < n % size);
  unsigned char cut_cursor[LMDBIO_CURSOR_BYTES];
  size_t cut_len = 0;
  rc = lmdbio_cursor_get(limited, cut_cursor, sizeof cut_cursor, &cut_len);
  if ((5 * limit > mine) != (rc == LMDBIO_ERR_INVALID_ARGUMENT)) {
    fprintf(stderr, "rank %d: cursor after %" PRIu64 " steps of a %" PRIu64 "-record share gave %d (%s)\n",
            rank, limit, mine, rc, lmdbio_last_error());
    MPI_Abort(MPI_COMM_WORLD, 16);
  }
  /* The bounded job has ended: its counters no longer move, and the one
   * by name is the struct's. */
  lmdbio_counters done;
  CHECK(lmdbio_counters_get(limited, &done));
  value = -1;
  CHECK(lmdbio_counter_get(limited, "bytes_read", &value));
  if (value != (double)done.bytes_read) {
    fprintf(stderr, "rank %d: bytes_read %g by name, %" PRIu64 " in the struct\n", rank, value,
            done.bytes_read);
    MPI_Abort(MPI_COMM_WORLD, 17);
  }
  CHECK(lmdbio_close(limited));
  lmdbio_options_free(one);

  /* An engine may outlive MPI (a framework's objects destroyed at exit):
   * closing it after MPI_Finalize must neither call MPI nor fail. */
  lmdbio_engine *late;
  CHECK(lmdbio_open(MPI_COMM_WORLD, argv[1], opts, &late));
  lmdbio_batch first;
  CHECK(lmdbio_next_batch(late, &first));
  lmdbio_options_free(opts);
  MPI_Finalize();
  if (lmdbio_close(late) != LMDBIO_OK) {
    fprintf(stderr, "closing after MPI_Finalize failed: %s\n", lmdbio_last_error());
    return 9;
  }
  return 0;
}

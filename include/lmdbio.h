/* lmdbio: scalable reads of stock LMDB training data for MPI jobs.
 *
 * Conventions
 * - Every function returns an int status: LMDBIO_OK (0) or an error code
 *   below (positive); lmdbio_last_error() then holds a message for this
 *   thread, valid until the next lmdbio call on the same thread.
 *   lmdbio_next_batch also returns LMDBIO_END (negative, not an error)
 *   when a bounded job is over.
 * - Outputs (out pointers) are written only on success.
 * - Handles are opaque. lmdbio_options_new/_free and lmdbio_open/_close pair
 *   up; the _free/_close functions accept NULL.
 * - Calls marked COLLECTIVE must be made by every rank of the communicator
 *   given to lmdbio_open, in the same order. If any rank fails inside a
 *   collective call, every rank returns an error (the failing rank's code;
 *   others report its message prefixed by "rank N failed"); none hangs.
 *   lmdbio_next_batch with independent reads (the default) does not wait
 *   for other nodes inside a round: a step one rank cannot serve fails
 *   there at once, and on the other ranks at the call where the ranks next
 *   meet (the next round's start, the job's last step, or one of the other
 *   COLLECTIVE calls), which the failing rank waits for.
 * - Link against the same MPI library the caller uses (MPI_Comm differs
 *   between MPICH and Open MPI). MPI must be initialised before lmdbio_open
 *   and finalised after lmdbio_close.
 */
#ifndef LMDBIO_H
#define LMDBIO_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LMDBIO_VERSION_MAJOR 0
#define LMDBIO_VERSION_MINOR 1
#define LMDBIO_VERSION_PATCH 0

/* Status codes. Numbers are stable and never reused. */
#define LMDBIO_OK 0
#define LMDBIO_ERR_NOT_FOUND 1        /* path names no database */
#define LMDBIO_ERR_IO 2               /* the operating system failed a read */
#define LMDBIO_ERR_TRUNCATED 3        /* the file ends before data it refers to */
#define LMDBIO_ERR_NOT_LMDB 4         /* not an LMDB data file */
#define LMDBIO_ERR_CORRUPT 5          /* damaged structure (message names page and offset) */
#define LMDBIO_ERR_UNSUPPORTED 6      /* valid LMDB feature not read (e.g. MDB_DUPSORT) */
#define LMDBIO_ERR_NO_SUCH_DATABASE 7 /* named database not found */
#define LMDBIO_ERR_INVALID_ARGUMENT 8 /* bad option, NULL handle, failed engine */
#define LMDBIO_ERR_RESOURCE_LIMIT 9   /* e.g. shared window too small for one batch */
#define LMDBIO_ERR_MPI 10             /* an MPI call failed */
#define LMDBIO_ERR_INTERNAL 11        /* a bug in lmdbio; please report */
/* Not an error: lmdbio_next_batch after the last step of a job bounded by
 * lmdbio_options_set_epoch_limit (like liblmdb's MDB_NOTFOUND). */
#define LMDBIO_END (-1)

/* Partition modes and tail policies (lmdbio_options_set_partition/_tail). */
#define LMDBIO_PARTITION_CONTIGUOUS 0   /* rank r: a contiguous block (default) */
#define LMDBIO_PARTITION_ROUND_ROBIN 1  /* batches of B records dealt in turn */
#define LMDBIO_PARTITION_STRIDED 2      /* record i to rank i mod P (Caffe multi-GPU) */
#define LMDBIO_TAIL_WRAP 0  /* full batches; the last one continues into the next epoch (default) */
#define LMDBIO_TAIL_SHORT 1 /* each epoch ends with a short batch; equal batch counts on all ranks */

typedef struct lmdbio_options lmdbio_options;
typedef struct lmdbio_engine lmdbio_engine;

/* One record of a batch. key and value point into node-shared memory and
 * stay valid until this rank's next lmdbio_next_batch or lmdbio_close. */
typedef struct lmdbio_record {
  const void *key;
  size_t key_len;
  const void *value;
  size_t value_len;
  uint64_t ordinal; /* position in key order, 0-based: portable across ranks */
  uint64_t epoch;
} lmdbio_record;

typedef struct lmdbio_batch {
  const lmdbio_record *records; /* owned by the engine; valid as above */
  size_t count;
  uint64_t step;  /* how many batches this rank received before this one */
  uint64_t epoch; /* epoch of the first record */
} lmdbio_batch;

typedef struct lmdbio_counters {
  uint64_t bytes_read;        /* by this rank (or node): index + values */
  uint64_t read_requests;
  uint64_t file_opens;
  uint64_t index_bytes_read;
  uint64_t bytes_delivered;   /* value bytes handed to the caller */
  uint64_t records_delivered;
  uint64_t rounds;            /* collective read rounds */
  double io_seconds;
  double wait_seconds;
  /* MPI set-up this engine's open made with blocking calls: 1 for the node
   * communicators, 1 for the shared window; 0 when kept from an earlier
   * engine or made by lmdbio_prepare. */
  uint64_t setup_made;
  /* of read_requests, those read around the page cache (direct I/O) */
  uint64_t direct_read_requests;
  /* agreements (reductions over every rank) the steps were served under:
   * with independent reads one where each round starts, the steps between
   * waiting only for their own node's bytes; with collective reads, steps
   * that took one of their own (the others were covered by an earlier one,
   * which found their bytes already in on every node) */
  uint64_t step_agreements;
} lmdbio_counters;

/* One epoch's share of this rank's work (lmdbio_epoch_counters_get). */
typedef struct lmdbio_epoch_counters {
  uint64_t epoch;
  uint64_t db_bytes_read;         /* read from the database file for this epoch */
  uint64_t stage_bytes_read;      /* read from the node's stage */
  uint64_t remote_bytes_received; /* received from other nodes */
  uint64_t records;               /* records of this epoch handed to the caller */
  uint64_t bytes_delivered;       /* value bytes of this epoch handed to the caller */
  double seconds;                 /* wall seconds spent on the epoch */
} lmdbio_epoch_counters;

/* The structs' layouts are part of the ABI. On LP64 systems (x86_64,
 * aarch64) they are fixed as asserted here: every field 8 bytes, in the
 * order declared. A C11 compiler checks this on every include. */
#if defined(__LP64__) && !defined(__cplusplus) && defined(__STDC_VERSION__) && \
    __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(lmdbio_record) == 48, "lmdbio_record is 48 bytes");
_Static_assert(_Alignof(lmdbio_record) == 8, "lmdbio_record is 8-aligned");
_Static_assert(offsetof(lmdbio_record, key) == 0, "lmdbio_record.key");
_Static_assert(offsetof(lmdbio_record, key_len) == 8, "lmdbio_record.key_len");
_Static_assert(offsetof(lmdbio_record, value) == 16, "lmdbio_record.value");
_Static_assert(offsetof(lmdbio_record, value_len) == 24, "lmdbio_record.value_len");
_Static_assert(offsetof(lmdbio_record, ordinal) == 32, "lmdbio_record.ordinal");
_Static_assert(offsetof(lmdbio_record, epoch) == 40, "lmdbio_record.epoch");
_Static_assert(sizeof(lmdbio_batch) == 32, "lmdbio_batch is 32 bytes");
_Static_assert(_Alignof(lmdbio_batch) == 8, "lmdbio_batch is 8-aligned");
_Static_assert(offsetof(lmdbio_batch, records) == 0, "lmdbio_batch.records");
_Static_assert(offsetof(lmdbio_batch, count) == 8, "lmdbio_batch.count");
_Static_assert(offsetof(lmdbio_batch, step) == 16, "lmdbio_batch.step");
_Static_assert(offsetof(lmdbio_batch, epoch) == 24, "lmdbio_batch.epoch");
_Static_assert(sizeof(lmdbio_counters) == 96, "lmdbio_counters is 96 bytes");
_Static_assert(_Alignof(lmdbio_counters) == 8, "lmdbio_counters is 8-aligned");
_Static_assert(offsetof(lmdbio_counters, bytes_read) == 0, "lmdbio_counters.bytes_read");
_Static_assert(offsetof(lmdbio_counters, read_requests) == 8, "lmdbio_counters.read_requests");
_Static_assert(offsetof(lmdbio_counters, file_opens) == 16, "lmdbio_counters.file_opens");
_Static_assert(offsetof(lmdbio_counters, index_bytes_read) == 24,
               "lmdbio_counters.index_bytes_read");
_Static_assert(offsetof(lmdbio_counters, bytes_delivered) == 32,
               "lmdbio_counters.bytes_delivered");
_Static_assert(offsetof(lmdbio_counters, records_delivered) == 40,
               "lmdbio_counters.records_delivered");
_Static_assert(offsetof(lmdbio_counters, rounds) == 48, "lmdbio_counters.rounds");
_Static_assert(offsetof(lmdbio_counters, io_seconds) == 56, "lmdbio_counters.io_seconds");
_Static_assert(offsetof(lmdbio_counters, wait_seconds) == 64, "lmdbio_counters.wait_seconds");
_Static_assert(offsetof(lmdbio_counters, setup_made) == 72, "lmdbio_counters.setup_made");
_Static_assert(offsetof(lmdbio_counters, direct_read_requests) == 80,
               "lmdbio_counters.direct_read_requests");
_Static_assert(offsetof(lmdbio_counters, step_agreements) == 88,
               "lmdbio_counters.step_agreements");
_Static_assert(sizeof(lmdbio_epoch_counters) == 56, "lmdbio_epoch_counters is 56 bytes");
_Static_assert(_Alignof(lmdbio_epoch_counters) == 8, "lmdbio_epoch_counters is 8-aligned");
_Static_assert(offsetof(lmdbio_epoch_counters, epoch) == 0, "lmdbio_epoch_counters.epoch");
_Static_assert(offsetof(lmdbio_epoch_counters, db_bytes_read) == 8,
               "lmdbio_epoch_counters.db_bytes_read");
_Static_assert(offsetof(lmdbio_epoch_counters, stage_bytes_read) == 16,
               "lmdbio_epoch_counters.stage_bytes_read");
_Static_assert(offsetof(lmdbio_epoch_counters, remote_bytes_received) == 24,
               "lmdbio_epoch_counters.remote_bytes_received");
_Static_assert(offsetof(lmdbio_epoch_counters, records) == 32, "lmdbio_epoch_counters.records");
_Static_assert(offsetof(lmdbio_epoch_counters, bytes_delivered) == 40,
               "lmdbio_epoch_counters.bytes_delivered");
_Static_assert(offsetof(lmdbio_epoch_counters, seconds) == 48, "lmdbio_epoch_counters.seconds");
#endif

const char *lmdbio_last_error(void);

int lmdbio_options_new(lmdbio_options **out);
void lmdbio_options_free(lmdbio_options *options);
int lmdbio_options_set_batch_size(lmdbio_options *options, size_t records_per_rank);
int lmdbio_options_set_subdb(lmdbio_options *options, const char *name_or_null);
int lmdbio_options_set_partition(lmdbio_options *options, int mode);
int lmdbio_options_set_tail(lmdbio_options *options, int tail);
/* 0: group ranks by shared memory (default); K: K consecutive ranks per virtual node. */
int lmdbio_options_set_ranks_per_node(lmdbio_options *options, size_t k);
int lmdbio_options_set_readers_per_node(lmdbio_options *options, size_t readers);
/* Bytes of node-shared memory for values (default 256 MiB). */
int lmdbio_options_set_window_bytes(lmdbio_options *options, size_t bytes);
/* Steps read ahead per round, at most (default 16; fewer when
 * half the window cannot hold them). */
int lmdbio_options_set_prefetch(lmdbio_options *options, size_t steps);
/* Bytes of node-shared memory for the leaf pages the index scan read that
 * hold inline values (default 1 GiB, at most half the window): those values
 * are served from memory, never read again. 0: every value is read. */
int lmdbio_options_set_inline_pages(lmdbio_options *options, uint64_t bytes);
/* Nonzero (default): load a saved index of this very database state instead
 * of scanning the tree, and save the index a scan built (beside the data
 * file, else in $LMDBIO_INDEX_CACHE or $XDG_CACHE_HOME/lmdbio). 0: neither. */
int lmdbio_options_set_saved_index(lmdbio_options *options, int on);
/* 0 when the caller never reads lmdbio_record.key: a node then holds no
 * keys, scanning or loading a saved index, and keys come back empty.
 * Default 1. */
int lmdbio_options_set_keys(lmdbio_options *options, int keys);
/* Runs of reads grow to target_bytes (default 4 MiB), bridging holes of up to
 * max_gap_bytes (default 64 KiB); independent reads issue one request per
 * run, collective reads take adjacent runs in one request. */
int lmdbio_options_set_coalesce(lmdbio_options *options, uint64_t target_bytes, uint64_t max_gap_bytes);
/* 0: all readers at once (default); G: at most G readers read at a time. */
int lmdbio_options_set_stagger(lmdbio_options *options, size_t readers_at_once);
/* Zero (default): independent reads, each reader opening the file on its
 * own and reading with positioned reads on read_streams threads (no
 * collective open, no waiting on other readers). Nonzero: the readers open
 * the file together with MPI-IO and read with MPI_File_read_at_all, so
 * MPI-IO may aggregate across nodes (enable collective buffering with the
 * romio_cb_read hint; lmdbio's default hints switch it off). */
int lmdbio_options_set_collective(lmdbio_options *options, int collective);
/* Threads each reader reads with, independent reads only: the requests a
 * reader keeps in flight. Default: two per machine, shared among the
 * readers on it (at least one each). */
int lmdbio_options_set_read_streams(lmdbio_options *options, size_t streams);
/* Independent reads around the kernel's page cache (direct I/O).
 * LMDBIO_DIRECT_IO_NEVER: always through the page cache; AUTO (default): a
 * round is read directly when the file system supports it, the page cache
 * holds less than half of the round (through the cache where the kernel
 * cannot say, before Linux 6.5) and the bytes can land in huge pages;
 * ALWAYS: every round, and lmdbio_open fails where the file system cannot.
 * A direct read lands straight in the shared window where lmdbio_prepare
 * mapped it in 2 MiB pages (a one-rank node's window, where the system
 * gives huge pages on request), else in a small buffer of the reader's own
 * in 2 MiB pages (at most 16 MiB per read stream, Linux 6.1+) and is
 * copied into the window; into 4 KiB pages a read reaches the device as
 * several small requests (docs/PERFORMANCE.md). On a file system that is
 * not one of the local ones (ext4, XFS, Btrfs, F2FS, ZFS, bcachefs, tmpfs,
 * ramfs, overlayfs: FUSE and network file systems) AUTO also scans the
 * tree through a second descriptor opened with O_DIRECT, so that no cache
 * (a server's included) keeps its pages in the way of the value streams:
 * file_opens counts 2 on the node's first rank. */
#define LMDBIO_DIRECT_IO_NEVER 0
#define LMDBIO_DIRECT_IO_AUTO 1
#define LMDBIO_DIRECT_IO_ALWAYS 2
int lmdbio_options_set_direct_io(lmdbio_options *options, int when);
/* Nonzero (default): read the next round into the other half of the window
 * while the ranks work on the current one (on helper threads; collective
 * reads only when MPI provides MPI_THREAD_MULTIPLE, else when the round
 * starts). */
int lmdbio_options_set_overlap(lmdbio_options *options, int overlap);
/* The job reads epochs 0..epochs-1 (counted from its first) and stops:
 * records of later epochs are neither read nor delivered, so under
 * LMDBIO_TAIL_WRAP the batch reaching into the next epoch comes short,
 * and lmdbio_step_limit tells how many steps to take. Without it a job of
 * whole epochs reads up to a batch per rank of the next one. After a batch
 * it cut short there is no cursor (LMDBIO_ERR_INVALID_ARGUMENT): jobs that
 * stop at an epoch's end and resume use LMDBIO_TAIL_SHORT. UINT64_MAX
 * (default): unbounded. */
/* Seconds a rank waits for the others (in a collective call, or for its
 * node's reader) before failing with an error naming the ranks that did not
 * arrive. Default: the environment variable LMDBIO_TIMEOUT, else 1800. */
int lmdbio_options_set_timeout(lmdbio_options *options, double seconds);
int lmdbio_options_set_epoch_limit(lmdbio_options *options, uint64_t epochs);
/* A node-local directory (NVMe scratch, $SLURM_TMPDIR, /dev/shm) where each
 * node's reader keeps the parts of the database it holds (DIR/node-N): the
 * first epoch copies what it reads there, later epochs read it from there
 * instead of the shared file system. budget: bytes per node (UINT64_MAX: no
 * limit; less than the database: each node holds its share). keep: nonzero
 * leaves the stage, complete, for a later job to reuse. NULL dir: no stage
 * (default). Independent reads with one reader per node only. Problems
 * with the stage warn once on stderr and read the database file instead. */
int lmdbio_options_set_stage(lmdbio_options *options, const char *dir_or_null, uint64_t budget,
                             int keep);
/* Shuffle every epoch with this seed; chunk_records 0 picks about 4 MiB of
 * values per chunk. Every rank computes the same order. */
int lmdbio_options_set_shuffle(lmdbio_options *options, uint64_t seed, uint64_t chunk_records);
/* How shuffled epochs are ordered (needs lmdbio_options_set_shuffle; a mode
 * without a seed fails at lmdbio_open). CHUNKED: chunks of records permuted
 * and interleaved within windows of chunks, so reads stay large; a batch
 * mixes the records of a window's chunks. GLOBAL: every epoch a uniform
 * permutation of all records, so every batch has the class mix of a random
 * sample; read from the database file each record is a read of its own
 * (docs/design/global-shuffle.md). GLOBAL_AFTER_FIRST: the first epoch
 * (which reads the database file and fills a stage) exactly CHUNKED, every
 * later one exactly GLOBAL. DEFAULT: GLOBAL_AFTER_FIRST with a stage, else
 * CHUNKED. */
#define LMDBIO_SHUFFLE_DEFAULT 0
#define LMDBIO_SHUFFLE_CHUNKED 1
#define LMDBIO_SHUFFLE_GLOBAL 2
#define LMDBIO_SHUFFLE_GLOBAL_AFTER_FIRST 3
int lmdbio_options_set_shuffle_mode(lmdbio_options *options, int mode);
/* Resume from a cursor written by lmdbio_cursor_get on the same rank of a
 * job with the same rank count, order options and database (refused
 * otherwise at lmdbio_open). The bytes are copied. Replaces a job cursor
 * set before. */
int lmdbio_options_set_resume(lmdbio_options *options, const void *cursor, size_t len);
/* Resume from a job cursor written by lmdbio_job_cursor_get, taken with the
 * same order options and database. Every rank passes the same bytes. On the
 * job's rank count the job resumes exactly. On another rank count, only if
 * repartition is nonzero: the records of the current epoch that no rank
 * was handed yet (by lmdbio_next_batch; read-ahead does not count) are
 * split among the new ranks, each once, in contiguous runs; then normal
 * epochs follow. Refused at lmdbio_open otherwise. The bytes are copied;
 * replaces a rank cursor set before. */
int lmdbio_options_set_resume_job(lmdbio_options *options, const void *job_cursor, size_t len,
                                  int repartition);
/* An MPI-IO hint passed to MPI_File_open, e.g. ("romio_cb_read", "disable"). */
int lmdbio_options_set_hint(lmdbio_options *options, const char *key, const char *value);

/* COLLECTIVE. Makes ahead of time what lmdbio_open with these options on
 * this communicator's ranks needs besides the database: the node,
 * readers' and masters' communicators and the node's shared window (which
 * lmdbio_open makes on first use otherwise), and maps the window's memory
 * (its first window_bytes) on every rank, so the first open neither makes
 * nor page-faults anything; in 2 MiB pages where the options want direct
 * reads and the system allows them. Each is a blocking collective MPI call, costly
 * where ranks outnumber cores. They are kept between engines, the window
 * with its memory, and freed when MPI_Finalize starts. options may be
 * NULL for defaults. */
int lmdbio_prepare(MPI_Comm comm, const lmdbio_options *options);
/* LOCAL. Returns the memory of every kept window (those of closed engines
 * and of lmdbio_prepare) to the system; the communicators and windows stay
 * for the next lmdbio_open, which maps memory again as it uses it (or
 * lmdbio_prepare maps it ahead). An open engine's memory is not touched.
 * A node's memory goes when the node's first rank calls it (on other ranks
 * it does nothing), so calling it on every rank is simplest; a rank that
 * measures its memory after another rank's call needs a barrier first. */
int lmdbio_release_memory(void);

/* COLLECTIVE. path: a database directory (holding data.mdb) or a data file.
 * options may be NULL for defaults; it is copied and may be freed after. */
int lmdbio_open(MPI_Comm comm, const char *path, const lmdbio_options *options, lmdbio_engine **out);
/* COLLECTIVE: every rank calls it once per step. Returns LMDBIO_OK with
 * the step's batch, or, once a job bounded by an epoch limit has taken its
 * last step, LMDBIO_END with an empty batch (count 0, step = the step
 * limit), on every rank at the same step and on every call after:
 *   while ((rc = lmdbio_next_batch(engine, &batch)) == LMDBIO_OK) { ... }
 *   if (rc != LMDBIO_END) { error }
 * After an error the engine returns errors only. */
int lmdbio_next_batch(lmdbio_engine *engine, lmdbio_batch *out);
int lmdbio_record_count(const lmdbio_engine *engine, uint64_t *out);
/* The step at which the engine stops: lmdbio_next_batch serves steps before
 * it and returns LMDBIO_END from it on (set by
 * lmdbio_options_set_epoch_limit); UINT64_MAX when unbounded. Local. */
int lmdbio_step_limit(const lmdbio_engine *engine, uint64_t *out);
/* Any out pointer may be NULL. */
int lmdbio_rank_info(const lmdbio_engine *engine, int *rank, int *ranks, int *node_rank, int *node_size);
/* Size of an encoded cursor. */
#define LMDBIO_CURSOR_BYTES 112
/* Writes this rank's cursor (its position after the batches delivered so
 * far) into buf, which holds len >= LMDBIO_CURSOR_BYTES bytes. Local. */
int lmdbio_cursor_get(const lmdbio_engine *engine, void *buf, size_t len, size_t *out_len);
/* Size of this job's job cursor: every rank's cursor plus the remainder the
 * job started with. Local; the same on every rank. */
int lmdbio_job_cursor_size(const lmdbio_engine *engine, size_t *out);
/* COLLECTIVE: writes the job cursor (the same bytes on every rank) into buf,
 * which holds len >= lmdbio_job_cursor_size bytes. A job that was itself
 * re-partitioned can only be resumed from its job cursor. */
int lmdbio_job_cursor_get(const lmdbio_engine *engine, void *buf, size_t len, size_t *out_len);
int lmdbio_counters_get(const lmdbio_engine *engine, lmdbio_counters *out);
/* One of this rank's counters by its Rust name (Counters in
 * engine/src/counters.rs: "bytes_read", "stage_bytes_read", "reader_slots",
 * "index_seconds", ...), as a double. An unknown name is
 * LMDBIO_ERR_INVALID_ARGUMENT. Local. */
int lmdbio_counter_get(const lmdbio_engine *engine, const char *name, double *value);
/* This rank's counters for one epoch (as lmdbio_record.epoch counts it); an
 * epoch this engine has not (yet) read or delivered records of is
 * LMDBIO_ERR_INVALID_ARGUMENT. Local. */
int lmdbio_epoch_counters_get(const lmdbio_engine *engine, uint64_t epoch,
                              lmdbio_epoch_counters *out);
/* COLLECTIVE: sums of the node's counters. Call it on every rank: a rank
 * that served steps since the ranks last met meets the others first (a
 * rank that failed a step may be waiting for them). */
int lmdbio_node_counters(const lmdbio_engine *engine, lmdbio_counters *out);
/* COLLECTIVE. Frees the engine; the node communicators and the shared
 * window, with its memory, are kept for the next lmdbio_open on the same
 * ranks (see lmdbio_prepare; lmdbio_release_memory gives the memory back). */
int lmdbio_close(lmdbio_engine *engine);

#ifdef __cplusplus
}
#endif
#endif /* LMDBIO_H */

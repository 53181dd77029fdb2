#include "mpi_session.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <glog/logging.h>

namespace lmdbio_caffe {
namespace {

std::mutex session_mutex;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// glog's failure function (after a FATAL entry is written): the other ranks
// may be waiting for this one in a collective call that would never end,
// so the whole job is ended, not only this process.
void abort_job() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    // Through glog (which released its lock before calling this), so that
    // the note also lands in the rank's own log file: the launcher may drop
    // the last lines of a rank that ends the job.
    LOG(ERROR) << "libcaffe_lmdbio: rank " << rank
               << " failed (see the F line above); ending every rank";
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::abort();
}

// The rank an MPI launcher gave this process, or -1 (read before MPI is
// initialised: the log is quietened before Caffe writes its first line).
int launcher_rank() {
  for (const char* var : {"PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return std::atoi(v);
  }
  return -1;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

// Data-parallel training logs from rank 0 only: the other ranks keep
// warnings and errors (and FATAL entries) but not INFO.
struct QuietOtherRanks {
  QuietOtherRanks() {
    if (launcher_rank() <= 0 || allreduce_disabled_by_env() ||
        env_flag("LMDBIO_CAFFE_LOG_ALL_RANKS")) {
      return;
    }
    if (FLAGS_minloglevel < google::GLOG_WARNING) FLAGS_minloglevel = google::GLOG_WARNING;
  }
};

const QuietOtherRanks quiet_other_ranks;

}  // namespace

bool launched_by_mpiexec() {
  for (const char* var : {"PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

bool ensure_mpi(bool even_alone) {
  std::lock_guard<std::mutex> lock(session_mutex);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return true;
  if (!launched_by_mpiexec() && !even_alone) return false;
  // The engine is called from a prefetch thread and reads ahead on a
  // helper thread of its own when MPI allows it.
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "libcaffe_lmdbio: MPI_Init_thread failed\n");
    std::abort();
  }
  std::atexit(finalize_at_exit);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) google::InstallFailureFunction(&abort_job);
  return true;
}

void world_rank_size(int* rank, int* size) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    *rank = 0;
    *size = 1;
    return;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
}

int mpi_thread_level() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return -1;
  int provided = 0;
  MPI_Query_thread(&provided);
  return provided;
}

bool allreduce_disabled_by_env() {
  const char* v = std::getenv("LMDBIO_CAFFE_ALLREDUCE");
  return v != nullptr && std::strcmp(v, "0") == 0;
}

bool data_parallel_enabled() {
  if (allreduce_disabled_by_env()) return false;
  int rank = 0, size = 1;
  world_rank_size(&rank, &size);
  return size > 1;
}

}  // namespace lmdbio_caffe

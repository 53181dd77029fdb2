#include "mpi_session.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace lmdbio_caffe {
namespace {

std::mutex session_mutex;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

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

}  // namespace lmdbio_caffe

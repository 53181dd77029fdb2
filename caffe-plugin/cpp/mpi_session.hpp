// MPI for the plugin: stock Caffe never initialises MPI, so the plugin does
// it when the process was started by a launcher (or when the LMDBIOData
// layer needs a communicator even in a lone process: MPI's singleton
// start), and finalises it at exit if it was the one to initialise it.
#ifndef LMDBIO_CAFFE_MPI_SESSION_HPP
#define LMDBIO_CAFFE_MPI_SESSION_HPP

namespace lmdbio_caffe {

// True when an MPI launcher started this process (PMI, PMIx or Open MPI
// variables in the environment).
bool launched_by_mpiexec();

// Initialises MPI with MPI_THREAD_MULTIPLE unless it already is, when
// launched by mpiexec or when `even_alone` is true. Returns whether MPI is
// initialised afterwards. Thread-safe.
bool ensure_mpi(bool even_alone);

// Rank and size in MPI_COMM_WORLD, or 0 and 1 when MPI is not initialised.
void world_rank_size(int* rank, int* size);

// The thread support MPI provides (MPI_THREAD_*); -1 when not initialised.
int mpi_thread_level();

// Whether this process trains data-parallel (cpp/data_parallel.cpp): MPI
// is initialised with more than one rank and LMDBIO_CAFFE_ALLREDUCE is not
// 0. The data layers then split records with Caffe's stride.
bool data_parallel_enabled();

// LMDBIO_CAFFE_ALLREDUCE set to 0.
bool allreduce_disabled_by_env();

}  // namespace lmdbio_caffe

#endif

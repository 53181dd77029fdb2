// Data-parallel training in the stock `caffe` binary: under mpiexec with
// more than one rank (and LMDBIO_CAFFE_ALLREDUCE not 0), the solver the
// binary creates trains one model over all ranks. The hooks below are
// exported under Caffe's own names by src/caffe_symbols.rs, so libcaffe's
// calls through its PLT reach them first:
//
// - Solver<float>::Step: on the first call, attaches a DataParallel to the
//   solver (a Solver::Callback and a Net::Callback of its train net) and
//   broadcasts rank 0's learnable parameters, so unseeded initialisation
//   and anything loaded per rank agree before the first forward pass.
// - Net<float>::Forward(float*): for the solver's train and test nets,
//   averages the loss and the net's outputs over the ranks, so the
//   printed training loss and the test scores are the global ones.
// - Solver<float>::Snapshot: only rank 0 writes (every rank, each under its
//   own prefix, with LMDBIO_CAFFE_SNAPSHOT_ALL_RANKS=1).
//
// Gradients are averaged in one fused buffer that the learnable blobs'
// diffs point into: per layer with MPI_Iallreduce as the backward pass
// leaves each layer (Net::add_after_backward), completed before the update
// (Solver callback on_gradients_ready); or in one MPI_Allreduce after the
// backward pass (LMDBIO_CAFFE_ALLREDUCE=fused, and always with iter_size >
// 1, where the diffs of one backward pass are not the final ones).
#ifndef LMDBIO_CAFFE_DATA_PARALLEL_HPP
#define LMDBIO_CAFFE_DATA_PARALLEL_HPP

extern "C" {
// Each calls libcaffe's own function (dlsym RTLD_NEXT) around its work.
void lmdbio_caffe_solver_step(void* solver, int iters);
const void* lmdbio_caffe_net_forward(void* net, float* loss);
void lmdbio_caffe_solver_snapshot(void* solver);
}

#endif

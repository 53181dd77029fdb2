//! The native module of the `lmdbio` Python package (`lmdbio._lmdbio`): the
//! engine on a thread of its own (`worker`) or the caller's (`inline`),
//! both asked through `driver`, zero-copy batches
//! (`batch`), Caffe `Datum` decoding (`datum`, `decode`), the engine's
//! errors as Python exceptions (`errors`). The Python layer
//! (`python/lmdbio/`) turns these into `lmdbio.Reader`, `lmdbio.caffe` and
//! `lmdbio.torch`.

mod batch;
mod datum;
mod decode;
mod driver;
mod errors;
mod inline;
mod local;
mod mpi;
mod options;
mod reader;
mod worker;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use errors::to_py;

/// Initialises MPI (MPI_THREAD_MULTIPLE) unless it is; returns whether
/// this call did (the caller then finalises at exit with `finalize_mpi`).
#[pyfunction]
fn init_mpi() -> PyResult<bool> {
    mpi::ensure_initialized().map_err(to_py)
}

/// Finalises MPI if `init_mpi` initialised it.
#[pyfunction]
fn finalize_mpi(py: Python<'_>) {
    py.allow_threads(mpi::finalize_if_ours)
}

/// Whether MPI provides MPI_THREAD_MULTIPLE.
#[pyfunction]
fn mpi_thread_multiple() -> bool {
    mpi::thread_multiple()
}

/// The MPI library this module is built against.
#[pyfunction]
fn mpi_library_version() -> String {
    mpi::library_version()
}

/// (rank, size) of a communicator handle (None: MPI_COMM_WORLD).
#[pyfunction]
#[pyo3(signature = (comm=None))]
fn comm_rank_size(comm: Option<i128>) -> PyResult<(usize, usize)> {
    let c = mpi::comm_from(comm);
    Ok((
        mpi::comm_rank(c).map_err(to_py)?,
        mpi::comm_size(c).map_err(to_py)?,
    ))
}

/// Makes the node's communicators and shared window for readers with these
/// options and maps the window's memory ahead (the C ABI's
/// `lmdbio_prepare`). Collective over the communicator.
#[pyfunction]
#[pyo3(signature = (comm=None, *, batch_size=64, **options))]
fn prepare(
    py: Python<'_>,
    comm: Option<i128>,
    batch_size: usize,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    let options = options::PyOptions::from_keywords(batch_size, options)?
        .engine_options()
        .map_err(to_py)?;
    let c = mpi::comm_from(comm);
    py.allow_threads(move || {
        let c = c;
        lmdbio::engine::prepare(c.0, &options)
    })
    .map_err(to_py)
}

#[pymodule]
fn _lmdbio(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add("_Engine", m.py().get_type::<reader::Engine>())?;
    m.add("_LocalEngine", m.py().get_type::<local::LocalEngine>())?;
    m.add_class::<batch::Batch>()?;
    m.add_class::<batch::Buffer>()?;
    m.add_function(wrap_pyfunction!(init_mpi, m)?)?;
    m.add_function(wrap_pyfunction!(prepare, m)?)?;
    m.add_function(wrap_pyfunction!(finalize_mpi, m)?)?;
    m.add_function(wrap_pyfunction!(mpi_thread_multiple, m)?)?;
    m.add_function(wrap_pyfunction!(mpi_library_version, m)?)?;
    m.add_function(wrap_pyfunction!(comm_rank_size, m)?)?;
    decode::register(m)?;
    Ok(())
}

//! The `lmdbio.Error` family: one Python exception class per engine
//! `ErrorKind`, each with the kind's name as `.kind` and its C ABI number
//! as `.code`; the engine's message (path, page, offset, rank) is the
//! exception's message. A failure another rank reported carries that rank
//! in `.rank`.

use lmdbio::{Error, ErrorKind};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::{create_exception, PyErr};

create_exception!(
    lmdbio,
    LmdbioError,
    PyException,
    "Base of every lmdbio error."
);
create_exception!(
    lmdbio,
    NotFound,
    LmdbioError,
    "The path names nothing lmdbio can open."
);
create_exception!(
    lmdbio,
    ReadError,
    LmdbioError,
    "An operating-system read failed."
);
create_exception!(
    lmdbio,
    Truncated,
    LmdbioError,
    "The file ends before a page or value it refers to."
);
create_exception!(
    lmdbio,
    NotLmdb,
    LmdbioError,
    "The file is not an LMDB data file."
);
create_exception!(
    lmdbio,
    Corrupt,
    LmdbioError,
    "The LMDB file's structure is damaged."
);
create_exception!(
    lmdbio,
    Unsupported,
    LmdbioError,
    "A valid LMDB feature lmdbio does not read (e.g. DUPSORT)."
);
create_exception!(
    lmdbio,
    NoSuchDatabase,
    LmdbioError,
    "No named database of that name."
);
create_exception!(
    lmdbio,
    InvalidArgument,
    LmdbioError,
    "An option or call the API cannot honour."
);
create_exception!(
    lmdbio,
    ResourceLimit,
    LmdbioError,
    "A configured bound cannot be met (e.g. the window)."
);
create_exception!(lmdbio, MpiError, LmdbioError, "An MPI call failed.");
create_exception!(
    lmdbio,
    InternalError,
    LmdbioError,
    "A bug in lmdbio (please report)."
);

/// Every class with its kind's name, for the module and for `.kind`.
pub const KINDS: [(ErrorKind, &str); 11] = [
    (ErrorKind::NotFound, "not_found"),
    (ErrorKind::Io, "io"),
    (ErrorKind::Truncated, "truncated"),
    (ErrorKind::NotLmdb, "not_lmdb"),
    (ErrorKind::Corrupt, "corrupt"),
    (ErrorKind::Unsupported, "unsupported"),
    (ErrorKind::NoSuchDatabase, "no_such_database"),
    (ErrorKind::InvalidArgument, "invalid_argument"),
    (ErrorKind::ResourceLimit, "resource_limit"),
    (ErrorKind::Mpi, "mpi"),
    (ErrorKind::Internal, "internal"),
];

fn class(py: Python<'_>, kind: ErrorKind) -> Bound<'_, pyo3::types::PyType> {
    match kind {
        ErrorKind::NotFound => py.get_type::<NotFound>(),
        ErrorKind::Io => py.get_type::<ReadError>(),
        ErrorKind::Truncated => py.get_type::<Truncated>(),
        ErrorKind::NotLmdb => py.get_type::<NotLmdb>(),
        ErrorKind::Corrupt => py.get_type::<Corrupt>(),
        ErrorKind::Unsupported => py.get_type::<Unsupported>(),
        ErrorKind::NoSuchDatabase => py.get_type::<NoSuchDatabase>(),
        ErrorKind::InvalidArgument => py.get_type::<InvalidArgument>(),
        ErrorKind::ResourceLimit => py.get_type::<ResourceLimit>(),
        ErrorKind::Mpi => py.get_type::<MpiError>(),
        ErrorKind::Internal => py.get_type::<InternalError>(),
    }
}

/// Adds the classes to the module, each with `.kind` and `.code`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<LmdbioError>())?;
    let base = py.get_type::<LmdbioError>();
    base.setattr("kind", py.None())?;
    base.setattr("code", py.None())?;
    base.setattr("rank", py.None())?;
    for (kind, name) in KINDS {
        let cls = class(py, kind);
        cls.setattr("kind", name)?;
        cls.setattr("code", kind.code())?;
        m.add(cls.name()?.to_string().as_str(), cls)?;
    }
    Ok(())
}

/// The Python exception for an engine error.
pub fn to_py(e: Error) -> PyErr {
    Python::with_gil(|py| {
        let rank = match &e {
            Error::OnRank { rank, .. } => Some(*rank),
            _ => None,
        };
        let err = PyErr::from_type(class(py, e.kind()), e.to_string());
        if let Some(rank) = rank {
            let _ = err.value(py).setattr("rank", rank);
        }
        err
    })
}

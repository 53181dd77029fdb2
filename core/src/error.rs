//! The one error type of the crate. Every variant says what went wrong and
//! where (path, page number, byte offset), so a user looking at a failed
//! training job can tell a bad path from a damaged file from a feature we do
//! not read.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path names nothing we can open.
    #[error("{path}: {reason}")]
    NotFound { path: PathBuf, reason: String },

    /// An operating-system read failed (not a short read: see `Truncated`).
    #[error("{path}: read of {len} bytes at offset {offset} failed: {source}")]
    Io {
        path: PathBuf,
        offset: u64,
        len: usize,
        #[source]
        source: std::io::Error,
    },

    /// The file ends before a page or value the database refers to.
    #[error("{path}: truncated: {what} needs bytes up to offset {needed_end} but the file has {file_len} bytes")]
    Truncated {
        path: PathBuf,
        what: String,
        needed_end: u64,
        file_len: u64,
    },

    /// The file is not an LMDB data file at all (bad magic, no meta page).
    #[error("{path}: not an LMDB data file: {reason}")]
    NotLmdb { path: PathBuf, reason: String },

    /// The file is LMDB but its structure is damaged.
    #[error("{path}: corrupt database at page {pgno} (file offset {offset}): {reason}")]
    Corrupt {
        path: PathBuf,
        pgno: u64,
        offset: u64,
        reason: String,
    },

    /// A valid LMDB feature lmdbio deliberately does not read.
    #[error("{path}: unsupported LMDB feature: {feature}{}", detail_suffix(.detail))]
    Unsupported {
        path: PathBuf,
        feature: &'static str,
        detail: String,
    },

    /// `-s NAME` names no sub-database.
    #[error("{path}: no named database {name:?}{}", detail_suffix(.detail))]
    NoSuchDatabase {
        path: PathBuf,
        name: String,
        detail: String,
    },

    /// The caller asked for something the API cannot do (bad option,
    /// ordinal out of range).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A configured bound cannot be met (shared window too small for one
    /// batch, a request larger than MPI can describe).
    #[error("resource limit: {0}")]
    ResourceLimit(String),

    /// An MPI call returned an error.
    #[error("{call} failed: {message} (code {code})")]
    Mpi {
        call: &'static str,
        code: i32,
        message: String,
    },

    /// A bug in lmdbio (a panic caught before it could cross a collective
    /// call or the C boundary).
    #[error("internal error (please report): {0}")]
    Internal(String),

    /// Another rank failed inside a collective call; every rank returns
    /// this so none waits forever.
    #[error("rank {rank} failed: {message}")]
    OnRank {
        rank: usize,
        kind: ErrorKind,
        message: String,
    },
}

fn detail_suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(" ({detail})")
    }
}

impl Error {
    /// A short stable name for the error's kind: used for C status codes and
    /// in tests that check which error a damaged file produces.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::Io { .. } => ErrorKind::Io,
            Error::Truncated { .. } => ErrorKind::Truncated,
            Error::NotLmdb { .. } => ErrorKind::NotLmdb,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::NoSuchDatabase { .. } => ErrorKind::NoSuchDatabase,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::ResourceLimit(_) => ErrorKind::ResourceLimit,
            Error::Mpi { .. } => ErrorKind::Mpi,
            Error::Internal(_) => ErrorKind::Internal,
            Error::OnRank { kind, .. } => *kind,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    NotFound,
    Io,
    Truncated,
    NotLmdb,
    Corrupt,
    Unsupported,
    NoSuchDatabase,
    InvalidArgument,
    ResourceLimit,
    Mpi,
    Internal,
}

impl ErrorKind {
    /// Stable numbers for the C ABI and for carrying a kind between ranks.
    /// Never renumber; add at the end.
    pub fn code(self) -> i32 {
        match self {
            ErrorKind::NotFound => 1,
            ErrorKind::Io => 2,
            ErrorKind::Truncated => 3,
            ErrorKind::NotLmdb => 4,
            ErrorKind::Corrupt => 5,
            ErrorKind::Unsupported => 6,
            ErrorKind::NoSuchDatabase => 7,
            ErrorKind::InvalidArgument => 8,
            ErrorKind::ResourceLimit => 9,
            ErrorKind::Mpi => 10,
            ErrorKind::Internal => 11,
        }
    }

    pub fn from_code(code: i32) -> ErrorKind {
        match code {
            1 => ErrorKind::NotFound,
            2 => ErrorKind::Io,
            3 => ErrorKind::Truncated,
            4 => ErrorKind::NotLmdb,
            5 => ErrorKind::Corrupt,
            6 => ErrorKind::Unsupported,
            7 => ErrorKind::NoSuchDatabase,
            8 => ErrorKind::InvalidArgument,
            9 => ErrorKind::ResourceLimit,
            11 => ErrorKind::Internal,
            _ => ErrorKind::Mpi,
        }
    }
}

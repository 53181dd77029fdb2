//! The one error type of the crate. Every variant says what went wrong and
//! where (path, page number, byte offset), so a user looking at a failed
//! training job can tell a bad path from a damaged file from a feature we do
//! not read.

use std::path::PathBuf;

/// `Result` with lmdbio's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in lmdbio. [`Error::kind`] gives the
/// stable [`ErrorKind`] (the C status code); `Display` gives the message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path names nothing we can open.
    #[error("{path}: {reason}")]
    NotFound {
        /// The path as given (or the data file derived from it).
        path: PathBuf,
        /// Why it cannot be opened: the OS message, or that a directory
        /// holds no `data.mdb`.
        reason: String,
    },

    /// An operating-system read failed (not a short read: see `Truncated`).
    #[error("{path}: read of {len} bytes at offset {offset} failed: {source}")]
    Io {
        /// The file being read.
        path: PathBuf,
        /// Byte offset of the failed read in the file.
        offset: u64,
        /// Bytes asked for.
        len: usize,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// The file ends before a page or value the database refers to.
    #[error("{path}: truncated: {what} needs bytes up to offset {needed_end} but the file has {file_len} bytes")]
    Truncated {
        /// The file being read.
        path: PathBuf,
        /// What lies past the end (e.g. "a read of 4096 bytes at offset
        /// 8192").
        what: String,
        /// The byte offset (exclusive) the read needs the file to reach.
        needed_end: u64,
        /// The file's length in bytes.
        file_len: u64,
    },

    /// The file is not an LMDB data file at all (bad magic, no meta page).
    #[error("{path}: not an LMDB data file: {reason}")]
    NotLmdb {
        /// The file opened.
        path: PathBuf,
        /// What gave it away (the magic found, the version, ...).
        reason: String,
    },

    /// The file is LMDB but its structure is damaged.
    #[error("{path}: corrupt database at page {pgno} (file offset {offset}): {reason}")]
    Corrupt {
        /// The file being read.
        path: PathBuf,
        /// The damaged page's number.
        pgno: u64,
        /// The damaged page's byte offset in the file (`pgno * page size`).
        offset: u64,
        /// What is wrong with it, in the format's own terms.
        reason: String,
    },

    /// A valid LMDB feature lmdbio deliberately does not read.
    #[error("{path}: unsupported LMDB feature: {feature}{}", detail_suffix(.detail))]
    Unsupported {
        /// The file being read.
        path: PathBuf,
        /// The feature, by its liblmdb name (`MDB_DUPSORT`, ...).
        feature: &'static str,
        /// Where it was found (database name, page), or empty.
        detail: String,
    },

    /// `-s NAME` names no sub-database.
    #[error("{path}: no named database {name:?}{}", detail_suffix(.detail))]
    NoSuchDatabase {
        /// The file opened.
        path: PathBuf,
        /// The database name asked for.
        name: String,
        /// Why the name is not a database (e.g. MAIN holds it as a plain
        /// record); empty when MAIN has no such key.
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
        /// The MPI function, e.g. `"MPI_File_read_at"`.
        call: &'static str,
        /// Its return code (MPI implementation-specific).
        code: i32,
        /// `MPI_Error_string` of the code.
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
        /// The failing rank in the engine's communicator.
        rank: usize,
        /// The kind of that rank's error; [`Error::kind`] returns it.
        kind: ErrorKind,
        /// That rank's error message.
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

/// Declares [`ErrorKind`] and [`ErrorKind::ALL`] from one list, so that no
/// kind can miss its number or its place in `ALL`.
macro_rules! error_kinds {
    ($($(#[$doc:meta])* $kind:ident = $code:literal,)*) => {
        /// What kind of failure an [`Error`] is. The discriminants are the
        /// stable numbers of the C ABI (`LMDBIO_ERR_*` in
        /// `include/lmdbio.h`, checked by the abi-check crate) and of a kind
        /// carried between ranks: never renumber, add at the end.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum ErrorKind {
            $($(#[$doc])* $kind = $code,)*
        }

        impl ErrorKind {
            /// Every kind, in code order.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$kind),*];
        }
    };
}

error_kinds! {
    /// [`Error::NotFound`].
    NotFound = 1,
    /// [`Error::Io`].
    Io = 2,
    /// [`Error::Truncated`].
    Truncated = 3,
    /// [`Error::NotLmdb`].
    NotLmdb = 4,
    /// [`Error::Corrupt`].
    Corrupt = 5,
    /// [`Error::Unsupported`].
    Unsupported = 6,
    /// [`Error::NoSuchDatabase`].
    NoSuchDatabase = 7,
    /// [`Error::InvalidArgument`].
    InvalidArgument = 8,
    /// [`Error::ResourceLimit`].
    ResourceLimit = 9,
    /// [`Error::Mpi`].
    Mpi = 10,
    /// [`Error::Internal`].
    Internal = 11,
}

impl ErrorKind {
    /// The kind's stable number.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The kind numbered `code`; a number no kind has is taken for an MPI
    /// failure (what a rank that never set a kind reports).
    pub fn from_code(code: i32) -> ErrorKind {
        ErrorKind::ALL
            .iter()
            .copied()
            .find(|k| k.code() == code)
            .unwrap_or(ErrorKind::Mpi)
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorKind;

    #[test]
    fn codes_run_from_one_and_round_trip() {
        for (i, &kind) in ErrorKind::ALL.iter().enumerate() {
            assert_eq!(kind.code(), i as i32 + 1, "{kind:?}: codes run 1, 2, ...");
            assert_eq!(ErrorKind::from_code(kind.code()), kind);
        }
        assert_eq!(ErrorKind::Internal.code(), 11);
        assert_eq!(ErrorKind::from_code(0), ErrorKind::Mpi);
        assert_eq!(ErrorKind::from_code(99), ErrorKind::Mpi);
    }
}

//! The boundary every exported C function runs behind, shared by lmdbio's C
//! ABI (`ffi`) and the Caffe plugin: an error or a panic becomes a nonzero
//! status and a message kept for the calling thread, so no panic unwinds
//! into C and the caller can always ask what went wrong.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{Error, ErrorKind};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A failure a C function reports: its message, and the status it returns.
pub trait Failure: Display {
    /// The status returned for a panic caught in the body.
    const PANIC_STATUS: c_int;
    /// The status returned for this failure; never 0.
    fn status(&self) -> c_int;
}

/// lmdbio's own errors return their kind's code.
impl Failure for Error {
    const PANIC_STATUS: c_int = ErrorKind::Internal.code();
    fn status(&self) -> c_int {
        self.kind().code()
    }
}

/// A bare message returns 1 (the Caffe plugin's "failed").
impl Failure for String {
    const PANIC_STATUS: c_int = 1;
    fn status(&self) -> c_int {
        1
    }
}

/// Keeps `message` as this thread's last error (NUL bytes become spaces).
pub fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// This thread's last error message ("" after a success); the pointer stays
/// valid until the thread's next call through [`guard`].
pub fn last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Runs `body`: 0 on success (clearing the last error), else the failure's
/// status with its message kept; a panic is caught and reported as a bug.
pub fn guard<E: Failure>(body: impl FnOnce() -> Result<(), E>) -> c_int {
    guard_status(|| body().map(|()| 0))
}

/// [`guard`] for a body that chooses its success status (such as
/// `LMDBIO_END`, which is not an error and leaves no message).
pub fn guard_status<E: Failure>(body: impl FnOnce() -> Result<c_int, E>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(status)) => {
            set_last_error("");
            status
        }
        Ok(Err(e)) => {
            set_last_error(&e.to_string());
            e.status()
        }
        Err(_) => {
            set_last_error("internal error: a panic was caught at the C boundary (please report)");
            E::PANIC_STATUS
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: last_error points at this thread's NUL-terminated message.
        unsafe { CStr::from_ptr(last_error()) }
            .to_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn errors_panics_and_successes_set_status_and_message() {
        let status = guard(|| Err(Error::InvalidArgument("bad\0value".into())));
        assert_eq!(status, ErrorKind::InvalidArgument.code());
        assert_eq!(last(), "invalid argument: bad value");

        let status = guard::<Error>(|| panic!("boom"));
        assert_eq!(status, ErrorKind::Internal.code());
        assert!(last().contains("panic was caught"), "{}", last());

        assert_eq!(guard::<String>(|| Err("plugin failed".into())), 1);
        assert_eq!(last(), "plugin failed");
        assert_eq!(guard::<String>(|| panic!("boom")), 1);

        assert_eq!(guard::<Error>(|| Ok(())), 0);
        assert_eq!(last(), "");
    }
}

//! The engine's timeout: how long a rank waits for the others (in a
//! collective call, or for a reader's values on the node) before failing
//! with an error that names the ranks that did not arrive
//! (`mpi_raw::deadline`). Taken from the options, else from the
//! environment variable `LMDBIO_TIMEOUT` (seconds), else
//! [`DEFAULT_TIMEOUT`]: long enough for any step of a sane job on a slow
//! file system, short enough that a stopped rank does not hold a machine
//! allocation for the rest of its time.

use std::time::Duration;

use super::EngineOptions;
use lmdbio_core::error::{Error, Result};

/// The timeout when neither the options nor the environment set one:
/// 30 minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// The environment variable read for a timeout in seconds when the
/// options set none.
pub const TIMEOUT_VARIABLE: &str = "LMDBIO_TIMEOUT";

/// Parses a timeout in seconds (fractions allowed; positive).
pub fn parse_seconds(text: &str) -> Result<Duration> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(Error::InvalidArgument(format!(
            "timeout {text:?}: expected a positive number of seconds"
        ))),
    }
}

/// The timeout `o` asks for.
pub fn resolve(o: &EngineOptions) -> Result<Duration> {
    if let Some(t) = o.timeout {
        return Ok(t);
    }
    match std::env::var(TIMEOUT_VARIABLE) {
        Ok(text) => parse_seconds(&text)
            .map_err(|e| Error::InvalidArgument(format!("{TIMEOUT_VARIABLE}: {e}"))),
        Err(_) => Ok(DEFAULT_TIMEOUT),
    }
}

/// Makes the timeout of `o` the one every wait of this process uses.
pub fn apply(o: &EngineOptions) -> Result<()> {
    crate::mpi_raw::deadline::set_timeout(resolve(o)?);
    Ok(())
}

/// The error of a rank that waited past the timeout for the values the
/// node's reader `reader` (its node rank) was to read.
pub(crate) fn reader_missing(reader: usize) -> Error {
    Error::Mpi {
        call: "waiting for the node's reader",
        code: 0,
        message: format!(
            "timed out after {} s (LMDBIO_TIMEOUT / the timeout option): node rank {reader}, a reader, did not deliver the step's values",
            crate::mpi_raw::deadline::timeout().as_secs_f64()
        ),
    }
}

/// The timeout as one of the inputs every rank must agree on.
pub(crate) fn agreed_field(o: &EngineOptions) -> Option<(&'static str, String)> {
    Some((
        "the timeout",
        match resolve(o) {
            Ok(t) => format!("{} s", t.as_secs_f64()),
            Err(e) => e.to_string(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_parse_and_nonsense_is_refused() {
        assert_eq!(parse_seconds("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_seconds(" 0.5 ").unwrap(), Duration::from_millis(500));
        for bad in ["0", "-1", "soon", "inf", "NaN"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
        let o = EngineOptions {
            timeout: Some(Duration::from_secs(7)),
            ..EngineOptions::default()
        };
        assert_eq!(resolve(&o).unwrap(), Duration::from_secs(7));
    }
}

//! A launcher of one MPI started under another's `mpiexec` (a binary linked
//! with MPICH run by Open MPI's, or the reverse) does not fail: each
//! process comes up as a one-rank world and reads the whole database
//! alone. The launcher's environment still says how many ranks it
//! started, so a world of one under a launcher of several is refused.

use lmdbio_core::error::{Error, Result};

/// Variables launchers set to the number of processes they started:
/// Open MPI's `mpiexec`, MPICH's Hydra (and Intel MPI, MVAPICH2 with
/// Hydra), MVAPICH2's own launcher.
const LAUNCHER_SIZES: &[&str] = &["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"];

/// [`check`] against `MPI_COMM_WORLD`'s size.
pub(crate) fn world_check() -> Result<()> {
    check(crate::mpi_raw::Comm::caller(crate::mpi_raw::comm_world())?.size())
}

/// Fails when MPI's world holds one process but a launcher's environment
/// says it started more.
pub(crate) fn check(world_size: usize) -> Result<()> {
    check_env(world_size, |name| std::env::var(name).ok())
}

fn check_env(world_size: usize, var: impl Fn(&str) -> Option<String>) -> Result<()> {
    if world_size != 1 {
        return Ok(());
    }
    for name in LAUNCHER_SIZES {
        let Some(started) = var(name).and_then(|v| v.trim().parse::<usize>().ok()) else {
            continue;
        };
        if started > 1 {
            return Err(Error::InvalidArgument(format!(
                "the launcher started {started} processes ({name}={started}) but MPI sees a world of 1: \
                 this program's MPI library is not the one of the mpiexec that started it \
                 (e.g. a binary linked with MPICH run by Open MPI's mpiexec); \
                 use the matching mpiexec (mpiexec.mpich or mpiexec.openmpi)"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_world_of_one_under_a_launcher_of_several_is_refused() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let e = check_env(1, env(&[("OMPI_COMM_WORLD_SIZE", "2")])).unwrap_err();
        assert!(e.to_string().contains("OMPI_COMM_WORLD_SIZE=2"), "{e}");
        assert!(check_env(1, env(&[("PMI_SIZE", "4")])).is_err());
        assert!(check_env(4, env(&[("PMI_SIZE", "4")])).is_ok());
        assert!(check_env(1, env(&[("PMI_SIZE", "1")])).is_ok());
        assert!(check_env(1, env(&[])).is_ok());
    }
}

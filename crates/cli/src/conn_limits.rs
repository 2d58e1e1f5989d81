//! `serve`'s connection limits from its switches, the cap held below the process's open-file
//! limit (RLIMIT_NOFILE) so that accepting can never fail for want of a descriptor: a quarter of
//! the limit stays for the model's files, the engine and the sockets being turned away.

use tf_server::{ConnLimits, ServeArgs};

/// The most connections a process with `nofile` descriptors may hold open.
pub fn cap_for(nofile: u64) -> u64 {
    (nofile / 4 * 3).max(1)
}

/// The soft open-file limit, if the system reports a finite one.
fn open_file_limit() -> Option<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one `rlimit` through a pointer to a live, writable one.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// The limits `a` asks for, `--max-connections` held to the open-file limit's cap (with a
/// warning when it asked for more).
pub fn conn_limits(a: &ServeArgs) -> ConnLimits {
    let cap = open_file_limit().map(cap_for);
    let max = match (a.max_connections, cap) {
        (Some(n), Some(cap)) if n > cap => {
            tracing::warn!(
                "--max-connections {n} is past three quarters of the open-file limit; using {cap} (raise `ulimit -n` for more)"
            );
            cap
        }
        (Some(n), _) => n,
        (None, Some(cap)) => cap,
        (None, None) => ConnLimits::default().max_connections as u64,
    };
    ConnLimits {
        header_read_timeout: a.header_read_timeout,
        body_read_timeout: a.body_read_timeout,
        idle_timeout: a.idle_timeout,
        max_connections: usize::try_from(max).unwrap_or(usize::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_a_quarter_of_the_descriptors() {
        assert_eq!(cap_for(1024), 768);
        assert_eq!(cap_for(256), 192);
        assert_eq!(cap_for(1), 1);
        assert!(open_file_limit().is_none_or(|n| n > 0));
    }
}

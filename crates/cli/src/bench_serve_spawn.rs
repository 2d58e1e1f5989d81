//! The server `bench-serve --model` starts: this binary's own `serve` on an ephemeral loopback
//! port, its address read from the line it prints, stopped (SIGTERM, then killed) when dropped.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// Lines of the server's stderr kept to explain a failed start.
const KEPT_LINES: usize = 20;

/// A `serve` child process.
pub struct Spawned {
    /// The URL it listens on.
    pub url: String,
    child: Child,
}

/// Refuses `serve` switches that would move the server off its ephemeral loopback port.
pub fn check_extra(extra: &[String]) -> Result<(), String> {
    match extra.iter().find(|a| is_address_switch(a)) {
        Some(bad) => Err(format!("'{bad}' after --: bench-serve picks the server's loopback address itself")),
        None => Ok(()),
    }
}

/// Starts `serve --model MODEL --host 127.0.0.1 --port 0 EXTRA...` and waits up to `timeout`
/// for it to listen.
pub fn start(model: &Path, extra: &[String], timeout: Duration) -> Result<Spawned, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program to start serve: {e}"))?;
    let mut child = Command::new(exe)
        .arg("serve")
        .arg("--model")
        .arg(model)
        .args(["--host", "127.0.0.1", "--port", "0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start serve: {e}"))?;
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("listening on ") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
    }
    let kept = Arc::new(Mutex::new(VecDeque::new()));
    if let Some(err) = child.stderr.take() {
        let kept = Arc::clone(&kept);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if let Ok(mut k) = kept.lock() {
                    if k.len() == KEPT_LINES {
                        k.pop_front();
                    }
                    k.push_back(line);
                }
            }
        });
    }
    let mut spawned = Spawned { url: String::new(), child };
    match rx.recv_timeout(timeout) {
        Ok(url) => {
            spawned.url = url;
            Ok(spawned)
        }
        Err(_) => {
            let status = spawned.child.try_wait().ok().flatten();
            drop(spawned);
            let tail: Vec<String> = kept.lock().map(|k| k.iter().cloned().collect()).unwrap_or_default();
            let why = match status {
                Some(s) => format!("serve exited ({s}) before listening"),
                None => format!("serve did not listen within {} s", timeout.as_secs()),
            };
            Err(format!("{why}; its last lines:\n{}", tail.join("\n")))
        }
    }
}

fn is_address_switch(a: &str) -> bool {
    ["--host", "--port"].iter().any(|s| a == *s || a.starts_with(&format!("{s}=")))
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            if let Ok(pid) = i32::try_from(self.child.id()) {
                // SAFETY: kill(2) on our own child's pid; it has not been reaped (try_wait said so).
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            for _ in 0..100 {
                if !matches!(self.child.try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_is_ours_to_pick() {
        assert!(is_address_switch("--port") && is_address_switch("--host=0.0.0.0"));
        assert!(!is_address_switch("--device") && !is_address_switch("--portable"));
    }
}

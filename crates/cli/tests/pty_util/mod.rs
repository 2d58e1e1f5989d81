//! Test helper: `tensorfold` on a pseudo-terminal (its controlling terminal, so Ctrl-C there
//! sends SIGINT as a user's would), with a reader that waits for text to appear.

#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// A child on a pseudo-terminal.
pub struct Pty {
    /// The process.
    pub child: Child,
    master: File,
    rx: Receiver<Vec<u8>>,
    /// Output read and not yet consumed by `expect`.
    seen: String,
}

impl Pty {
    /// Runs the binary with `args` on a fresh terminal of 200 columns.
    pub fn spawn(args: &[&str]) -> Pty {
        let (mut master_fd, mut slave_fd) = (0, 0);
        let size = libc::winsize { ws_row: 50, ws_col: 200, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: openpty writes two descriptors through live pointers; name and termios may be null.
        let r = unsafe { libc::openpty(&mut master_fd, &mut slave_fd, std::ptr::null_mut(), std::ptr::null(), &size) };
        assert_eq!(r, 0, "openpty failed");
        // SAFETY: both descriptors were just opened and are owned here.
        let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master_fd), OwnedFd::from_raw_fd(slave_fd)) };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorfold"));
        cmd.args(args).env("TERM", "xterm").env_remove("RUST_LOG");
        cmd.stdin(Stdio::from(slave.try_clone().unwrap()));
        cmd.stdout(Stdio::from(slave.try_clone().unwrap()));
        cmd.stderr(Stdio::from(slave));
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        let master = File::from(master);
        let mut reader = master.try_clone().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Pty { child, master, rx, seen: String::new() }
    }

    /// Types `text` at the terminal.
    pub fn send(&mut self, text: &str) {
        self.master.write_all(text.as_bytes()).unwrap();
        self.master.flush().unwrap();
    }

    /// Waits for `pattern` and returns the output before it (carriage returns dropped), consuming
    /// both; panics after `secs` seconds.
    pub fn expect(&mut self, pattern: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(at) = self.seen.find(pattern) {
                let before = self.seen[..at].to_string();
                self.seen.drain(..at + pattern.len());
                return before;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(bytes) => self.seen.push_str(&String::from_utf8_lossy(&bytes).replace('\r', "")),
                Err(_) => panic!("no {pattern:?} within {secs}s; the terminal showed: {:?}", self.seen),
            }
        }
    }

    /// Whether output arrives within `secs` seconds that holds `pattern` (consumed when it does).
    pub fn sees(&mut self, pattern: &str, secs: f64) -> bool {
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        while !self.seen.contains(pattern) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(bytes) => self.seen.push_str(&String::from_utf8_lossy(&bytes).replace('\r', "")),
                Err(_) => return false,
            }
        }
        self.expect(pattern, 0);
        true
    }

    /// Waits up to `secs` seconds for the process to exit; its exit code.
    pub fn wait(&mut self, secs: u64) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// The master side's descriptor (kept open as long as the terminal lives).
    pub fn fd(&self) -> i32 {
        self.master.as_raw_fd()
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

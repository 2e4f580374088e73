//! Finds and kills every process a worker left behind, wherever it went (docs/operations.md
//! §8.2 "Processes").
//!
//! A process group is not enough: a child that calls `setsid` (a daemon) leaves the group, and
//! after a crash of the service nobody holds the group any more. Every worker process is started
//! with `AGENTRY_WORKER_COOKIE=<worker id>` in its environment (set last, so no configured
//! variable can override it), and descendants inherit it; that variable is the cookie this
//! module looks for in `/proc/<pid>/environ`. It is called when a worker's run
//! ends (after its group was killed) and, at start-up, for the rows a crashed process left open.
//!
//! Limits, documented for operators: a process that clears or rewrites its environment before
//! `exec` escapes the cookie; without root, only processes of the service's own user can be
//! read and killed (which are the only ones a worker can start, unless it runs setuid
//! programs); a pid freed and reused between the read and the kill is an unavoidable race,
//! narrowed by reading immediately before killing. Depends only on `/proc` and `nix`.

use std::{
    fmt::Write as _,
    fs,
    io::{self, Read},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

/// The environment variable that marks a worker's processes.
pub const COOKIE: &str = "AGENTRY_WORKER_COOKIE";

/// Rounds of scan-and-kill: a process that forks while it is being killed leaves a child the
/// next round finds; past this many rounds something is forking faster than we kill.
const MAX_ROUNDS: usize = 8;

/// SIGKILLs every process (other than this one) whose environment carries the cookie of one of
/// `worker_ids`, repeating until a scan finds none. Returns how many processes were killed.
pub fn kill_marked(worker_ids: &[&str]) -> usize {
    if worker_ids.is_empty() {
        return 0;
    }
    let needles: Vec<Vec<u8>> = worker_ids
        .iter()
        .map(|id| format!("{COOKIE}={id}\0").into_bytes())
        .collect();
    let me = std::process::id();
    let mut killed = 0;
    let mut buf = Vec::new();
    for _ in 0..MAX_ROUNDS {
        let found = scan(me, &needles, &mut buf);
        if found.is_empty() {
            break;
        }
        for pid in found {
            match kill(Pid::from_raw(pid), Signal::SIGKILL) {
                Ok(()) => killed += 1,
                Err(e) => tracing::debug!(pid, error = %e, "cannot kill a leftover worker process"),
            }
        }
    }
    killed
}

/// The pids whose environment holds one of `needles` (each `NAME=value\0`), matched at the
/// start of a variable.
///
/// Runs at the end of every worker, so each process costs as few system calls as it can: one
/// `open`, one `read` and one `close` (`read_to_end` would add an `fstat`, an `lseek` and a
/// read that confirms the end), and one buffer for every file.
fn scan(me: u32, needles: &[Vec<u8>], buf: &mut Vec<u8>) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut path = String::with_capacity(32);
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        path.clear();
        let _ = write!(path, "/proc/{pid}/environ");
        let Ok(mut file) = fs::File::open(&path) else {
            continue;
        };
        let Ok(len) = read_environ(&mut file, buf) else {
            continue;
        };
        if len > 0
            && needles.iter().any(|n| holds_variable(&buf[..len], n))
            && let Ok(pid) = i32::try_from(pid)
        {
            found.push(pid);
        }
    }
    found
}

/// Reads a `/proc/<pid>/environ` into `buf` (grown as needed); returns its length. The kernel
/// fills a read of `environ` up to the buffer's size or the end of the block, so a read that
/// leaves room in the buffer has read everything.
fn read_environ(file: &mut fs::File, buf: &mut Vec<u8>) -> io::Result<usize> {
    if buf.is_empty() {
        buf.resize(16 * 1024, 0);
    }
    let mut len = 0;
    loop {
        match file.read(&mut buf[len..]) {
            Ok(n) => {
                len += n;
                if n == 0 || len < buf.len() {
                    return Ok(len);
                }
                let bigger = buf.len() * 2;
                buf.resize(bigger, 0);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Whether the NUL-separated `environ` block has a variable starting exactly with `needle`.
fn holds_variable(environ: &[u8], needle: &[u8]) -> bool {
    // `needle` ends in NUL, so the last variable (which may lack one) is matched with one added.
    let body = &needle[..needle.len() - 1];
    environ.split(|b| *b == 0).any(|var| var == body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_match_whole_and_only_at_their_start() {
        let env = b"PATH=/bin\0AGENTRY_WORKER_COOKIE=wkr_1\0HOME=/root";
        assert!(holds_variable(env, b"AGENTRY_WORKER_COOKIE=wkr_1\0"));
        assert!(!holds_variable(env, b"AGENTRY_WORKER_COOKIE=wkr_\0"));
        assert!(!holds_variable(
            b"X_AGENTRY_WORKER_COOKIE=wkr_1\0",
            b"AGENTRY_WORKER_COOKIE=wkr_1\0"
        ));
        assert!(holds_variable(
            b"AGENTRY_WORKER_COOKIE=wkr_1",
            b"AGENTRY_WORKER_COOKIE=wkr_1\0"
        ));
    }

    #[test]
    fn a_marked_process_that_left_its_group_is_killed() {
        let id = "wkr_sweeptest0000000000000000000001";
        let mut child = std::process::Command::new("setsid")
            .args(["sleep", "30"])
            .env(COOKIE, id)
            .spawn()
            .expect("setsid and sleep exist");
        // `setsid` execs sleep in a new session; give it a moment to exist under its new name.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(kill_marked(&[id]) >= 1);
        let status = child.wait().unwrap();
        assert!(!status.success());
        assert_eq!(kill_marked(&[id]), 0, "nothing left to kill");
    }
}

//! Finds and kills every process a worker left behind, wherever it went (docs/operations.md
//! §8.2 "Processes").
//!
//! A process group is not enough: a child that calls `setsid` (a daemon) leaves the group, and
//! after a crash of the service nobody holds the group any more. Every worker process is started
//! with `AGENTRY_WORKER_COOKIE=<worker id>` in its environment (set last, so no configured
//! variable can override it), and descendants inherit it; that variable is the cookie this
//! module looks for in `/proc/<pid>/environ`. It runs when a worker's run ends (after its group
//! was killed), where the run ends or, when several end together, on one sweeper thread that
//! serves them all with one scan ([`after_exit`]); and at start-up, for the rows a crashed
//! process left open.
//!
//! A scan lists `/proc` and reads the environment only of processes it has not read before
//! (`Seen`): a process is known by its pid together with the inode number of its
//! `/proc/<pid>` directory, which procfs gives anew to a new process that reuses a freed pid.
//! Most processes on a machine outlive many workers, so a scan at a worker's end costs one
//! directory listing plus the few processes started since the last one (reading every
//! environment took about 0.3 ms for 80 processes, more on a busy host).
//!
//! Limits, documented for operators: a process that clears or rewrites its environment before
//! `exec` escapes the cookie; without root, only processes of the service's own user can be
//! read and killed (which are the only ones a worker can start, unless it runs setuid
//! programs); a pid freed and reused between the read and the kill is an unavoidable race,
//! narrowed by reading immediately before killing. Depends only on `/proc` and `nix`.

use std::{
    collections::HashMap,
    fmt::Write as _,
    fs,
    io::{self, Read},
    os::unix::fs::DirEntryExt,
    sync::{
        LazyLock, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use tokio::sync::oneshot;

use nix::{
    errno::Errno,
    sys::signal::{Signal, kill},
    unistd::Pid,
};

/// The environment variable that marks a worker's processes.
pub const COOKIE: &str = "AGENTRY_WORKER_COOKIE";

/// Rounds of scan-and-kill: a process that forks while it is being killed leaves a child the
/// next round finds; past this many rounds something is forking faster than we kill.
const MAX_ROUNDS: usize = 8;

/// SIGKILLs every process (other than this one) whose environment carries the cookie of one of
/// `worker_ids`, repeating until a scan finds none it has not killed already. Returns how many
/// processes were killed.
///
/// For workers of this process whose leader is reaped or killed already: what earlier scans
/// read is trusted (`Seen`). A leader is the one process whose environment gains the cookie
/// at its `exec` (its parent lacks it), and a scan that read it just before would remember it
/// without; the scans never remember a process whose environment is this process's own (a
/// child of this process not yet exec'd), and the workers of other processes are swept with
/// [`kill_marked_afresh`].
pub fn kill_marked(worker_ids: &[&str]) -> usize {
    kill_each(worker_ids, Reading::Unseen).iter().sum()
}

/// [`kill_marked`] reading every environment again: for workers another process started (a
/// predecessor that crashed, a lost replica on this host), whose leaders may still run.
pub fn kill_marked_afresh(worker_ids: &[&str]) -> usize {
    kill_each(worker_ids, Reading::All).iter().sum()
}

/// Which environments a scan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Only those the last scan did not read ([`Seen`]).
    Unseen,
    /// Every one.
    All,
}

/// [`kill_marked`], counting the processes killed for each of `worker_ids`.
fn kill_each(worker_ids: &[&str], read: Reading) -> Vec<usize> {
    let mut killed = vec![0; worker_ids.len()];
    if worker_ids.is_empty() {
        return killed;
    }
    let me = std::process::id();
    let mut buf = Vec::new();
    // A process killed in one round can still be dying, its environment readable, when the
    // next scan runs: it is neither counted nor a reason for another round again.
    let mut signalled = std::collections::HashSet::new();
    for _ in 0..MAX_ROUNDS {
        let mut fresh = scan(me, worker_ids, read, &mut buf);
        fresh.retain(|(pid, _)| !signalled.contains(pid));
        if fresh.is_empty() {
            break;
        }
        for (pid, which) in fresh {
            match kill(Pid::from_raw(pid), Signal::SIGKILL) {
                Ok(()) => {
                    signalled.insert(pid);
                    killed[which] += 1;
                }
                Err(e) => tracing::debug!(pid, error = %e, "cannot kill a leftover worker process"),
            }
        }
    }
    killed
}

/// A sweep asked for one worker, answered with how many processes it killed.
type Request = (String, oneshot::Sender<usize>);

/// The sweeper thread's queue; `None` if the thread could not be started.
static SWEEPER: LazyLock<Option<mpsc::Sender<Request>>> = LazyLock::new(|| {
    let (tx, rx) = mpsc::channel::<Request>();
    let started = std::thread::Builder::new()
        .name("agentry-sweep".to_owned())
        .spawn(move || sweep_loop(&rx));
    match started {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the sweeper thread; sweeps run inline");
            None
        }
    }
});

/// Most workers one scan serves.
const MAX_BATCH: usize = 256;

/// Sweeps asked for and not answered yet: a scan running inline, or requests queued for (or
/// being served by) the sweeper thread.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Serves queued sweeps: every request queued while a scan ran is served by the next scan,
/// which starts after each of them was asked for, so each still gets a scan of its own that
/// began after its leader was reaped.
fn sweep_loop(rx: &mpsc::Receiver<Request>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter().take(MAX_BATCH - 1));
        let ids: Vec<&str> = batch.iter().map(|(id, _)| id.as_str()).collect();
        let killed = kill_each(&ids, Reading::Unseen);
        let served = batch.len();
        for ((_, done), n) in batch.into_iter().zip(killed) {
            let _ = done.send(n);
        }
        ACTIVE.fetch_sub(served, Ordering::AcqRel);
    }
}

/// [`kill_marked`] for one worker whose leader was just reaped. When no other sweep is under
/// way it scans right here (no hand-off, so a lone worker ends as fast as it can); otherwise
/// it queues the worker for the sweeper thread, so workers that end together share a scan and
/// the caller's thread is not held by it. The sweep runs even if the answer is no longer
/// awaited.
///
/// `leader` is the pid of the worker's first process, just reaped. When it is still the last
/// pid the kernel gave out in this pid namespace (see `last_created_was`), no process has been
/// created since it was: it had no descendants, nothing can carry the cookie, and there is
/// nothing to scan for.
pub fn after_exit(worker_id: &str, leader: Option<u32>) -> oneshot::Receiver<usize> {
    if leader.is_some_and(last_created_was) {
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(0);
        return rx;
    }
    if ACTIVE.fetch_add(1, Ordering::AcqRel) == 0 {
        let (tx, rx) = oneshot::channel();
        sweep_here(worker_id, tx);
        return rx;
    }
    queue(worker_id)
}

/// Queues a sweep for the sweeper thread (counted in [`ACTIVE`] by the caller); scans inline if
/// the thread is not there.
fn queue(worker_id: &str) -> oneshot::Receiver<usize> {
    let (tx, rx) = oneshot::channel();
    let queued = match SWEEPER.as_ref() {
        Some(queue) => queue.send((worker_id.to_owned(), tx)),
        None => Err(mpsc::SendError((worker_id.to_owned(), tx))),
    };
    if let Err(mpsc::SendError((id, tx))) = queued {
        sweep_here(&id, tx);
    }
    rx
}

/// Where the kernel says which pid it gave out last in the reading process's pid namespace
/// (processes and threads alike; a process in a nested namespace takes a pid in this one too).
/// A sysctl, so container tools that rewrite `/proc/loadavg` leave it alone.
const LAST_PID: &str = "/proc/sys/kernel/ns_last_pid";

/// Whether `pid` is the last pid the kernel gave out in this pid namespace: if so, no process
/// or thread was created after the one that got it. Read after that process was reaped, the
/// answer could only be wrong if the pid counter went once round the whole pid space between
/// the reap and this read (a few microseconds), or if a process was created with a pid of its
/// choosing (`clone3` with `set_tid`, which needs `CAP_CHECKPOINT_RESTORE` or `CAP_SYS_ADMIN`
/// and does not move the counter). Any doubt (the file is missing or unreadable, as in some
/// sandboxes) answers `false`, and the caller scans.
fn last_created_was(pid: u32) -> bool {
    let mut buf = [0u8; 24];
    let Ok(mut file) = fs::File::open(LAST_PID) else {
        return false;
    };
    let Ok(n) = file.read(&mut buf) else {
        return false;
    };
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        == Some(pid)
}

/// Runs a sweep counted in [`ACTIVE`] on this thread and answers it.
fn sweep_here(worker_id: &str, done: oneshot::Sender<usize>) {
    let _ = done.send(kill_marked(&[worker_id]));
    ACTIVE.fetch_sub(1, Ordering::AcqRel);
}

/// The cookie values in one process's environment (usually none or one).
type Cookies = Box<[Box<[u8]>]>;

/// What the last scan read: for each process, by pid, the inode number of its `/proc/<pid>`
/// directory then and its cookies. A process still listed under the same pid and inode is the
/// same process, so its cookies are not read again. (Its environment is the one it was started
/// or last exec'd with; a process of a worker cannot take the cookie of another.)
struct Seen {
    /// When that scan listed `/proc`.
    at: Instant,
    by_pid: HashMap<u32, (u64, Cookies)>,
}

/// The last scan's [`Seen`], shared by every scan of the process.
static SEEN: Mutex<Option<Seen>> = Mutex::new(None);

/// How long a scan trusts what the last one read. Procfs inode numbers come from a 32-bit
/// counter that other pseudo-files share, so a freed pid could in theory come back with the
/// same number once the counter has gone round; between two listings less than this apart that
/// cannot happen, and after a longer pause everything is read again.
const SEEN_FOR: Duration = Duration::from_secs(10);

/// The processes whose environment holds the cookie of one of `worker_ids`, with the index of
/// that worker.
///
/// Runs at the end of every worker, so it reads as little as it can: the `/proc` listing, then
/// only the environments the last scan did not read ([`Seen`]), each with one `open`, one
/// `read` and one `close` (`read_to_end` would add an `fstat`, an `lseek` and a read that
/// confirms the end) into one buffer for every file.
fn scan(me: u32, worker_ids: &[&str], read: Reading, buf: &mut Vec<u8>) -> Vec<(i32, usize)> {
    let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    let listed_at = Instant::now();
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut before = match seen.take() {
        Some(last) if read == Reading::Unseen && last.at.elapsed() < SEEN_FOR => last.by_pid,
        _ => HashMap::new(),
    };
    let wanted: HashMap<&[u8], usize> = worker_ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_bytes(), i))
        .collect();
    let mut found = Vec::new();
    let mut now = HashMap::with_capacity(before.len() + 16);
    let mut path = String::with_capacity(32);
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let ino = entry.ino();
        let (cookies, remember) = match before.remove(&pid) {
            Some((was, cookies)) if was == ino => (cookies, true),
            _ => match read_cookies(pid, &mut path, buf) {
                Some(read) => read,
                None => continue,
            },
        };
        if let Some(which) = cookies.iter().find_map(|c| wanted.get(&**c))
            && let Ok(pid) = i32::try_from(pid)
        {
            found.push((pid, *which));
        }
        if remember {
            now.insert(pid, (ino, cookies));
        }
    }
    *seen = Some(Seen {
        at: listed_at,
        by_pid: now,
    });
    found
}

/// The cookies in `/proc/<pid>/environ`, and whether a later scan may trust them; `None` when
/// the process is gone or its environment reads empty, as it does for a moment in the middle of
/// `exec` (it is read again by the next scan). Not to be trusted later: an environment that is
/// this process's own, as a child of this one reads until its `exec` gives it the cookie.
/// Remembered with none: a process without memory (`ESRCH`: a kernel thread, a zombie; neither
/// ever gets an environment again) and one this process may not read (not ours to kill).
fn read_cookies(pid: u32, path: &mut String, buf: &mut Vec<u8>) -> Option<(Cookies, bool)> {
    path.clear();
    let _ = write!(path, "/proc/{pid}/environ");
    let mut file = match fs::File::open(&*path) {
        Ok(file) => file,
        Err(e)
            if e.kind() == io::ErrorKind::PermissionDenied
                || e.raw_os_error() == Some(Errno::ESRCH as i32) =>
        {
            return Some((Box::default(), true));
        }
        Err(_) => return None,
    };
    let len = read_environ(&mut file, buf).ok().filter(|&len| len > 0)?;
    let environ = &buf[..len];
    let remember = OWN_ENVIRON.as_deref() != Some(environ);
    Some((cookies(environ).map(Box::from).collect(), remember))
}

/// This process's environment as `/proc` shows it (the block it was started with), which its
/// children show too until they `exec`.
static OWN_ENVIRON: LazyLock<Option<Vec<u8>>> =
    LazyLock::new(|| fs::read("/proc/self/environ").ok());

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

/// Every value of the cookie variable in a NUL-separated `environ` block: a process that adds
/// a second one in front of its own (which `getenv` would read) is still found by its own.
fn cookies(environ: &[u8]) -> impl Iterator<Item = &[u8]> {
    environ
        .split(|b| *b == 0)
        .filter_map(|var| var.strip_prefix(COOKIE.as_bytes())?.strip_prefix(b"="))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_read_whole_and_only_from_its_own_variable() {
        let first = |env: &'static [u8]| cookies(env).next();
        let env = b"PATH=/bin\0AGENTRY_WORKER_COOKIE=wkr_1\0HOME=/root";
        assert_eq!(first(env), Some(&b"wkr_1"[..]));
        assert_eq!(first(b"X_AGENTRY_WORKER_COOKIE=wkr_1\0"), None);
        assert_eq!(first(b"AGENTRY_WORKER_COOKIEX=wkr_1\0"), None);
        // The last variable may lack its NUL.
        assert_eq!(
            first(b"A=b\0AGENTRY_WORKER_COOKIE=wkr_2"),
            Some(&b"wkr_2"[..])
        );
        assert_eq!(first(b""), None);
        // A cookie added in front does not hide the inherited one.
        let twice = b"AGENTRY_WORKER_COOKIE=decoy\0AGENTRY_WORKER_COOKIE=wkr_3\0";
        assert_eq!(
            cookies(twice).collect::<Vec<_>>(),
            [&b"decoy"[..], &b"wkr_3"[..]]
        );
    }

    #[tokio::test]
    async fn queued_and_inline_sweeps_each_get_their_own_count() {
        let spawn = |id: &str| {
            std::process::Command::new("setsid")
                .args(["sleep", "30"])
                .env(COOKIE, id)
                .spawn()
                .expect("setsid and sleep exist")
        };
        let (a, b, none) = (
            "wkr_sweeptest0000000000000000000002",
            "wkr_sweeptest0000000000000000000003",
            "wkr_sweeptest0000000000000000000004",
        );
        let mut children = [spawn(a), spawn(a), spawn(b)];
        std::thread::sleep(std::time::Duration::from_millis(100));
        // Two go through the sweeper thread, as when other sweeps are under way; the third
        // goes where the count of sweeps under way sends it. Each gets its own count.
        ACTIVE.fetch_add(2, Ordering::AcqRel);
        let answers = [queue(a), queue(b), after_exit(none, None)];
        let mut counts = Vec::new();
        for rx in answers {
            counts.push(rx.await.unwrap());
        }
        assert_eq!(counts, [2, 1, 0]);
        for c in &mut children {
            assert!(!c.wait().unwrap().success());
        }
    }

    #[test]
    fn a_scan_finds_processes_it_had_read_before_and_ones_started_since() {
        let (id, other) = (
            "wkr_sweeptest0000000000000000000005",
            "wkr_sweeptest0000000000000000000006",
        );
        let spawn = || {
            std::process::Command::new("setsid")
                .args(["sleep", "30"])
                .env(COOKIE, id)
                .spawn()
                .expect("setsid and sleep exist")
        };
        let mut before = spawn();
        std::thread::sleep(std::time::Duration::from_millis(100));
        // A scan reads the first one's environment (exec'd by now) and remembers it.
        assert_eq!(kill_marked(&[other]), 0);
        let mut since = spawn();
        std::thread::sleep(std::time::Duration::from_millis(100));
        // The next finds the first from what it remembers, the second by reading it. (Had a
        // scan of a test running beside this one read either before its exec, it would have
        // read this process's environment, which no scan remembers.)
        assert_eq!(kill_marked(&[id]), 2);
        for child in [&mut before, &mut since] {
            assert!(!child.wait().unwrap().success());
        }
        assert_eq!(kill_marked(&[id]), 0, "nothing left to kill");
    }

    #[test]
    fn a_child_read_before_the_exec_that_gives_it_the_cookie_is_found_after_it() {
        let (id, other) = (
            "wkr_sweeptest0000000000000000000007",
            "wkr_sweeptest0000000000000000000008",
        );
        // As a worker's leader does: this process's environment (passed on unchanged) until
        // an `exec` adds the cookie, in the same process.
        let mut child = std::process::Command::new("sh")
            .args(["-c", &format!("sleep 1; exec env {COOKIE}={id} sleep 30")])
            .spawn()
            .expect("sh, env and sleep exist");
        std::thread::sleep(std::time::Duration::from_millis(300));
        // This scan reads the shell before its exec: this process's own environment, which is
        // not remembered.
        assert_eq!(kill_marked(&[other]), 0);
        std::thread::sleep(std::time::Duration::from_millis(1200));
        assert_eq!(kill_marked(&[id]), 1, "the shell, exec'd with the cookie");
        assert!(!child.wait().unwrap().success());
    }

    #[test]
    fn the_last_pid_is_the_leader_only_until_something_else_is_created() {
        // Other tests start processes and threads beside this one, so a lone `true` is seen
        // as the last one created in one of many tries, not in each.
        let seen_alone = (0..500).any(|_| {
            let mut child = std::process::Command::new("true")
                .spawn()
                .expect("true exists");
            child.wait().unwrap();
            last_created_was(child.id())
        });
        assert!(seen_alone, "{LAST_PID} never named a process just reaped");
        // A leader that started a process of its own is never the last one created.
        for _ in 0..20 {
            let mut child = std::process::Command::new("sh")
                .args(["-c", "true & wait"])
                .spawn()
                .expect("sh exists");
            child.wait().unwrap();
            assert!(!last_created_was(child.id()));
        }
        assert!(!last_created_was(0));
    }

    #[tokio::test]
    async fn a_leader_that_started_nothing_is_not_scanned_for() {
        let id = "wkr_sweeptest0000000000000000000010";
        // A decoy carries the cookie but was started before the leader, so it is no
        // descendant of it: a scan finds and kills it, while a skipped scan leaves it alone.
        // Other tests create processes beside this one, so the skip shows in one of many tries.
        let mut skipped = false;
        for _ in 0..200 {
            let mut decoy = std::process::Command::new("setsid")
                .args(["sleep", "30"])
                .env(COOKIE, id)
                .spawn()
                .expect("setsid and sleep exist");
            std::thread::sleep(std::time::Duration::from_millis(20));
            let mut leader = std::process::Command::new("true")
                .spawn()
                .expect("true exists");
            leader.wait().unwrap();
            let killed = after_exit(id, Some(leader.id())).await.unwrap();
            if killed == 0 {
                decoy.kill().unwrap();
            }
            decoy.wait().unwrap();
            if killed == 0 {
                skipped = true;
                break;
            }
        }
        assert!(
            skipped,
            "every exit of a leader that started nothing was scanned for"
        );
    }

    #[tokio::test]
    async fn a_leader_that_started_a_process_is_swept_after_it() {
        let id = "wkr_sweeptest0000000000000000000009";
        // The leader leaves a process of its own behind in a new session, then exits.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 30 & sleep 0.2"])
            .env(COOKIE, id)
            .spawn()
            .expect("sh, setsid and sleep exist");
        let leader = child.id();
        child.wait().unwrap();
        assert_eq!(after_exit(id, Some(leader)).await.unwrap(), 1);
        // It is not our child, so nothing here waits for it to be gone; once it has died, a
        // scan no longer finds it.
        let gone = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            kill_each(&[id], Reading::All) == [0]
        });
        assert!(gone, "the swept process did not die");
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

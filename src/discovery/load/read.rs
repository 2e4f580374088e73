//! Reading one definition file, bounded (docs §2.4 `too_large`), into a per-thread buffer.

use std::{
    fs::{FileType, Metadata},
    io::Read,
    os::unix::fs::{FileTypeExt, OpenOptionsExt},
    path::Path,
};

use crate::persona::{Diagnostic, MAX_FILE_BYTES, Severity};

/// Runs `f` with this thread's read buffer: files are read into it and parsed from it, so a
/// build allocates no buffer per file. A buffer grown past 64 KiB by a large file is let go.
pub(super) fn with_read_buffer<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    thread_local! {
        static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUFFER.with_borrow_mut(|buf| {
        let out = f(buf);
        buf.clear();
        if buf.capacity() > 64 << 10 {
            *buf = Vec::new();
        }
        out
    })
}

/// Reads a file's bytes, at most [`MAX_FILE_BYTES`], into `bytes` (emptied first) and returns
/// its metadata as seen on the open descriptor before reading; `Err` is the diagnostic that
/// says why not, naming the file as `shown` (formatted only on that path).
pub(in crate::discovery) fn read_bounded(
    path: &Path,
    shown: &(impl std::fmt::Display + ?Sized),
    bytes: &mut Vec<u8>,
) -> Result<Metadata, Diagnostic> {
    bytes.clear();
    let fail = |severity, code: &'static str, message: String| Diagnostic {
        path: shown.to_string(),
        line: None,
        severity,
        code,
        message,
    };
    let error = |code, message| fail(Severity::Error, code, message);
    // O_NONBLOCK: a FIFO that appears between listing and opening must not block discovery;
    // for a regular file the flag changes nothing. The type is checked on the open descriptor.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(|e| error("unreadable", format!("cannot open: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| error("unreadable", format!("cannot stat: {e}")))?;
    if !meta.is_file() {
        return Err(fail(
            Severity::Warning,
            "not_a_file",
            format!(
                "{} is {}, not a file; skipped",
                shown,
                what(meta.file_type())
            ),
        ));
    }
    let len = meta.len();
    if len > MAX_FILE_BYTES {
        return Err(error(
            "too_large",
            format!("file is {len} bytes; definition files are limited to {MAX_FILE_BYTES} bytes"),
        ));
    }
    let read = read_sized(&mut file, usize::try_from(len).unwrap_or(usize::MAX), bytes)
        .map_err(|e| error("unreadable", format!("cannot read: {e}")))?;
    if read as u64 > MAX_FILE_BYTES {
        return Err(error(
            "too_large",
            format!("file grew past the {MAX_FILE_BYTES}-byte limit while being read"),
        ));
    }
    Ok(meta)
}

/// Reads `file`, a regular file that `fstat` said holds `len` bytes, into `bytes` (emptied),
/// at most [`MAX_FILE_BYTES`] + 1 bytes, and returns how many were read. The buffer is sized
/// from `len` plus one byte, so a file that has not changed is read by one call that comes back
/// one byte short: having read the size `fstat` reported, that short read is its end, and no
/// second call is made to see end-of-file (discovery reads thousands of files, and the floor it
/// is measured against makes that second call). Any other short read, or a file that grew, is
/// read on until a read returns nothing or the bound is passed.
pub(super) fn read_sized(
    file: &mut impl Read,
    len: usize,
    bytes: &mut Vec<u8>,
) -> std::io::Result<usize> {
    const BOUND: usize = MAX_FILE_BYTES as usize + 1;
    bytes.clear();
    bytes.resize(len.saturating_add(1).min(BOUND), 0);
    let mut filled = 0;
    loop {
        if filled == bytes.len() {
            if filled >= BOUND {
                break;
            }
            // Larger than `fstat` said: it grew since. Read on, within the bound.
            bytes.resize(filled.saturating_mul(2).clamp(4096, BOUND), 0);
        }
        match file.read(&mut bytes[filled..]) {
            Ok(0) => break,
            Ok(n) => {
                filled += n;
                if filled == len && filled < bytes.len() {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(filled);
    Ok(filled)
}

/// What a non-regular entry is, for the `not_a_file` message.
pub(super) fn what(t: FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

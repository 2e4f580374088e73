//! Reads directories (docs §3.2, §2.5, §3.6) and parses their files in parallel:
//! * [`walk`] lists a directory (top level or recursive) into the files to read;
//! * [`parse`] reads and parses them, personas and commands, in parallel and in order;
//! * [`cache`] holds what successive builds share: listings by directory and parsed files by
//!   path, each trusted again only while its stamps say nothing changed;
//! * [`read`] reads one file within its bound.

mod cache;
mod parse;
mod read;
mod walk;

use std::{os::unix::ffi::OsStrExt, path::Path};

pub use cache::ParseCache;
pub use parse::{LoadedCommand, ParsedAgent, ParsedCommand, parse_all, parse_commands};
pub(super) use read::read_bounded;
pub use walk::{ListCache, list};

/// A path as people see it: UTF-8 as is, every byte that is not valid UTF-8 escaped as `\xNN`
/// (never U+FFFD, which would make two different names look the same).
pub fn shown(p: &Path) -> String {
    let mut out = String::new();
    for chunk in p.as_os_str().as_bytes().utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::{
        io::Read,
        sync::Arc,
        time::{Duration, UNIX_EPOCH},
    };

    use sha2::{Digest, Sha256};

    use super::super::sources::SourceDir;
    use super::cache::{SETTLE, Stamp, sha_hex};
    use super::read::read_sized;
    use super::walk::Found;
    use super::*;
    use crate::persona::MAX_FILE_BYTES;

    #[test]
    fn a_listing_is_reused_only_while_no_directory_it_read_changed() {
        use super::super::SourceKind;
        let root = tempfile::tempdir().unwrap();
        let tree = root.path().join("tree");
        std::fs::create_dir_all(tree.join("team/area")).unwrap();
        std::fs::write(tree.join("team/area/one.md"), "x").unwrap();
        let dirs = [SourceDir {
            kind: SourceKind::Dir,
            family: String::new(),
            path: tree.clone(),
            recursive: true,
            toml: false,
            skills: false,
        }];
        let names =
            |found: &Found| -> Vec<String> { found.files().iter().map(|f| shown(f.rel)).collect() };
        let cache = ListCache::new(100);
        // Too fresh to be trusted: listed again every time.
        let fresh = list(&dirs, &mut Vec::new(), &cache);
        assert!(fresh.listings[0].dirs.is_none());
        std::thread::sleep(SETTLE + Duration::from_millis(100));
        let first = list(&dirs, &mut Vec::new(), &cache);
        assert!(first.listings[0].dirs.is_some());
        let again = list(&dirs, &mut Vec::new(), &cache);
        assert!(Arc::ptr_eq(&first.listings[0], &again.listings[0]));
        // A file added two levels down changes that directory's stamp.
        std::fs::write(tree.join("team/area/two.md"), "x").unwrap();
        let added = list(&dirs, &mut Vec::new(), &cache);
        assert_eq!(names(&added), ["team/area/one.md", "team/area/two.md"]);
        std::fs::remove_file(tree.join("team/area/one.md")).unwrap();
        assert_eq!(
            names(&list(&dirs, &mut Vec::new(), &cache)),
            ["team/area/two.md"]
        );
        // A symlink's target can change while no directory does: never trusted.
        std::os::unix::fs::symlink(tree.join("team/area"), tree.join("team/link")).unwrap();
        let linked = list(&dirs, &mut Vec::new(), &cache);
        assert!(linked.listings[0].dirs.is_none());
        assert_eq!(names(&linked), ["team/area/two.md"]);
    }

    /// Serves `data` at most `chunk` bytes per call, counting the calls.
    struct Chunked<'a> {
        data: &'a [u8],
        chunk: usize,
        calls: usize,
    }

    impl Read for Chunked<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.calls += 1;
            let n = buf.len().min(self.chunk).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_file_of_the_size_fstat_said_is_read_by_one_call_and_any_other_whole() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let mut bytes = b"left over".to_vec();
        let mut read = |data: &[u8], chunk: usize, len: usize| {
            let mut r = Chunked {
                data,
                chunk,
                calls: 0,
            };
            let n = read_sized(&mut r, len, &mut bytes).unwrap();
            assert_eq!(n, bytes.len());
            (bytes.clone(), r.calls)
        };
        // Unchanged since fstat: one call, one byte short of the buffer.
        assert_eq!(
            read(&data[..2000], usize::MAX, 2000),
            (data[..2000].to_vec(), 1)
        );
        assert_eq!(read(&[], usize::MAX, 0), (Vec::new(), 1));
        // Short reads before the end are read on; the end is the size fstat said.
        assert_eq!(read(&data[..100], 7, 100), (data[..100].to_vec(), 15));
        // Grown since fstat: read on to the end.
        assert_eq!(read(&data, usize::MAX, 10).0, data);
        // Shrunk since fstat: read until a call returns nothing.
        assert_eq!(read(&data[..50], usize::MAX, 100), (data[..50].to_vec(), 2));

        // A file past the bound is read only one byte past it, for the caller to refuse.
        let big = vec![b'x'; MAX_FILE_BYTES as usize + 10];
        let mut r = Chunked {
            data: &big,
            chunk: usize::MAX,
            calls: 0,
        };
        let n = read_sized(&mut r, 10, &mut bytes).unwrap();
        assert_eq!(n as u64, MAX_FILE_BYTES + 1);
    }

    #[test]
    fn sha_hex_is_lowercase_hex_of_sha256() {
        for bytes in [&b""[..], b"abc", &[0xff; 300]] {
            assert_eq!(sha_hex(bytes), hex::encode(Sha256::digest(bytes)));
        }
    }

    #[test]
    fn shown_escapes_bytes_that_are_not_utf8() {
        use std::ffi::OsStr;
        let p = Path::new(OsStr::from_bytes(b"/a/\xffb\xc3.md"));
        assert_eq!(shown(p), "/a/\\xffb\\xc3.md");
        assert_eq!(shown(Path::new("/ü/x.md")), "/ü/x.md");
    }

    #[test]
    fn a_stamp_is_trusted_only_once_the_file_has_settled() {
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let stamp = |mtime: i128, ctime: i128| Stamp {
            dev: 1,
            ino: 2,
            len: 3,
            mtime_ns: mtime * 1_000_000_000,
            ctime_ns: ctime * 1_000_000_000,
        };
        assert!(stamp(100, 100).settled(at(103)));
        assert!(!stamp(100, 100).settled(at(101)));
        // A modification time set into the future does not make a fresh file look old.
        assert!(!stamp(200, 100).settled(at(103)));
        assert!(!stamp(100, 102).settled(at(103)));
    }
}

//! The memory tools of a worker whose persona has `memory` (docs/model.md §11.11): list, read
//! and write files in the agent's memory directory, and nowhere else. A path is relative to the
//! directory; an absolute path or a `..` is refused, and no symlink is followed anywhere on the
//! way (the directory's own path included), so the directory handed to the worker is the only
//! place these tools touch. Only regular files are read or written, never a FIFO or a device.

use std::path::{Component, Path};

use serde_json::{Value, json};

use crate::confine::{ConfineError, Confined};

/// Lists the memory directory.
pub const LIST: &str = "memory_list";
/// Reads one file of it.
pub const READ: &str = "memory_read";
/// Writes (or appends to) one file of it.
pub const WRITE: &str = "memory_write";

/// Largest file `memory_read` returns, and largest `content` `memory_write` takes.
pub const MAX_FILE_BYTES: usize = 256 * 1024;
/// Most entries `memory_list` names.
pub const MAX_ENTRIES: usize = 1000;

/// The definitions offered: all three, or only the reading ones for a read-only worker.
pub fn definitions(read_only: bool) -> Vec<Value> {
    let path = json!({"type": "string", "description": "A path relative to your memory directory, e.g. MEMORY.md or notes/topic.md."});
    let mut defs = vec![
        json!({"type": "function", "function": {
            "name": LIST,
            "description": "List the files in your memory directory, with their sizes.",
            "parameters": {"type": "object", "properties": {}},
        }}),
        json!({"type": "function", "function": {
            "name": READ,
            "description": "Read a file of your memory directory (what earlier runs of this agent wrote).",
            "parameters": {"type": "object", "properties": {"path": path}, "required": ["path"]},
        }}),
    ];
    if !read_only {
        defs.push(json!({"type": "function", "function": {
            "name": WRITE,
            "description": "Write a file of your memory directory, for later runs of this agent. Keep MEMORY.md a short index: its first 200 lines are shown to every run.",
            "parameters": {"type": "object", "properties": {
                "path": path,
                "content": {"type": "string", "description": "The text to write."},
                "append": {"type": "boolean", "description": "Add to the end instead of replacing the file."},
            }, "required": ["path", "content"]},
        }}));
    }
    defs
}

/// Runs memory tool `tool` with `args` in `dir` (an absolute path without symlinks, as
/// admission made it): the text for the model, or why it is refused. Every path is walked from
/// `/` without following a symlink ([`crate::confine`]), on the blocking pool.
pub async fn call(dir: &Path, tool: &str, args: Option<&Value>) -> Result<String, String> {
    let field = |k: &str| args.and_then(|a| a.get(k));
    let text = |k: &str| -> Result<String, String> {
        field(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("{tool} needs \"{k}\" (a string)."))
    };
    let op = match tool {
        LIST => Op::List,
        READ => Op::Read(text("path")?),
        WRITE => {
            let (path, content) = (text("path")?, text("content")?);
            if content.len() > MAX_FILE_BYTES {
                return Err(format!(
                    "content is {} bytes, over the {MAX_FILE_BYTES} bytes a memory file may have.",
                    content.len()
                ));
            }
            let append = field("append").and_then(Value::as_bool).unwrap_or(false);
            Op::Write {
                path,
                content,
                append,
            }
        }
        other => return Err(format!("{other} is not a memory tool.")),
    };
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || op.run(&dir))
        .await
        .map_err(|e| format!("the memory tool did not finish: {e}."))?
}

/// One memory tool call, run on the blocking pool.
enum Op {
    List,
    Read(String),
    Write {
        path: String,
        content: String,
        append: bool,
    },
}

impl Op {
    fn run(self, dir: &Path) -> Result<String, String> {
        let root = open_dir(dir)?;
        match self {
            Op::List => {
                let (files, more) = root.list(MAX_ENTRIES);
                let mut out: Vec<String> = files
                    .iter()
                    .map(|(p, n)| format!("{p} ({n} bytes)"))
                    .collect();
                if out.is_empty() {
                    out.push("(empty: nothing remembered yet)".to_owned());
                }
                if more > 0 {
                    out.push(format!("… and {more} more"));
                }
                Ok(out.join("\n"))
            }
            Op::Read(rel) => {
                let bytes = root
                    .read(inside(&rel)?, MAX_FILE_BYTES)
                    .map_err(|e| refused(&rel, "read", e))?;
                String::from_utf8(bytes).map_err(|_| format!("{rel} is not UTF-8 text."))
            }
            Op::Write {
                path,
                content,
                append,
            } => {
                let shown = root
                    .write(inside(&path)?, content.as_bytes(), append)
                    .map_err(|e| refused(&path, "write", e))?;
                Ok(format!(
                    "{} {} bytes to {shown}.",
                    if append { "appended" } else { "wrote" },
                    content.len()
                ))
            }
        }
    }
}

/// The memory directory, opened from `/` without following a symlink (it has none: admission
/// built it from a canonical base).
pub fn open_dir(dir: &Path) -> Result<Confined, String> {
    let rel = dir.strip_prefix("/").map_err(|_| {
        format!(
            "the memory directory {} is not an absolute path.",
            dir.display()
        )
    })?;
    Confined::open(Path::new("/"), rel, false).map_err(|e| {
        format!(
            "the memory directory {} cannot be used: {e}.",
            dir.display()
        )
    })
}

/// `rel` as a path of plain components, or the refusal for the model.
fn inside(rel: &str) -> Result<&Path, String> {
    let p = Path::new(rel);
    let plain = !rel.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        && p.file_name().is_some();
    if !plain {
        return Err(format!(
            "{rel:?} is not a path inside your memory directory: give a relative path without `..`."
        ));
    }
    Ok(p)
}

/// The model's text for a refused read or write.
fn refused(rel: &str, what: &str, e: ConfineError) -> String {
    match e {
        ConfineError::Symlink(_) => format!("{rel:?} leads out of your memory directory."),
        ConfineError::TooLarge(_, max) => {
            format!("{rel} is over the {max} bytes memory_read returns.")
        }
        e => format!("cannot {what} {rel}: {e}."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn files_are_read_and_written_only_inside_the_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("mem");
        std::fs::create_dir_all(&dir).unwrap();
        let w = |a: Value| {
            let dir = dir.clone();
            async move { call(&dir, WRITE, Some(&a)).await }
        };
        assert_eq!(
            w(json!({"path": "notes/a.md", "content": "one"}))
                .await
                .unwrap(),
            "wrote 3 bytes to notes/a.md."
        );
        w(json!({"path": "notes/a.md", "content": "+two", "append": true}))
            .await
            .unwrap();
        let r = call(&dir, READ, Some(&json!({"path": "./notes/a.md"}))).await;
        assert_eq!(r.unwrap(), "one+two");
        assert_eq!(
            call(&dir, LIST, None).await.unwrap(),
            "notes/a.md (7 bytes)"
        );
        for bad in ["../out.md", "/etc/passwd", "", "notes/..", "a/../../b"] {
            let e = w(json!({"path": bad, "content": "x"})).await.unwrap_err();
            assert!(e.contains("memory directory"), "{bad}: {e}");
        }
        // A symlink out of the directory, as a file or as a directory on the way: refused, and
        // nothing is created on the other side of it.
        std::os::unix::fs::symlink(root.path(), dir.join("up")).unwrap();
        std::os::unix::fs::symlink(root.path().join("x.md"), dir.join("x.md")).unwrap();
        for bad in ["up/escape.md", "x.md", "up/new/deeper/x.md"] {
            let e = w(json!({"path": bad, "content": "x"})).await.unwrap_err();
            assert!(
                e.ends_with("leads out of your memory directory."),
                "{bad}: {e}"
            );
        }
        assert!(!root.path().join("escape.md").exists() && !root.path().join("x.md").exists());
        assert!(!root.path().join("new").exists());
        // A FIFO is refused at once, never opened for a blocking read.
        nix::unistd::mkfifo(
            &dir.join("pipe.md"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let e = call(&dir, READ, Some(&json!({"path": "pipe.md"})))
            .await
            .unwrap_err();
        assert_eq!(e, "cannot read pipe.md: pipe.md is not a regular file.");
        // The directory itself reached through a symlink is refused too.
        let link = root.path().join("linked");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = call(&link, LIST, None).await.unwrap_err();
        assert!(e.contains("is a symlink"), "{e}");
        let e = call(&dir, READ, Some(&json!({}))).await.unwrap_err();
        assert_eq!(e, "memory_read needs \"path\" (a string).");
        assert_eq!(definitions(true).len(), 2);
    }
}

//! The memory tools of a worker whose persona has `memory` (docs/model.md §11.11): list, read
//! and write files in the agent's memory directory, and nowhere else. A path is relative to the
//! directory; an absolute path, a `..`, or a symlink that leads out of it is refused, so the
//! directory handed to the worker is the only place these tools touch.

use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};

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

/// Runs memory tool `tool` with `args` in `dir`: the text for the model, or why it is refused.
pub async fn call(dir: &Path, tool: &str, args: Option<&Value>) -> Result<String, String> {
    let field = |k: &str| args.and_then(|a| a.get(k));
    let text = |k: &str| -> Result<String, String> {
        field(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("{tool} needs \"{k}\" (a string)."))
    };
    let dir = tokio::fs::canonicalize(dir).await.map_err(|e| {
        format!(
            "the memory directory {} cannot be used: {e}.",
            dir.display()
        )
    })?;
    match tool {
        LIST => list(&dir).await,
        READ => {
            let path = inside(&dir, &text("path")?).await?;
            let bytes = tokio::fs::read(&path)
                .await
                .map_err(|e| format!("cannot read {}: {e}.", shown(&dir, &path)))?;
            if bytes.len() > MAX_FILE_BYTES {
                return Err(format!(
                    "{} is {} bytes, over the {MAX_FILE_BYTES} bytes memory_read returns.",
                    shown(&dir, &path),
                    bytes.len()
                ));
            }
            String::from_utf8(bytes)
                .map_err(|_| format!("{} is not UTF-8 text.", shown(&dir, &path)))
        }
        WRITE => {
            let (rel, content) = (text("path")?, text("content")?);
            if content.len() > MAX_FILE_BYTES {
                return Err(format!(
                    "content is {} bytes, over the {MAX_FILE_BYTES} bytes a memory file may have.",
                    content.len()
                ));
            }
            let append = field("append").and_then(Value::as_bool).unwrap_or(false);
            let path = inside(&dir, &rel).await?;
            let mut f = tokio::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .append(append)
                .truncate(!append)
                .open(&path)
                .await
                .map_err(|e| format!("cannot write {}: {e}.", shown(&dir, &path)))?;
            tokio::io::AsyncWriteExt::write_all(&mut f, content.as_bytes())
                .await
                .map_err(|e| format!("cannot write {}: {e}.", shown(&dir, &path)))?;
            Ok(format!(
                "{} {} bytes to {}.",
                if append { "appended" } else { "wrote" },
                content.len(),
                shown(&dir, &path)
            ))
        }
        other => Err(format!("{other} is not a memory tool.")),
    }
}

/// `rel` inside `dir` (canonical): a relative path of plain components whose directory,
/// created if missing, resolves inside `dir`, and which is not itself a symlink.
async fn inside(dir: &Path, rel: &str) -> Result<PathBuf, String> {
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
    let path = dir.join(p);
    let parent = path.parent().unwrap_or(dir).to_owned();
    tokio::fs::create_dir_all(&parent)
        .await
        .map_err(|e| format!("cannot make the directory of {rel}: {e}."))?;
    let real_parent = tokio::fs::canonicalize(&parent)
        .await
        .map_err(|e| format!("cannot resolve the directory of {rel}: {e}."))?;
    let is_link = tokio::fs::symlink_metadata(&path)
        .await
        .is_ok_and(|m| m.file_type().is_symlink());
    if !real_parent.starts_with(dir) || is_link {
        return Err(format!("{rel:?} leads out of your memory directory."));
    }
    Ok(path)
}

fn shown(dir: &Path, path: &Path) -> String {
    path.strip_prefix(dir).unwrap_or(path).display().to_string()
}

/// Every regular file under `dir`, `path (N bytes)` a line, in path order.
async fn list(dir: &Path) -> Result<String, String> {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut files = Vec::new();
        let mut pending = vec![dir.clone()];
        while let Some(d) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let Ok(kind) = e.file_type() else { continue };
                if kind.is_dir() {
                    pending.push(e.path());
                } else if kind.is_file() {
                    let size = e.metadata().map(|m| m.len()).unwrap_or(0);
                    files.push((shown(&dir, &e.path()), size));
                }
            }
        }
        files.sort();
        let more = files.len().saturating_sub(MAX_ENTRIES);
        let mut out: Vec<String> = files
            .iter()
            .take(MAX_ENTRIES)
            .map(|(p, n)| format!("{p} ({n} bytes)"))
            .collect();
        if out.is_empty() {
            out.push("(empty: nothing remembered yet)".to_owned());
        }
        if more > 0 {
            out.push(format!("… and {more} more"));
        }
        out.join("\n")
    })
    .await
    .map_err(|e| format!("cannot list the memory directory: {e}."))
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
        // A symlink out of the directory, as a file or as a directory on the way.
        std::os::unix::fs::symlink(root.path(), dir.join("up")).unwrap();
        std::os::unix::fs::symlink(root.path().join("x.md"), dir.join("x.md")).unwrap();
        for bad in ["up/escape.md", "x.md"] {
            let e = w(json!({"path": bad, "content": "x"})).await.unwrap_err();
            assert!(
                e.ends_with("leads out of your memory directory."),
                "{bad}: {e}"
            );
        }
        assert!(!root.path().join("escape.md").exists() && !root.path().join("x.md").exists());
        let e = call(&dir, READ, Some(&json!({}))).await.unwrap_err();
        assert_eq!(e, "memory_read needs \"path\" (a string).");
        assert_eq!(definitions(true).len(), 2);
    }
}

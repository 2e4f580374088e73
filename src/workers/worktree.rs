//! A git worktree per worker (`isolation: worktree`): created from the workspace's repository
//! before the worker runs, handed to it as its workspace, and removed when it ends with nothing
//! to keep — or kept, and reported, when it changed something.
//!
//! git is run as a program (`git -C <dir> …`), never through a shell; a failure carries the
//! command and the tail of git's stderr. Operations on one machine are serialised, so two workers
//! of the same repository never race on its worktree list.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use serde::{Deserialize, Serialize};

/// Where a worker's worktree branches from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Base {
    /// The workspace's current `HEAD` (the default).
    #[default]
    Head,
    /// The repository's default branch: `origin/HEAD`, else `main`, else `master`.
    DefaultBranch,
}

/// One worker's worktree, as recorded on its row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    /// The worktree directory.
    pub path: String,
    /// Its branch, `agentry/<worker_id>`.
    pub branch: String,
    /// The commit it was created from.
    pub base_commit: String,
    /// The repository's top-level directory.
    pub repo: String,
    /// The worker's workspace inside it (the caller's workspace, moved into the worktree).
    pub workspace: String,
    /// The caller's own workspace (part of the dispatch's identity, docs/workers.md §6.7).
    pub origin: String,
    /// Set when the worker ended: whether it left changes or commits (then it is kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<bool>,
}

/// Serialises git operations of this process.
static GIT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long one git command may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `git -C dir args…` and returns its trimmed stdout, or the error naming the command and
/// the tail of stderr.
async fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let run = tokio::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(GIT_TIMEOUT, run)
        .await
        .map_err(|_| {
            format!(
                "git {} timed out after {}s",
                args.join(" "),
                GIT_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = tail[tail.len().saturating_sub(3)..].join("; ");
    Err(format!(
        "git {} failed ({}): {tail}",
        args.join(" "),
        out.status
    ))
}

/// Creates the worktree of worker `id` for a caller in `workspace`, under `root`.
pub async fn create(
    root: &Path,
    id: &str,
    workspace: &str,
    base: Base,
) -> Result<Worktree, String> {
    if workspace.is_empty() {
        return Err(
            "isolation: worktree needs a workspace (the directory of a git repository)".to_owned(),
        );
    }
    let ws = Path::new(workspace);
    let _one = GIT.lock().await;
    let repo = git(ws, &["rev-parse", "--show-toplevel"])
        .await
        .map_err(|e| format!("workspace {workspace} is not in a git repository: {e}"))?;
    let repo_path = PathBuf::from(&repo);
    let base_ref = match base {
        Base::Head => "HEAD".to_owned(),
        Base::DefaultBranch => default_branch(&repo_path).await?,
    };
    let base_commit = git(
        &repo_path,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{base_ref}^{{commit}}"),
        ],
    )
    .await
    .map_err(|_| {
        format!("repository {repo} has no commit at {base_ref} to branch a worktree from")
    })?;
    std::fs::create_dir_all(root).map_err(|e| {
        format!(
            "cannot create the worktrees directory {}: {e}",
            root.display()
        )
    })?;
    let path = root.join(id);
    let branch = format!("agentry/{id}");
    let path_text = path.display().to_string();
    git(
        &repo_path,
        &[
            "worktree",
            "add",
            "--quiet",
            "-b",
            &branch,
            &path_text,
            &base_commit,
        ],
    )
    .await?;
    // The caller's workspace, at the same place inside the worktree.
    let canonical_ws = std::fs::canonicalize(ws).unwrap_or_else(|_| ws.to_owned());
    let inside = canonical_ws
        .strip_prefix(std::fs::canonicalize(&repo_path).unwrap_or(repo_path.clone()))
        .map(Path::to_owned)
        .unwrap_or_default();
    let moved = if inside.as_os_str().is_empty() {
        path.clone()
    } else {
        path.join(inside)
    };
    Ok(Worktree {
        workspace: moved.display().to_string(),
        origin: workspace.to_owned(),
        path: path_text,
        branch,
        base_commit,
        repo,
        changed: None,
    })
}

async fn default_branch(repo: &Path) -> Result<String, String> {
    if let Ok(r) = git(
        repo,
        &["symbolic-ref", "--quiet", "refs/remotes/origin/HEAD"],
    )
    .await
    {
        return Ok(r);
    }
    for b in ["main", "master"] {
        if git(
            repo,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{b}"),
            ],
        )
        .await
        .is_ok()
        {
            return Ok(b.to_owned());
        }
    }
    Err(format!(
        "repository {} has no default branch (no origin/HEAD, main or master)",
        repo.display()
    ))
}

/// The caller's workspace of a worker whose row records a worktree (JSON text).
pub fn origin(recorded: Option<&str>) -> Option<String> {
    serde_json::from_str::<Worktree>(recorded?)
        .ok()
        .map(|w| w.origin)
}

/// Ends a worker's worktree: removed with its branch when it holds no change and no new commit,
/// else kept. Returns the record with `changed` set; a git failure keeps the worktree (nothing
/// is ever deleted that might hold work) and is logged.
pub async fn finish(mut w: Worktree) -> Worktree {
    let _one = GIT.lock().await;
    let path = PathBuf::from(&w.path);
    let repo = PathBuf::from(&w.repo);
    if !path.exists() {
        w.changed = Some(false);
        return w;
    }
    let dirty = git(&path, &["status", "--porcelain", "--untracked-files=all"]).await;
    let commits = git(
        &repo,
        &[
            "rev-list",
            "--count",
            &format!("{}..{}", w.base_commit, w.branch),
        ],
    )
    .await;
    let changed = match (&dirty, &commits) {
        (Ok(d), Ok(c)) => !d.is_empty() || c != "0",
        _ => true,
    };
    w.changed = Some(changed);
    if changed {
        if let (Err(e), _) | (_, Err(e)) = (&dirty, &commits) {
            tracing::warn!(worktree = %w.path, error = %e, "cannot tell whether the worktree changed; it is kept");
        }
        return w;
    }
    if let Err(e) = remove(&repo, &w.path, &w.branch).await {
        tracing::warn!(worktree = %w.path, error = %e, "cannot remove the worktree");
    }
    w
}

async fn remove(repo: &Path, path: &str, branch: &str) -> Result<(), String> {
    git(repo, &["worktree", "remove", "--force", path]).await?;
    git(repo, &["branch", "-D", branch]).await.map(drop)
}

/// The worktrees under `root` last modified more than `older_than` ago: `(worker id, path)`,
/// in name order.
pub fn candidates(root: &Path, older_than: Duration) -> Vec<(String, std::path::PathBuf)> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let now = std::time::SystemTime::now();
    let mut out: Vec<(String, std::path::PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let id = entry.file_name().to_str()?.to_owned();
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).unwrap_or_default() >= older_than);
            (old && id.starts_with("wkr_")).then(|| (id, entry.path()))
        })
        .collect();
    out.sort();
    out
}

/// Removes the kept worktree of worker `id` at `path` with its branch `agentry/<id>`, found
/// through the repository it belongs to.
pub async fn remove_kept(id: &str, path: &Path) -> Result<(), String> {
    let _one = GIT.lock().await;
    let common = git(
        path,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )
    .await?;
    let repo = Path::new(&common)
        .parent()
        .map(Path::to_owned)
        .unwrap_or_default();
    remove(&repo, &path.display().to_string(), &format!("agentry/{id}")).await
}

/// Removes the kept worktrees under `root` last modified more than `older_than` ago, with their
/// branches; returns the paths removed and the failures. It does not know which workers still
/// run: the service's `PruneWorktrees` does, and skips theirs.
pub async fn prune(root: &Path, older_than: Duration) -> (Vec<String>, Vec<String>) {
    let (mut removed, mut failed) = (Vec::new(), Vec::new());
    for (id, path) in candidates(root, older_than) {
        match remove_kept(&id, &path).await {
            Ok(()) => removed.push(path.display().to_string()),
            Err(e) => failed.push(format!("{}: {e}", path.display())),
        }
    }
    (removed, failed)
}

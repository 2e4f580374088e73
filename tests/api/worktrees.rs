//! A git worktree per worker (`isolation: worktree`, docs/workers.md §6.10) through gRPC, with a
//! real git repository made by each test and the exec executor's real processes.

use std::{path::Path, process::Command};

use agentry::grpc::pb;
use tonic::Code;

use crate::{
    helpers::*,
    workers::{spawn, spawn_req, with_runtime},
};

/// `git args…` in `dir`, which must succeed.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A repository with one commit (`README.md`) and a subdirectory `src`.
pub(crate) fn repo(dir: &Path) -> std::path::PathBuf {
    let r = dir.join("repo");
    std::fs::create_dir_all(r.join("src")).unwrap();
    git(&r, &["init", "-q", "-b", "main"]);
    std::fs::write(r.join("README.md"), "hello\n").unwrap();
    std::fs::write(r.join("src/lib.rs"), "// lib\n").unwrap();
    git(&r, &["add", "."]);
    git(&r, &["commit", "-q", "-m", "first"]);
    r
}

fn isolated(agent: &str, prompt: &str, workspace: &Path) -> pb::SpawnWorkerRequest {
    pb::SpawnWorkerRequest {
        workspace: workspace.display().to_string(),
        isolation: pb::Isolation::Worktree as i32,
        ..spawn_req(agent, prompt, true)
    }
}

/// The runtime prints its working directory; a prompt `edit` also writes a file there.
const RUNTIME: &str = "pwd\nif grep -q '\"prompt\":\"edit' \"$OUT/$AGENTRY_WORKER_ID.json\"; then echo changed > NEW.txt; fi";

#[tokio::test]
async fn a_worker_runs_in_its_own_worktree_removed_when_clean_and_kept_when_changed() {
    let s = with_runtime(RUNTIME, |_| {}).await;
    let repo = repo(s.dir.path());
    let head = git(&repo, &["rev-parse", "HEAD"]);

    // Clean: it ran in the worktree (the caller's subdirectory, moved into it), which is gone.
    let w = spawn(&s, isolated("task", "look", &repo.join("src")))
        .await
        .unwrap()
        .worker
        .unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    let wt = w.worktree.clone().expect("the worktree is reported");
    assert_eq!(wt.branch, format!("agentry/{}", w.id));
    assert_eq!(wt.base_commit, head);
    assert!(!wt.changed);
    assert!(wt.path.ends_with(&format!("worktrees/{}", w.id)), "{wt:?}");
    assert_eq!(
        w.result.as_deref().map(str::trim),
        Some(format!("{}/src", wt.path).as_str())
    );
    assert_eq!(w.workspace, format!("{}/src", wt.path));
    assert!(!Path::new(&wt.path).exists(), "a clean worktree is removed");
    assert!(
        !git(&repo, &["branch", "--list", &wt.branch]).contains("agentry/"),
        "and its branch"
    );

    // Changed: kept, with its branch; the caller's checkout is untouched.
    let w = spawn(&s, isolated("task", "edit", &repo))
        .await
        .unwrap()
        .worker
        .unwrap();
    let wt = w.worktree.clone().unwrap();
    assert!(wt.changed, "{wt:?}");
    assert_eq!(
        std::fs::read_to_string(Path::new(&wt.path).join("NEW.txt")).unwrap(),
        "changed\n"
    );
    assert!(
        !repo.join("NEW.txt").exists(),
        "the caller's checkout is never touched"
    );
    assert!(git(&repo, &["branch", "--list", &wt.branch]).contains(&wt.branch));
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    // `agentry worktrees prune` removes kept ones older than the bound, with their branches.
    let config = s.dir.path().join("prune.yaml");
    let dir = Path::new(&wt.path).parent().unwrap();
    std::fs::write(
        &config,
        format!("workers: {{worktrees_dir: {}}}\n", dir.display()),
    )
    .unwrap();
    let prune = |older: &str| {
        Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args(["worktrees", "prune", "--older-than", older, "--config"])
            .arg(&config)
            .output()
            .unwrap()
    };
    let kept = prune("1h");
    assert!(kept.status.success());
    assert!(
        String::from_utf8_lossy(&kept.stdout).starts_with("0 worktrees removed"),
        "{kept:?}"
    );
    let out = prune("0s");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains(&format!("removed {}", wt.path)) && text.contains("1 worktrees removed"),
        "{text}"
    );
    assert!(!Path::new(&wt.path).exists());
    assert!(!git(&repo, &["branch", "--list", &wt.branch]).contains("agentry/"));
}

#[tokio::test]
async fn two_workers_of_one_repository_get_two_worktrees() {
    let s = with_runtime("pwd; sleep 1", |_| {}).await;
    let repo = repo(s.dir.path());
    let (a, b) = tokio::join!(
        spawn(&s, isolated("task", "one", &repo)),
        spawn(&s, isolated("task", "two", &repo)),
    );
    let (a, b) = (a.unwrap().worker.unwrap(), b.unwrap().worker.unwrap());
    assert_eq!(
        (a.state, b.state),
        (
            pb::WorkerState::Completed as i32,
            pb::WorkerState::Completed as i32
        )
    );
    assert_ne!(a.result, b.result);
    assert_eq!(
        git(&repo, &["worktree", "list"]).lines().count(),
        1,
        "both removed"
    );
}

#[tokio::test]
async fn the_persona_field_and_the_config_default_ask_for_a_worktree() {
    let s = with_runtime(RUNTIME, |c| {
        let agents = c.agent_dirs[0].path.clone();
        persona(
            &agents,
            "iso.md",
            "name: iso\ndescription: isolated\nisolation: worktree",
            "Iso.",
        );
    })
    .await;
    let repo = repo(s.dir.path());
    let w = spawn(
        &s,
        pb::SpawnWorkerRequest {
            workspace: repo.display().to_string(),
            ..spawn_req("iso", "look", true)
        },
    )
    .await
    .unwrap()
    .worker
    .unwrap();
    assert!(w.worktree.is_some(), "{w:?}");
    // The request can say no.
    let w = spawn(
        &s,
        pb::SpawnWorkerRequest {
            workspace: repo.display().to_string(),
            isolation: pb::Isolation::None as i32,
            ..spawn_req("iso", "look again", true)
        },
    )
    .await
    .unwrap()
    .worker
    .unwrap();
    assert!(w.worktree.is_none());
    assert_eq!(
        w.result.as_deref().map(str::trim),
        Some(repo.display().to_string().as_str())
    );
}

#[tokio::test]
async fn a_workspace_that_is_no_repository_or_has_no_commit_is_refused() {
    let s = with_runtime(RUNTIME, |_| {}).await;
    let plain = s.ws("plain");
    let e = spawn(&s, isolated("task", "x", &plain)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().starts_with(&format!(
            "workspace {} is not in a git repository: git rev-parse --show-toplevel failed",
            plain.display()
        )),
        "{}",
        e.message()
    );
    let empty = s.ws("empty");
    git(&empty, &["init", "-q"]);
    let e = spawn(&s, isolated("task", "x", &empty)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(
        e.message().contains("has no commit at HEAD"),
        "{}",
        e.message()
    );
    let e = spawn(
        &s,
        pb::SpawnWorkerRequest {
            isolation: pb::Isolation::Worktree as i32,
            ..spawn_req("task", "x", true)
        },
    )
    .await
    .unwrap_err();
    assert_eq!(
        e.message(),
        "isolation: worktree needs a workspace (the directory of a git repository)"
    );
    // Nothing was created.
    let listed = s
        .client
        .clone()
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert!(listed.is_empty());
}

/// `memory: project` (docs/personas.md §2.7): the directory is made in the workspace, named in the
/// prompt with its MEMORY.md, and handed to the worker.
#[tokio::test]
async fn a_persona_with_memory_gets_its_directory_and_notes() {
    let s = with_runtime("echo ok", |c| {
        let agents = c.agent_dirs[0].path.clone();
        persona(
            &agents,
            "keeper.md",
            "name: keeper\ndescription: remembers\nmemory: project",
            "Keep notes.",
        );
    })
    .await;
    let ws = s.ws("proj");
    let dir = ws.join(".claude/agent-memory/keeper");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("MEMORY.md"), "- the build needs protox\n").unwrap();
    let w = spawn(
        &s,
        pb::SpawnWorkerRequest {
            workspace: ws.display().to_string(),
            ..spawn_req("keeper", "go", true)
        },
    )
    .await
    .unwrap()
    .worker
    .unwrap();
    assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
    let out = crate::workers::out(&s);
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(format!("{}.json", w.id))).unwrap())
            .unwrap();
    // The stdin spec names the directory (as the runner spec's `memory_dir` does).
    assert_eq!(spec["memory_dir"].as_str(), Some(dir.to_str().unwrap()));
    let prompt = spec["agent"]["system_prompt"].as_str().unwrap();
    assert!(
        prompt.starts_with("Keep notes.\n\nYour persistent memory directory is "),
        "{prompt}"
    );
    assert!(
        prompt.ends_with("MEMORY.md:\n- the build needs protox"),
        "{prompt}"
    );
    let env = std::fs::read_to_string(out.join(format!("{}.env", w.id))).unwrap();
    assert!(
        env.contains(&format!("AGENTRY_MEMORY_DIR={}", dir.display())),
        "{env}"
    );
    // Without a workspace a project memory has nowhere to live.
    let e = spawn(&s, spawn_req("keeper", "again", true))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(
        e.message(),
        "agent keeper: memory: project needs a workspace (its memory lives in the project)"
    );
}

/// `PruneWorktrees` (docs/workers.md §6.10): the kept worktree of a finished worker goes with its
/// branch, a running worker's stays (`kept_live`) whatever its age; the bound is required; with
/// authentication on, only an operator may call it.
#[tokio::test]
async fn prune_worktrees_removes_finished_workers_kept_worktrees_and_never_a_live_one() {
    const HOLDING: &str = "pwd\nif grep -q '\"prompt\":\"edit' \"$OUT/$AGENTRY_WORKER_ID.json\"; then echo changed > NEW.txt; fi\nif grep -q '\"prompt\":\"hold' \"$OUT/$AGENTRY_WORKER_ID.json\"; then echo held > HELD.txt; exec sleep 60; fi";
    let s = with_runtime(HOLDING, |_| {}).await;
    let repo = repo(s.dir.path());
    let kept = spawn(&s, isolated("task", "edit it", &repo))
        .await
        .unwrap()
        .worker
        .unwrap();
    let kept_wt = kept.worktree.clone().unwrap();
    assert!(
        kept_wt.changed && Path::new(&kept_wt.path).exists(),
        "{kept_wt:?}"
    );
    let live = spawn(
        &s,
        pb::SpawnWorkerRequest {
            wait: false,
            ..isolated("task", "hold on", &repo)
        },
    )
    .await
    .unwrap()
    .worker
    .unwrap();
    crate::workers::wait_state(&s, &live.id, pb::WorkerState::Running).await;
    let live_path = s
        .dir
        .path()
        .join("state/worktrees")
        .join(&live.id)
        .display()
        .to_string();
    eventually(
        "the live worker wrote into its worktree",
        std::time::Duration::from_secs(10),
        || {
            let p = Path::new(&live_path).join("HELD.txt");
            async move { p.exists().then_some(()) }
        },
    )
    .await;

    let prune = |older_than: Option<prost_types::Duration>| {
        let mut c = s.client.clone();
        async move {
            c.prune_worktrees(pb::PruneWorktreesRequest { older_than })
                .await
                .map(|r| r.into_inner())
        }
    };
    let e = prune(None).await.unwrap_err();
    assert_status(
        &e,
        Code::InvalidArgument,
        "INVALID_REQUEST",
        "invalid request: older_than: is required (0s prunes every finished worker's)",
    );
    // An hour: nothing is that old.
    let hour = prune(Some(prost_types::Duration {
        seconds: 3600,
        nanos: 0,
    }))
    .await
    .unwrap();
    assert!(
        hour.removed.is_empty() && hour.kept_live.is_empty(),
        "{hour:?}"
    );

    let zero = Some(prost_types::Duration::default());
    let r = prune(zero).await.unwrap();
    assert_eq!(r.removed, [kept_wt.path.as_str()]);
    assert_eq!(r.kept_live, [live_path.as_str()]);
    assert!(r.failed.is_empty(), "{r:?}");
    assert!(!Path::new(&kept_wt.path).exists());
    let branches = git(&repo, &["branch", "--list", "agentry/*"]);
    assert!(!branches.contains(&kept.id), "{branches}");
    assert!(branches.contains(&live.id), "{branches}");
    assert!(
        Path::new(&live_path).join("HELD.txt").exists(),
        "the live worktree is untouched"
    );

    // Once stopped, it is kept (it has changes) and the next prune removes it.
    stop_worker(&s, &live.id, "done").await;
    let r = prune(zero).await.unwrap();
    assert_eq!(r.removed, [live_path.as_str()], "{r:?}");
    assert!(git(&repo, &["branch", "--list", "agentry/*"]).is_empty());

    // With authentication on, an operator's call.
    let authed = start_with(|c| {
        tokens_file(c, "alice-secret: alice\nops-secret: ops\n");
        c.auth.operators = vec!["ops".into()];
    })
    .await;
    let call = |token: &'static str| {
        let mut c = authed.client.clone();
        async move {
            c.prune_worktrees(req(
                pb::PruneWorktreesRequest { older_than: zero },
                &[("authorization", token)],
            ))
            .await
        }
    };
    let e = call("Bearer alice-secret").await.unwrap_err();
    assert_status(
        &e,
        Code::PermissionDenied,
        "OPERATORS_ONLY",
        "PruneWorktrees is for operators (auth.operators); principal \"alice\" is not one",
    );
    call("Bearer ops-secret").await.unwrap();
}

/// issue 40: a worktree is made before its worker's row; `PruneWorktrees` racing the spawn must
/// not take it for a leftover and remove it while `git worktree add` runs.
#[tokio::test]
async fn prune_racing_spawns_never_removes_a_worktree_being_made() {
    let s = with_runtime(
        "sleep 0.2\npwd\nif [ -e .git ] && [ -e README.md ]; then echo present; else echo gone; fi",
        |_| {},
    )
    .await;
    let repo = repo(s.dir.path());
    // `git worktree add` runs the post-checkout hook once the worktree's directory exists: a
    // slow one holds the spawn in the window where the directory is there and the row is not.
    let hook = repo.join(".git/hooks/post-checkout");
    std::fs::write(&hook, "#!/bin/sh\nsleep 0.3\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let worktrees = s.dir.path().join("state/worktrees");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pruner = {
        let (mut c, done) = (s.client.clone(), done.clone());
        tokio::spawn(async move {
            let mut rounds = 0u32;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let r = c
                    .prune_worktrees(pb::PruneWorktreesRequest {
                        older_than: Some(prost_types::Duration::default()),
                    })
                    .await
                    .unwrap()
                    .into_inner();
                assert!(r.failed.is_empty(), "{r:?}");
                rounds += 1;
            }
            rounds
        })
    };
    // One at a time: each spawn's `git worktree add` has the repository to itself, and a
    // prune that found its directory meanwhile is next in line.
    let mut workers = Vec::new();
    for i in 0..4 {
        let r = isolated("task", &format!("work {i}"), &repo);
        workers.push(spawn(&s, r).await.unwrap().worker.unwrap());
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = pruner.await.unwrap();
    assert!(rounds > 0);
    for w in workers {
        let id = &w.id;
        assert_eq!(w.state, pb::WorkerState::Completed as i32, "{w:?}");
        let here = worktrees.join(id).display().to_string();
        assert_eq!(
            w.result.as_deref(),
            Some(format!("{here}\npresent\n").as_str()),
            "worker {id} ran without its worktree"
        );
    }
}

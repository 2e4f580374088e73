use super::snapshot::FREE_ON_POOL;
use super::*;
use crate::persona::{Severity, Spawns, ThinkingLevel};
use std::path::PathBuf;

fn cfg(home: &Path) -> Config {
    Config {
        home: Some(home.to_owned()),
        ..Config::default()
    }
}

#[test]
fn bundled_agents_parse_cleanly_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::new(&cfg(dir.path()), false).unwrap();
    let s = reg.build_once(None);
    assert!(s.diagnostics.is_empty(), "{:?}", s.diagnostics);
    let names: Vec<_> = s.agents.iter().map(|a| a.persona.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "explore",
            "plan",
            "designer",
            "reviewer",
            "task",
            "quick_task"
        ]
    );
    let get = |n: &str| &s.get(n).unwrap().persona;
    assert_eq!(
        get("explore").tools.as_deref().unwrap(),
        ["read", "grep", "find", "bash", "submit_result"]
    );
    assert_eq!(get("explore").thinking_level, Some(ThinkingLevel::Minimal));
    assert!(get("explore").output.is_some());
    assert_eq!(
        get("plan").spawns,
        Some(Spawns::Only(vec!["explore".into()]))
    );
    assert_eq!(get("plan").thinking_level, Some(ThinkingLevel::High));
    assert_eq!(get("designer").tools, None);
    assert_eq!(
        get("reviewer").spawns,
        Some(Spawns::Only(vec!["explore".into(), "task".into()]))
    );
    assert!(get("reviewer").output.is_some());
    assert_eq!(get("task").spawns, Some(Spawns::Any));
    assert_eq!(get("task").thinking_level, Some(ThinkingLevel::Medium));
    assert_eq!(get("quick_task").spawns, None);
    assert_eq!(
        get("quick_task").thinking_level,
        Some(ThinkingLevel::Minimal)
    );
    assert!(s.agents.iter().all(|a| a.source == SourceKind::Bundled));
}

#[test]
fn version_is_stable_and_content_sensitive() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".claude/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(agents.join("a.md"), "---\nname: a\ndescription: d\n---\n").unwrap();
    let reg = Registry::new(&cfg(dir.path()), false).unwrap();
    let v1 = reg.build_once(None).version.clone();
    assert_eq!(v1, reg.build_once(None).version);
    std::fs::write(agents.join("a.md"), "---\nname: a\ndescription: e\n---\n").unwrap();
    assert_ne!(v1, reg.build_once(None).version);
}

#[test]
fn recursive_dir_skips_readme_hidden_and_outside_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(root.join("b/c")).unwrap();
    std::fs::create_dir_all(root.join(".hidden")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let w = |p: PathBuf, n: &str| {
        std::fs::write(p, format!("---\nname: {n}\ndescription: d\n---\n")).unwrap();
    };
    w(root.join("z.md"), "z");
    w(root.join("b/c/deep.md"), "deep");
    w(root.join("b/README.md"), "readme");
    w(root.join("Readme.MD"), "readme2");
    w(root.join(".hidden/h.md"), "hidden");
    w(outside.join("o.md"), "outside");
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    std::os::unix::fs::symlink(root.join("b"), root.join("loop")).unwrap();
    let mut c = cfg(dir.path());
    c.bundled_agents = false;
    c.agent_dirs = vec![crate::config::AgentDir {
        path: root.clone(),
        recursive: true,
    }];
    let s = Registry::new(&c, false).unwrap().build_once(None);
    let names: Vec<_> = s.agents.iter().map(|a| a.persona.name.as_str()).collect();
    // byte order of relative paths: "b/c/deep.md" < "z.md"; `loop` is a second view of `b`.
    assert_eq!(names, ["deep", "z"]);
    assert!(
        s.diagnostics
            .iter()
            .any(|d| d.code == "symlink_outside_root")
    );
}

#[tokio::test]
async fn a_cached_snapshot_is_reused_until_a_file_changes() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".claude/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(agents.join("a.md"), "---\nname: a\ndescription: d\n---\n").unwrap();
    let reg = Registry::new(&cfg(dir.path()), true).unwrap();
    let first = reg.snapshot("").await.unwrap();
    // Give the watcher time to deliver the events of our own reads: they must not count.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let second = reg.snapshot("").await.unwrap();
    assert!(Arc::ptr_eq(&first, &second), "rebuilt without a change");
    std::fs::write(agents.join("a.md"), "---\nname: a\ndescription: e\n---\n").unwrap();
    let mut rebuilt = false;
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let third = reg.snapshot("").await.unwrap();
        if !Arc::ptr_eq(&first, &third) {
            assert_eq!(third.get("a").unwrap().persona.description, "e");
            rebuilt = true;
            break;
        }
    }
    assert!(rebuilt, "an edit must rebuild the snapshot");
}

#[test]
fn entries_named_md_that_are_not_files_are_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".claude/agents");
    std::fs::create_dir_all(agents.join("dir.md")).unwrap();
    nix::unistd::mkfifo(&agents.join("fifo.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    nix::unistd::mkfifo(&agents.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    // A symlink is followed: `link.md -> pipe` is a FIFO too, and is never opened.
    std::os::unix::fs::symlink(agents.join("pipe"), agents.join("link.md")).unwrap();
    std::fs::write(agents.join("ok.md"), "---\nname: ok\ndescription: d\n---\n").unwrap();
    let s = Registry::new(&cfg(dir.path()), false)
        .unwrap()
        .build_once(None);
    let got: Vec<_> = s
        .diagnostics
        .iter()
        .map(|d| (d.path.rsplit('/').next().unwrap(), d.code, d.severity))
        .collect();
    assert_eq!(
        got,
        [
            ("dir.md", "not_a_file", Severity::Warning),
            ("fifo.md", "not_a_file", Severity::Warning),
            ("link.md", "not_a_file", Severity::Warning),
        ]
    );
    assert!(s.diagnostics[0].message.contains("a directory"));
    assert!(s.diagnostics[1].message.contains("a FIFO"));
    assert!(s.get("ok").is_some());
}

#[test]
fn codex_dirs_read_toml_recursively_beside_flat_markdown() {
    let dir = tempfile::tempdir().unwrap();
    let codex = dir.path().join(".codex/agents");
    std::fs::create_dir_all(codex.join("team/deep")).unwrap();
    std::fs::create_dir_all(codex.join("nested")).unwrap();
    std::fs::create_dir_all(codex.join(".hidden")).unwrap();
    let toml = |name: &str| {
        format!("name = \"{name}\"\ndescription = \"d\"\ndeveloper_instructions = \"x\"\n")
    };
    std::fs::write(codex.join("b.toml"), toml("b")).unwrap();
    std::fs::write(codex.join("team/deep/c.toml"), toml("c")).unwrap();
    std::fs::write(codex.join(".hidden/h.toml"), toml("h")).unwrap();
    std::fs::write(codex.join("a.md"), "---\nname: a\ndescription: d\n---\n").unwrap();
    // Markdown stays flat in a Codex dir.
    std::fs::write(
        codex.join("nested/n.md"),
        "---\nname: n\ndescription: d\n---\n",
    )
    .unwrap();
    // The same name from `.md` and `.toml` in one dir is a duplicate; byte order decides.
    std::fs::write(
        codex.join("dup.md"),
        "---\nname: dup\ndescription: md\n---\n",
    )
    .unwrap();
    std::fs::write(codex.join("dup.toml"), toml("dup")).unwrap();
    // TOML files elsewhere are not agents.
    let claude = dir.path().join(".claude/agents");
    std::fs::create_dir_all(&claude).unwrap();
    std::fs::write(claude.join("x.toml"), toml("x")).unwrap();
    let mut c = cfg(dir.path());
    c.bundled_agents = false;
    let s = Registry::new(&c, false).unwrap().build_once(None);
    let names: Vec<_> = s.agents.iter().map(|a| a.persona.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "dup", "c"]);
    assert_eq!(
        s.get("dup").unwrap().persona.format,
        crate::persona::Format::Markdown
    );
    assert_eq!(
        s.get("c").unwrap().persona.format,
        crate::persona::Format::Toml
    );
    let codes: Vec<_> = s.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["duplicate_name"]);
    assert!(s.diagnostics[0].path.ends_with("dup.toml"));
}

#[test]
fn command_merge_names_aliases_and_precedence() {
    let dir = tempfile::tempdir().unwrap();
    // The workspace is not under home, so the walk up from it never finds the user dirs.
    let home = dir.path().join("home");
    let ws = dir.path().join("ws");
    let project = ws.join(".claude/commands");
    let user = home.join(".claude/commands");
    let gemini = home.join(".gemini/commands");
    let w = |p: PathBuf, text: &str| {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w(project.join("opsx/apply.md"), "Apply $ARGUMENTS");
    w(project.join("a/zap.md"), "nested zap");
    w(project.join("zap.md"), "root zap");
    w(project.join("b/zap.md"), "second nested zap");
    w(user.join("apply.md"), "user apply");
    w(user.join("review.md"), "user review");
    w(user.join("x/review.md"), "nested review");
    w(user.join("README.md"), "not a command");
    w(user.join("bad\\name.md"), "x");
    w(
        gemini.join("git/commit.toml"),
        "prompt = \"Commit {{args}}\"",
    );
    w(gemini.join("init.toml"), "prompt = \"project init\"");
    // A `.md` file in a Gemini commands dir is not a command (Gemini CLI ignores it).
    w(
        gemini.join("included.md"),
        "a fragment other commands include",
    );
    let s = Registry::new(&cfg(&home), false)
        .unwrap()
        .build_once(Some(&ws.canonicalize().unwrap()));
    let names: Vec<_> = s.commands.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "a:zap",
            "b:zap",
            "opsx:apply",
            "zap",
            "review",
            "x:review",
            "git:commit",
            "init"
        ]
    );
    let template = |n: &str| s.command(n).unwrap().command.template.as_str();
    // A root command of the same dir keeps its name; the first nested one gets no alias.
    assert_eq!(template("zap"), "root zap");
    assert!(s.command("a:zap").unwrap().aliases.is_empty());
    // An alias from a dir that comes first beats a later root command.
    assert_eq!(template("apply"), "Apply $ARGUMENTS");
    assert_eq!(s.command("opsx:apply").unwrap().aliases, ["apply"]);
    // A root command of the same (later) dir beats the alias.
    assert_eq!(template("review"), "user review");
    assert_eq!(template("git:commit"), "Commit {{args}}");
    assert_eq!(template("init"), "project init");
    let shadowed: Vec<_> = s
        .shadowed_commands
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.shadowed_by
                    .as_deref()
                    .unwrap()
                    .rsplit('/')
                    .next()
                    .unwrap(),
            )
        })
        .collect();
    assert_eq!(shadowed, [("apply", "apply.md"), ("init", "init.toml")]);
    assert!(s.command("included").is_none());
    assert_eq!(s.shadowed_commands[1].source, SourceKind::Bundled);
    let codes: Vec<_> = s.command_diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["invalid_command_name"]);
    assert!(s.diagnostics.is_empty(), "{:?}", s.diagnostics);
}

#[test]
fn the_sources_table_reads_the_same_in_readme_and_docs() {
    let table = |file: &str| -> Vec<String> {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let at = text
            .find("<!-- sources-table")
            .unwrap_or_else(|| panic!("{file} has no sources table"));
        text[at..]
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with('|'))
            .map(str::to_owned)
            .collect()
    };
    let readme = table("docs/guide.md");
    assert!(readme.len() > 10, "{readme:?}");
    assert_eq!(readme, table("docs/sources.md"));
}

#[tokio::test]
async fn a_reload_reuses_unchanged_files_and_sees_a_same_size_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".claude/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(agents.join("a.md"), "---\nname: a\ndescription: d\n---\n").unwrap();
    std::fs::write(agents.join("b.md"), "---\nname: b\ndescription: d\n---\n").unwrap();
    let reg = Registry::new(&cfg(dir.path()), false).unwrap();
    let first = reg.reload("").await.unwrap();
    // Same size, same second: the stamp may not tell, the bytes must.
    std::fs::write(agents.join("a.md"), "---\nname: a\ndescription: e\n---\n").unwrap();
    let second = reg.reload("").await.unwrap();
    assert_eq!(second.get("a").unwrap().persona.description, "e");
    assert_ne!(first.version, second.version);
    assert!(
        Arc::ptr_eq(first.get("b").unwrap(), second.get("b").unwrap()),
        "an unchanged file must not be parsed again"
    );
    std::fs::remove_file(agents.join("b.md")).unwrap();
    let third = reg.reload("").await.unwrap();
    assert!(third.get("b").is_none());
    assert_eq!(third.get("a").unwrap().persona.description, "e");
}

#[test]
fn a_file_seen_through_another_source_is_not_reused_as_is() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("a.md"), "---\nname: a\ndescription: d\n---\n").unwrap();
    let reg = Registry::new(&cfg(dir.path()), false).unwrap();
    let caches = ParseCaches::new(100);
    let plan = |kind, family: &str| sources::Plan {
        agents: vec![SourceDir {
            kind,
            family: family.to_owned(),
            path: shared.clone(),
            recursive: false,
            toml: false,
            skills: false,
        }],
        ..sources::Plan::default()
    };
    let none = || Bundled {
        agents: &[],
        commands: &[],
    };
    let opts = &reg.inner.opts;
    let as_dir = assemble(
        &plan(SourceKind::Dir, ""),
        Vec::new(),
        opts,
        none(),
        caches.parsed(),
        0,
    );
    let as_user = assemble(
        &plan(SourceKind::User, ".claude"),
        Vec::new(),
        opts,
        none(),
        caches.parsed(),
        0,
    );
    assert_eq!(as_dir.get("a").unwrap().source, SourceKind::Dir);
    assert_eq!(as_user.get("a").unwrap().source, SourceKind::User);
    assert_eq!(as_user.get("a").unwrap().family, ".claude");
}

/// A snapshot of `n` agents read from their own directory, and a weak handle on its first one.
fn snapshot_of(n: usize) -> (Snapshot, std::sync::Weak<AgentDef>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..n {
        std::fs::write(
            dir.path().join(format!("a{i:05}.md")),
            format!("---\nname: a{i:05}\ndescription: d\n---\nbody {i}\n"),
        )
        .unwrap();
    }
    let mut config = cfg(dir.path());
    config.bundled_agents = false;
    let reg = Registry::new(&config, false).unwrap();
    let snap = reg.build_dirs(&[dir.path().to_owned()], false);
    assert_eq!(snap.agents.len(), n);
    let first = Arc::downgrade(&snap.agents[0]);
    (snap, first, dir)
}

#[test]
fn a_small_snapshot_is_freed_where_it_is_dropped() {
    let (snap, first, _dir) = snapshot_of(FREE_ON_POOL / 2);
    drop(snap);
    assert!(first.upgrade().is_none(), "freed before drop returned");
}

#[test]
fn a_large_snapshot_is_freed_on_the_pool_and_nothing_of_it_is_kept() {
    let (snap, first, _dir) = snapshot_of(FREE_ON_POOL);
    // Every thread of rayon's pool is held, so a free done by `drop` itself would show.
    let threads = rayon::current_num_threads();
    let (held, release) = (
        Arc::new(std::sync::Barrier::new(threads + 1)),
        Arc::new(std::sync::Barrier::new(threads + 1)),
    );
    for _ in 0..threads {
        let (held, release) = (held.clone(), release.clone());
        rayon::spawn(move || {
            held.wait();
            release.wait();
        });
    }
    held.wait();
    drop(snap);
    assert!(
        first.upgrade().is_some(),
        "freed by the dropping thread, not the pool"
    );
    release.wait();
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while first.upgrade().is_some() {
        assert!(
            Instant::now() < deadline,
            "the pool never freed the snapshot"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn the_first_definition_wins_and_a_repeat_in_one_directory_names_its_first() {
    let root = tempfile::tempdir().unwrap();
    let dirs: Vec<PathBuf> = ["a", "b", "c"]
        .iter()
        .map(|d| root.path().join(d))
        .collect();
    let write = |dir: &Path, file: &str, name: &str| {
        std::fs::create_dir_all(dir).unwrap();
        let text = format!("---\nname: {name}\ndescription: from {file}\n---\nbody\n");
        std::fs::write(dir.join(file), text).unwrap();
    };
    // `x` twice in a, once in b, twice in c; 300 other names so the index holds many.
    write(&dirs[0], "x1.md", "x");
    write(&dirs[0], "x2.md", "x");
    write(&dirs[1], "x.md", "x");
    write(&dirs[2], "x1.md", "x");
    write(&dirs[2], "x2.md", "x");
    for i in 0..300 {
        write(&dirs[i % 3], &format!("n{i:03}.md"), &format!("n{i:03}"));
    }
    let mut c = cfg(root.path());
    c.bundled_agents = false;
    let s = Registry::new(&c, false).unwrap().build_dirs(&dirs, false);
    let path = |d: usize, f: &str| load::shown(&dirs[d].join(f));

    assert_eq!(s.agents.len(), 301);
    assert_eq!(s.get("x").unwrap().file_path, path(0, "x1.md"));
    for i in 0..300 {
        let name = format!("n{i:03}");
        let def = s.get(&name).unwrap_or_else(|| panic!("{name} is missing"));
        assert_eq!(def.persona.name, name);
        assert_eq!(def.file_path, path(i % 3, &format!("{name}.md")));
    }
    assert!(s.get("n300").is_none() && s.get("").is_none() && s.get("X").is_none());

    let lost: Vec<_> = s
        .shadowed
        .iter()
        .map(|d| (d.file_path.clone(), d.shadowed_by.clone().unwrap()))
        .collect();
    let winner = path(0, "x1.md");
    assert_eq!(
        lost,
        [
            (path(0, "x2.md"), winner.clone()),
            (path(1, "x.md"), winner.clone()),
            (path(2, "x1.md"), winner.clone()),
            (path(2, "x2.md"), winner),
        ]
    );
    // Each repeat inside one directory names the first definition in that directory.
    let dups: Vec<_> = s
        .diagnostics
        .iter()
        .map(|d| (d.code, d.path.clone(), d.message.clone()))
        .collect();
    let message = |first: String| {
        format!("agent \"x\" is also defined by {first} in the same directory, which wins")
    };
    assert_eq!(
        dups,
        [
            (
                "duplicate_name",
                path(0, "x2.md"),
                message(path(0, "x1.md"))
            ),
            (
                "duplicate_name",
                path(2, "x2.md"),
                message(path(2, "x1.md"))
            ),
        ]
    );
}

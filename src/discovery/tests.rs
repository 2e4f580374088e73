use super::*;
use crate::persona::{Spawns, ThinkingLevel};

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
    let v1 = reg.build_once(None).version;
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
        std::fs::write(p, format!("---\nname: {n}\ndescription: d\n---\n")).unwrap()
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
fn a_fifo_named_md_does_not_block_discovery() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".claude/agents");
    std::fs::create_dir_all(&agents).unwrap();
    // A symlink is followed when listing, so `pipe.md -> pipe` reaches the open.
    assert!(
        std::process::Command::new("mkfifo")
            .arg(agents.join("pipe"))
            .status()
            .unwrap()
            .success()
    );
    std::os::unix::fs::symlink(agents.join("pipe"), agents.join("pipe.md")).unwrap();
    let s = Registry::new(&cfg(dir.path()), false)
        .unwrap()
        .build_once(None);
    let d = s
        .diagnostics
        .iter()
        .find(|d| d.path.ends_with("pipe.md"))
        .expect("a diagnostic for the fifo");
    assert_eq!(d.code, "unreadable");
    assert_eq!(d.message, "not a regular file");
}

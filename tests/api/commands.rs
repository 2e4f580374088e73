//! Workflow commands through gRPC (docs §3.6): sources and precedence, names and aliases,
//! markdown and Gemini TOML files, expansion, errors, watching, the shared registry version,
//! pagination, and `agentry check`. Fixtures: `tests/fixtures/dialects/`.

use std::{path::Path, time::Duration};

use agentry::grpc::pb;
use tonic::Code;

use crate::{
    dialects::{copy_tree, fixture},
    helpers::*,
};

async fn resolve(
    s: &TestServer,
    ws: &Path,
    name: &str,
    arguments: &str,
) -> Result<pb::ResolveCommandResponse, tonic::Status> {
    s.client
        .clone()
        .resolve_command(pb::ResolveCommandRequest {
            name: name.into(),
            workspace: ws.display().to_string(),
            arguments: arguments.into(),
        })
        .await
        .map(|r| r.into_inner())
}

fn command(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn names(c: &[pb::Command]) -> Vec<&str> {
    c.iter().map(|c| c.name.as_str()).collect()
}

#[tokio::test]
async fn precedence_across_all_sources_with_bundled_init_last() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config_in(dir.path());
    let home = dir.path().join("home");
    let ws = dir.path().join("ws/proj");
    std::fs::create_dir_all(&ws).unwrap();
    let extra = dir.path().join("extra");
    cfg.command_dirs = vec![agentry::config::CommandDir {
        path: extra.clone(),
        recursive: true,
    }];
    let sources = [
        ws.join(".xcsh/commands"),
        home.join(".xcsh/agent/commands"),
        ws.join(".claude/commands"),
        home.join(".claude/commands"),
        ws.join(".codex/commands"),
        home.join(".codex/commands"),
        ws.join(".gemini/commands"),
        home.join(".gemini/commands"),
        dir.path().join("plug-project/commands"),
        dir.path().join("plug-user/commands"),
        extra.clone(),
    ];
    for (i, s) in sources.iter().enumerate() {
        // A Gemini commands dir holds TOML commands only.
        if s.to_string_lossy().contains(".gemini") {
            command(s, "dup.toml", &format!("prompt = \"from source {i}\""));
        } else {
            command(s, "dup.md", &format!("from source {i}"));
        }
    }
    command(
        &extra,
        "init.md",
        "---\ndescription: our init\n---\nInit our way.",
    );
    std::fs::create_dir_all(home.join(".claude/plugins")).unwrap();
    std::fs::write(
        home.join(".claude/plugins/installed_plugins.json"),
        serde_json::json!({
            "version": 2,
            "plugins": {
                "user-plug@market": [{"scope": "user", "installPath": dir.path().join("plug-user")}],
                "proj-plug@market": [{"scope": "project", "installPath": dir.path().join("plug-project")}]
            }
        })
        .to_string(),
    )
    .unwrap();
    let s = start_in(dir, cfg).await;

    let r = list_commands_all(&s, &ws, true).await;
    // A plugin's commands are namespaced: they shadow nothing and are not shadowed.
    assert_eq!(
        names(&r.commands),
        ["dup", "proj-plug:dup", "user-plug:dup", "init"]
    );
    let dup = &r.commands[0];
    assert_eq!(dup.template, "from source 0");
    assert_eq!(dup.description, "from source 0", "first body line");
    assert_eq!(
        (dup.source, dup.family.as_str()),
        (pb::Source::Project as i32, ".xcsh")
    );
    let order: Vec<_> = r
        .shadowed
        .iter()
        .filter(|c| c.name == "dup")
        .map(|c| c.template.as_str())
        .collect();
    let expected: Vec<_> = (1..sources.len())
        .filter(|i| !(8..=9).contains(i))
        .map(|i| format!("from source {i}"))
        .collect();
    assert_eq!(order, expected, "shadowed in precedence order");
    let winner = sources[0].join("dup.md").display().to_string();
    assert!(
        r.shadowed
            .iter()
            .filter(|c| c.name == "dup")
            .all(|c| c.shadowed_by == winner)
    );
    let plugin = &r.commands[1];
    assert_eq!(
        (
            plugin.source,
            plugin.family.as_str(),
            plugin.template.as_str()
        ),
        (pb::Source::Plugin as i32, "proj-plug", "from source 8")
    );
    assert!(plugin.aliases.is_empty(), "`dup` was taken first");
    // A command on disk beats the bundled one of the same name.
    assert_eq!(r.commands[3].template, "Init our way.");
    assert_eq!(r.commands[3].source, pb::Source::Dir as i32);
    let bundled = r.shadowed.iter().find(|c| c.name == "init").unwrap();
    assert_eq!(bundled.source, pb::Source::Bundled as i32);
    assert_eq!(bundled.file_path, "bundled:init.md");
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    assert_eq!(r.total_size, 4);

    // Without a workspace the .xcsh user dir wins.
    let r = list_commands_all(&s, Path::new(""), false).await;
    assert_eq!(r.commands[0].template, "from source 1");
    assert!(r.shadowed.is_empty(), "only when asked for");
}

#[tokio::test]
async fn bundled_init_and_file_shapes() {
    let s = start().await;
    let ws = s.ws("proj");
    copy_tree(&fixture("claude-commands"), &ws.join(".claude/commands"));
    copy_tree(
        &fixture("gemini-commands"),
        &s.home().join(".gemini/commands"),
    );
    let r = list_commands_all(&s, &ws, false).await;
    assert_eq!(
        names(&r.commands),
        [
            "opsx:apply",
            "opsx:archive",
            "review-pr",
            "standup",
            "explain",
            "git:commit",
            "init"
        ]
    );
    let by = |n: &str| r.commands.iter().find(|c| c.name == n).unwrap();

    let pr = by("review-pr");
    assert_eq!(pr.description, "Review a pull request by number");
    assert_eq!(pr.argument_hint.as_deref(), Some("<pr-number> [focus]"));
    assert_eq!(pr.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(
        pr.allowed_tools.as_ref().unwrap().values,
        ["Bash(gh pr view:*)", "Bash(gh pr diff:*)", "Read"]
    );
    let extra: serde_json::Value = serde_json::from_str(&pr.extra_json).unwrap();
    assert_eq!(extra["disable-model-invocation"], true);
    assert_eq!(pr.format, pb::FileFormat::Markdown as i32);
    assert_eq!(pr.family, ".claude");

    // No frontmatter: the whole file is the template, its first line the description.
    let standup = by("standup");
    assert_eq!(
        standup.description,
        "Summarise what changed in this repository since yesterday, grouped by author."
    );
    assert!(standup.template.ends_with("Keep it under ten lines."));
    assert_eq!(standup.allowed_tools, None);
    assert_eq!(standup.extra_json, "{}");

    // Nested commands answer to their base names too.
    assert_eq!(by("opsx:apply").aliases, ["apply"]);
    assert_eq!(by("git:commit").aliases, ["commit"]);
    assert!(by("review-pr").aliases.is_empty());

    // Gemini TOML commands.
    let commit = by("git:commit");
    assert_eq!(commit.format, pb::FileFormat::Toml as i32);
    assert_eq!(
        commit.description,
        "Write a commit message for the staged changes"
    );
    assert!(commit.template.contains("{{args}}"));
    assert_eq!(
        by("explain").description,
        "Custom command from explain.toml"
    );
    assert_eq!(by("explain").source, pb::Source::User as i32);

    let init = by("init");
    assert_eq!(init.source, pb::Source::Bundled as i32);
    assert!(
        init.description.contains("AGENTS.md"),
        "{}",
        init.description
    );
    let got = resolve(&s, &ws, "init", "the test suite").await.unwrap();
    assert!(got.expanded.contains("AGENTS.md"));
    assert!(got.expanded.ends_with("Focus, if given: the test suite"));
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
}

#[tokio::test]
async fn resolve_expands_arguments_by_name_or_alias() {
    let s = start().await;
    let ws = s.ws("proj");
    copy_tree(&fixture("claude-commands"), &ws.join(".claude/commands"));
    copy_tree(&fixture("gemini-commands"), &ws.join(".gemini/commands"));
    let r = resolve(&s, &ws, "review-pr", "42  error handling")
        .await
        .unwrap();
    assert_eq!(
        r.expanded,
        "Review pull request #42. Focus on error first, then everything else.\n\n\
         Full request: 42  error handling"
    );
    assert_eq!(r.command.unwrap().name, "review-pr");
    let list = list_commands_all(&s, &ws, false).await;
    assert_eq!(r.registry_version, list.registry_version);

    // By base name: the nested command answers.
    let r = resolve(&s, &ws, "apply", "add-dark-mode").await.unwrap();
    assert_eq!(r.command.as_ref().unwrap().name, "opsx:apply");
    assert_eq!(
        r.expanded,
        "Apply the change proposal add-dark-mode: implement its tasks in order and tick each one off."
    );
    // A `$` that is no placeholder stays; missing words are empty.
    let r = resolve(&s, &ws, "opsx:archive", "").await.unwrap();
    assert_eq!(
        r.expanded,
        "Archive the change  once every task is done, and note it in $HOME/CHANGES.md."
    );
    // Gemini's {{args}}.
    let r = resolve(&s, &ws, "commit", "mention the issue")
        .await
        .unwrap();
    assert_eq!(
        r.expanded,
        "Write a conventional commit message for the staged changes.\n\
         Extra guidance from the user: mention the issue"
    );
    // Exact names only: no case folding, no leading slash.
    for near in ["Review-PR", "/review-pr", "review"] {
        let e = resolve(&s, &ws, near, "").await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{near}");
    }
}

#[tokio::test]
async fn unknown_command_names_what_is_available() {
    let s = start().await;
    let ws = s.ws("proj");
    command(&ws.join(".claude/commands"), "b.md", "b");
    command(&ws.join(".claude/commands"), "a/x.md", "x");
    let e = resolve(&s, &ws, "nope", "").await.unwrap_err();
    assert_status(
        &e,
        Code::NotFound,
        "COMMAND_NOT_FOUND",
        "Unknown command \"nope\". Available: a:x, b, init",
    );
    use tonic_types::StatusExt;
    assert_eq!(
        e.get_details_error_info().unwrap().metadata["command"],
        "nope"
    );

    let s = start_with(|c| c.bundled_agents = false).await;
    let e = resolve(&s, Path::new(""), "init", "").await.unwrap_err();
    assert_status(
        &e,
        Code::NotFound,
        "COMMAND_NOT_FOUND",
        "Unknown command \"init\". Available: none",
    );
}

#[tokio::test]
async fn bad_files_are_diagnostics_and_bad_requests_name_the_field() {
    let s = start_with(|c| c.limits.max_prompt_bytes = 64).await;
    let ws = s.ws("proj");
    let claude = ws.join(".claude/commands");
    let gemini = ws.join(".gemini/commands");
    command(&claude, "ok.md", "say $ARGUMENTS $ARGUMENTS");
    command(&claude, "back\\slash.md", "x");
    command(&claude, "huge.md", &"x".repeat((1 << 20) + 1));
    command(&claude, "open.md", "---\ndescription: never closed\n");
    command(
        &gemini,
        "broken.toml",
        "description = \"d\"\nprompt = \"unterminated\n",
    );
    command(&gemini, "empty.toml", "description = \"no prompt\"\n");
    command(&gemini, "typed.toml", "prompt = 42\n");
    let r = list_commands_all(&s, &ws, false).await;
    assert_eq!(names(&r.commands), ["ok", "init"]);
    let mut got: Vec<_> = r
        .diagnostics
        .iter()
        .map(|d| {
            (
                d.path.rsplit('/').next().unwrap().to_owned(),
                d.code.clone(),
                d.line,
            )
        })
        .collect();
    got.sort();
    let own = |f: &str, c: &str, l: Option<u32>| (f.to_owned(), c.to_owned(), l);
    assert_eq!(
        got,
        [
            own("back\\slash.md", "invalid_command_name", None),
            own("broken.toml", "toml_syntax", Some(2)),
            own("empty.toml", "missing_prompt", None),
            own("huge.md", "too_large", None),
            own("open.md", "unclosed_frontmatter", Some(1)),
            own("typed.toml", "invalid_field", Some(1)),
        ]
    );
    assert!(
        r.diagnostics
            .iter()
            .all(|d| d.severity == pb::Severity::Error as i32)
    );
    // Agent listings keep their own diagnostics; ReloadAgents reports both.
    let agents = list_all(&s, &ws, false).await;
    assert!(agents.diagnostics.is_empty(), "{:?}", agents.diagnostics);
    let reload = s
        .client
        .clone()
        .reload_agents(pb::ReloadAgentsRequest {
            workspace: ws.display().to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reload.diagnostics.len(), 6);

    // Arguments over limits.max_prompt_bytes, and an expansion over it.
    let e = resolve(&s, &ws, "ok", &"a".repeat(65)).await.unwrap_err();
    assert_bad_field(&e, "arguments");
    assert!(
        e.message().contains("limits.max_prompt_bytes"),
        "{}",
        e.message()
    );
    assert_eq!(
        resolve(&s, &ws, "ok", &"a".repeat(28))
            .await
            .unwrap()
            .expanded
            .len(),
        61
    );
    let e = resolve(&s, &ws, "ok", &"a".repeat(30)).await.unwrap_err();
    assert_bad_field(&e, "arguments");
    assert!(e.message().contains("\"ok\""), "{}", e.message());
    // Names and workspaces.
    for (name, field) in [
        ("", "name"),
        (&"n".repeat(129)[..], "name"),
        ("a\u{1}b", "name"),
    ] {
        let e = resolve(&s, &ws, name, "").await.unwrap_err();
        assert_bad_field(&e, field);
    }
    let e = resolve(&s, Path::new("relative"), "ok", "")
        .await
        .unwrap_err();
    assert_bad_field(&e, "workspace");
    let e = s
        .client
        .clone()
        .list_commands(pb::ListCommandsRequest {
            page_size: -1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_bad_field(&e, "page_size");
    let e = s
        .client
        .clone()
        .list_commands(req(
            pb::ListCommandsRequest::default(),
            &[("x-agentry-depth", "deep")],
        ))
        .await
        .unwrap_err();
    assert_bad_field(&e, "x-agentry-depth");
}

#[tokio::test]
async fn new_commands_are_seen_and_share_the_registry_version() {
    let s = start().await;
    let ws = s.ws("proj");
    let agents_before = list_all(&s, &ws, false).await.registry_version;
    let before = list_commands_all(&s, &ws, false).await;
    assert_eq!(before.registry_version, agents_before);
    // A commands dir that does not exist yet, nested two levels deep.
    let dir = ws.join(".gemini/commands");
    command(
        &dir,
        "team/deploy/check.toml",
        "prompt = \"Check the deploy of {{args}}\"",
    );
    // A new command must be visible within about a second.
    eventually(
        "the new command team:deploy:check",
        Duration::from_secs(3),
        || async {
            let listed = list_commands_all(&s, &ws, false).await;
            let names = names(&listed.commands);
            names
                .contains(&"team:deploy:check")
                .then_some(())
                .ok_or(format!("{names:?}"))
        },
    )
    .await;
    let after = list_commands_all(&s, &ws, false).await;
    assert_ne!(after.registry_version, before.registry_version);
    assert_eq!(
        list_all(&s, &ws, false).await.registry_version,
        after.registry_version
    );
    // An edit below it changes the version again; a delete brings it back.
    std::fs::write(dir.join("team/deploy/check.toml"), "prompt = \"v2\"").unwrap();
    eventually("the edit to be visible", Duration::from_secs(3), || async {
        match resolve(&s, &ws, "check", "").await {
            Ok(r) if r.expanded == "v2" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
    eventually(
        "deleting the command to restore the version",
        Duration::from_secs(3),
        || async {
            let now = list_commands_all(&s, &ws, false).await.registry_version;
            (now == before.registry_version).then_some(()).ok_or(now)
        },
    )
    .await;
}

#[tokio::test]
async fn pagination_walks_every_command_once() {
    let s = start().await;
    let ws = s.ws("proj");
    let dir = ws.join(".claude/commands");
    for i in 0..7 {
        command(&dir, &format!("c{i}.md"), "t");
    }
    let pages = walk_pages(|page_token| async {
        let r = s
            .client
            .clone()
            .list_commands(pb::ListCommandsRequest {
                workspace: ws.display().to_string(),
                page_size: 3,
                page_token,
                include_shadowed: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.total_size, 8);
        let names = r.commands.into_iter().map(|c| c.name).collect();
        (names, r.next_page_token)
    })
    .await;
    assert_eq!(pages.len(), 3);
    assert_eq!(
        pages.concat(),
        ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "init"]
    );

    let first = s
        .client
        .clone()
        .list_commands(pb::ListCommandsRequest {
            workspace: ws.display().to_string(),
            page_size: 3,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    // A token is bound to its parameters …
    let e = s
        .client
        .clone()
        .list_commands(pb::ListCommandsRequest {
            workspace: ws.display().to_string(),
            page_size: 3,
            include_shadowed: true,
            page_token: first.next_page_token.clone(),
        })
        .await
        .unwrap_err();
    assert_bad_field(&e, "page_token");
    // … its page size among them …
    let e = s
        .client
        .clone()
        .list_commands(pb::ListCommandsRequest {
            workspace: ws.display().to_string(),
            page_size: 4,
            include_shadowed: false,
            page_token: first.next_page_token.clone(),
        })
        .await
        .unwrap_err();
    assert_bad_field(&e, "page_token");
    // … and to the registry version: a change between pages aborts the listing.
    command(&dir, "new.md", "t");
    eventually(
        "a page token from an older registry to be ABORTED",
        Duration::from_secs(3),
        || async {
            match s
                .client
                .clone()
                .list_commands(pb::ListCommandsRequest {
                    workspace: ws.display().to_string(),
                    page_size: 3,
                    page_token: first.next_page_token.clone(),
                    include_shadowed: false,
                })
                .await
            {
                Err(e) if e.code() == Code::Aborted => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

#[tokio::test]
async fn agentry_check_lists_agents_and_commands() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    copy_tree(&fixture("claude-commands"), &home.join(".claude/commands"));
    copy_tree(&fixture("codex"), &home.join(".codex/agents"));
    command(&home.join(".claude/commands"), "bad\\name.md", "x");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentry"))
        .arg("check")
        .env("HOME", &home)
        .env("RUST_LOG", "off")
        .env_remove("AGENTRY_HOME")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("\ncommands (5):\n"), "{text}");
    assert!(text.contains("opsx:apply"), "{text}");
    assert!(text.contains("(also apply)"), "{text}");
    assert!(text.contains("bundled:init.md"), "{text}");
    assert!(text.contains("rust-reviewer"), "{text}");
    assert!(text.contains("broken.toml:3: error[toml_syntax]"), "{text}");
    assert!(text.contains("error[invalid_command_name]"), "{text}");
    assert!(text.contains("diagnostics (5, 4 errors):"), "{text}");
    assert!(
        text.contains("warning[unsupported_field]: `sandbox_mode`"),
        "{text}"
    );

    // Explicit directories are read like a Codex agents dir: TOML files count.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentry"))
        .arg("check")
        .arg(fixture("codex"))
        .env("HOME", &home)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("agents (3):"), "{text}");
    assert!(
        !text.contains("commands ("),
        "no commands are read from DIRs: {text}"
    );
    assert!(text.contains("diagnostics (4, 3 errors):"), "{text}");
}

/// Command files as their own tools read them (docs §3.6): a descriptive field of an unexpected
/// type never drops the file, and a name segment may hold `:`.
#[tokio::test]
async fn command_files_as_their_tools_read_them() {
    let s = start().await;
    let ws = s.ws("proj");
    let claude = ws.join(".claude/commands");
    command(
        &claude,
        "new.md",
        "---\ndescription: Start a project\nargument-hint: [project-name]\n---\nCreate $ARGUMENTS",
    );
    command(
        &claude,
        "svelte/svelte:a11y.md",
        "Check accessibility of $ARGUMENTS",
    );
    command(&claude, "odd.md", "---\ndescription: {a: 1}\n---\nOdd");
    let r = list_commands_all(&s, &ws, false).await;
    let by = |n: &str| {
        r.commands
            .iter()
            .find(|c| c.name == n)
            .unwrap_or_else(|| panic!("{n}: {:?}", r.commands))
    };
    assert_eq!(by("new").argument_hint.as_deref(), Some("[project-name]"));
    assert!(
        by("svelte:svelte:a11y")
            .aliases
            .contains(&"svelte:a11y".to_owned())
    );
    assert_eq!(by("odd").description, "Odd");
    let d: Vec<_> = r
        .diagnostics
        .iter()
        .map(|d| (d.code.as_str(), d.severity))
        .collect();
    assert_eq!(d, [("invalid_field", pb::Severity::Warning as i32)]);
    let resolved = resolve(&s, &ws, "svelte:a11y", "App.svelte").await.unwrap();
    assert_eq!(resolved.expanded, "Check accessibility of App.svelte");

    // Arguments given to a template without a placeholder are appended as each tool does, and
    // Gemini's {{args}} inside a shell block is one quoted word.
    command(&claude, "plain.md", "Review the change.");
    let gemini = ws.join(".gemini/commands");
    command(
        &gemini,
        "diff.toml",
        "prompt = \"Diff: !{git diff {{args}}}\"\n",
    );
    command(&gemini, "hello.toml", "prompt = \"Say hello.\"\n");
    // The watcher would see the new files soon; a reload makes the test not race it.
    s.client
        .clone()
        .reload_agents(pb::ReloadAgentsRequest {
            workspace: ws.display().to_string(),
        })
        .await
        .unwrap();
    let plain = resolve(&s, &ws, "plain", "src/lib.rs").await.unwrap();
    assert_eq!(
        plain.expanded,
        "Review the change.\n\nARGUMENTS: src/lib.rs"
    );
    let hello = resolve(&s, &ws, "hello", "to all").await.unwrap();
    assert_eq!(hello.expanded, "Say hello.\n\n/hello to all");
    let diff = resolve(&s, &ws, "diff", "a b; rm -rf ~").await.unwrap();
    assert_eq!(diff.expanded, "Diff: !{git diff 'a b; rm -rf ~'}");
}

#[tokio::test]
async fn html_comments_are_removed_only_where_the_reference_reader_removes_them() {
    let s = start().await;
    let ws = s.ws("proj");
    let body = "Review <!-- internal note --> it.\n\nKeep `<!-- inline -->` and:\n\n```html\n<!-- fenced -->\n<p>x</p>\n```";
    persona(
        &ws.join(".xcsh/agents"),
        "native.md",
        "name: native\ndescription: native <!-- hidden -->",
        body,
    );
    persona(
        &ws.join(".claude/agents"),
        "claude.md",
        "name: claude\ndescription: as written",
        body,
    );
    command(&ws.join(".xcsh/commands"), "x.md", body);
    command(&ws.join(".claude/commands"), "c.md", body);
    let r = list_all(&s, &ws, false).await;
    let prompt = |n: &str| {
        r.agents
            .iter()
            .find(|a| a.name == n)
            .unwrap_or_else(|| panic!("{n}: {:?}", r.diagnostics))
            .system_prompt
            .clone()
    };
    let stripped =
        "Review  it.\n\nKeep `<!-- inline -->` and:\n\n```html\n<!-- fenced -->\n<p>x</p>\n```";
    assert_eq!(prompt("native"), stripped);
    assert_eq!(
        r.agents
            .iter()
            .find(|a| a.name == "native")
            .unwrap()
            .description,
        "native"
    );
    assert_eq!(prompt("claude"), body);
    assert_eq!(resolve(&s, &ws, "x", "").await.unwrap().expanded, stripped);
    assert_eq!(resolve(&s, &ws, "c", "").await.unwrap().expanded, body);
}

/// The command fixture set (`tests/fixtures/commands`, one file per rule of docs §3.6, written
/// the way users write them) against its expected table: every command in precedence order with
/// its aliases, description and hint, the diagnostics, and one expansion per rule.
#[tokio::test]
async fn the_fixture_set_expands_as_each_tool_does() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_in(dir.path());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/commands");
    let ws = dir.path().join("ws/proj");
    copy_tree(&root.join("ws"), &ws);
    let plugins = dir.path().join("plugins");
    copy_tree(&root.join("plugins"), &plugins);
    let registry = dir
        .path()
        .join("home/.claude/plugins/installed_plugins.json");
    std::fs::create_dir_all(registry.parent().unwrap()).unwrap();
    std::fs::write(
        &registry,
        serde_json::json!({
            "version": 2,
            "plugins": {
                "beta@market": [{"scope": "user", "installPath": plugins.join("beta")}],
                "alpha@market": [{"scope": "project", "installPath": plugins.join("alpha")}]
            }
        })
        .to_string(),
    )
    .unwrap();
    let s = start_in(dir, cfg).await;
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("expected.json")).unwrap())
            .unwrap();
    let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);

    let r = list_commands_all(&s, &ws, false).await;
    let want = expected["commands"].as_array().unwrap();
    assert_eq!(
        names(&r.commands),
        want.iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect::<Vec<_>>()
    );
    for (got, want) in r.commands.iter().zip(want) {
        let aliases: Vec<String> = want["aliases"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(text)
            .collect();
        assert_eq!(got.aliases, aliases, "{}", got.name);
        if let Some(d) = text(&want["description"]) {
            assert_eq!(got.description, d, "{}", got.name);
        }
        assert_eq!(
            got.argument_hint,
            text(&want["argument_hint"]),
            "{}",
            got.name
        );
    }
    let (ws_shown, plugins_shown) = (ws.display().to_string(), plugins.display().to_string());
    let relative = |p: &str| {
        p.strip_prefix(&ws_shown)
            .map(|r| format!("ws{r}"))
            .or_else(|| {
                p.strip_prefix(&plugins_shown)
                    .map(|r| format!("plugins{r}"))
            })
            .unwrap_or_else(|| p.to_owned())
    };
    let diagnostics: Vec<(String, String, i32)> = r
        .diagnostics
        .iter()
        .map(|d| (relative(&d.path), d.code.clone(), d.severity))
        .collect();
    let want: Vec<(String, String, i32)> = expected["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert_eq!(d["severity"], "info");
            (
                text(&d["file"]).unwrap(),
                text(&d["code"]).unwrap(),
                pb::Severity::Info as i32,
            )
        })
        .collect();
    assert_eq!(diagnostics, want);

    for case in expected["resolve"].as_array().unwrap() {
        let (rule, name) = (&case["rule"], case["name"].as_str().unwrap());
        let arguments = case["arguments"].as_str().unwrap();
        let got = resolve(&s, &ws, name, arguments).await;
        match text(&case["expanded"]) {
            Some(expanded) => {
                let expanded = expanded
                    .replace("{ws}", &ws_shown)
                    .replace("{plugins}", &plugins_shown);
                assert_eq!(got.unwrap().expanded, expanded, "{rule}");
            }
            None => {
                assert_eq!(case["error"], "NOT_FOUND", "{rule}");
                assert_eq!(got.unwrap_err().code(), Code::NotFound, "{rule}");
            }
        }
    }
}

/// `agentry check` tells an author why a placeholder was not expanded, without failing the lint.
#[tokio::test]
async fn agentry_check_notes_another_dialects_placeholder() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    command(
        &home.join(".claude/commands"),
        "explain.md",
        "Explain {{args}}.",
    );
    command(
        &home.join(".gemini/commands"),
        "review.toml",
        "prompt = \"Review $ARGUMENTS\"\n",
    );
    for format in ["text", "github"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args(["check", "--format", format])
            .env("HOME", &home)
            .env("RUST_LOG", "off")
            .env_remove("AGENTRY_HOME")
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(0), "{text}");
        let (explain, review) = (
            home.join(".claude/commands/explain.md"),
            home.join(".gemini/commands/review.toml"),
        );
        if format == "text" {
            assert!(
                text.contains(&format!(
                    "{}: info[foreign_placeholder]: `{{{{args}}}}` is Gemini CLI's placeholder; \
                     Claude Code does not expand it in this file",
                    explain.display()
                )),
                "{text}"
            );
            assert!(
                text.contains(&format!(
                    "{}: info[foreign_placeholder]: `$ARGUMENTS` is Claude Code's placeholder; \
                     Gemini CLI does not expand it",
                    review.display()
                )),
                "{text}"
            );
        } else {
            assert!(
                text.contains(&format!(
                    "::notice file={},title=foreign_placeholder::",
                    explain.display()
                )),
                "{text}"
            );
        }
    }
}

/// A Codex agent's `[mcp_servers.chrome_devtools]` loads: Codex names servers with `_`.
#[tokio::test]
async fn codex_server_names_with_underscores_load() {
    // A user file: a project file's inline servers are refused for another reason.
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_in(dir.path());
    let agents = dir.path().join("home/.codex/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("browser.toml"),
        "name = \"browser\"\ndescription = \"Drives a browser\"\n\
         developer_instructions = \"Test the page.\"\n\n\
         [mcp_servers.chrome_devtools]\ncommand = \"npx\"\nargs = [\"chrome-devtools-mcp@latest\"]\n\n\
         [mcp_servers.bad__name]\ncommand = \"x\"\n",
    )
    .unwrap();
    let s = start_in(dir, cfg).await;
    let r = list_all(&s, Path::new(""), false).await;
    assert!(r.agents.iter().any(|a| a.name == "browser"), "{r:?}");
    let d: Vec<_> = r
        .diagnostics
        .iter()
        .map(|d| (d.code.as_str(), d.message.as_str()))
        .collect();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].1.contains("\"bad__name\""), "{d:?}");
    assert!(!d[0].1.contains("chrome_devtools"), "{d:?}");
}

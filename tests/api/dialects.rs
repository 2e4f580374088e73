//! Agents in every dialect a user already has, through gRPC: Codex TOML agents (docs §2.5),
//! Gemini CLI fields and remote agents (§2.6), and the entries of an agents dir that are not
//! files or whose names are not UTF-8 (§3.2). Fixtures: `tests/fixtures/dialects/`.

use std::{
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    time::Duration,
};

use agentry::grpc::pb;
use tonic::Code;

use crate::helpers::*;

/// `tests/fixtures/dialects/<name>`.
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/dialects")
        .join(name)
}

/// Copies a directory tree (files and directories only).
pub(crate) fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn diag<'a>(r: &'a pb::ListAgentsResponse, file: &str) -> Vec<&'a pb::Diagnostic> {
    r.diagnostics
        .iter()
        .filter(|d| d.path.ends_with(file))
        .collect()
}

#[tokio::test]
async fn codex_toml_agents_are_read_beside_markdown() {
    let s = start().await;
    let ws = s.ws("proj");
    let codex = ws.join(".codex/agents");
    copy_tree(&fixture("codex"), &codex);
    // One name from a `.md` and a `.toml` file in the same dir: a duplicate like any other.
    simple(&codex, "explorer.md", "explorer", "markdown explorer");
    let r = list_all(&s, &ws, true).await;

    let rev = r.agents.iter().find(|a| a.name == "rust-reviewer").unwrap();
    assert_eq!(rev.format, pb::FileFormat::Toml as i32);
    assert_eq!(rev.source, pb::Source::Project as i32);
    assert_eq!(rev.family, ".codex");
    assert!(rev.file_path.ends_with(".codex/agents/reviewer.toml"));
    assert!(
        rev.system_prompt
            .starts_with("You review a Rust change. Read the diff")
    );
    assert!(rev.system_prompt.ends_with("never rewrite the whole file."));
    assert_eq!(rev.model, ["gpt-5-codex"]);
    assert_eq!(rev.thinking_level, pb::ThinkingLevel::High as i32);
    assert_eq!(rev.tools, None, "a Codex agent inherits every tool");
    let extra: serde_json::Value = serde_json::from_str(&rev.extra_json).unwrap();
    assert_eq!(extra["sandbox_mode"], "read-only");
    assert_eq!(
        extra["nickname_candidates"],
        serde_json::json!(["Ferris", "Borrowck"])
    );
    // Codex `[mcp_servers.*]` tables are the agent's own servers (docs §2.9), not `extra`.
    assert!(extra.get("mcp_servers").is_none());
    // In a project file, `sandbox_mode` (not enforced) and the inline server (not allowed by
    // default) are said, at their lines.
    let said: Vec<(&str, Option<u32>)> = diag(&r, "reviewer.toml")
        .iter()
        .map(|d| (d.code.as_str(), d.line))
        .collect();
    assert_eq!(
        said,
        [
            ("unsupported_field", Some(6)),
            ("inline_mcp_refused", Some(15))
        ]
    );

    // Nested TOML files are read; `none` effort is off. Byte order of the relative path puts
    // `explorer.md` before `team/explorer.toml`, so the markdown one wins in its own dir.
    let explorer = r.agents.iter().find(|a| a.name == "explorer").unwrap();
    assert_eq!(explorer.description, "markdown explorer");
    assert_eq!(explorer.format, pb::FileFormat::Markdown as i32);
    let nested = r
        .shadowed
        .iter()
        .find(|a| a.name == "explorer" && a.format == pb::FileFormat::Toml as i32)
        .expect("the nested TOML explorer is shadowed");
    assert!(nested.file_path.ends_with("team/explorer.toml"));
    assert_eq!(nested.thinking_level, pb::ThinkingLevel::Off as i32);
    let dup = diag(&r, "team/explorer.toml");
    assert_eq!(dup.len(), 1);
    assert_eq!(dup[0].code, "duplicate_name");

    // The markdown persona beside them is still markdown.
    let docs = r.agents.iter().find(|a| a.name == "docs-writer").unwrap();
    assert_eq!(docs.format, pb::FileFormat::Markdown as i32);
    // Bundled agents are markdown too.
    let explore = r.agents.iter().find(|a| a.name == "explore").unwrap();
    assert_eq!(explore.format, pb::FileFormat::Markdown as i32);

    // Bad files are error diagnostics, never a failed listing.
    let broken = diag(&r, "broken.toml");
    assert_eq!(broken.len(), 1);
    assert_eq!(broken[0].code, "toml_syntax");
    assert_eq!(broken[0].line, Some(3));
    assert_eq!(broken[0].severity, pb::Severity::Error as i32);
    let silent = diag(&r, "no-instructions.toml");
    assert_eq!(silent[0].code, "missing_instructions");
    let listy = diag(&r, "list-instructions.toml");
    assert_eq!(listy[0].code, "invalid_field");
    assert_eq!(listy[0].line, Some(3));
    assert!(listy[0].message.contains("developer_instructions"));
    for gone in ["broken", "silent", "listy"] {
        assert!(!r.agents.iter().any(|a| a.name == gone), "{gone} loaded");
    }

    // ResolveAgent: the instructions are the persona body of the composed prompt.
    let eff = effective_of(&s, &ws, "rust-reviewer").await;
    assert!(eff.system_prompt.starts_with("You review a Rust change."));
}

#[tokio::test]
async fn toml_files_outside_codex_dirs_are_not_agents() {
    let s = start().await;
    let claude = s.home().join(".claude/agents");
    std::fs::create_dir_all(&claude).unwrap();
    std::fs::copy(fixture("codex/reviewer.toml"), claude.join("reviewer.toml")).unwrap();
    let r = list_all(&s, Path::new(""), false).await;
    assert!(!r.agents.iter().any(|a| a.name == "rust-reviewer"));
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    // In the user's Codex dir they are.
    copy_tree(&fixture("codex/team"), &s.home().join(".codex/agents/team"));
    let reload = s
        .client
        .clone()
        .reload_agents(pb::ReloadAgentsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let r = list_all(&s, Path::new(""), false).await;
    assert_eq!(r.registry_version, reload.registry_version);
    let e = r.agents.iter().find(|a| a.name == "explorer").unwrap();
    assert_eq!(e.source, pb::Source::User as i32);
    assert_eq!(e.format, pb::FileFormat::Toml as i32);
}

#[tokio::test]
async fn gemini_fields_remote_agents_and_tool_patterns() {
    let s = start().await;
    let ws = s.ws("proj");
    copy_tree(&fixture("gemini"), &ws.join(".gemini/agents"));
    let r = list_all(&s, &ws, false).await;
    let res = r.agents.iter().find(|a| a.name == "researcher").unwrap();
    assert_eq!(res.temperature, Some(0.2));
    assert_eq!(res.timeout_mins, Some(5));
    assert_eq!(res.max_turns, Some(20));
    assert!(!res.remote);
    assert_eq!(
        res.tools.as_ref().unwrap().values,
        [
            "read_file",
            "grep_search",
            "mcp_docs_*",
            "mcp_*",
            "submit_result"
        ]
    );
    assert_eq!(res.family, ".gemini");
    // Unset fields stay unset.
    let explore = r.agents.iter().find(|a| a.name == "explore").unwrap();
    assert_eq!((explore.temperature, explore.timeout_mins), (None, None));

    // A temperature out of range is a warning; the agent loads without it.
    let hot = r.agents.iter().find(|a| a.name == "hot").unwrap();
    assert_eq!(hot.temperature, None);
    let d = diag(&r, "hot.md");
    assert_eq!(d.len(), 1);
    assert_eq!(
        (d[0].code.as_str(), d[0].severity, d[0].line),
        ("invalid_temperature", pb::Severity::Warning as i32, Some(4))
    );

    // The patterns reach the effective agent verbatim.
    let resolve = |name: &str| pb::ResolveAgentRequest {
        name: name.into(),
        workspace: ws.display().to_string(),
        ..Default::default()
    };
    let eff = s
        .client
        .clone()
        .resolve_agent(resolve("researcher"))
        .await
        .unwrap()
        .into_inner()
        .effective
        .unwrap();
    let Some(pb::effective_tools::Kind::Only(tools)) = eff.tools.unwrap().kind else {
        panic!("an explicit tool list")
    };
    assert_eq!(
        tools.values,
        [
            "read_file",
            "grep_search",
            "mcp_docs_*",
            "mcp_*",
            "submit_result"
        ]
    );

    // A remote agent is listed and resolvable …
    let remote = r.agents.iter().find(|a| a.name == "remote-helper").unwrap();
    assert!(remote.remote);
    let extra: serde_json::Value = serde_json::from_str(&remote.extra_json).unwrap();
    assert_eq!(
        extra["agent_card_url"],
        "https://agents.example.com/helper/.well-known/agent.json"
    );
    let got = s
        .client
        .clone()
        .resolve_agent(resolve("remote-helper"))
        .await
        .unwrap()
        .into_inner();
    assert!(got.agent.unwrap().remote);
    // … but, from a project directory, not spawnable (it would let the workspace choose the
    // URL agentry calls), and no worker row is written.
    let e = s
        .client
        .clone()
        .spawn_worker(pb::SpawnWorkerRequest {
            agent: "remote-helper".into(),
            prompt: "help".into(),
            workspace: ws.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_status(
        &e,
        Code::FailedPrecondition,
        "REMOTE_AGENT",
        "Cannot spawn 'remote-helper': it is a remote (A2A) agent defined in a project directory, \
         and a project file may not make agentry call a URL it chooses. Define it in a user or \
         configured directory, or set a2a.allow_project_remotes: true.",
    );
    let workers = s
        .client
        .clone()
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert!(workers.is_empty(), "{workers:?}");
    // The unknown-agent check still comes first.
    let e = s
        .client
        .clone()
        .spawn_worker(pb::SpawnWorkerRequest {
            agent: "remote-helpr".into(),
            prompt: "help".into(),
            workspace: ws.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

/// The agent's `timeout_mins` bounds its worker when it is the smallest of the three. Paused
/// time: the server runs on this test's runtime, so minutes pass at once.
#[tokio::test(start_paused = true)]
async fn the_smallest_of_request_agent_and_executor_timeouts_applies() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config_in(dir.path());
    let runtime = script(
        &dir.path().join("bin"),
        "run-agent",
        "cat >/dev/null; sleep 30",
    );
    cfg.executor.command = vec![runtime.display().to_string()];
    cfg.executor.kill_grace = Duration::from_millis(100);
    let agents = dir.path().join("agents");
    persona(
        &agents,
        "slow.md",
        "name: slow\ndescription: d\ntimeout_mins: 1",
        "be slow",
    );
    cfg.agent_dirs = vec![agentry::config::AgentDir {
        path: agents,
        recursive: false,
    }];
    let s = start_in(dir, cfg).await;
    let run = |agent: &str, timeout: Option<u64>| pb::SpawnWorkerRequest {
        agent: agent.into(),
        prompt: "go".into(),
        wait: true,
        timeout: timeout.map(|secs| prost_types::Duration {
            seconds: secs as i64,
            nanos: 0,
        }),
        ..Default::default()
    };
    let error = |r: pb::SpawnWorkerResponse| {
        let w = r.worker.unwrap();
        assert_eq!(w.state, pb::WorkerState::Failed as i32, "{w:?}");
        w.error.unwrap()
    };
    let mut c = s.client.clone();
    // The agent's minute beats the request's 30 minutes and the executor's 10.
    let r = c.spawn_worker(run("slow", Some(1800))).await.unwrap();
    assert!(error(r.into_inner()).starts_with("timed out after 1m"));
    // A shorter request timeout beats the agent's.
    let r = c.spawn_worker(run("slow", Some(20))).await.unwrap();
    assert!(error(r.into_inner()).starts_with("timed out after 20s"));
    // Without an agent timeout the request's applies.
    let r = c.spawn_worker(run("quick_task", Some(120))).await.unwrap();
    assert!(error(r.into_inner()).starts_with("timed out after 2m"));
}

#[tokio::test]
async fn entries_that_are_not_files_and_names_that_are_not_utf8() {
    let s = start().await;
    let agents = s.home().join(".claude/agents");
    std::fs::create_dir_all(agents.join("x.md")).unwrap();
    nix::unistd::mkfifo(&agents.join("pipe.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    simple(&agents, "ok.md", "ok", "fine");
    // A file whose name is not UTF-8, and that is not a valid persona either.
    let odd = agents.join(std::ffi::OsStr::from_bytes(b"caf\xe9.md"));
    std::fs::write(&odd, "---\nname: odd\n---\n").unwrap();
    // And a valid one, whose path the API must show without replacement characters.
    let fine = agents.join(std::ffi::OsStr::from_bytes(b"na\xefve.md"));
    std::fs::write(&fine, "---\nname: naive\ndescription: d\n---\n").unwrap();

    // The home directory's snapshot was built at start-up; the files above reach it through
    // the watcher, so the listing is awaited until it holds all five of them.
    let r = eventually("the five new entries", Duration::from_secs(5), || async {
        let r = list_all(&s, Path::new(""), false).await;
        let seen = r
            .agents
            .iter()
            .filter(|a| ["ok", "naive"].contains(&a.name.as_str()));
        (seen.count() == 2 && r.diagnostics.len() == 3)
            .then_some(r.clone())
            .ok_or(format!("{:?} {:?}", names(&r.agents), r.diagnostics))
    })
    .await;
    let mut got: Vec<_> = r
        .diagnostics
        .iter()
        .map(|d| {
            (
                d.path.rsplit('/').next().unwrap().to_owned(),
                d.code.clone(),
                d.severity,
            )
        })
        .collect();
    got.sort();
    let warn = pb::Severity::Warning as i32;
    assert_eq!(
        got,
        [
            (
                "caf\\xe9.md".to_owned(),
                "missing_description".to_owned(),
                pb::Severity::Error as i32
            ),
            ("pipe.md".to_owned(), "not_a_file".to_owned(), warn),
            ("x.md".to_owned(), "not_a_file".to_owned(), warn),
        ]
    );
    let fifo = r
        .diagnostics
        .iter()
        .find(|d| d.path.ends_with("pipe.md"))
        .unwrap();
    assert!(fifo.message.contains("FIFO"), "{}", fifo.message);
    let dir = r
        .diagnostics
        .iter()
        .find(|d| d.path.ends_with("x.md"))
        .unwrap();
    assert!(dir.message.contains("directory"), "{}", dir.message);
    let naive = r.agents.iter().find(|a| a.name == "naive").unwrap();
    assert!(
        naive.file_path.ends_with("/na\\xefve.md"),
        "{}",
        naive.file_path
    );
    assert!(r.agents.iter().any(|a| a.name == "ok"));
    let everything = format!("{r:#?}");
    let replaced: Vec<&str> = everything
        .lines()
        .filter(|l| l.contains('\u{fffd}'))
        .collect();
    assert!(
        replaced.is_empty(),
        "a replacement character in {replaced:?}"
    );
}

/// A Claude Code subagent file as its documentation shows it today (docs §2.7): the spawn tool
/// syntax, effort, permission mode, and the fields agentry does not honour reported by name.
#[tokio::test]
async fn claude_code_2026_subagents_are_read_as_written_or_reported() {
    let s = start().await;
    let ws = s.ws("proj");
    persona(
        &ws.join(".claude/agents"),
        "builder.md",
        "name: builder\ndescription: builds\ntools: Read, Grep, Edit, Bash(git diff:*), Agent(explore, plan)\npermissionMode: acceptEdits\neffort: max\nskills: [lint]\nmcpServers:\n  - github\nmemory: project\nisolation: worktree\nbackground: true\nhooks: {PreToolUse: []}\ndisallowedTools: Bash(rm -rf:*)",
        "Build it.",
    );
    let r = list_all(&s, &ws, false).await;
    let unsupported: Vec<(String, Option<u32>)> = diag(&r, "builder.md")
        .iter()
        .filter(|d| d.code == "unsupported_field")
        .map(|d| (d.message.split('`').nth(1).unwrap().to_owned(), d.line))
        .collect();
    // `mcpServers` is honoured (docs §2.9); `hooks` is not, and says so.
    assert_eq!(unsupported, [("hooks".to_owned(), Some(13))]);
    let eff = effective_of(&s, &ws, "builder").await;
    let Some(pb::effective_tools::Kind::Only(tools)) = eff.tools.unwrap().kind else {
        panic!("an explicit tool list")
    };
    assert_eq!(
        tools.values,
        [
            "Read",
            "Grep",
            "Edit",
            "Bash(git diff:*)",
            "task",
            "submit_result"
        ]
    );
    assert_eq!(eff.spawns, "explore,plan");
    assert_eq!(eff.thinking_level, pb::ThinkingLevel::Xhigh as i32);
    assert_eq!(eff.permission_mode.as_deref(), Some("acceptEdits"));
    // Permission patterns stay verbatim in the tools, and are also given name and pattern apart:
    // the allow rule of the tools, the deny rule of disallowedTools (it restricts Bash).
    let rules: Vec<(&str, &str, &str, bool)> = eff
        .tool_rules
        .iter()
        .map(|r| {
            (
                r.entry.as_str(),
                r.name.as_str(),
                r.pattern.as_str(),
                r.deny,
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            ("Bash(git diff:*)", "Bash", "git diff:*", false),
            ("Bash(rm -rf:*)", "Bash", "rm -rf:*", true)
        ]
    );
    let servers = eff.mcp_servers.expect("the persona's MCP servers").servers;
    assert_eq!(servers.len(), 1);
    assert_eq!(
        (servers[0].name.as_str(), servers[0].inline),
        ("github", false)
    );
    let builder = r.agents.iter().find(|a| a.name == "builder").unwrap();
    assert!(
        builder.background,
        "background: true is surfaced on the agent"
    );

    // permissionMode: plan is plan mode: the plan-mode tools and prompt, no spawning.
    persona(
        &ws.join(".claude/agents"),
        "planner.md",
        "name: planner\ndescription: plans\ntools: Read, Edit, Agent\npermissionMode: plan",
        "Plan it.",
    );
    s.client
        .clone()
        .reload_agents(pb::ReloadAgentsRequest {
            workspace: ws.display().to_string(),
        })
        .await
        .unwrap();
    let eff = effective_of(&s, &ws, "planner").await;
    assert_eq!(eff.mode, pb::Mode::Plan as i32);
    assert_eq!(eff.spawns, "");
    assert!(
        eff.system_prompt.starts_with("You are in plan mode."),
        "{}",
        eff.system_prompt
    );
}

/// The effective agent of `name` resolved in `ws`.
async fn effective_of(s: &TestServer, ws: &Path, name: &str) -> pb::EffectiveAgent {
    s.client
        .clone()
        .resolve_agent(pb::ResolveAgentRequest {
            name: name.into(),
            workspace: ws.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .effective
        .unwrap()
}

/// The effective prompt of `name` resolved in `ws`.
async fn prompt_of(s: &TestServer, ws: &Path, name: &str) -> String {
    effective_of(s, ws, name).await.system_prompt
}

fn skill(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    std::fs::write(dir.join(name).join("SKILL.md"), text).unwrap();
}

#[tokio::test]
async fn skills_are_found_like_agents_and_composed_after_the_body() {
    let s = start().await;
    let ws = s.ws("proj");
    let sub = ws.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    // The nearest project dir wins over the user dir; a skill only the user has is found there.
    skill(
        &ws.join(".claude/skills"),
        "lint",
        "---\nname: lint\ndescription: Lints\n---\nRun the project linter.",
    );
    skill(&s.home().join(".claude/skills"), "lint", "User lint.");
    skill(
        &s.home().join(".claude/skills"),
        "style",
        "Follow the house style.",
    );
    persona(
        &ws.join(".claude/agents"),
        "builder.md",
        "name: builder\ndescription: builds\nskills: [style, lint, nope, ../escape]",
        "Build it.",
    );
    let r = list_all(&s, &sub, false).await;
    assert_eq!(
        prompt_of(&s, &sub, "builder").await,
        "Build it.\n\n## Skill: style\n\nFollow the house style.\n\n## Skill: lint\n\nRun the project linter."
    );
    let missing: Vec<(Option<u32>, &str)> = diag(&r, "builder.md")
        .iter()
        .filter(|d| d.code == "missing_skill")
        .map(|d| {
            assert_eq!(d.severity, pb::Severity::Warning as i32);
            (d.line, d.message.as_str())
        })
        .collect();
    assert_eq!(missing.len(), 2, "{missing:?}");
    assert_eq!(missing[0].0, Some(4));
    assert!(
        missing[0]
            .1
            .starts_with("skill \"nope\" not found: no nope/SKILL.md in ")
            && missing[0].1.contains(".claude/skills"),
        "{}",
        missing[0].1
    );
    assert_eq!(
        missing[1].1,
        "skill \"../escape\" cannot name a directory (it holds a path separator); ignored"
    );

    // Editing a skill is seen by the watcher: a new prompt and a new registry version.
    let before = r.registry_version.clone();
    skill(&ws.join(".claude/skills"), "lint", "Run clippy.");
    eventually("the edited skill", Duration::from_secs(10), || {
        let (s, sub) = (&s, &sub);
        async move {
            let p = prompt_of(s, sub, "builder").await;
            if p.ends_with("## Skill: lint\n\nRun clippy.") {
                Ok(())
            } else {
                Err(p)
            }
        }
    })
    .await;
    assert_ne!(list_all(&s, &sub, false).await.registry_version, before);

    // A skill that cannot be used is a warning; the agent still loads.
    skill(
        &s.home().join(".claude/skills"),
        "empty",
        "---\nname: empty\n---\n",
    );
    persona(
        &ws.join(".claude/agents"),
        "other.md",
        "name: other\ndescription: o\nskills: empty",
        "Other.",
    );
    s.client
        .clone()
        .reload_agents(pb::ReloadAgentsRequest {
            workspace: sub.display().to_string(),
        })
        .await
        .unwrap();
    let r = list_all(&s, &sub, false).await;
    let d = diag(&r, "other.md");
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].message.starts_with("skill \"empty\": ")
            && d[0].message.ends_with(
                "the skill has no instructions (its body is empty); the agent runs without it"
            ),
        "{}",
        d[0].message
    );
    assert_eq!(prompt_of(&s, &sub, "other").await, "Other.");
}

/// The Claude Code 2026 corpus (`tests/fixtures/claude2026`, ten subagents and a skill written
/// for this test, using every Claude Code field of docs §2.7): read as a project's `.claude`
/// dir, every file loads, each field it does not honour is said at its line, and each agent
/// resolves to the effective agent recorded in `expected.json` beside the files. Run with
/// `AGENTRY_BLESS=1` to rewrite that file after a deliberate change, and review its diff.
#[tokio::test]
async fn the_claude_code_2026_corpus_resolves_to_its_expected_effective_agents() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude2026");
    let s = start().await;
    let ws = s.ws("proj");
    copy_tree(&root.join("agents"), &ws.join(".claude/agents"));
    copy_tree(&root.join("skills"), &ws.join(".claude/skills"));
    let listed = list_all(&s, &ws, false).await;
    let mut files: Vec<String> = std::fs::read_dir(root.join("agents"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 10, "{files:?}");
    let mut got = serde_json::Map::new();
    for file in &files {
        let name = file.trim_end_matches(".md");
        let agent = listed
            .agents
            .iter()
            .find(|a| a.name == name)
            .unwrap_or_else(|| panic!("{file} did not load: {:?}", diag(&listed, file)));
        let eff = effective_of(&s, &ws, name).await;
        let tools = match eff.tools.unwrap().kind.unwrap() {
            pb::effective_tools::Kind::Only(l) => serde_json::json!({"only": l.values}),
            pb::effective_tools::Kind::AllExcept(l) => serde_json::json!({"all_except": l.values}),
        };
        let skills: Vec<&str> = eff
            .system_prompt
            .lines()
            .filter_map(|l| l.strip_prefix("## Skill: "))
            .collect();
        let servers: Vec<String> = eff
            .mcp_servers
            .map(|l| {
                l.servers
                    .iter()
                    .map(|s| match s.inline {
                        true => format!("{} (inline: {})", s.name, s.command.join(" ")),
                        false => s.name.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let diagnostics: Vec<String> = diag(&listed, file)
            .iter()
            .map(|d| {
                let message = d.message.replace(&ws.display().to_string(), "$WORKSPACE");
                format!("{}:{} {message}", d.line.unwrap_or(0), d.code)
            })
            .collect();
        got.insert(
            name.to_owned(),
            serde_json::json!({
                "diagnostics": diagnostics,
                "tools": tools,
                "tool_rules": eff.tool_rules.iter().map(|r| {
                    format!("{} {} {:?}", if r.deny { "deny" } else { "allow" }, r.name, r.pattern)
                }).collect::<Vec<_>>(),
                "spawns": eff.spawns,
                "model": eff.model,
                "thinking_level": pb::ThinkingLevel::try_from(eff.thinking_level).unwrap().as_str_name(),
                "permission_mode": eff.permission_mode,
                "max_turns": eff.max_turns,
                "mode": pb::Mode::try_from(eff.mode).unwrap().as_str_name(),
                "skills_composed": skills,
                "mcp_servers": servers,
                "background": agent.background,
                "isolation": agent.isolation,
                "memory": agent.memory,
                "prompt_starts": eff.system_prompt.lines().next().unwrap_or_default(),
            }),
        );
    }
    let got = serde_json::Value::Object(got);
    let expected_path = root.join("expected.json");
    if std::env::var_os("AGENTRY_BLESS").is_some() {
        std::fs::write(
            &expected_path,
            serde_json::to_string_pretty(&got).unwrap() + "\n",
        )
        .unwrap();
    }
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&expected_path).unwrap()).unwrap();
    for (name, want) in expected.as_object().unwrap() {
        assert_eq!(&got[name], want, "effective agent of {name}");
    }
    assert_eq!(got, expected);
}

/// A skill a plugin installs (`<installPath>/skills/<name>/SKILL.md`, docs §2.8) is found after
/// the project and user skill dirs, and composed like any other.
#[tokio::test]
async fn a_plugins_skills_are_found_after_the_project_and_user_dirs() {
    let s = start().await;
    let ws = s.ws("proj");
    let plug = s.dir.path().join("plug");
    skill(
        &plug.join("skills"),
        "deploy",
        "Deploy with the plugin's script.",
    );
    skill(&plug.join("skills"), "lint", "The plugin's lint.");
    skill(&s.home().join(".claude/skills"), "lint", "The user's lint.");
    std::fs::create_dir_all(s.home().join(".claude/plugins")).unwrap();
    std::fs::write(
        s.home().join(".claude/plugins/installed_plugins.json"),
        serde_json::json!({
            "version": 2,
            "plugins": {"ops@market": [{"scope": "user", "installPath": plug}]}
        })
        .to_string(),
    )
    .unwrap();
    persona(
        &ws.join(".claude/agents"),
        "shipper.md",
        "name: shipper\ndescription: ships\nskills: deploy, lint",
        "Ship it.",
    );
    s.client
        .clone()
        .reload_agents(pb::ReloadAgentsRequest {
            workspace: ws.display().to_string(),
        })
        .await
        .unwrap();
    assert_eq!(
        prompt_of(&s, &ws, "shipper").await,
        "Ship it.\n\n## Skill: deploy\n\nDeploy with the plugin's script.\n\n## Skill: lint\n\nThe user's lint."
    );
    let r = list_all(&s, &ws, false).await;
    assert!(
        diag(&r, "shipper.md").is_empty(),
        "{:?}",
        diag(&r, "shipper.md")
    );
}

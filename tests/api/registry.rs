//! ListAgents / ResolveAgent / ReloadAgents / health through gRPC.

use std::time::Duration;

use agentry::grpc::pb;
use tonic::Code;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

use crate::helpers::*;

fn resolve_req(name: &str, ws: &std::path::Path) -> pb::ResolveAgentRequest {
    pb::ResolveAgentRequest {
        name: name.to_owned(),
        workspace: ws.display().to_string(),
        mode: pb::Mode::Default as i32,
        output_schema: None,
    }
}

#[tokio::test]
async fn precedence_across_all_sources() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config_in(dir.path());
    let home = dir.path().join("home");
    let ws = dir.path().join("ws/proj");
    std::fs::create_dir_all(&ws).unwrap();
    let extra = dir.path().join("extra");
    cfg.agent_dirs = vec![agentry::config::AgentDir {
        path: extra.clone(),
        recursive: false,
    }];
    // Every source defines `dup`; each also defines a unique marker.
    let sources = [
        ws.join(".xcsh/agents"),
        home.join(".xcsh/agent/agents"),
        ws.join(".claude/agents"),
        home.join(".claude/agents"),
        ws.join(".codex/agents"),
        home.join(".codex/agents"),
        ws.join(".gemini/agents"),
        home.join(".gemini/agents"),
        dir.path().join("plug-project/agents"),
        dir.path().join("plug-user/agents"),
        extra.clone(),
    ];
    for (i, s) in sources.iter().enumerate() {
        simple(s, "dup.md", "dup", &format!("from source {i}"));
    }
    // `explore` on disk beats the bundled one.
    simple(&extra, "explore.md", "explore", "local explore");
    std::fs::create_dir_all(home.join(".claude/plugins")).unwrap();
    std::fs::write(
        home.join(".claude/plugins/installed_plugins.json"),
        serde_json::json!({
            "version": 2,
            "plugins": {
                "user-plug@market": [{"scope": "user", "installPath": dir.path().join("plug-user")}],
                "proj-plug@some@market": [{"scope": "project", "installPath": dir.path().join("plug-project")}],
                "broken": [{"installPath": "/x"}]
            }
        })
        .to_string(),
    )
    .unwrap();
    let s = start_in(dir, cfg).await;

    let r = list_all(&s, &ws, true).await;
    let dup = r.agents.iter().find(|a| a.name == "dup").unwrap();
    assert_eq!(dup.description, "from source 0");
    assert_eq!(dup.source, pb::Source::Project as i32);
    assert_eq!(dup.family, ".xcsh");
    let order: Vec<_> = r
        .shadowed
        .iter()
        .filter(|a| a.name == "dup")
        .map(|a| a.description.clone())
        .collect();
    let expected: Vec<_> = (1..sources.len())
        .map(|i| format!("from source {i}"))
        .collect();
    assert_eq!(order, expected, "shadowed in precedence order");
    let winner_path = sources[0].join("dup.md").display().to_string();
    assert!(
        r.shadowed
            .iter()
            .filter(|a| a.name == "dup")
            .all(|a| a.shadowed_by == winner_path)
    );
    let plugin = r
        .shadowed
        .iter()
        .find(|a| a.description == "from source 8")
        .unwrap();
    assert_eq!(plugin.source, pb::Source::Plugin as i32);
    assert_eq!(plugin.family, "proj-plug@some");
    let explore = r.agents.iter().find(|a| a.name == "explore").unwrap();
    assert_eq!(explore.source, pb::Source::Dir as i32);
    assert!(
        r.shadowed
            .iter()
            .any(|a| a.name == "explore" && a.source == pb::Source::Bundled as i32)
    );
    // The broken plugin entry is a warning, not a failure.
    assert!(
        r.diagnostics
            .iter()
            .any(|d| d.code == "plugin_registry" && d.message.contains("broken"))
    );
    // Without a workspace, the user dir of .xcsh wins.
    let r = list_all(&s, std::path::Path::new(""), false).await;
    let dup = r.agents.iter().find(|a| a.name == "dup").unwrap();
    assert_eq!(dup.description, "from source 1");
    assert_eq!(dup.source, pb::Source::User as i32);
}

#[tokio::test]
async fn nearest_project_dir_wins_and_names_are_case_sensitive() {
    let s = start().await;
    let far = s.ws("a");
    let near = s.ws("a/b/c");
    simple(&far.join(".claude/agents"), "x.md", "x", "far");
    simple(&near.join("../.claude/agents"), "x.md", "x", "near");
    simple(&near.join("../.claude/agents"), "t.md", "Task", "capital");
    let r = list_all(&s, &near, true).await;
    let x = r.agents.iter().find(|a| a.name == "x").unwrap();
    assert_eq!(x.description, "near");
    // Only the nearest dir of a family is read: the farther one is not even shadowed.
    assert!(!r.shadowed.iter().any(|a| a.name == "x"));
    assert!(r.agents.iter().any(|a| a.name == "Task"));
    assert!(r.agents.iter().any(|a| a.name == "task"));
    let t = s
        .client
        .clone()
        .resolve_agent(resolve_req("Task", &near))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(t.agent.unwrap().description, "capital");
}

#[tokio::test]
async fn byte_order_inside_a_directory_and_duplicate_names() {
    let s = start().await;
    let ws = s.ws("p");
    let d = ws.join(".claude/agents");
    simple(&d, "b.md", "same", "from b");
    simple(&d, "B.md", "same", "from B");
    simple(&d, "a.md", "same", "from a");
    simple(&d, "notes.txt", "ignored", "not markdown");
    simple(&d, "upper.MD", "upper", "wrong suffix");
    let r = list_all(&s, &ws, true).await;
    let same = r.agents.iter().find(|a| a.name == "same").unwrap();
    // Byte order: "B.md" < "a.md" < "b.md".
    assert_eq!(same.description, "from B");
    let dups: Vec<_> = r
        .diagnostics
        .iter()
        .filter(|d| d.code == "duplicate_name")
        .map(|d| d.path.rsplit('/').next().unwrap().to_owned())
        .collect();
    assert_eq!(dups, ["a.md", "b.md"]);
    assert!(
        !r.agents
            .iter()
            .any(|a| a.name == "ignored" || a.name == "upper")
    );
}

#[tokio::test]
async fn a_name_repeated_in_a_later_directory_is_shadowed_and_its_repeat_names_that_directory() {
    let s = start().await;
    let ws = s.ws("p");
    let project = ws.join(".claude/agents");
    let user = s.home().join(".claude/agents");
    let winner = simple(&project, "x.md", "x", "from the project");
    let first = simple(&user, "x1.md", "x", "first in user");
    let second = simple(&user, "x2.md", "x", "second in user");
    let r = list_all(&s, &ws, true).await;

    let x: Vec<_> = r.agents.iter().filter(|a| a.name == "x").collect();
    assert_eq!(x.len(), 1);
    assert_eq!(x[0].description, "from the project");
    let lost: Vec<_> = r
        .shadowed
        .iter()
        .filter(|a| a.name == "x")
        .map(|a| (a.description.as_str(), a.shadowed_by.clone()))
        .collect();
    let by = winner.display().to_string();
    assert_eq!(
        lost,
        [("first in user", by.clone()), ("second in user", by)]
    );
    // The repeat inside the user dir names the first definition there, not the winner.
    let dups: Vec<_> = r
        .diagnostics
        .iter()
        .filter(|d| d.code == "duplicate_name")
        .map(|d| (d.path.clone(), d.message.clone()))
        .collect();
    assert_eq!(
        dups,
        [(
            second.display().to_string(),
            format!(
                "agent \"x\" is also defined by {} in the same directory, which wins",
                first.display()
            )
        )]
    );
    let resolved = s
        .client
        .clone()
        .resolve_agent(resolve_req("x", &ws))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resolved.agent.unwrap().description, "from the project");
}

#[tokio::test]
async fn parser_rules_through_the_api() {
    let s = start().await;
    let ws = s.ws("p");
    let d = ws.join(".claude/agents");
    std::fs::create_dir_all(&d).unwrap();
    // The .xcsh family loses its HTML comments (docs §2.1), so a comment above the frontmatter
    // is no obstacle there; a .claude file keeps it, and then has no frontmatter.
    let native = ws.join(".xcsh/agents");
    std::fs::create_dir_all(&native).unwrap();
    std::fs::write(
        d.join("commented.md"),
        "<!-- header -->\n---\nname: commented\ndescription: d\n---\nb\n",
    )
    .unwrap();
    std::fs::write(
        native.join("bom.md"),
        "\u{feff}\r\n<!-- header -->\r\n---\r\nname: bom\r\ndescription: crlf file\r\ntools: read, task\r\nthinking: high\r\n---\r\nBody line\r\n",
    )
    .unwrap();
    std::fs::write(
        d.join("fallback.md"),
        "---\nname: fallback\ndescription: Use when: things break\nmaxTurns: 7\n  nested: ignored\ncolor: red\n---\nfallback body",
    )
    .unwrap();
    std::fs::write(
        d.join("full.md"),
        "---\nname: full\ndescription: all fields\nwhen-to-use: first line\ntools: [read]\ndisallowedTools: bash\nspawns: explore, plan\nmodel: a, b\nthinkingLevel: xhigh\noutput: {type: object}\npermissionMode: read-only\nmax_turns: 3\ncriticalReminder: be careful\nx-custom: {a: 1}\n---\n",
    )
    .unwrap();
    std::fs::write(
        d.join("unclosed.md"),
        "---\nname: unclosed\ndescription: d\n",
    )
    .unwrap();
    std::fs::write(d.join("noname.md"), "---\ndescription: d\n---\n").unwrap();
    std::fs::write(
        d.join("badthink.md"),
        "---\nname: badthink\ndescription: d\nthinking: loud\n---\n",
    )
    .unwrap();
    std::fs::write(d.join("binary.md"), b"---\nname: \xff\xfe\n---\n").unwrap();
    std::fs::write(d.join("big.md"), vec![b'x'; (1 << 20) + 1]).unwrap();

    let r = list_all(&s, &ws, false).await;
    let get = |n: &str| r.agents.iter().find(|a| a.name == n).cloned();
    let bom = get("bom").expect("BOM/CRLF file loads");
    assert_eq!(bom.description, "crlf file");
    assert_eq!(bom.system_prompt, "Body line");
    assert_eq!(bom.tools.unwrap().values, ["read", "task", "submit_result"]);
    assert_eq!(bom.spawns.as_deref(), Some("*"), "compatibility rule");
    assert_eq!(bom.thinking_level, pb::ThinkingLevel::High as i32);

    let fb = get("fallback").expect("fallback loads");
    assert_eq!(fb.description, "Use when: things break");
    assert_eq!(fb.max_turns, Some(7));
    assert_eq!(fb.system_prompt, "fallback body");
    assert_eq!(fb.extra_json, r#"{"color":"red"}"#);

    let full = get("full").unwrap();
    assert_eq!(full.when_to_use.as_deref(), Some("first line"));
    assert_eq!(full.tools.unwrap().values, ["read", "submit_result"]);
    assert_eq!(full.disallowed_tools.unwrap().values, ["bash"]);
    assert_eq!(full.spawns.as_deref(), Some("explore,plan"));
    assert_eq!(full.model, ["a", "b"]);
    assert_eq!(full.thinking_level, pb::ThinkingLevel::Xhigh as i32);
    assert_eq!(full.output_schema.as_deref(), Some(r#"{"type":"object"}"#));
    assert_eq!(full.permission_mode.as_deref(), Some("read-only"));
    assert_eq!(full.max_turns, Some(3));
    assert_eq!(full.critical_reminder.as_deref(), Some("be careful"));
    assert_eq!(full.extra_json, r#"{"x-custom":{"a":1}}"#);
    assert_eq!(full.content_sha256.len(), 64);

    // Absent stays absent.
    let bad = get("badthink").expect("an invalid thinking level is only a warning");
    assert_eq!(bad.thinking_level, pb::ThinkingLevel::Unspecified as i32);
    assert!(bad.tools.is_none() && bad.spawns.is_none() && bad.max_turns.is_none());

    let diag = |file: &str| {
        r.diagnostics
            .iter()
            .filter(|d| d.path.ends_with(&format!("/{file}")))
            .map(|d| (d.code.clone(), d.severity, d.line))
            .collect::<Vec<_>>()
    };
    let (w, e) = (pb::Severity::Warning as i32, pb::Severity::Error as i32);
    assert_eq!(diag("fallback.md"), [("yaml_fallback".into(), w, Some(3))]);
    assert_eq!(
        diag("unclosed.md"),
        [("unclosed_frontmatter".into(), e, Some(1))]
    );
    assert_eq!(diag("noname.md"), [("missing_name".into(), e, Some(1))]);
    assert_eq!(diag("commented.md"), [("missing_name".into(), e, Some(1))]);
    assert_eq!(
        diag("badthink.md"),
        [("invalid_thinking_level".into(), w, Some(4))]
    );
    assert_eq!(diag("binary.md"), [("not_utf8".into(), e, Some(2))]);
    assert_eq!(diag("big.md"), [("too_large".into(), e, None)]);
    assert!(get("unclosed").is_none());
}

#[tokio::test]
async fn effective_agent_depth_plan_mode_and_schema_precedence() {
    let s = start_with(|c| {
        c.base_prompt = "BASE".into();
    })
    .await;
    let ws = s.ws("p");
    let d = ws.join(".claude/agents");
    persona(
        &d,
        "lead.md",
        "name: lead\ndescription: leads\ntools: read, bash\ndisallowed_tools: bash\nspawns: explore\ncritical_reminder: stay on task",
        "LEAD BODY",
    );
    persona(
        &d,
        "open.md",
        "name: open\ndescription: all tools\nspawns: '*'\ndisallowedTools: rm",
        "OPEN",
    );
    let mut c = s.client.clone();
    let eff = |r: pb::ResolveAgentResponse| r.effective.unwrap();
    let only = |t: Option<pb::EffectiveTools>| match t.unwrap().kind.unwrap() {
        pb::effective_tools::Kind::Only(l) => ("only", l.values),
        pb::effective_tools::Kind::AllExcept(l) => ("all_except", l.values),
    };

    // Depth 0 caller: child at depth 1 < max 2, keeps the spawn tool.
    let e = eff(c
        .resolve_agent(resolve_req("lead", &ws))
        .await
        .unwrap()
        .into_inner());
    assert_eq!(e.depth, 1);
    assert!(!e.at_max_depth);
    assert_eq!(
        only(e.tools.clone()),
        (
            "only",
            vec!["read".into(), "submit_result".into(), "task".into()]
        )
    );
    assert_eq!(e.spawns, "explore");
    assert_eq!(
        e.system_prompt,
        "BASE\n\nLEAD BODY\n\n<critical-reminder>\nstay on task\n</critical-reminder>"
    );
    let e = eff(c
        .resolve_agent(resolve_req("open", &ws))
        .await
        .unwrap()
        .into_inner());
    assert_eq!(only(e.tools), ("all_except", vec!["rm".into()]));
    assert_eq!(e.spawns, "*");

    // Caller at depth 1: the child is at max depth 2, loses the spawn tool and its spawns.
    let r = req(resolve_req("lead", &ws), &[("x-agentry-depth", "1")]);
    let e = eff(c.resolve_agent(r).await.unwrap().into_inner());
    assert_eq!((e.depth, e.at_max_depth), (2, true));
    assert_eq!(
        only(e.tools),
        ("only", vec!["read".into(), "submit_result".into()])
    );
    assert_eq!(e.spawns, "");
    let r = req(resolve_req("open", &ws), &[("x-agentry-depth", "1")]);
    let e = eff(c.resolve_agent(r).await.unwrap().into_inner());
    assert_eq!(
        only(e.tools),
        ("all_except", vec!["rm".into(), "task".into()])
    );

    // Plan mode: preamble + body, plan tools exactly, spawns cleared.
    let mut r = resolve_req("lead", &ws);
    r.mode = pb::Mode::Plan as i32;
    let e = eff(c.resolve_agent(r).await.unwrap().into_inner());
    assert_eq!(e.mode, pb::Mode::Plan as i32);
    assert!(
        e.system_prompt.starts_with("BASE\n\nYou are in plan mode."),
        "{}",
        e.system_prompt
    );
    assert!(e.system_prompt.contains("\n\nLEAD BODY"));
    assert_eq!(
        only(e.tools).1,
        ["read", "grep", "find", "ls", "lsp", "fetch", "web_search"]
    );
    assert_eq!(e.spawns, "");

    // Output schema precedence: the agent's own beats the request's.
    let mut r = resolve_req("explore", &ws);
    r.output_schema = Some(r#"{"type":"string"}"#.into());
    let e = eff(c.resolve_agent(r).await.unwrap().into_inner());
    assert_eq!(e.output_schema_source, pb::OutputSchemaSource::Agent as i32);
    assert!(e.output_schema.unwrap().contains("start_here"));
    let mut r = resolve_req("lead", &ws);
    r.output_schema = Some(r#"{"type":"string"}"#.into());
    let e = eff(c.resolve_agent(r).await.unwrap().into_inner());
    assert_eq!(
        e.output_schema_source,
        pb::OutputSchemaSource::Request as i32
    );
    assert_eq!(e.output_schema.as_deref(), Some(r#"{"type":"string"}"#));
    let e = eff(c
        .resolve_agent(resolve_req("lead", &ws))
        .await
        .unwrap()
        .into_inner());
    assert_eq!(
        e.output_schema_source,
        pb::OutputSchemaSource::Unspecified as i32
    );
    assert_eq!(e.output_schema, None);
}

/// ResolveAgent answers are encoded once per (snapshot, caller, mode, schema) and reused: each
/// of those still gets its own answer, a repeat gets the same one, and an edited file is seen.
#[tokio::test]
async fn repeated_resolves_answer_per_caller_and_see_edits() {
    let s = start().await;
    let ws = s.ws("cached");
    let d = ws.join(".claude/agents");
    persona(
        &d,
        "default.md",
        "name: default\ndescription: the coordinator",
        "COORD",
    );
    persona(
        &d,
        "lead.md",
        "name: lead\ndescription: leads\ntools: read\nspawns: '*'",
        "LEAD v1",
    );
    let resolve = |r: tonic::Request<pb::ResolveAgentRequest>| {
        let mut c = s.client.clone();
        async move { c.resolve_agent(r).await.unwrap().into_inner() }
    };
    let plain = || tonic::Request::new(resolve_req("lead", &ws));
    let first = resolve(plain()).await;
    assert_eq!(
        first,
        resolve(plain()).await,
        "a repeat gets the same answer"
    );
    let e = first.effective.clone().unwrap();
    assert_eq!(
        (e.depth, e.at_max_depth, e.spawns.as_str()),
        (1, false, "*")
    );

    // A deeper caller, plan mode and a request schema are other answers, and asking for them
    // leaves the first one as it was.
    let deep = resolve(req(resolve_req("lead", &ws), &[("x-agentry-depth", "1")])).await;
    let e = deep.effective.unwrap();
    assert_eq!((e.depth, e.at_max_depth, e.spawns.as_str()), (2, true, ""));
    let mut plan = resolve_req("lead", &ws);
    plan.mode = pb::Mode::Plan as i32;
    let e = resolve(tonic::Request::new(plan)).await.effective.unwrap();
    assert_eq!(e.mode, pb::Mode::Plan as i32);
    let mut schema = resolve_req("lead", &ws);
    schema.output_schema = Some(r#"{"type":"object"}"#.into());
    let e = resolve(tonic::Request::new(schema))
        .await
        .effective
        .unwrap();
    assert_eq!(e.output_schema.as_deref(), Some(r#"{"type":"object"}"#));
    assert_eq!(resolve(plain()).await, first);

    // The coordinator's catalog depends on what the caller may spawn.
    let coord = |md: Vec<(&'static str, &'static str)>| {
        let mut c = s.client.clone();
        let ws = ws.clone();
        async move {
            let r = req(resolve_req("default", &ws), &md);
            c.resolve_agent(r)
                .await
                .unwrap()
                .into_inner()
                .effective
                .unwrap()
                .system_prompt
        }
    };
    assert!(coord(vec![]).await.contains("`lead`"));
    let blocked = coord(vec![("x-agentry-blocked-agent", "lead")]).await;
    assert!(!blocked.contains("`lead`"), "{blocked}");
    assert!(coord(vec![]).await.contains("`lead`"));

    // An edit makes a new snapshot, whose answer is computed afresh.
    persona(
        &d,
        "lead.md",
        "name: lead\ndescription: leads\ntools: read\nspawns: '*'",
        "LEAD v2",
    );
    s.client
        .clone()
        .reload_agents(pb::ReloadAgentsRequest {
            workspace: ws.display().to_string(),
        })
        .await
        .unwrap();
    let edited = resolve(plain()).await;
    assert_ne!(edited.registry_version, first.registry_version);
    assert_eq!(edited.agent.unwrap().system_prompt, "LEAD v2");
    assert!(edited.effective.unwrap().system_prompt.ends_with("LEAD v2"));
}

#[tokio::test]
async fn catalog_respects_policy_reserved_and_default_prompt() {
    let s = start().await;
    let ws = s.ws("p");
    let d = ws.join(".claude/agents");
    persona(
        &d,
        "default.md",
        "name: default\ndescription: the coordinator",
        "COORD",
    );
    persona(
        &d,
        "helper.md",
        "name: helper\ndescription: helps\nwhen_to_use: |\n\n  When stuck.\n  More.",
        "",
    );
    let mut c = s.client.clone();
    let catalog = |md: Vec<(&'static str, &'static str)>| {
        let mut c = s.client.clone();
        let ws = ws.clone();
        async move {
            let r = req(
                pb::ListAgentsRequest {
                    workspace: ws.display().to_string(),
                    view: pb::AgentView::Catalog as i32,
                    ..Default::default()
                },
                &md,
            );
            c.list_agents(r).await.unwrap().into_inner()
        }
    };
    let r = catalog(vec![]).await;
    assert_eq!(
        names(&r.agents),
        [
            "helper",
            "explore",
            "plan",
            "designer",
            "task",
            "quick_task"
        ]
    );
    assert!(
        r.catalog_markdown
            .starts_with("- `helper` — helps When to use: When stuck.\n- `explore` — "),
        "{}",
        r.catalog_markdown
    );
    assert!(
        !r.catalog_markdown.contains("`reviewer`") && !r.catalog_markdown.contains("`default`")
    );
    let r = catalog(vec![("x-agentry-spawns", "plan, reviewer,helper")]).await;
    assert_eq!(names(&r.agents), ["helper", "plan"]);
    let r = catalog(vec![("x-agentry-spawns", "")]).await;
    assert!(r.agents.is_empty() && r.catalog_markdown.is_empty());
    let r = catalog(vec![("x-agentry-blocked-agent", "task")]).await;
    assert!(!names(&r.agents).contains(&"task".to_owned()));
    let r = catalog(vec![("x-agentry-depth", "2")]).await;
    assert!(r.agents.is_empty(), "at max depth nothing can be spawned");

    // Reserved agents still resolve; `default` gets the catalog in its prompt.
    let e = c
        .resolve_agent(req(
            resolve_req("default", &ws),
            &[("x-agentry-spawns", "helper")],
        ))
        .await
        .unwrap()
        .into_inner()
        .effective
        .unwrap();
    assert_eq!(
        e.system_prompt,
        "COORD\n\n- `helper` — helps When to use: When stuck."
    );
    assert!(c.resolve_agent(resolve_req("reviewer", &ws)).await.is_ok());
}

#[tokio::test]
async fn errors_have_codes_messages_and_details() {
    let s = start_with(|c| c.bundled_agents = false).await;
    let ws = s.ws("p");
    let mut c = s.client.clone();
    let e = c.resolve_agent(resolve_req("nope", &ws)).await.unwrap_err();
    assert_status(
        &e,
        Code::NotFound,
        "AGENT_NOT_FOUND",
        "Unknown agent \"nope\". Available: none",
    );
    simple(&ws.join(".claude/agents"), "b.md", "b", "d");
    simple(&ws.join(".claude/agents"), "a.md", "a", "d");
    c.reload_agents(pb::ReloadAgentsRequest::default())
        .await
        .unwrap();
    let e = c.resolve_agent(resolve_req("nope", &ws)).await.unwrap_err();
    assert_status(
        &e,
        Code::NotFound,
        "AGENT_NOT_FOUND",
        "Unknown agent \"nope\". Available: a, b",
    );

    let e = c.resolve_agent(resolve_req("", &ws)).await.unwrap_err();
    assert_bad_field(&e, "name");
    let e = c
        .resolve_agent(resolve_req("a", std::path::Path::new("relative/dir")))
        .await
        .unwrap_err();
    assert_bad_field(&e, "workspace");
    let e = c
        .resolve_agent(resolve_req("a", std::path::Path::new("/does/not/exist")))
        .await
        .unwrap_err();
    assert_bad_field(&e, "workspace");
    assert!(e.message().contains("does not exist"), "{e:?}");
    let mut r = resolve_req("a", &ws);
    r.output_schema = Some("{not json".into());
    assert_bad_field(&c.resolve_agent(r).await.unwrap_err(), "output_schema");
    let mut r = resolve_req("a", &ws);
    r.name = "x".repeat(200);
    assert_bad_field(&c.resolve_agent(r).await.unwrap_err(), "name");
    for (k, v) in [
        ("x-agentry-depth", "-1"),
        ("x-agentry-depth", "two"),
        ("x-agentry-blocked-agent", "a/b"),
    ] {
        let e = c
            .resolve_agent(req(resolve_req("a", &ws), &[(k, v)]))
            .await
            .unwrap_err();
        assert_bad_field(&e, k);
    }
    let list = |size: i32, token: &str| pb::ListAgentsRequest {
        workspace: ws.display().to_string(),
        page_size: size,
        page_token: token.to_owned(),
        ..Default::default()
    };
    assert_bad_field(&c.list_agents(list(-1, "")).await.unwrap_err(), "page_size");
    assert_bad_field(
        &c.list_agents(list(1001, "")).await.unwrap_err(),
        "page_size",
    );
    assert_bad_field(
        &c.list_agents(list(1, "forged")).await.unwrap_err(),
        "page_token",
    );
}

#[tokio::test]
async fn pagination_walks_every_agent_once() {
    let s = start().await;
    let ws = s.ws("p");
    for i in 0..25 {
        simple(
            &ws.join(".claude/agents"),
            &format!("a{i:02}.md"),
            &format!("a{i:02}"),
            "d",
        );
    }
    let mut c = s.client.clone();
    let pages = walk_pages(|page_token| {
        let (mut c, ws) = (c.clone(), ws.display().to_string());
        async move {
            let r = c
                .list_agents(pb::ListAgentsRequest {
                    workspace: ws,
                    page_size: 10,
                    page_token,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(r.total_size, 31);
            (names(&r.agents), r.next_page_token)
        }
    })
    .await;
    assert_eq!(pages.len(), 4);
    let seen = pages.concat();
    assert_eq!(seen.len(), 31);
    assert_eq!(seen[0], "a00");
    assert_eq!(seen[30], "quick_task");
    // A token is bound to its request parameters.
    let r = c
        .list_agents(pb::ListAgentsRequest {
            workspace: ws.display().to_string(),
            page_size: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e = c
        .list_agents(pb::ListAgentsRequest {
            workspace: String::new(),
            page_size: 10,
            page_token: r.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_bad_field(&e, "page_token");
}

#[tokio::test]
async fn workspace_outside_roots_is_denied() {
    let s = start_with(|c| {
        let root = c.home.clone().unwrap().parent().unwrap().join("ws/allowed");
        std::fs::create_dir_all(&root).unwrap();
        c.workspace_roots = vec![root];
    })
    .await;
    let inside = s.ws("allowed/proj");
    let outside = s.ws("other");
    let mut c = s.client.clone();
    c.resolve_agent(resolve_req("task", &inside)).await.unwrap();
    let e = c
        .resolve_agent(resolve_req("task", &outside))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    // A symlink into the root from outside resolves inside; one out of the root is refused.
    let link = s.dir.path().join("ws/allowed/escape");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let e = c
        .resolve_agent(resolve_req("task", &link))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
}

#[tokio::test]
async fn hot_reload_of_add_edit_and_delete() {
    let s = start().await;
    let ws = s.ws("hot/inner");
    let c = s.client.clone();
    let v0 = list_all(&s, &ws, false).await.registry_version;
    // Add: the project dir does not even exist yet.
    let file = simple(&ws.join("../.claude/agents"), "new.md", "newbie", "v1");
    let desc = |s: &TestServer| {
        let (s_client, ws) = (s.client.clone(), ws.clone());
        async move {
            let mut c = s_client;
            c.resolve_agent(resolve_req("newbie", &ws))
                .await
                .ok()
                .map(|r| r.into_inner().agent.unwrap().description)
        }
    };
    eventually("the added persona", Duration::from_secs(2), || async {
        let d = desc(&s).await;
        (d.as_deref() == Some("v1"))
            .then_some(())
            .ok_or(format!("{d:?}"))
    })
    .await;
    let v1 = list_all(&s, &ws, false).await.registry_version;
    assert_ne!(v0, v1);
    simple(file.parent().unwrap(), "new.md", "newbie", "v2");
    eventually("the edited persona", Duration::from_secs(2), || async {
        let d = desc(&s).await;
        (d.as_deref() == Some("v2"))
            .then_some(())
            .ok_or(format!("{d:?}"))
    })
    .await;
    std::fs::remove_file(&file).unwrap();
    eventually(
        "the deleted persona to go",
        Duration::from_secs(2),
        || async {
            match desc(&s).await {
                None => Ok(()),
                Some(d) => Err(d),
            }
        },
    )
    .await;
    assert_eq!(
        list_all(&s, &ws, false).await.registry_version,
        v0,
        "same set, same version"
    );
    // User dir created after start.
    simple(&s.home().join(".codex/agents"), "u.md", "user-agent", "u");
    eventually(
        "the agent of a user dir created after start",
        Duration::from_secs(2),
        || {
            let (mut c, ws) = (c.clone(), ws.clone());
            async move {
                c.resolve_agent(resolve_req("user-agent", &ws))
                    .await
                    .map(drop)
                    .map_err(|e| format!("{e:?}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn reload_returns_version_and_diagnostics() {
    let s = start().await;
    let ws = s.ws("p");
    std::fs::create_dir_all(ws.join(".claude/agents")).unwrap();
    std::fs::write(ws.join(".claude/agents/bad.md"), "no frontmatter").unwrap();
    let r = s
        .client
        .clone()
        .reload_agents(pb::ReloadAgentsRequest {
            workspace: ws.display().to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.registry_version,
        list_all(&s, &ws, false).await.registry_version
    );
    assert_eq!(r.diagnostics.len(), 1);
    assert_eq!(r.diagnostics[0].code, "missing_name");
}

#[tokio::test]
async fn health_goes_serving_after_first_discovery_and_not_serving_on_shutdown() {
    // A large extra dir makes the first discovery take long enough to observe NOT_SERVING.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config_in(dir.path());
    let big = dir.path().join("big");
    std::fs::create_dir_all(&big).unwrap();
    for i in 0..20_000 {
        std::fs::write(
            big.join(format!("a{i:05}.md")),
            format!("---\nname: a{i}\ndescription: d\ntools: [read, grep]\n---\nbody {i}\n"),
        )
        .unwrap();
    }
    cfg.agent_dirs = vec![agentry::config::AgentDir {
        path: big,
        recursive: false,
    }];
    let s = start_in(dir, cfg).await;
    let mut h = s.health.clone();
    let mut stream = h
        .watch(HealthCheckRequest {
            service: "agentry.v1.AgentRegistryService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap().status;
    assert_eq!(first, ServingStatus::NotServing as i32);
    let mut status = first;
    while status != ServingStatus::Serving as i32 {
        status = stream.message().await.unwrap().unwrap().status;
    }
    let overall = h
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(overall, ServingStatus::Serving as i32);
    let r = list_all(&s, std::path::Path::new(""), false).await;
    assert_eq!(r.total_size, 20_006);
    let stopper = tokio::spawn(s.stop());
    let next = stream.message().await.unwrap().unwrap().status;
    assert_eq!(next, ServingStatus::NotServing as i32);
    drop(stream);
    stopper.await.unwrap().unwrap();
}

#[tokio::test]
async fn concurrent_calls_on_one_connection_each_get_their_own_reply() {
    // The replies of calls that finish together leave in one write (BatchedWrites), and one
    // over 64 KiB is not held back; each caller must still get its own, whole.
    let s = start().await;
    let ws = s.ws("proj");
    let agents = ws.join(".claude/agents");
    for i in 0..32 {
        simple(
            &agents,
            &format!("a{i}.md"),
            &format!("agent-{i}"),
            &format!("marker {i}"),
        );
    }
    let big = "a large persona body line\n".repeat(4096);
    persona(&agents, "big.md", "name: big\ndescription: large", &big);
    let mut calls = tokio::task::JoinSet::new();
    for round in 0..4 {
        for i in 0..32 {
            let (mut c, r) = (s.client.clone(), resolve_req(&format!("agent-{i}"), &ws));
            calls.spawn(async move {
                let a = c.resolve_agent(r).await.unwrap().into_inner();
                (i, a.agent.unwrap().description)
            });
        }
        let (mut c, r, big) = (s.client.clone(), resolve_req("big", &ws), big.clone());
        calls.spawn(async move {
            let a = c.resolve_agent(r).await.unwrap().into_inner();
            let prompt = a.effective.unwrap().system_prompt;
            assert!(
                prompt.len() > 64 * 1024 && prompt.contains(big.trim_end()),
                "round {round}: the large prompt came whole"
            );
            (usize::MAX, "large".to_owned())
        });
    }
    let mut seen = 0;
    while let Some(done) = calls.join_next().await {
        let (i, description) = done.unwrap();
        let want = if i == usize::MAX {
            "large".to_owned()
        } else {
            format!("marker {i}")
        };
        assert_eq!(description, want);
        seen += 1;
    }
    assert_eq!(seen, 4 * 33);
}

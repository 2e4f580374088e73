use super::*;

fn p(text: &str) -> Parsed {
    parse(
        text.as_bytes(),
        "t.md",
        &ParseOptions::default(),
        Comments::Strip,
    )
}

fn ok(text: &str) -> Persona {
    let r = p(text);
    r.persona
        .unwrap_or_else(|| panic!("expected a persona, got {:?}", r.diagnostics))
}

fn codes(r: &Parsed) -> Vec<&'static str> {
    r.diagnostics.iter().map(|d| d.code).collect()
}

#[test]
fn minimal_file() {
    let a = ok("---\nname: a\ndescription: does a\n---\n\nYou are A.\n");
    assert_eq!(a.name, "a");
    assert_eq!(a.description, "does a");
    assert_eq!(a.system_prompt, "You are A.");
    assert_eq!(a.tools, None);
    assert_eq!(a.spawns, None);
    assert!(a.extra.is_empty());
}

#[test]
fn bom_crlf_comments_leading_blank_lines() {
    let a = ok(
        "\u{feff}\r\n<!-- generated -->\r\n\r\n---\r\nname: a\r\ndescription: d <!-- hidden -->\r\n---\r\nbody\r\n",
    );
    assert_eq!(a.name, "a");
    assert_eq!(a.description, "d");
    assert_eq!(a.system_prompt, "body");
}

#[test]
fn missing_and_unclosed() {
    let r = p("just a body");
    assert!(r.persona.is_none());
    assert_eq!(codes(&r), ["missing_name"]);
    let r = p("---\nname: a\ndescription: d\n");
    assert_eq!(codes(&r), ["unclosed_frontmatter"]);
    assert_eq!(r.diagnostics[0].line, Some(1));
    assert_eq!(r.diagnostics[0].severity, Severity::Error);
    let r = p("---\ndescription: d\n---\n");
    assert_eq!(codes(&r), ["missing_name"]);
    let r = p("---\nname: '  '\n---\n");
    assert_eq!(codes(&r), ["missing_name", "missing_description"]);
}

#[test]
fn invalid_names() {
    for bad in ["a/b", "a\\\\b", "a\\u0001b", ".", "..", "a\\u0000b"] {
        let r = p(&format!("---\nname: \"{bad}\"\ndescription: d\n---\n"));
        assert_eq!(codes(&r), ["invalid_name"], "{bad}");
    }
    let long = "x".repeat(129);
    let r = p(&format!("---\nname: {long}\ndescription: d\n---\n"));
    assert_eq!(codes(&r), ["invalid_name"]);
    assert!(
        ok(&format!(
            "---\nname: {}\ndescription: d\n---\n",
            "x".repeat(128)
        ))
        .name
        .len()
            == 128
    );
}

#[test]
fn not_utf8() {
    let r = parse(
        b"---\nname: \xff\n---\n",
        "t.md",
        &ParseOptions::default(),
        Comments::Keep,
    );
    assert_eq!(codes(&r), ["not_utf8"]);
    assert_eq!(r.diagnostics[0].line, Some(2));
}

#[test]
fn yaml_with_tabs_is_read() {
    let a = ok("---\nname: a\ndescription: d\ntools:\n\t- read\n\t- grep\n---\n");
    assert_eq!(a.tools.unwrap(), ["read", "grep", "submit_result"]);
}

#[test]
fn fallback_when_yaml_breaks() {
    let r = p(
        "---\nname: helper\ndescription: Use when: the build breaks: fix it\n  indented: ignored\nmodel: a, b\nname: helper2\n---\nbody",
    );
    let a = r.persona.clone().expect("fallback should load");
    assert_eq!(codes(&r), ["yaml_fallback"]);
    assert_eq!(r.diagnostics[0].severity, Severity::Warning);
    assert_eq!(r.diagnostics[0].line, Some(3));
    assert_eq!(a.name, "helper2");
    assert_eq!(a.description, "Use when: the build breaks: fix it");
    assert_eq!(a.model.unwrap(), ["a", "b"]);
    assert!(!a.extra.contains_key("indented"));
}

#[test]
fn key_normalisation() {
    let a = ok(
        "---\nname: a\ndescription: d\nthinkingLevel: high\npermission-mode: read-only\nmaxTurns: 15\nwhenToUse: |\n  first\n  second\ncriticalReminder: stay\ndisallowedTools: bash\n---\n",
    );
    assert_eq!(a.thinking_level, Some(ThinkingLevel::High));
    assert_eq!(a.permission_mode, Some(super::PermissionMode::ReadOnly));
    assert_eq!(a.max_turns, Some(15));
    assert_eq!(a.when_to_use.as_deref(), Some("first\nsecond\n"));
    assert_eq!(a.critical_reminder.as_deref(), Some("stay"));
    assert_eq!(a.disallowed_tools.unwrap(), ["bash"]);
    assert!(a.extra.is_empty());
    assert_eq!(fields::normalise_key("thinking-level"), "thinking_level");
    assert_eq!(fields::normalise_key("permissionMode"), "permission_mode");
    assert_eq!(fields::normalise_key("max_turns"), "max_turns");
}

#[test]
fn tools_csv_list_and_implicit() {
    let a = ok("---\nname: a\ndescription: d\ntools: read, grep ,, bash\n---\n");
    assert_eq!(a.tools.unwrap(), ["read", "grep", "bash", "submit_result"]);
    let a = ok("---\nname: a\ndescription: d\ntools: [read, submit_result, bash]\n---\n");
    assert_eq!(a.tools.unwrap(), ["read", "submit_result", "bash"]);
    let a = ok("---\nname: a\ndescription: d\ntools: []\n---\n");
    assert_eq!(a.tools.unwrap(), ["submit_result"]);
    let r = p("---\nname: a\ndescription: d\ntools: [read, 3]\n---\n");
    assert_eq!(codes(&r), ["invalid_field"]);
    assert!(r.persona.is_none());
    assert_eq!(r.diagnostics[0].line, Some(4));
}

#[test]
fn spawns_forms_and_compatibility_rule() {
    let s = |y: &str| ok(&format!("---\nname: a\ndescription: d\n{y}\n---\n")).spawns;
    assert_eq!(s("spawns: '*'"), Some(Spawns::Any));
    assert_eq!(s("spawns: ' * '"), Some(Spawns::Any));
    assert_eq!(
        s("spawns: explore, plan"),
        Some(Spawns::Only(vec!["explore".into(), "plan".into()]))
    );
    assert_eq!(
        s("spawns: [explore]"),
        Some(Spawns::Only(vec!["explore".into()]))
    );
    assert_eq!(s("spawns: ''"), None);
    assert_eq!(s("tools: read, task"), Some(Spawns::Any));
    assert_eq!(
        s("tools: read, task\nspawns: explore"),
        Some(Spawns::Only(vec!["explore".into()]))
    );
    assert_eq!(s("tools: read"), None);
}

#[test]
fn model_thinking_output_max_turns() {
    let a = ok(
        "---\nname: a\ndescription: d\nmodel: [gpt-x, 'claude-*']\nthinking: minimal\noutput:\n  type: object\n  properties:\n    q: {type: string}\n---\n",
    );
    assert_eq!(a.model.unwrap(), ["gpt-x", "claude-*"]);
    assert_eq!(a.thinking_level, Some(ThinkingLevel::Minimal));
    assert_eq!(
        a.output.unwrap(),
        serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}})
    );
    let r = p("---\nname: a\ndescription: d\nthinking_level: extreme\nmax_turns: many\n---\n");
    assert_eq!(codes(&r), ["invalid_thinking_level", "invalid_max_turns"]);
    assert_eq!(r.diagnostics[0].line, Some(4));
    assert_eq!(r.diagnostics[1].line, Some(5));
    let a = r.persona.unwrap();
    assert_eq!(a.thinking_level, None);
    assert_eq!(a.max_turns, None);
    let r = p("---\nname: a\ndescription: d\nmax_turns: 0\n---\n");
    assert_eq!(codes(&r), ["invalid_max_turns"]);
}

#[test]
fn unknown_keys_go_to_extra() {
    let a = ok("---\nname: a\ndescription: d\ncolor: blue\nx-Custom:\n  k: [1, 2]\n---\n");
    assert_eq!(a.extra["color"], "blue");
    assert_eq!(a.extra["x-Custom"], serde_json::json!({"k": [1, 2]}));
}

#[test]
fn case_sensitive_names_and_numbers_as_text() {
    assert_eq!(ok("---\nname: Task\ndescription: d\n---\n").name, "Task");
    assert_eq!(ok("---\nname: 404\ndescription: 1.5\n---\n").name, "404");
}

#[test]
fn comment_lines_are_counted_in_diagnostics() {
    let r = p("<!--\n\n\n-->\n---\nname: a\ndescription: d\nthinking: loud\n---\n");
    assert_eq!(codes(&r), ["invalid_thinking_level"]);
    assert_eq!(r.diagnostics[0].line, Some(8));
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A cheap deterministic fuzz over tricky fragments.
    let parts = [
        "---",
        "\n",
        "\r",
        "name: a",
        "description: d",
        "<!--",
        "-->",
        "\t",
        ": :",
        "- x",
        "tools: [",
        "\u{feff}",
        "'",
        "\"",
        "{",
        "}",
        "output: *a",
        "&a x",
        "é",
    ];
    let mut seed = 0x9e3779b97f4a7c15u64;
    for _ in 0..5000 {
        let mut s = String::new();
        for _ in 0..12 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            s.push_str(parts[(seed % parts.len() as u64) as usize]);
        }
        let _ = p(&s);
    }
}

#[test]
fn gemini_fields_are_typed() {
    let a = ok(
        "---\nname: a\ndescription: d\ntemperature: 0.2\ntimeout_mins: 5\nmax_turns: 10\n\
         tools: ['*', mcp_*, mcp_github_*, read_file]\n---\nbody\n",
    );
    assert_eq!(a.temperature, Some(0.2));
    assert_eq!(a.timeout_mins, Some(5));
    assert!(!a.remote);
    assert_eq!(a.format, Format::Markdown);
    // Patterns are kept verbatim: matching them is the executor's business.
    assert_eq!(
        a.tools.unwrap(),
        ["*", "mcp_*", "mcp_github_*", "read_file", "submit_result"]
    );
    // Whole numbers, camelCase and the line fallback's strings are read too.
    let a = ok("---\nname: a\ndescription: d\ntemperature: 2\ntimeoutMins: 1\n---\n");
    assert_eq!((a.temperature, a.timeout_mins), (Some(2.0), Some(1)));
    let r = p("---\nname: a\ndescription: Use when: x\ntemperature: 0.5\ntimeout_mins: 3\n---\n");
    let a = r.persona.unwrap();
    assert_eq!((a.temperature, a.timeout_mins), (Some(0.5), Some(3)));
}

#[test]
fn bad_gemini_values_are_warnings() {
    let r = p(
        "---\nname: a\ndescription: d\ntemperature: 2.5\ntimeout_mins: 0\nkind: satellite\n---\n",
    );
    assert_eq!(
        codes(&r),
        [
            "invalid_temperature",
            "invalid_timeout_mins",
            "invalid_kind"
        ]
    );
    assert_eq!(
        r.diagnostics.iter().map(|d| d.line).collect::<Vec<_>>(),
        [Some(4), Some(5), Some(6)]
    );
    assert!(
        r.diagnostics
            .iter()
            .all(|d| d.severity == Severity::Warning)
    );
    let a = r.persona.unwrap();
    assert_eq!(
        (a.temperature, a.timeout_mins, a.remote),
        (None, None, false)
    );
    for bad in ["-0.1", "warm", "[1]"] {
        let r = p(&format!(
            "---\nname: a\ndescription: d\ntemperature: {bad}\n---\n"
        ));
        assert_eq!(codes(&r), ["invalid_temperature"], "{bad}");
    }
}

#[test]
fn remote_agents_load_and_want_a_card() {
    let a = ok(
        "---\nkind: remote\nname: r\ndescription: d\nagent_card_url: https://a.example/card.json\n---\n",
    );
    assert!(a.remote);
    assert_eq!(a.extra["agent_card_url"], "https://a.example/card.json");
    assert!(!a.extra.contains_key("kind"));
    let a = ok("---\nkind: local\nname: l\ndescription: d\n---\n");
    assert!(!a.remote);
    let r = p("---\nkind: remote\nname: r\ndescription: d\n---\n");
    assert_eq!(codes(&r), ["missing_agent_card"]);
    assert!(r.persona.unwrap().remote);
}

/// A frontmatter of `n` keys, through the fast reader, YAML (a comment) or the line fallback
/// (a value YAML refuses), with a duplicate key at the end.
fn many_keys(n: usize, path: &str) -> String {
    let mut t = String::from("---\nname: many\ndescription: many keys\n");
    match path {
        "yaml" => t.push_str("# through YAML\n"),
        "fallback" => t.push_str("when_to_use: Use when: broken\n"),
        _ => {}
    }
    for i in 0..n {
        t.push_str(&format!("k{i:06}: v\n"));
    }
    t.push_str("---\nbody\n");
    t
}

/// The fastest of three parses of `text`.
fn fastest(text: &str) -> std::time::Duration {
    (0..3)
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(p(text));
            t.elapsed()
        })
        .min()
        .unwrap()
}

#[test]
fn many_keys_parse_in_time_linear_in_the_file() {
    // Eight times the keys must cost about eight times as much, never the 64 times a pass per
    // key over the block (or over the keys read so far) costs. The bound leaves room for noise.
    for path in ["fast", "yaml", "fallback"] {
        let small = many_keys(5_000, path);
        let large = many_keys(40_000, path);
        let a = ok(&large);
        assert_eq!(a.extra.len(), 40_000, "{path}");
        let ratio = fastest(&large).as_secs_f64() / fastest(&small).as_secs_f64();
        assert!(
            ratio < 24.0,
            "{path}: 8× the keys took {ratio:.1}× the time"
        );
    }
    // Lines are still found for the YAML path (a diagnostic names them): after the opening
    // line, name, description, the comment and 1,000 keys, a bad thinking level is on line 1005.
    let r = p(&format!(
        "{}thinking: bogus\n---\nbody\n",
        many_keys(1_000, "yaml").trim_end_matches("---\nbody\n")
    ));
    assert!(r.persona.is_some(), "{:?}", r.diagnostics);
    let d = r
        .diagnostics
        .iter()
        .find(|d| d.code == "invalid_thinking_level")
        .unwrap_or_else(|| panic!("{:?}", r.diagnostics));
    assert_eq!(d.line, Some(1005), "{d:?}");
}

#[test]
fn agent_entries_in_tools_are_the_spawn_tool_with_their_agents() {
    let a = ok(
        "---\nname: a\ndescription: d\ntools: Read, Grep, Edit, Bash(git diff:*, git log:*), Agent(explore, plan)\n---\nb\n",
    );
    assert_eq!(
        a.tools.as_deref().unwrap(),
        [
            "Read",
            "Grep",
            "Edit",
            "Bash(git diff:*, git log:*)",
            "task",
            "submit_result"
        ]
    );
    assert_eq!(
        a.spawns,
        Some(Spawns::Only(vec!["explore".into(), "plan".into()]))
    );
    // Bare Agent / Task: any agent; a list item works the same as the CSV.
    let b = ok("---\nname: b\ndescription: d\ntools: [Read, Task]\n---\nb\n");
    assert_eq!(b.spawns, Some(Spawns::Any));
    assert!(b.tools.unwrap().contains(&"task".to_owned()));
    // With `spawns` too: the intersection, and a warning on the tools line.
    let r = p(
        "---\nname: c\ndescription: d\nspawns: plan, review\ntools: Agent(explore, plan)\n---\nb\n",
    );
    let c = r.persona.as_ref().unwrap();
    assert_eq!(c.spawns, Some(Spawns::Only(vec!["plan".into()])));
    let d = r
        .diagnostics
        .iter()
        .find(|d| d.code == "spawns_intersected")
        .unwrap();
    assert_eq!(d.line, Some(5));
    assert!(d.message.ends_with("allow: plan"), "{}", d.message);
    // Disallowing Agent disallows the spawn tool.
    let e = ok("---\nname: e\ndescription: d\ndisallowedTools: Agent, Write\n---\nb\n");
    assert_eq!(e.disallowed_tools.unwrap(), ["task", "Write"]);
}

#[test]
fn effort_and_permission_modes() {
    for (effort, level) in [
        ("low", ThinkingLevel::Low),
        ("high", ThinkingLevel::High),
        ("xhigh", ThinkingLevel::Xhigh),
        ("max", ThinkingLevel::Xhigh),
    ] {
        let a = ok(&format!(
            "---\nname: a\ndescription: d\neffort: {effort}\n---\nb\n"
        ));
        assert_eq!(a.thinking_level, Some(level), "{effort}");
    }
    let r = p("---\nname: a\ndescription: d\neffort: extreme\npermissionMode: yolo\n---\nb\n");
    assert_eq!(codes(&r), ["invalid_effort", "unknown_permission_mode"]);
    assert_eq!(
        r.persona
            .unwrap()
            .permission_mode
            .as_ref()
            .map(super::PermissionMode::as_str),
        Some("yolo")
    );
    let r = p(
        "---\nname: a\ndescription: d\npermissionMode: acceptEdits\nthinking: low\neffort: high\n---\nb\n",
    );
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    assert_eq!(
        r.persona.unwrap().thinking_level,
        Some(ThinkingLevel::Low),
        "thinking_level wins"
    );
}

#[test]
fn fields_that_change_a_worker_and_are_not_honoured_are_warnings() {
    let r = p(
        "---\nname: a\ndescription: d\nhooks: {PreToolUse: []}\nskills: [lint]\nmemory: project\nmcpServers: [github]\ncolor: blue\n---\nb\n",
    );
    let warned: Vec<(&str, Option<u32>)> = r.diagnostics.iter().map(|d| (d.code, d.line)).collect();
    assert_eq!(warned, [("unsupported_field", Some(4))]);
    assert!(
        r.diagnostics[0]
            .message
            .starts_with("`hooks` is not honoured")
    );
    let a = r.persona.unwrap();
    // MCP servers are honoured (docs/personas.md §2.9).
    assert_eq!(
        a.mcp_servers,
        Some(vec![super::mcp::McpRef::Named("github".into())])
    );
    assert_eq!(a.mcp_servers_line, Some(7));
    assert!(!a.extra.contains_key("mcpServers"));
    assert!(a.extra.contains_key("color") && a.extra.contains_key("hooks"));
    // Skills are honoured (docs/personas.md §2.8): read as a list, not kept in `extra`.
    assert_eq!(a.skills, ["lint"]);
    assert_eq!(a.skills_line, Some(5));
    assert!(!a.extra.contains_key("skills"));
}

#[test]
fn skill_files_keep_their_body_and_description() {
    let s = parse_skill(
        b"---
name: lint
description: Lints the code
allowed-tools: Bash
---

Run the linter.
",
        Comments::Keep,
    )
    .unwrap();
    assert_eq!(s.description, "Lints the code");
    assert_eq!(s.body, "Run the linter.");
    // No frontmatter: the whole text is the instructions.
    assert_eq!(
        parse_skill(b"Just do it.", Comments::Keep).unwrap().body,
        "Just do it."
    );
    // A frontmatter YAML cannot read loses the description only.
    let s = parse_skill(
        b"---
description: Use when: x
---
Body",
        Comments::Keep,
    )
    .unwrap();
    assert_eq!((s.description.as_str(), s.body.as_str()), ("", "Body"));
    assert!(
        parse_skill(
            b"---
name: x
",
            Comments::Keep
        )
        .unwrap_err()
        .contains("never closed")
    );
    assert!(
        parse_skill(
            b"---
name: x
---
",
            Comments::Keep
        )
        .unwrap_err()
        .contains("no instructions")
    );
    assert!(
        parse_skill(b"\xff", Comments::Keep)
            .unwrap_err()
            .contains("UTF-8")
    );
}

/// docs/personas.md §2.7 lists every field of the dialects as honoured or not; a field the
/// parser reads, warns about or that the dialects define must be in one of the two tables.
#[test]
fn the_dialect_tables_name_every_field() {
    let doc = include_str!("../../docs/personas.md");
    let section = &doc[doc.find("## 2.7").expect("§2.7")..];
    let listed: Vec<String> = section
        .lines()
        .filter(|l| l.starts_with("| `") || l.starts_with("| body"))
        .flat_map(|l| {
            let first = l.split('|').nth(1).unwrap_or_default().to_owned();
            first
                .split(['`', ',', '/'])
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
        })
        .collect();
    let dialects = [
        // Claude Code subagents
        "name",
        "description",
        "tools",
        "disallowedTools",
        "model",
        "permissionMode",
        "mcpServers",
        "hooks",
        "maxTurns",
        "skills",
        "initialPrompt",
        "memory",
        "effort",
        "background",
        "isolation",
        "color",
        // Codex TOML agents
        "developer_instructions",
        "model_reasoning_effort",
        "sandbox_mode",
        "mcp_servers",
        "nickname_candidates",
        "approval_policy",
        // Gemini CLI agents
        "kind",
        "temperature",
        "max_turns",
        "timeout_mins",
        "agent_card_url",
        "agent_card_json",
        // xcsh
        "when_to_use",
        "spawns",
        "thinking_level",
        "output",
        "critical_reminder",
    ];
    for field in dialects
        .iter()
        .copied()
        .chain(UNSUPPORTED_FIELDS.iter().copied())
    {
        assert!(
            listed.iter().any(|l| l == field),
            "{field} is in neither table of docs/personas.md §2.7"
        );
    }
    for field in UNSUPPORTED_FIELDS {
        let row = section
            .lines()
            .find(|l| l.contains(&format!("`{field}`")))
            .unwrap();
        assert!(
            row.contains("**warning**"),
            "{field} must be reported as a warning: {row}"
        );
    }
}

/// Every permission mode reads back as it was written, through its text and through JSON (a
/// stored spec, the exec document); unknown ones are kept, and read-only is `read-only`,
/// `readonly` or `plan`.
#[test]
fn permission_modes_are_typed_and_read_back_as_written() {
    use super::PermissionMode;
    for text in super::PERMISSION_MODES
        .iter()
        .copied()
        .chain(["yolo", "readonly", ""])
    {
        let m = PermissionMode::parse(text);
        assert_eq!(m.as_str(), text);
        assert_eq!(
            m.is_known(),
            super::PERMISSION_MODES.contains(&text),
            "{text}"
        );
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, serde_json::to_string(text).unwrap());
        assert_eq!(serde_json::from_str::<PermissionMode>(&json).unwrap(), m);
        assert_eq!(
            m.is_read_only(),
            matches!(text, "read-only" | "readonly" | "plan"),
            "{text}"
        );
    }
}

#[test]
fn a_policy_knows_the_length_of_its_text() {
    for text in ["*", "", "explore", "explore,plan", "a, b ,c"] {
        let p = Spawns::parse_policy(text);
        assert_eq!(p.policy_len(), p.to_policy_string().len(), "{text:?}");
    }
}

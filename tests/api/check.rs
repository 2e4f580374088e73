//! `agentry check`, the real binary: exit statuses, the three formats, `--recursive` and its hint.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use crate::helpers::{persona, simple};

/// Runs `agentry check ARGS` with an empty home, so no user dir of the machine is read.
fn check(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentry"))
        .arg("check")
        .args(args)
        .env("AGENTRY_HOME", home)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// A directory with one valid agent, one with a warning and one file that does not load (an
/// error on line 1), named with the `,` and `:` that GitHub properties must escape.
struct Fixture {
    _dir: tempfile::TempDir,
    home: PathBuf,
    agents: PathBuf,
    broken: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let agents = dir.path().join("agents");
    simple(&agents, "good.md", "good", "a good agent");
    persona(
        &agents,
        "odd.md",
        "name: odd\ndescription: thinks oddly\nthinking: extreme",
        "prompt",
    );
    let broken = agents.join("no,front:matter.md");
    std::fs::write(&broken, "just a body, 100% without frontmatter\n").unwrap();
    Fixture {
        _dir: dir,
        home,
        agents,
        broken,
    }
}

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_directory_that_does_not_exist_is_a_usage_error_naming_it() {
    let f = fixture();
    let missing = f.agents.join("typo");
    for format in ["text", "json", "github"] {
        let o = check(
            &f.home,
            &["--format", format, arg(&f.agents), arg(&missing)],
        );
        assert_eq!(o.status.code(), Some(2), "{format}: {o:?}");
        assert_eq!(
            stderr(&o).trim(),
            format!("agentry: directory {} does not exist", missing.display())
        );
        assert_eq!(stdout(&o), "", "nothing is linted");
    }
    let o = check(&f.home, &[arg(&f.agents.join("good.md"))]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("good.md is not a directory"), "{o:?}");
    let o = check(&f.home, &["--workspace", arg(&missing)]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        stderr(&o).contains(&format!("--workspace {} does not exist", missing.display())),
        "{o:?}"
    );
}

#[test]
fn options_that_make_no_sense_together_are_usage_errors() {
    let f = fixture();
    for args in [
        vec!["--recursive"],
        vec!["--workspace", arg(&f.home), arg(&f.agents)],
        vec!["--format", "yaml", arg(&f.agents)],
    ] {
        let o = check(&f.home, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
    }
}

#[test]
fn help_documents_the_exit_statuses_and_what_is_read() {
    let f = fixture();
    let o = check(&f.home, &["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    for line in [
        "Exit status:",
        "0  no errors (warnings allowed)",
        "1  at least one error diagnostic",
        "2  usage error",
        "no bundled agents",
        "--recursive",
        "--format",
    ] {
        assert!(help.contains(line), "{line:?} not in:\n{help}");
    }
}

#[test]
fn text_lists_agents_and_diagnostics_and_exits_1_on_an_error() {
    let f = fixture();
    let o = check(&f.home, &[arg(&f.agents)]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "agents (2):", "{out}");
    assert!(lines[1].starts_with("  good ") && lines[1].ends_with("/agents/good.md"));
    assert!(lines[2].starts_with("  odd "), "{out}");
    assert_eq!(lines[3], "diagnostics (2, 1 errors):", "{out}");
    assert!(
        out.contains(&format!(
            "  {}:1: error[missing_name]: ",
            f.broken.display()
        )),
        "{out}"
    );
    assert!(
        out.contains("odd.md:4: warning[invalid_thinking_level]: "),
        "{out}"
    );
    assert!(lines.last().unwrap().starts_with("registry_version: "));
    // With DIRs only those are read: no bundled agent is listed.
    assert!(!out.contains("bundled"), "{out}");

    simple(
        &f.home.join(".claude/agents"),
        "mine.md",
        "mine",
        "a user agent",
    );
    std::fs::remove_file(&f.broken).unwrap();
    let o = check(&f.home, &[arg(&f.agents)]);
    assert_eq!(o.status.code(), Some(0), "warnings alone pass: {o:?}");
    assert!(
        !stdout(&o).contains("mine"),
        "the user dir is not read: {o:?}"
    );
}

#[test]
fn without_dirs_the_service_sources_and_the_bundled_agents_are_read() {
    let f = fixture();
    simple(
        &f.home.join(".claude/agents"),
        "mine.md",
        "mine",
        "a user agent",
    );
    let o = check(&f.home, &[]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let out = stdout(&o);
    assert!(out.starts_with("agents (7):\n"), "{out}");
    assert!(out.contains("  mine "), "{out}");
    // Six bundled agents and the bundled `init` workflow command.
    assert_eq!(out.matches(" bundled ").count(), 7, "{out}");
    assert!(out.contains("commands (1):\n  init "), "{out}");
}

#[test]
fn json_is_one_document_with_agents_shadowed_diagnostics_and_a_summary() {
    let f = fixture();
    let o = check(&f.home, &["--format", "json", arg(&f.agents)]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = doc["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["good", "odd"]);
    assert_eq!(doc["agents"][0]["description"], "a good agent");
    assert_eq!(doc["agents"][0]["source"], "dir");
    assert_eq!(doc["shadowed"], serde_json::json!([]));
    let error = doc["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["severity"] == "error")
        .unwrap();
    assert_eq!(error["path"], arg(&f.broken));
    assert_eq!(error["line"], 1);
    assert_eq!(error["code"], "missing_name");
    assert_eq!(doc["hints"], serde_json::json!([]));
    let mut summary = doc["summary"].clone();
    let version = summary
        .as_object_mut()
        .unwrap()
        .remove("registry_version")
        .unwrap();
    assert_eq!(version.as_str().unwrap().len(), 64, "{version}");
    assert_eq!(
        summary,
        serde_json::json!({
            "agents": 2, "shadowed": 0, "commands": 0, "diagnostics": 2, "errors": 1,
            "warnings": 1,
            "exit_code": 1,
        })
    );
}

#[test]
fn github_prints_one_workflow_command_per_diagnostic_then_a_summary() {
    let f = fixture();
    let o = check(&f.home, &["--format", "github", arg(&f.agents)]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    // Properties escape `,` and `:`; the message escapes `%`; the order is the text format's.
    let file = f
        .broken
        .display()
        .to_string()
        .replace(',', "%2C")
        .replace(':', "%3A");
    let error = lines.iter().find(|l| l.starts_with("::error ")).unwrap();
    assert!(
        error.starts_with(&format!("::error file={file},line=1,title=missing_name::")),
        "{error}"
    );
    let warning = lines.iter().find(|l| l.starts_with("::warning ")).unwrap();
    assert!(
        warning.starts_with(&format!(
            "::warning file={}/odd.md,line=4,title=invalid_thinking_level::",
            f.agents.display()
        )),
        "{warning}"
    );
    assert!(
        lines[2].starts_with(
            "agentry check: 2 agents, 0 shadowed, 0 commands, 2 diagnostics (1 errors, \
             1 warnings), registry_version "
        ),
        "{out}"
    );

    std::fs::remove_file(&f.broken).unwrap();
    let o = check(&f.home, &["--format", "github", arg(&f.agents)]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(stdout(&o).matches("::error").count(), 0);
}

#[test]
fn a_percent_sign_in_a_message_is_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    // A duplicate name's warning quotes the name, so the name carries the `%`.
    simple(&agents, "a.md", "50%\"x", "first");
    simple(&agents, "b.md", "50%\"x", "second");
    let o = check(dir.path(), &["--format", "github", arg(&agents)]);
    let out = stdout(&o);
    let warning = out
        .lines()
        .find(|l| l.contains("title=duplicate_name::"))
        .unwrap_or_else(|| panic!("no duplicate_name warning in {out}"));
    assert!(warning.contains("50%25"), "{warning}");
    assert!(!warning.contains("50%\\"), "{warning}");

    let o = check(dir.path(), &["--format", "json", arg(&agents)]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["shadowed"][0]["name"], "50%\"x");
    assert_eq!(doc["shadowed"][0]["path"], arg(&agents.join("b.md")));
    assert_eq!(doc["shadowed"][0]["shadowed_by"], arg(&agents.join("a.md")));
    assert_eq!(doc["summary"]["shadowed"], 1);
}

/// Personas in subfolders, a README.md and a hidden directory that a recursive read skips.
fn nested() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    simple(&agents.join("team/a"), "alpha.md", "alpha", "first");
    simple(&agents.join("team"), "beta.md", "beta", "second");
    std::fs::write(
        agents.join("team/README.md"),
        "no frontmatter: would be an error\n",
    )
    .unwrap();
    std::fs::create_dir_all(agents.join(".git")).unwrap();
    std::fs::write(
        agents.join(".git/x.md"),
        "no frontmatter: would be an error\n",
    )
    .unwrap();
    (dir, agents)
}

#[test]
fn personas_in_subfolders_get_a_hint_and_recursive_reads_them() {
    let (dir, agents) = nested();
    let home = dir.path();
    let o = check(home, &[arg(&agents)]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let out = stdout(&o);
    let hint = format!(
        "hint: {}: no agents at the top level, but 2 .md files in subdirectories; \
         pass --recursive (-r) to read them",
        agents.display()
    );
    assert!(out.starts_with("agents (0):\n"), "{out}");
    assert!(out.lines().any(|l| l == hint), "{out}");

    let o = check(home, &["--format", "json", arg(&agents)]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["hints"][0]["path"], arg(&agents));
    let o = check(home, &["--format", "github", arg(&agents)]);
    assert!(
        stdout(&o).starts_with("::notice title=agentry check::"),
        "{o:?}"
    );

    for flag in ["--recursive", "-r"] {
        let o = check(home, &[flag, arg(&agents)]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "README.md and .git are skipped: {o:?}"
        );
        let out = stdout(&o);
        assert!(out.starts_with("agents (2):\n"), "{out}");
        // Byte order of the relative path: team/a/alpha.md before team/beta.md.
        assert!(
            out.find("alpha").unwrap() < out.find("beta").unwrap(),
            "{out}"
        );
        assert!(!out.contains("hint:"), "{out}");
    }
}

#[test]
fn no_hint_when_the_top_level_has_agents() {
    let (dir, agents) = nested();
    simple(&agents, "top.md", "top", "at the top");
    let o = check(dir.path(), &[arg(&agents)]);
    let out = stdout(&o);
    assert!(out.starts_with("agents (1):\n"), "{out}");
    assert!(!out.contains("hint:"), "{out}");
}

/// `--version` and the help of both commands say what the README says: the defaults, the
/// implicit model executor, the environment, examples and exit statuses.
#[test]
fn version_and_help_read_like_the_readme() {
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    assert_eq!(
        run(&["--version"]),
        format!("agentry {}\n", env!("CARGO_PKG_VERSION"))
    );
    let top = run(&["--help"]);
    assert!(
        top.contains("agentry serve") && top.contains("docs/guide.md"),
        "{top}"
    );
    let serve = run(&["serve", "--help"]);
    for needle in [
        "127.0.0.1:50051",
        "OPENAI_API_KEY",
        "AGENTRY_STORE_URL",
        "--config examples/walkthrough.yaml",
        "FAILED_PRECONDITION",
    ] {
        assert!(
            serve.contains(needle),
            "serve --help lacks {needle}: {serve}"
        );
    }
    let check = run(&["check", "--help"]);
    for needle in ["--format github", "Exit status:", "2  usage error"] {
        assert!(
            check.contains(needle),
            "check --help lacks {needle}: {check}"
        );
    }
}

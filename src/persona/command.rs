//! Workflow commands (docs §3.6): prompt templates a coordinator expands and runs. Parses one
//! command file — markdown with optional frontmatter, or a Gemini CLI TOML command — derives a
//! command's name from its path inside a commands directory, and expands a template with the
//! caller's arguments.
//!
//! Pure like the rest of [`crate::persona`]: a path is only split into names, never opened.

use std::path::{Component, Path};

use super::{
    Comments, Diagnostic, Format, MAX_NAME_BYTES, Severity, decode,
    fields::{self, Reader},
    split, tomlread,
};

/// Longest description taken from a template's first line, in characters.
pub const MAX_FALLBACK_DESCRIPTION_CHARS: usize = 200;

/// One parsed command file. The name comes from its path, not from the file.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// The `description` key, else the template's first non-empty line (at most
    /// [`MAX_FALLBACK_DESCRIPTION_CHARS`] characters).
    pub description: String,
    /// The body (markdown) or `prompt` (TOML): what [`expand`] fills in.
    pub template: String,
    /// `argument_hint`: what to pass, for a human (`<file> [focus]`).
    pub argument_hint: Option<String>,
    /// `model` the command asks for, passed through.
    pub model: Option<String>,
    /// `allowed_tools` (CSV or list); `None` when the file does not say.
    pub allowed_tools: Option<Vec<String>>,
    /// Markdown or TOML.
    pub format: Format,
    /// Every other key, as JSON, so nothing a file says is lost.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// The result of parsing one command file.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// `None` when an error diagnostic made the file unusable.
    pub command: Option<Command>,
    /// Warnings (file loaded) and errors (file skipped).
    pub diagnostics: Vec<Diagnostic>,
}

/// The names a command file answers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandName {
    /// The relative path without its extension, `/` written `:` (`opsx/apply.md` →
    /// `opsx:apply`).
    pub full: String,
    /// For a nested command, its base name (`apply`), which it also answers to unless a
    /// command of that name comes first.
    pub base: Option<String>,
}

/// Derives a command's names from its path relative to the commands directory. `Err` says why
/// the path cannot name a command: a segment that is not UTF-8, empty, or holds `\`, NUL or a
/// control character, or a name over [`MAX_NAME_BYTES`]. A segment may hold `:`
/// (`svelte/svelte:a11y.md` is `/svelte:a11y` to its users), as the tools that read these files
/// allow; a name two files would give is a `duplicate_name` like any other.
pub fn name_from_path(rel: &Path) -> Result<CommandName, String> {
    let mut segments = Vec::new();
    for c in rel.components() {
        let Component::Normal(os) = c else {
            return Err(format!("{} is not a plain relative path", rel.display()));
        };
        let Some(s) = os.to_str() else {
            return Err("a path segment is not valid UTF-8".to_owned());
        };
        segments.push(s);
    }
    let Some(last) = segments.pop() else {
        return Err("the path is empty".to_owned());
    };
    let stem = last
        .strip_suffix(".md")
        .or_else(|| last.strip_suffix(".toml"))
        .unwrap_or(last);
    segments.push(stem);
    for s in &segments {
        if s.is_empty() {
            return Err("a path segment is empty".to_owned());
        }
        if let Some(c) = s.chars().find(|c| *c == '\\' || c.is_control()) {
            return Err(format!(
                "{s:?} contains {c:?}; a command name segment may not hold `\\`, NUL or a \
                 control character"
            ));
        }
    }
    let full = segments.join(":");
    if full.len() > MAX_NAME_BYTES {
        return Err(format!(
            "the name {full:?} is {} bytes; the limit is {MAX_NAME_BYTES}",
            full.len()
        ));
    }
    let base = (segments.len() > 1).then(|| stem.to_owned());
    Ok(CommandName { full, base })
}

/// The description a command without one gets: its template's first non-empty line, trimmed,
/// at most [`MAX_FALLBACK_DESCRIPTION_CHARS`] characters.
fn fallback_description(template: &str) -> String {
    template
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .chars()
        .take(MAX_FALLBACK_DESCRIPTION_CHARS)
        .collect()
}

fn empty_template(path: &str) -> Diagnostic {
    Diagnostic {
        path: path.to_owned(),
        line: None,
        severity: Severity::Warning,
        code: "empty_template",
        message: "the command's template is empty; it expands to nothing".to_owned(),
    }
}

/// Parses a markdown command: optional frontmatter (`description`, `argument_hint`, `model`,
/// `allowed_tools`, the rest in `extra`), then the template. Never panics on any input.
pub fn parse_markdown(bytes: &[u8], path: &str, comments: Comments) -> Parsed {
    let mut diags = Vec::new();
    let command =
        decode(bytes, path, &mut diags).and_then(|t| markdown(t, path, comments, &mut diags));
    Parsed {
        command,
        diagnostics: diags,
    }
}

fn markdown(
    text: &str,
    path: &str,
    comments: Comments,
    diags: &mut Vec<Diagnostic>,
) -> Option<Command> {
    let doc = split::split(text, comments);
    let mut c = Command {
        description: String::new(),
        template: doc.body,
        argument_hint: None,
        model: None,
        allowed_tools: None,
        format: Format::Markdown,
        extra: serde_json::Map::new(),
    };
    let mut description = None;
    match doc.front {
        split::Front::None => {}
        split::Front::Unclosed { open_line } => {
            diags.push(Diagnostic {
                path: path.to_owned(),
                line: Some(open_line),
                severity: Severity::Error,
                code: "unclosed_frontmatter",
                message: format!(
                    "frontmatter opened on line {open_line} is never closed by a `---` line"
                ),
            });
            return None;
        }
        split::Front::Block(block) => {
            let mut diag = |line: Option<u32>, severity, code, message: String| {
                diags.push(Diagnostic {
                    path: path.to_owned(),
                    line,
                    severity,
                    code,
                    message,
                });
            };
            let entries = fields::entries(&block, &mut diag);
            let mut r = Reader::new(&block, &mut diag);
            for e in entries {
                match &*e.key {
                    "description" => description = describing(&mut r, &e),
                    "argument_hint" => c.argument_hint = describing(&mut r, &e),
                    "model" => c.model = r.string(&e).map(|m| m.trim().to_owned()),
                    "allowed_tools" => c.allowed_tools = r.list(&e),
                    _ => {
                        c.extra
                            .insert(e.raw_key.into_owned(), fields::yaml_to_json(e.value));
                    }
                }
            }
            if r.failed() {
                return None;
            }
        }
    }
    finish(c, description, path, diags)
}

/// A field that only describes (`description`, `argument-hint`): a string as it is; a list, as
/// YAML readers turn `[project-name]` into one, rendered back as its source text; anything
/// else a warning, and the file still loads (only fields that change behaviour may skip it).
fn describing(r: &mut Reader<'_, '_>, e: &fields::Entry) -> Option<String> {
    use serde_yaml::Value as Yaml;
    match &e.value {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Null => None,
        Yaml::Sequence(items) => Some(format!(
            "[{}]",
            items
                .iter()
                .map(|i| match i {
                    Yaml::String(s) => s.clone(),
                    other => serde_yaml::to_string(other)
                        .unwrap_or_default()
                        .trim()
                        .to_owned(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Yaml::Bool(_) | Yaml::Number(_) => Some(
            serde_yaml::to_string(&e.value)
                .unwrap_or_default()
                .trim()
                .to_owned(),
        ),
        _ => {
            r.warn_describing(e);
            None
        }
    }
}

/// Fills the description (given or from the template) and warns about an empty template.
fn finish(
    mut c: Command,
    description: Option<String>,
    path: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<Command> {
    c.description = match description.map(|d| d.trim().to_owned()) {
        Some(d) if !d.is_empty() => d,
        _ => fallback_description(&c.template),
    };
    if c.template.trim().is_empty() {
        diags.push(empty_template(path));
    }
    Some(c)
}

/// Parses a Gemini CLI TOML command: `prompt` (required, the template), `description`, the rest
/// in `extra`. Never panics on any input.
pub fn parse_toml(bytes: &[u8], path: &str) -> Parsed {
    let mut diags = Vec::new();
    let command = decode(bytes, path, &mut diags).and_then(|t| toml_command(t, path, &mut diags));
    Parsed {
        command,
        diagnostics: diags,
    }
}

fn toml_command(text: &str, path: &str, diags: &mut Vec<Diagnostic>) -> Option<Command> {
    let entries = tomlread::entries_or_report(text, path, diags)?;
    let mut diag = |line: Option<u32>, severity, code, message: String| {
        diags.push(Diagnostic {
            path: path.to_owned(),
            line,
            severity,
            code,
            message,
        });
    };
    let mut c = Command {
        description: String::new(),
        template: String::new(),
        argument_hint: None,
        model: None,
        allowed_tools: None,
        format: Format::Toml,
        extra: serde_json::Map::new(),
    };
    let (mut prompt, mut description, mut failed) = (None, None, false);
    for e in entries {
        let slot = match e.key.as_str() {
            "prompt" => &mut prompt,
            "description" => &mut description,
            _ => {
                c.extra.insert(e.key, tomlread::to_json(e.value));
                continue;
            }
        };
        match e.value {
            toml::Value::String(s) => *slot = Some(s),
            other => {
                diag(
                    Some(e.line),
                    Severity::Error,
                    "invalid_field",
                    format!("`{}` must be a string, not {}", e.key, other.type_str()),
                );
                failed = true;
            }
        }
    }
    match prompt {
        Some(p) if !p.trim().is_empty() => c.template = p.trim().to_owned(),
        _ if failed => {}
        _ => {
            diag(
                None,
                Severity::Error,
                "missing_prompt",
                "the command has no non-blank `prompt` (its template)".to_owned(),
            );
            failed = true;
        }
    }
    if failed {
        return None;
    }
    // Gemini CLI's own fallback for a command without one.
    let description = description.or_else(|| {
        let file = std::path::Path::new(path)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        Some(format!("Custom command from {file}"))
    });
    finish(c, description, path, diags)
}

/// Expands a command as its own tool does (docs §3.6): the placeholders of [`expand`]; in a
/// Gemini TOML command, `{{args}}` inside a `!{…}` shell block is shell-quoted (one single-quoted
/// word); and when the template has no placeholder at all and arguments are given, they are not
/// lost: Gemini CLI appends two newlines and the invocation as typed (`/name arguments`), Claude
/// Code two newlines and `ARGUMENTS: <arguments>`.
pub fn expand_command(
    name: &str,
    format: Format,
    template: &str,
    arguments: &str,
    limit: usize,
) -> Result<String, TooLarge> {
    let gemini = format == Format::Toml;
    let mut out = if gemini && template.contains("!{") {
        expand_shell_blocks(template, arguments, limit)?
    } else {
        expand(template, arguments, limit)?
    };
    let args = arguments.trim();
    if !args.is_empty() && !has_placeholder(template) {
        let tail = if gemini {
            format!("\n\n/{name} {args}")
        } else {
            format!("\n\nARGUMENTS: {args}")
        };
        if out.len() + tail.len() > limit {
            return Err(TooLarge { limit });
        }
        out.push_str(&tail);
    }
    Ok(out)
}

/// Whether `template` has any placeholder [`expand`] fills.
fn has_placeholder(template: &str) -> bool {
    template.contains("$ARGUMENTS")
        || template.contains("$@")
        || template.contains("{{args}}")
        || template
            .as_bytes()
            .windows(2)
            .any(|w| w[0] == b'$' && (b'1'..=b'9').contains(&w[1]))
}

/// `arguments` as one POSIX shell word.
fn shell_quote(arguments: &str) -> String {
    format!("'{}'", arguments.replace('\'', "'\\''"))
}

/// [`expand`] with `{{args}}` quoted inside `!{…}` blocks (braces inside a block nest).
fn expand_shell_blocks(template: &str, arguments: &str, limit: usize) -> Result<String, TooLarge> {
    let quoted = shell_quote(arguments);
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("!{") {
        out.push_str(&expand(
            &rest[..start],
            arguments,
            limit.saturating_sub(out.len()),
        )?);
        let block = &rest[start + 2..];
        let mut depth = 1usize;
        let mut end = None;
        for (i, c) in block.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            // An unclosed block is text.
            out.push_str(&expand(
                &rest[start..],
                arguments,
                limit.saturating_sub(out.len()),
            )?);
            return Ok(out);
        };
        let inner = block[..end].replace("{{args}}", &quoted);
        let piece = format!("!{{{inner}}}");
        if out.len() + piece.len() > limit {
            return Err(TooLarge { limit });
        }
        out.push_str(&piece);
        rest = &block[end + 1..];
    }
    out.push_str(&expand(rest, arguments, limit.saturating_sub(out.len()))?);
    Ok(out)
}

/// The expansion was bigger than the caller's bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the expanded command exceeds {limit} bytes")]
pub struct TooLarge {
    /// The bound that was passed.
    pub limit: usize,
}

/// Expands a template: `$ARGUMENTS`, `$@` and `{{args}}` become `arguments`; `$1`…`$9` its
/// whitespace-separated words (a missing word is empty). Any other `$` or `{` is kept as it is.
/// One pass, so text coming from `arguments` is never expanded again. Stops with [`TooLarge`] as
/// soon as the output would pass `limit` bytes.
pub fn expand(template: &str, arguments: &str, limit: usize) -> Result<String, TooLarge> {
    let words: Vec<&str> = arguments.split_whitespace().collect();
    let mut out = String::with_capacity(template.len().min(limit));
    let push = |out: &mut String, s: &str| {
        if out.len() + s.len() > limit {
            return Err(TooLarge { limit });
        }
        out.push_str(s);
        Ok(())
    };
    let mut rest = template;
    while let Some(at) = rest.find(['$', '{']) {
        push(&mut out, &rest[..at])?;
        let tail = &rest[at..];
        let (with, used) = if let Some(after) = tail.strip_prefix("$ARGUMENTS") {
            (arguments, tail.len() - after.len())
        } else if tail.starts_with("$@") || tail.starts_with("{{args}}") {
            (arguments, if tail.starts_with('$') { 2 } else { 8 })
        } else if let Some(d @ b'1'..=b'9') = tail.as_bytes().get(1).copied()
            && tail.starts_with('$')
        {
            (words.get(usize::from(d - b'1')).copied().unwrap_or(""), 2)
        } else {
            (&tail[..1], 1)
        };
        push(&mut out, with)?;
        rest = &tail[used..];
    }
    push(&mut out, rest)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(text: &str) -> Parsed {
        parse_markdown(text.as_bytes(), "c.md", Comments::Strip)
    }

    fn codes(r: &Parsed) -> Vec<&'static str> {
        r.diagnostics.iter().map(|d| d.code).collect()
    }

    #[test]
    fn names_from_paths() {
        let n = name_from_path(Path::new("opsx/apply.md")).unwrap();
        assert_eq!(n.full, "opsx:apply");
        assert_eq!(n.base.as_deref(), Some("apply"));
        let n = name_from_path(Path::new("review-pr.md")).unwrap();
        assert_eq!((n.full.as_str(), n.base), ("review-pr", None));
        let n = name_from_path(Path::new("git/v1.2/commit.toml")).unwrap();
        assert_eq!(n.full, "git:v1.2:commit");
        assert_eq!(
            name_from_path(Path::new("über_ß.md")).unwrap().full,
            "über_ß"
        );
        for bad in ["a\\b.md", ".md", "a\u{7}.md", "x/\u{0}y.md"] {
            assert!(name_from_path(Path::new(bad)).is_err(), "{bad}");
        }
        // `:` (and other punctuation, spaces) may be part of a segment, as users name them.
        let n = name_from_path(Path::new("svelte/svelte:a11y.md")).unwrap();
        assert_eq!(
            (n.full.as_str(), n.base.as_deref()),
            ("svelte:svelte:a11y", Some("svelte:a11y"))
        );
        assert_eq!(
            name_from_path(Path::new("my command.md")).unwrap().full,
            "my command"
        );
        let long = format!("{}.md", "x".repeat(129));
        assert!(
            name_from_path(Path::new(&long))
                .unwrap_err()
                .contains("129 bytes")
        );
        use std::os::unix::ffi::OsStrExt;
        let odd = Path::new(std::ffi::OsStr::from_bytes(b"a\xff.md"));
        assert!(name_from_path(odd).unwrap_err().contains("UTF-8"));
    }

    #[test]
    fn markdown_with_and_without_frontmatter() {
        let r = md(
            "---\ndescription: Apply a change\nargument-hint: <change-id>\nmodel: opus\n\
                    allowed-tools: Bash(git:*), Read\ndisable-model-invocation: true\n---\n\
                    Apply $ARGUMENTS now.\n",
        );
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        let c = r.command.unwrap();
        assert_eq!(c.description, "Apply a change");
        assert_eq!(c.argument_hint.as_deref(), Some("<change-id>"));
        assert_eq!(c.model.as_deref(), Some("opus"));
        assert_eq!(
            c.allowed_tools.as_deref(),
            Some(&["Bash(git:*)".to_owned(), "Read".to_owned()][..])
        );
        assert_eq!(c.extra["disable-model-invocation"], true);
        assert_eq!(c.template, "Apply $ARGUMENTS now.");
        assert_eq!(c.format, Format::Markdown);

        let c = md("\n\n   # Review the diff   \nthen report.\n")
            .command
            .unwrap();
        assert_eq!(c.description, "# Review the diff");
        assert_eq!(c.template, "# Review the diff   \nthen report.");
        let long = "é".repeat(300);
        let c = md(&format!("---\nmodel: x\n---\n{long}\n"))
            .command
            .unwrap();
        assert_eq!(
            c.description.chars().count(),
            MAX_FALLBACK_DESCRIPTION_CHARS
        );
    }

    #[test]
    fn markdown_problems() {
        let r = md("---\ndescription: d\n");
        assert_eq!(codes(&r), ["unclosed_frontmatter"]);
        assert!(r.command.is_none());
        let r = md("---\nallowed-tools: {a: 1}\n---\nx");
        assert_eq!(codes(&r), ["invalid_field"]);
        assert!(r.command.is_none());
        let r = md("---\ndescription: Use when: x\n---\nbody");
        assert_eq!(codes(&r), ["yaml_fallback"]);
        assert_eq!(r.command.unwrap().description, "Use when: x");
        let r = md("---\ndescription: d\n---\n");
        assert_eq!(codes(&r), ["empty_template"]);
        assert_eq!(r.command.unwrap().description, "d");
        let r = parse_markdown(b"caf\xe9", "c.md", Comments::Keep);
        assert_eq!(codes(&r), ["not_utf8"]);
    }

    #[test]
    fn gemini_toml_commands() {
        let r = parse_toml(
            b"description = \"Commit staged work\"\nprompt = \"\"\"\nWrite a commit for {{args}}.\n\"\"\"\nx = 1\n",
            "c.toml",
        );
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        let c = r.command.unwrap();
        assert_eq!(c.template, "Write a commit for {{args}}.");
        assert_eq!(c.description, "Commit staged work");
        assert_eq!(c.format, Format::Toml);
        assert_eq!(c.extra["x"], 1);
        let c = parse_toml(b"prompt = \"Explain {{args}}\"", "c.toml")
            .command
            .unwrap();
        // Gemini CLI's fallback, not the template's first line.
        assert_eq!(c.description, "Custom command from c.toml");
        let r = parse_toml(b"description = \"d\"", "c.toml");
        assert_eq!(codes(&r), ["missing_prompt"]);
        let r = parse_toml(b"prompt = 3", "c.toml");
        assert_eq!(codes(&r), ["invalid_field"]);
        assert_eq!(r.diagnostics[0].line, Some(1));
        let r = parse_toml(b"\nprompt = 'x\n", "c.toml");
        assert_eq!(codes(&r), ["toml_syntax"]);
        assert_eq!(r.diagnostics[0].line, Some(2));
    }

    #[test]
    fn expansion_of_every_placeholder() {
        let t = "all=$ARGUMENTS at=$@ g={{args}} one=$1 two=$2 three=$3 ten=$10";
        assert_eq!(
            expand(t, "  alpha   beta ", 1 << 20).unwrap(),
            "all=  alpha   beta  at=  alpha   beta  g=  alpha   beta  one=alpha two=beta \
             three= ten=alpha0"
        );
        // Not placeholders: kept as they are.
        let t = "$ $0 $$ $HOME $arguments ${1} {args} {{ args }} $";
        assert_eq!(expand(t, "x", 1 << 20).unwrap(), t);
        // Arguments are not expanded again.
        assert_eq!(
            expand("[$ARGUMENTS]", "$1 {{args}}", 100).unwrap(),
            "[$1 {{args}}]"
        );
        assert_eq!(expand("€$1€", "ü", 100).unwrap(), "€ü€");
    }

    #[test]
    fn arbitrary_input_never_panics() {
        // A cheap deterministic fuzz over fragments that are tricky for each reader.
        let parts = [
            "---",
            "\n",
            "\r",
            "$",
            "$1",
            "$9",
            "$@",
            "$ARGUMENTS",
            "{{args}}",
            "{{",
            "}}",
            "{",
            "é",
            "\u{feff}",
            "prompt = ",
            "\"",
            "'''",
            "\"\"\"",
            "[t]",
            "[[a]]",
            "=",
            "#",
            "description: d",
            "<!--",
            "-->",
            ": :",
            "\t",
            "\\",
            "\u{0}",
        ];
        let mut seed = 0x2545f4914f6cdd1du64;
        for _ in 0..5000 {
            let mut text = String::new();
            for _ in 0..10 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                text.push_str(parts[(seed % parts.len() as u64) as usize]);
            }
            let _ = parse_markdown(text.as_bytes(), "c.md", Comments::Strip);
            let _ = parse_toml(text.as_bytes(), "c.toml");
            let _ = super::super::parse_toml(text.as_bytes(), "a.toml");
            let out = expand(&text, &text, 1 << 16).unwrap();
            assert!(out.len() <= 1 << 16);
            let _ = expand(&text, &text, 7);
        }
    }

    #[test]
    fn expansion_as_each_tool_does_it() {
        let md =
            |t: &str, a: &str| expand_command("review", Format::Markdown, t, a, 1 << 20).unwrap();
        let gem =
            |t: &str, a: &str| expand_command("git:commit", Format::Toml, t, a, 1 << 20).unwrap();
        assert_eq!(
            md("Review the change.", "src/lib.rs"),
            "Review the change.\n\nARGUMENTS: src/lib.rs"
        );
        assert_eq!(md("Review $1.", "src/lib.rs"), "Review src/lib.rs.");
        assert_eq!(md("Review the change.", "  "), "Review the change.");
        assert_eq!(
            gem("Write a commit.", "fix it"),
            "Write a commit.\n\n/git:commit fix it"
        );
        assert_eq!(
            gem("Diff: !{git diff {{args}}} for {{args}}", "it's; rm -rf /"),
            "Diff: !{git diff 'it'\\''s; rm -rf /'} for it's; rm -rf /"
        );
        assert_eq!(gem("!{echo {a}} {{args}}", "x"), "!{echo {a}} x");
        assert_eq!(
            expand_command("n", Format::Markdown, "x", "abc", 5),
            Err(TooLarge { limit: 5 })
        );
    }

    #[test]
    fn expansion_is_bounded() {
        assert_eq!(expand("$@$@$@", "abcd", 12).unwrap().len(), 12);
        assert_eq!(expand("$@$@$@", "abcd", 11), Err(TooLarge { limit: 11 }));
        assert_eq!(expand("0123456789", "", 9), Err(TooLarge { limit: 9 }));
        let huge = "$ARGUMENTS".repeat(10_000);
        assert!(expand(&huge, &"x".repeat(1000), 1 << 20).is_err());
    }
}

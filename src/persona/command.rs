//! Workflow commands (docs §3.6): prompt templates a coordinator expands and runs. Parses one
//! command file — markdown with optional frontmatter (a command or a skill), or a Gemini CLI TOML
//! command — derives a command's name from its path inside a commands directory, and expands a
//! template with the caller's arguments by the rules of the tool that owns the file (its
//! [`Dialect`]): a placeholder of one tool is plain text to another.
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

/// Which tool's rules read and expand a command (docs §3.6); where its file sits decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Gemini CLI's TOML commands: `{{args}}` only; `$…` is text.
    Gemini,
    /// Claude Code's markdown commands and skills: `$ARGUMENTS`, `$ARGUMENTS[N]` and `$N`
    /// counting from 0 over shell-split words, named positions, `${CLAUDE_SKILL_DIR}`;
    /// `{{args}}` is text.
    Claude,
    /// agentry's own (`.xcsh`, `.codex`, `command_dirs`, bundled): `$ARGUMENTS`, `$@`, `$1`…`$9`
    /// over whitespace-separated words; `{{args}}` is text.
    Native,
}

impl Dialect {
    /// The dialect of a markdown file in a commands directory of `family` (a plugin's when
    /// `plugin`), or of a skill. TOML files are always [`Dialect::Gemini`].
    pub fn of_markdown(family: &str, plugin: bool, skill: bool) -> Self {
        if skill || plugin || family == ".claude" {
            Self::Claude
        } else {
            Self::Native
        }
    }

    /// The tool, as people name it.
    pub fn tool(self) -> &'static str {
        match self {
            Self::Gemini => "Gemini CLI",
            Self::Claude => "Claude Code",
            Self::Native => "agentry",
        }
    }
}

/// One parsed command file. The name comes from its path, not from the file.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// The `description` key, else the template's first non-empty line (at most
    /// [`MAX_FALLBACK_DESCRIPTION_CHARS`] characters).
    pub description: String,
    /// The body (markdown) or `prompt` (TOML): what [`expand_command`] fills in.
    pub template: String,
    /// `argument_hint`: what to pass, for a human (`<file> [focus]`).
    pub argument_hint: Option<String>,
    /// `model` the command asks for, passed through.
    pub model: Option<String>,
    /// `allowed_tools` (CSV or list); `None` when the file does not say.
    pub allowed_tools: Option<Vec<String>>,
    /// Markdown or TOML.
    pub format: Format,
    /// Whose rules expand it.
    pub dialect: Dialect,
    /// `arguments` (Claude dialect): the names of the positions, `$name` in the template.
    pub arguments: Vec<String>,
    /// `user-invocable` (a skill with `false` is not a command).
    pub user_invocable: bool,
    /// A skill's directory (`${CLAUDE_SKILL_DIR}`), set by whoever read it as a skill.
    pub skill_dir: Option<String>,
    /// Every other key, as JSON, so nothing a file says is lost.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Command {
    fn empty(format: Format, dialect: Dialect) -> Self {
        Self {
            description: String::new(),
            template: String::new(),
            argument_hint: None,
            model: None,
            allowed_tools: None,
            format,
            dialect,
            arguments: Vec::new(),
            user_invocable: true,
            skill_dir: None,
            extra: serde_json::Map::new(),
        }
    }
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
/// allow; a name two files would give is a `duplicate_name` like any other. A Gemini command's
/// segments are cleaned as Gemini CLI cleans them: every character outside `A-Za-z0-9_.-`
/// becomes `_` (`a:b.toml` is `a_b`).
pub fn name_from_path(rel: &Path, dialect: Dialect) -> Result<CommandName, String> {
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
    let cleaned: Vec<String>;
    if dialect == Dialect::Gemini {
        cleaned = segments.iter().map(|s| gemini_segment(s)).collect();
        segments = cleaned.iter().map(String::as_str).collect();
    }
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
    let base = (segments.len() > 1).then(|| segments[segments.len() - 1].to_owned());
    Ok(CommandName { full, base })
}

/// A name segment as Gemini CLI makes it: characters outside `A-Za-z0-9_.-` become `_`.
fn gemini_segment(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
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

/// Parses a markdown command of `dialect`: optional frontmatter (`description`,
/// `argument_hint`, `model`, `allowed_tools`; in the Claude dialect `arguments` and
/// `user-invocable` too; the rest in `extra`), then the template. Never panics on any input.
pub fn parse_markdown(bytes: &[u8], path: &str, comments: Comments, dialect: Dialect) -> Parsed {
    let mut diags = Vec::new();
    let command = decode(bytes, path, &mut diags)
        .and_then(|t| markdown(t, path, comments, dialect, &mut diags));
    Parsed {
        command,
        diagnostics: diags,
    }
}

fn markdown(
    text: &str,
    path: &str,
    comments: Comments,
    dialect: Dialect,
    diags: &mut Vec<Diagnostic>,
) -> Option<Command> {
    let doc = split::split(text, comments);
    let mut c = Command::empty(Format::Markdown, dialect);
    c.template = doc.body;
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
            let claude = dialect == Dialect::Claude;
            for e in entries {
                match &*e.key {
                    "description" => description = describing(&mut r, &block, &e),
                    "argument_hint" => c.argument_hint = describing(&mut r, &block, &e),
                    "model" => c.model = r.string(&e).map(|m| m.trim().to_owned()),
                    "allowed_tools" => c.allowed_tools = r.list(&e),
                    "arguments" if claude => c.arguments = positions(&mut r, &e),
                    "user_invocable" if claude => {
                        c.user_invocable = !matches!(e.value, serde_yaml::Value::Bool(false));
                        c.extra
                            .insert(e.raw_key.into_owned(), fields::yaml_to_json(e.value));
                    }
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

/// `arguments`: the names of the positions, as a list or a whitespace-separated string; any
/// other shape is a warning and names nothing (the file still loads).
fn positions(r: &mut Reader<'_, '_>, e: &fields::Entry) -> Vec<String> {
    use serde_yaml::Value as Yaml;
    let named: Option<Vec<String>> = match &e.value {
        Yaml::String(s) => Some(s.split_whitespace().map(str::to_owned).collect()),
        Yaml::Sequence(items) => items
            .iter()
            .map(|i| i.as_str().map(|s| s.trim().to_owned()))
            .collect(),
        Yaml::Null => Some(Vec::new()),
        _ => None,
    };
    match named {
        Some(names) => names.into_iter().filter(|n| is_position_name(n)).collect(),
        None => {
            r.warn_describing(e);
            Vec::new()
        }
    }
}

/// Whether `n` can be written `$n`: a letter or `_`, then letters, digits and `_`.
fn is_position_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The source text of an entry's value on its line (`key: <this>`), when it is all there.
fn source_text(block: &split::Block<'_>, e: &fields::Entry) -> Option<String> {
    let line = split::lines(&block.text).nth(e.line?)?;
    let (_, value) = line.split_once(':')?;
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// A field that only describes (`description`, `argument-hint`): a string as it is; a list, as
/// YAML readers turn `[project-name]` or `["file", "focus"]` into one, kept as its source text
/// exactly as written (rendered `[a, b]` only when it spans lines); anything else a warning,
/// and the file still loads (only fields that change behaviour may skip it).
fn describing(
    r: &mut Reader<'_, '_>,
    block: &split::Block<'_>,
    e: &fields::Entry,
) -> Option<String> {
    use serde_yaml::Value as Yaml;
    match &e.value {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Null => None,
        Yaml::Sequence(items) => source_text(block, e)
            .filter(|t| t.starts_with('['))
            .or_else(|| {
                Some(format!(
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
                ))
            }),
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
    diags.extend(foreign_placeholder(&c, path));
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
    let mut c = Command::empty(Format::Toml, Dialect::Gemini);
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
    // Gemini CLI's own fallback for a command without one (an empty one is none).
    let description = description.filter(|d| !d.trim().is_empty()).or_else(|| {
        let file = std::path::Path::new(path)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        Some(format!("Custom command from {file}"))
    });
    finish(c, description, path, diags)
}

/// The informational diagnostic of a template holding a placeholder of another dialect only
/// (docs §3.6): it stays text, and the author learns why.
fn foreign_placeholder(c: &Command, path: &str) -> Option<Diagnostic> {
    let (found, owner, own) = match c.dialect {
        // `$1` in a Gemini prompt is more often a price than a placeholder: not reported.
        Dialect::Gemini => ("$ARGUMENTS", "Claude Code", "{{args}}"),
        Dialect::Claude | Dialect::Native => ("{{args}}", "Gemini CLI", "$ARGUMENTS"),
    };
    c.template.contains(found).then(|| Diagnostic {
        path: path.to_owned(),
        line: None,
        severity: Severity::Info,
        code: "foreign_placeholder",
        message: format!(
            "`{found}` is {owner}'s placeholder; {} does not expand it in this file, so it stays \
             as written (its placeholder for the arguments is `{own}`)",
            c.dialect.tool()
        ),
    })
}

/// Expands a command as its own tool does (docs §3.6), by its [`Dialect`]'s placeholders, in
/// one pass (text that comes from `arguments` is never expanded again), bounded by `limit`
/// bytes. When the template has no placeholder of its dialect and arguments are given, they are
/// not lost: Gemini CLI appends two newlines and the invocation as typed (`/name arguments`),
/// Claude Code (and agentry's own commands) two newlines and `ARGUMENTS: <arguments>`.
pub fn expand_command(
    name: &str,
    c: &Command,
    arguments: &str,
    limit: usize,
) -> Result<String, TooLarge> {
    let mut out = Bounded::new(limit, c.template.len());
    let placeholders = match c.dialect {
        Dialect::Gemini => gemini(&c.template, arguments, &mut out)?,
        Dialect::Claude => claude(c, arguments, &mut out)?,
        Dialect::Native => native(&c.template, arguments, &mut out)?,
    };
    let args = arguments.trim();
    if !args.is_empty() && !placeholders {
        if c.dialect == Dialect::Gemini {
            out.push_all(&["\n\n/", name, " ", args])?;
        } else {
            out.push_all(&["\n\nARGUMENTS: ", args])?;
        }
    }
    Ok(out.text)
}

/// A string that refuses to grow past a bound.
struct Bounded {
    text: String,
    limit: usize,
}

impl Bounded {
    fn new(limit: usize, hint: usize) -> Self {
        Self {
            text: String::with_capacity(hint.min(limit)),
            limit,
        }
    }

    fn push(&mut self, s: &str) -> Result<(), TooLarge> {
        if self.text.len() + s.len() > self.limit {
            return Err(TooLarge { limit: self.limit });
        }
        self.text.push_str(s);
        Ok(())
    }

    fn push_all(&mut self, parts: &[&str]) -> Result<(), TooLarge> {
        parts.iter().try_for_each(|p| self.push(p))
    }
}

/// Gemini CLI: `{{args}}` is the arguments as given, except inside a `!{…}` shell block (braces
/// nest), where it is one single-quoted shell word, or nothing when there are no arguments.
/// Everything else, `$` included, is text; `!{…}` and `@{…}` are left for the caller. Whether
/// the template had a `{{args}}`.
fn gemini(template: &str, arguments: &str, out: &mut Bounded) -> Result<bool, TooLarge> {
    const ARGS: &str = "{{args}}";
    let quoted = if arguments.is_empty() {
        String::new()
    } else {
        format!("'{}'", arguments.replace('\'', "'\\''"))
    };
    let mut found = false;
    let mut rest = template;
    loop {
        let arg = rest.find(ARGS).unwrap_or(usize::MAX);
        let block = rest.find("!{").unwrap_or(usize::MAX);
        if arg == usize::MAX && block == usize::MAX {
            out.push(rest)?;
            return Ok(found);
        }
        if arg < block {
            out.push_all(&[&rest[..arg], arguments])?;
            found = true;
            rest = &rest[arg + ARGS.len()..];
            continue;
        }
        out.push_all(&[&rest[..block], "!{"])?;
        let inner = &rest[block + 2..];
        let Some(end) = block_end(inner) else {
            // An unclosed block is text.
            rest = inner;
            continue;
        };
        let mut pieces = inner[..end].split(ARGS);
        out.push(pieces.next().unwrap_or_default())?;
        for piece in pieces {
            found = true;
            out.push_all(&[&quoted, piece])?;
        }
        out.push("}")?;
        rest = &inner[end + 1..];
    }
}

/// Where the `}` that closes a `!{` block is in `block` (the text after `!{`); braces nest.
fn block_end(block: &str) -> Option<usize> {
    let mut depth = 1usize;
    for (i, b) in block.bytes().enumerate() {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Claude Code: `$ARGUMENTS` is the arguments as given; `$ARGUMENTS[N]` and `$N` the N-th
/// argument counting from 0, the arguments split as a shell splits words (unbalanced quotes:
/// at whitespace); `$name` the argument at `name`'s place in `arguments:`;
/// `${CLAUDE_SKILL_DIR}` a skill's directory. A missing argument is empty. Whether the template
/// had an argument placeholder.
fn claude(c: &Command, arguments: &str, out: &mut Bounded) -> Result<bool, TooLarge> {
    const ALL: &str = "$ARGUMENTS";
    const SKILL_DIR: &str = "${CLAUDE_SKILL_DIR}";
    let words = shlex::split(arguments)
        .unwrap_or_else(|| arguments.split_whitespace().map(str::to_owned).collect());
    let word = |n: usize| words.get(n).map_or("", String::as_str);
    let mut found = false;
    let mut rest = c.template.as_str();
    while let Some(at) = rest.find('$') {
        out.push(&rest[..at])?;
        let tail = &rest[at..];
        let (with, used) = if let Some(after) = tail.strip_prefix(ALL) {
            found = true;
            match index(after) {
                Some((n, len)) => (word(n), ALL.len() + len),
                None => (arguments, ALL.len()),
            }
        } else if let (Some(dir), true) = (&c.skill_dir, tail.starts_with(SKILL_DIR)) {
            (dir.as_str(), SKILL_DIR.len())
        } else {
            let ident = identifier(&tail[1..]);
            if !ident.is_empty() && ident.bytes().all(|b| b.is_ascii_digit()) {
                found = true;
                (word(ident.parse().unwrap_or(usize::MAX)), 1 + ident.len())
            } else if let Some(i) = c.arguments.iter().position(|n| n == ident) {
                found = true;
                (word(i), 1 + ident.len())
            } else {
                ("$", 1)
            }
        };
        out.push(with)?;
        rest = &tail[used..];
    }
    out.push(rest)?;
    Ok(found)
}

/// `[N]` at the start of `s`: N and the length of the brackets.
fn index(s: &str) -> Option<(usize, usize)> {
    let inner = s.strip_prefix('[')?;
    let close = inner.find(']')?;
    let digits = &inner[..close];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().unwrap_or(usize::MAX), close + 2))
}

/// The run of ASCII letters, digits and `_` at the start of `s`.
fn identifier(s: &str) -> &str {
    let end = s
        .bytes()
        .position(|b| !(b.is_ascii_alphanumeric() || b == b'_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// agentry's own: `$ARGUMENTS` and `$@` are the arguments as given, `$1`…`$9` their
/// whitespace-separated words (a missing word is empty). Any other `$` is kept. Whether the
/// template had a placeholder.
fn native(template: &str, arguments: &str, out: &mut Bounded) -> Result<bool, TooLarge> {
    let words: Vec<&str> = arguments.split_whitespace().collect();
    let mut found = false;
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push(&rest[..at])?;
        let tail = &rest[at..];
        let (with, used) = if tail.starts_with("$ARGUMENTS") {
            (arguments, "$ARGUMENTS".len())
        } else if tail.starts_with("$@") {
            (arguments, 2)
        } else if let Some(d @ b'1'..=b'9') = tail.as_bytes().get(1).copied() {
            (words.get(usize::from(d - b'1')).copied().unwrap_or(""), 2)
        } else {
            out.push("$")?;
            rest = &tail[1..];
            continue;
        };
        found = true;
        out.push(with)?;
        rest = &tail[used..];
    }
    out.push(rest)?;
    Ok(found)
}

/// The expansion was bigger than the caller's bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the expanded command exceeds {limit} bytes")]
pub struct TooLarge {
    /// The bound that was passed.
    pub limit: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(text: &str) -> Parsed {
        parse_markdown(text.as_bytes(), "c.md", Comments::Strip, Dialect::Claude)
    }

    /// A command of `dialect` with this template.
    fn cmd(dialect: Dialect, template: &str) -> Command {
        let format = if dialect == Dialect::Gemini {
            Format::Toml
        } else {
            Format::Markdown
        };
        let mut c = Command::empty(format, dialect);
        c.template = template.to_owned();
        c
    }

    /// `template` of `dialect` expanded with `arguments`, unbounded.
    fn exp(dialect: Dialect, template: &str, arguments: &str) -> String {
        expand_command("n", &cmd(dialect, template), arguments, 1 << 20).unwrap()
    }

    fn codes(r: &Parsed) -> Vec<&'static str> {
        r.diagnostics.iter().map(|d| d.code).collect()
    }

    #[test]
    fn names_from_paths() {
        let n = name_from_path(Path::new("opsx/apply.md"), Dialect::Claude).unwrap();
        assert_eq!(n.full, "opsx:apply");
        assert_eq!(n.base.as_deref(), Some("apply"));
        let n = name_from_path(Path::new("review-pr.md"), Dialect::Claude).unwrap();
        assert_eq!((n.full.as_str(), n.base), ("review-pr", None));
        let n = name_from_path(Path::new("git/v1.2/commit.toml"), Dialect::Claude).unwrap();
        assert_eq!(n.full, "git:v1.2:commit");
        assert_eq!(
            name_from_path(Path::new("über_ß.md"), Dialect::Claude)
                .unwrap()
                .full,
            "über_ß"
        );
        for bad in ["a\\b.md", ".md", "a\u{7}.md", "x/\u{0}y.md"] {
            assert!(
                name_from_path(Path::new(bad), Dialect::Claude).is_err(),
                "{bad}"
            );
        }
        // `:` (and other punctuation, spaces) may be part of a segment, as users name them.
        let n = name_from_path(Path::new("svelte/svelte:a11y.md"), Dialect::Claude).unwrap();
        assert_eq!(
            (n.full.as_str(), n.base.as_deref()),
            ("svelte:svelte:a11y", Some("svelte:a11y"))
        );
        assert_eq!(
            name_from_path(Path::new("my command.md"), Dialect::Claude)
                .unwrap()
                .full,
            "my command"
        );
        let long = format!("{}.md", "x".repeat(129));
        assert!(
            name_from_path(Path::new(&long), Dialect::Claude)
                .unwrap_err()
                .contains("129 bytes")
        );
        use std::os::unix::ffi::OsStrExt;
        let odd = Path::new(std::ffi::OsStr::from_bytes(b"a\xff.md"));
        assert!(
            name_from_path(odd, Dialect::Claude)
                .unwrap_err()
                .contains("UTF-8")
        );
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
        let r = parse_markdown(b"caf\xe9", "c.md", Comments::Keep, Dialect::Claude);
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
    fn native_placeholders() {
        let t = "all=$ARGUMENTS at=$@ g={{args}} one=$1 two=$2 three=$3 ten=$10";
        assert_eq!(
            exp(Dialect::Native, t, "  alpha   beta "),
            "all=  alpha   beta  at=  alpha   beta  g={{args}} one=alpha two=beta three= \
             ten=alpha0"
        );
        // Not placeholders: kept as they are.
        let t = "$ $0 $$ $HOME $arguments ${1} {args} {{ args }} $";
        assert_eq!(exp(Dialect::Native, t, ""), t);
        // Arguments are not expanded again.
        assert_eq!(
            exp(Dialect::Native, "[$ARGUMENTS]", "$1 {{args}}"),
            "[$1 {{args}}]"
        );
        assert_eq!(exp(Dialect::Native, "€$1€", "ü"), "€ü€");
    }

    #[test]
    fn gemini_knows_only_its_own_placeholder() {
        let g = |t: &str, a: &str| exp(Dialect::Gemini, t, a);
        // A price, an awk program and Claude's placeholders are text to Gemini CLI.
        assert_eq!(
            g("| Pro | $1.25 | for {{args}}", "A1 B2"),
            "| Pro | $1.25 | for A1 B2"
        );
        assert_eq!(
            g("Run !{awk '{print $3}' {{args}}}", "log.txt"),
            "Run !{awk '{print $3}' 'log.txt'}"
        );
        // No `{{args}}`: the invocation is appended, a `$ARGUMENTS:` heading notwithstanding.
        assert_eq!(
            g("$ARGUMENTS: what to review", "src"),
            "$ARGUMENTS: what to review\n\n/n src"
        );
        // Empty arguments inside a shell block are nothing, not `''`.
        assert_eq!(g("!{grep -rn {{args}} src}", ""), "!{grep -rn  src}");
        assert_eq!(g("!{echo {a}} {{args}}", "x"), "!{echo {a}} x");
        assert_eq!(
            g("Diff: !{git diff {{args}}} for {{args}}", "it's; rm -rf /"),
            "Diff: !{git diff 'it'\\''s; rm -rf /'} for it's; rm -rf /"
        );
        // An unclosed block is text, and `{{args}}` after it still expands.
        assert_eq!(g("!{echo {{args}}", "x"), "!{echo x");
    }

    #[test]
    fn claude_counts_from_zero_and_splits_as_a_shell() {
        let c = |t: &str, a: &str| exp(Dialect::Claude, t, a);
        let args = r#""fix login" main --force"#;
        assert_eq!(
            c("a=$0 b=$1 c=$2 d=$3 all=$ARGUMENTS", args),
            r#"a=fix login b=main c=--force d= all="fix login" main --force"#
        );
        assert_eq!(
            c(
                "$ARGUMENTS[0]/$ARGUMENTS[1]/$ARGUMENTS[9]/$ARGUMENTS[x]",
                "a 'b c'"
            ),
            "a/b c//a 'b c'[x]"
        );
        // Unbalanced quotes: split at whitespace.
        assert_eq!(c("$0|$1", "it's here"), "it's|here");
        // `{{args}}` is text here; with no placeholder the arguments are appended.
        assert_eq!(c("Use {{args}}.", "x y"), "Use {{args}}.\n\nARGUMENTS: x y");
        // Named positions.
        let mut named = cmd(Dialect::Claude, "Fix $issue on $branch ($issue_id, $other)");
        named.arguments = vec!["issue".into(), "branch".into()];
        assert_eq!(
            expand_command("n", &named, "42 main", 1 << 20).unwrap(),
            "Fix 42 on main ($issue_id, $other)"
        );
        // A skill's directory.
        let mut skill = cmd(Dialect::Claude, "Run ${CLAUDE_SKILL_DIR}/check.sh $0");
        skill.skill_dir = Some("/s/lint".into());
        assert_eq!(
            expand_command("lint", &skill, "a.rs", 1 << 20).unwrap(),
            "Run /s/lint/check.sh a.rs"
        );
        assert_eq!(c("${CLAUDE_SKILL_DIR}", ""), "${CLAUDE_SKILL_DIR}");
        // A huge index is a missing argument.
        assert_eq!(c("[$99999999999999999999999]", "a"), "[]");
    }

    #[test]
    fn frontmatter_of_claude_commands() {
        let c = md(
            "---\narguments: [issue, branch, 9bad]\nargument-hint: [\"file\", \"focus\"]\n---\nx",
        )
        .command
        .unwrap();
        assert_eq!(c.arguments, ["issue", "branch"]);
        assert_eq!(c.argument_hint.as_deref(), Some("[\"file\", \"focus\"]"));
        let c = md("---\narguments: issue branch\nuser-invocable: false\n---\nx")
            .command
            .unwrap();
        assert_eq!(c.arguments, ["issue", "branch"]);
        assert!(!c.user_invocable);
        let c = md("---\nargument-hint:\n  - a\n  - b\n---\nx")
            .command
            .unwrap();
        assert_eq!(c.argument_hint.as_deref(), Some("[a, b]"));
        // Another dialect's placeholder is a note for the author.
        let r = md("Use {{args}}.");
        assert_eq!(codes(&r), ["foreign_placeholder"]);
        assert_eq!(r.diagnostics[0].severity, Severity::Info);
        let r = parse_toml(b"prompt = \"Use $ARGUMENTS and $1.25\"", "c.toml");
        assert_eq!(codes(&r), ["foreign_placeholder"]);
        assert!(
            r.diagnostics[0]
                .message
                .contains("Claude Code's placeholder"),
            "{:?}",
            r.diagnostics
        );
        // An empty TOML description is none.
        let c = parse_toml(b"description = \"\"\nprompt = \"x\"", "my.toml")
            .command
            .unwrap();
        assert_eq!(c.description, "Custom command from my.toml");
    }

    #[test]
    fn gemini_names_are_cleaned_as_gemini_cleans_them() {
        let g = |p: &str| name_from_path(Path::new(p), Dialect::Gemini).unwrap();
        assert_eq!(g("a:b.toml").full, "a_b");
        assert_eq!(g("my cmd.toml").full, "my_cmd");
        let n = g("git/v1.2/com mit.toml");
        assert_eq!(
            (n.full.as_str(), n.base.as_deref()),
            ("git:v1.2:com_mit", Some("com_mit"))
        );
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
            let _ = parse_markdown(text.as_bytes(), "c.md", Comments::Strip, Dialect::Claude);
            let _ = parse_toml(text.as_bytes(), "c.toml");
            let _ = super::super::parse_toml(text.as_bytes(), "a.toml");
            for dialect in [Dialect::Gemini, Dialect::Claude, Dialect::Native] {
                let c = cmd(dialect, &text);
                let out = expand_command("n", &c, &text, 1 << 16).unwrap();
                assert!(out.len() <= 1 << 16);
                let _ = expand_command("n", &c, &text, 7);
            }
        }
    }

    #[test]
    fn expansion_is_bounded() {
        let native =
            |t: &str, a: &str, limit| expand_command("n", &cmd(Dialect::Native, t), a, limit);
        assert_eq!(native("$@$@$@", "abcd", 12).unwrap().len(), 12);
        assert_eq!(native("$@$@$@", "abcd", 11), Err(TooLarge { limit: 11 }));
        assert_eq!(native("0123456789", "", 9), Err(TooLarge { limit: 9 }));
        let huge = "$ARGUMENTS".repeat(10_000);
        for dialect in [Dialect::Claude, Dialect::Native] {
            let c = cmd(dialect, &huge);
            assert!(expand_command("n", &c, &"x".repeat(1000), 1 << 20).is_err());
        }
        let g = cmd(Dialect::Gemini, &"{{args}}!{{{args}}}".repeat(10_000));
        assert!(expand_command("n", &g, &"x".repeat(1000), 1 << 20).is_err());
        // The appended arguments count too.
        assert_eq!(native("x", "abc", 5), Err(TooLarge { limit: 5 }));
    }
}

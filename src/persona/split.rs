//! Splits a file's text into frontmatter and body (docs §2.1), keeping track of original line
//! numbers so diagnostics point at the line the author sees even after HTML comments (which may
//! span lines) were removed.

use std::{borrow::Cow, collections::HashMap};

/// The frontmatter block, as text plus the original line number of each of its lines.
#[derive(Debug)]
pub(super) struct Block<'a> {
    /// The lines between the two `---` lines, joined with `\n`: a slice of the file itself
    /// unless line breaks were normalised or comments removed.
    pub text: Cow<'a, str>,
    /// `lines[i]` is the 1-based line in the original file of the block's line `i`.
    pub lines: Vec<u32>,
    /// Original line of the opening `---`.
    pub open_line: u32,
}

impl Block<'_> {
    /// Maps a 0-based line index inside the block to the original 1-based line.
    pub fn orig_line(&self, idx: usize) -> u32 {
        self.lines
            .get(idx)
            .copied()
            .unwrap_or_else(|| self.lines.last().copied().unwrap_or(self.open_line))
    }
}

/// What the file starts with.
#[derive(Debug)]
pub(super) enum Front<'a> {
    /// First non-blank line is not `---`.
    None,
    /// Opened but never closed.
    Unclosed {
        /// Original line of the opening `---`.
        open_line: u32,
    },
    /// A complete block.
    Block(Block<'a>),
}

/// A split document.
#[derive(Debug)]
pub(super) struct Doc<'a> {
    /// The frontmatter, if any.
    pub front: Front<'a>,
    /// Everything after the closing line, trimmed (the whole text when there is no block).
    pub body: String,
}

/// Where `<!--` first starts in `s` (a vectorised search: the whole file is scanned).
fn find_open(s: &str) -> Option<usize> {
    memchr::memmem::find(s.as_bytes(), b"<!--")
}

/// `text.split('\n')`, the same pieces, found with a vectorised `memchr` (the standard
/// library's `char` searcher costs more per line than the short lines of a frontmatter take to
/// read).
pub(super) fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let ends = memchr::memchr_iter(b'\n', text.as_bytes()).chain(std::iter::once(text.len()));
    ends.map(move |end| {
        let line = &text[start..end];
        start = end + 1;
        line
    })
}

/// Removes `<!-- ... -->` comments outside code (docs §2.1 step 2): a fenced code block (a line
/// opening with three or more backticks or tildes, up to its closing fence) and an inline code
/// span (a run of backticks up to the next run of the same length in its paragraph) are copied
/// as written. Returns the new text (the text itself when nothing was removed) and, for each
/// removed comment, the offset in the new text where it was and the number of newlines removed
/// so far (inclusive). Linear in the length of the text.
fn strip_comments(text: &str) -> (Cow<'_, str>, Vec<(usize, u32)>) {
    let Some(first) = find_open(text) else {
        return (Cow::Borrowed(text), Vec::new());
    };
    if memchr::memmem::find(&text.as_bytes()[first + 4..], b"-->").is_none() {
        return (Cow::Borrowed(text), Vec::new());
    }
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut removed = Vec::new();
    let mut total = 0u32;
    // `text[copied..i]` is still to be copied to `out`.
    let mut copied = 0;
    let mut i = 0;
    let mut line_start = true;
    // An open fence: its character and length.
    let mut fence: Option<(u8, usize)> = None;
    // For a backtick run of length n that found no closing run, the paragraph end up to which
    // none exists: a later run of that length before it is text too (keeps the scan linear).
    let mut no_close: HashMap<usize, usize> = HashMap::new();
    // The end of the paragraph the scan is in (found once per paragraph).
    let mut para_end = 0;
    while i < b.len() {
        if line_start {
            line_start = false;
            let end = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |e| i + e);
            let line = &text[i..end];
            match fence {
                Some((ch, len)) => {
                    if closes_fence(line, ch, len) {
                        fence = None;
                    }
                    i = (end + 1).min(b.len());
                    line_start = true;
                    continue;
                }
                None => {
                    if let Some(open) = opens_fence(line) {
                        fence = Some(open);
                        i = (end + 1).min(b.len());
                        line_start = true;
                        continue;
                    }
                }
            }
        }
        match b[i] {
            b'\n' => {
                i += 1;
                line_start = true;
            }
            b'`' => {
                let run = b[i..].iter().take_while(|c| **c == b'`').count();
                let after = i + run;
                if after >= para_end {
                    para_end = paragraph_end(b, after);
                }
                let close = if no_close.get(&run).is_some_and(|e| *e >= after) {
                    None
                } else {
                    closing_run(&b[after..para_end], run).map(|c| after + c)
                };
                match close {
                    Some(c) => i = c + run,
                    None => {
                        no_close.insert(run, para_end);
                        i = after;
                    }
                }
            }
            b'<' if b[i..].starts_with(b"<!--") => {
                let Some(end_rel) = memchr::memmem::find(&b[i + 4..], b"-->") else {
                    break; // an unclosed comment is kept as text
                };
                let end = i + 4 + end_rel + 3;
                out.push_str(&text[copied..i]);
                let nl = memchr::memchr_iter(b'\n', &b[i..end]).count();
                total = total.saturating_add(u32::try_from(nl).unwrap_or(u32::MAX));
                removed.push((out.len(), total));
                copied = end;
                i = end;
            }
            _ => i += 1,
        }
    }
    if removed.is_empty() {
        return (Cow::Borrowed(text), removed);
    }
    out.push_str(&text[copied..]);
    (Cow::Owned(out), removed)
}

/// The fence a line opens: up to three spaces, then three or more backticks or tildes (a
/// backtick fence's info string has no backtick).
fn opens_fence(line: &str) -> Option<(u8, usize)> {
    let indent = line.bytes().take_while(|c| *c == b' ').count();
    if indent > 3 {
        return None;
    }
    let rest = &line.as_bytes()[indent..];
    let ch = *rest.first()?;
    if ch != b'`' && ch != b'~' {
        return None;
    }
    let len = rest.iter().take_while(|c| **c == ch).count();
    if len < 3 || (ch == b'`' && rest[len..].contains(&b'`')) {
        return None;
    }
    Some((ch, len))
}

/// Whether a line closes a fence of `ch` repeated `len` times: up to three spaces, at least as
/// many of the same character, nothing after them but whitespace.
fn closes_fence(line: &str, ch: u8, len: usize) -> bool {
    let indent = line.bytes().take_while(|c| *c == b' ').count();
    if indent > 3 {
        return false;
    }
    let rest = &line.as_bytes()[indent..];
    let n = rest.iter().take_while(|c| **c == ch).count();
    n >= len && rest[n..].iter().all(u8::is_ascii_whitespace)
}

/// Where the paragraph holding `from` ends: at the next blank line, else the end of the text.
fn paragraph_end(b: &[u8], from: usize) -> usize {
    let mut at = from;
    while let Some(nl) = memchr::memchr(b'\n', &b[at..]) {
        let next = at + nl + 1;
        let line_end = memchr::memchr(b'\n', &b[next..]).map_or(b.len(), |e| next + e);
        if b[next..line_end].iter().all(u8::is_ascii_whitespace) {
            return next;
        }
        at = next;
    }
    b.len()
}

/// The offset in `s` of the first run of exactly `run` backticks.
fn closing_run(s: &[u8], run: usize) -> Option<usize> {
    let mut at = 0;
    while let Some(p) = memchr::memchr(b'`', &s[at..]) {
        let start = at + p;
        let n = s[start..].iter().take_while(|c| **c == b'`').count();
        if n == run {
            return Some(start);
        }
        at = start + n;
    }
    None
}

/// Whether a family's files lose their HTML comments (docs §2.1 step 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comments {
    /// Removed outside code: the `.xcsh` family and the bundled files.
    Strip,
    /// Kept as written: every other family's tools send the body as written.
    Keep,
}

impl Comments {
    /// The rule for files of `family` (`.xcsh`, `.claude`, a plugin's name, …).
    pub fn for_family(family: &str) -> Self {
        if family == ".xcsh" {
            Self::Strip
        } else {
            Self::Keep
        }
    }
}

/// Splits `text` per docs §2.1.
pub(super) fn split(text: &str, comments: Comments) -> Doc<'_> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // The file's text, as long as the text worked on below is that very text.
    let mut file = Some(text);
    let normalised;
    let text = if memchr::memchr(b'\r', text.as_bytes()).is_some() {
        normalised = text.replace("\r\n", "\n").replace('\r', "\n");
        file = None;
        normalised.as_str()
    } else {
        text
    };
    let (text, removed) = match comments {
        Comments::Strip => strip_comments(text),
        Comments::Keep => (Cow::Borrowed(text), Vec::new()),
    };
    if matches!(text, Cow::Owned(_)) {
        file = None;
    }
    let text: &str = &text;
    let orig = |offset: usize, new_line: usize| -> u32 {
        // Newlines removed by comments that sit before `offset` in the new text.
        let idx = removed.partition_point(|(o, _)| *o < offset);
        let extra = if idx == 0 { 0 } else { removed[idx - 1].1 };
        u32::try_from(new_line + 1)
            .unwrap_or(u32::MAX)
            .saturating_add(extra)
    };

    // Walk lines with their byte offsets.
    let mut offset = 0usize;
    let mut lines = lines(text).enumerate().map(|(i, l)| {
        let start = offset;
        offset += l.len() + 1;
        (i, start, l)
    });
    let mut open = None;
    for (i, start, l) in lines.by_ref() {
        if l.trim().is_empty() {
            continue;
        }
        if l.trim_end() == "---" {
            open = Some(orig(start, i));
        }
        if open.is_none() {
            return Doc {
                front: Front::None,
                body: text.trim().to_owned(),
            };
        }
        break;
    }
    let Some(open_line) = open else {
        return Doc {
            front: Front::None,
            body: String::new(),
        };
    };
    // Most frontmatter blocks have fewer than 16 lines: one allocation, no regrowth.
    let mut block_lines = Vec::with_capacity(16);
    // The block's lines are contiguous in `text`: it is the slice from the first one's start to
    // the last one's end.
    let mut block = None::<(usize, usize)>;
    for (i, start, l) in lines.by_ref() {
        if l.trim_end() == "---" {
            let body_start = (start + l.len() + 1).min(text.len());
            let (from, to) = block.unwrap_or((0, 0));
            let block_text = match file {
                Some(file) => Cow::Borrowed(&file[from..to]),
                None => Cow::Owned(text[from..to].to_owned()),
            };
            return Doc {
                front: Front::Block(Block {
                    text: block_text,
                    lines: block_lines,
                    open_line,
                }),
                body: text[body_start..].trim().to_owned(),
            };
        }
        let from = block.map_or(start, |(from, _)| from);
        block = Some((from, start + l.len()));
        block_lines.push(orig(start, i));
    }
    Doc {
        front: Front::Unclosed { open_line },
        body: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_s(text: &str) -> Doc<'_> {
        split(text, Comments::Strip)
    }

    fn block<'a>(d: &'a Doc<'a>) -> &'a Block<'a> {
        match &d.front {
            Front::Block(b) => b,
            other => panic!("expected a block, got {other:?}"),
        }
    }

    #[test]
    fn bom_crlf_and_leading_blank_lines() {
        let d = split_s("\u{feff}\r\n\r\n---\r\nname: a\r\n---\r\n\r\nbody\r\n");
        let b = block(&d);
        assert_eq!(b.text, "name: a");
        assert_eq!(b.open_line, 3);
        assert_eq!(b.lines, [4]);
        assert_eq!(d.body, "body");
    }

    #[test]
    fn lone_cr_is_a_newline() {
        let d = split_s("---\rname: a\r---\rbody");
        assert_eq!(block(&d).text, "name: a");
        assert_eq!(d.body, "body");
    }

    #[test]
    fn comments_removed_and_lines_kept() {
        let d = split_s(
            "<!--\nheader\n-->\n---\n<!-- c -->name: a\n<!-- two\nlines -->\ndescription: d\n---\nx <!-- y --> z",
        );
        let b = block(&d);
        assert_eq!(b.open_line, 4);
        assert_eq!(b.text, "name: a\n\ndescription: d");
        assert_eq!(b.lines, [5, 6, 8]);
        assert_eq!(d.body, "x  z");
    }

    #[test]
    fn closing_line_may_have_trailing_spaces() {
        let d = split_s("---   \nname: a\n---  \nb");
        assert_eq!(block(&d).text, "name: a");
        assert_eq!(d.body, "b");
    }

    #[test]
    fn no_frontmatter_and_unclosed() {
        assert!(matches!(split_s("hello\n---\n").front, Front::None));
        assert!(matches!(split_s("").front, Front::None));
        assert!(matches!(
            split_s("\n---\nname: a\n").front,
            Front::Unclosed { open_line: 2 }
        ));
        // An indented `---` is not an opening line.
        assert!(matches!(
            split_s("  ---\nname: a\n---\n").front,
            Front::None
        ));
    }

    #[test]
    fn lines_are_the_pieces_of_split_on_newline() {
        for text in ["", "\n", "a", "a\n", "\na", "a\nb", "a\n\nb\n", "é\nü\n\n"] {
            let ours: Vec<&str> = lines(text).collect();
            let std: Vec<&str> = text.split('\n').collect();
            assert_eq!(ours, std, "{text:?}");
        }
    }

    #[test]
    fn unclosed_comment_is_text() {
        let d = split_s("---\nname: a <!-- x\n---\n");
        assert_eq!(block(&d).text, "name: a <!-- x");
    }

    #[test]
    fn comments_inside_code_are_kept() {
        let text = "---\nname: a\n---\nA <!-- gone --> b `x <!-- kept --> y` c\n\n```html\n<!-- in a fence -->\n```\n~~~~\n<!-- tilde -->\n~~~\nstill fenced <!-- k -->\n~~~~\nafter <!-- gone too -->.";
        let d = split_s(text);
        assert_eq!(
            d.body,
            "A  b `x <!-- kept --> y` c\n\n```html\n<!-- in a fence -->\n```\n~~~~\n<!-- tilde -->\n~~~\nstill fenced <!-- k -->\n~~~~\nafter ."
        );
        // Double backticks close only on a double run; a lone backtick closes nothing.
        let d = split_s("---\nname: a\n---\n``a ` <!-- k --> b`` <!-- g --> ` <!-- g2 -->");
        assert_eq!(d.body, "``a ` <!-- k --> b``  `");
        // A code span does not cross a blank line.
        let d = split_s("---\nname: a\n---\n`open\n\n<!-- g --> x`");
        assert_eq!(d.body, "`open\n\n x`");
    }

    #[test]
    fn other_families_keep_their_comments() {
        let text = "---\nname: a\n---\nx <!-- y --> z";
        assert_eq!(split(text, Comments::Keep).body, "x <!-- y --> z");
        assert_eq!(split(text, Comments::Strip).body, "x  z");
        assert_eq!(Comments::for_family(".xcsh"), Comments::Strip);
        assert_eq!(Comments::for_family(".claude"), Comments::Keep);
        assert_eq!(Comments::for_family(""), Comments::Keep);
    }

    #[test]
    fn many_backtick_runs() {
        // Unmatched runs of many lengths, then a long paragraph of spans (the scan is linear:
        // each unmatched length is searched once per paragraph).
        let mut text = String::from("---\nname: a\n---\n<!-- c -->");
        for n in 1..200 {
            text.push_str(&"`".repeat(n));
            text.push(' ');
        }
        for _ in 0..50_000 {
            text.push_str("`x` ");
        }
        let d = split_s(&text);
        assert!(d.body.starts_with('`'));
        assert!(d.body.ends_with("`x`"));
    }
}

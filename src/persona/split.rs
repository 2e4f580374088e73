//! Splits a file's text into frontmatter and body (docs §2.1), keeping track of original line
//! numbers so diagnostics point at the line the author sees even after HTML comments (which may
//! span lines) were removed.

use std::borrow::Cow;

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

/// Removes `<!-- ... -->` comments. Returns the new text (the text itself when it has none) and,
/// for each removed comment, the offset in the new text where it was and the number of newlines
/// removed so far (inclusive).
fn strip_comments(text: &str) -> (Cow<'_, str>, Vec<(usize, u32)>) {
    let Some(first) = find_open(text) else {
        return (Cow::Borrowed(text), Vec::new());
    };
    if memchr::memmem::find(&text.as_bytes()[first + 4..], b"-->").is_none() {
        return (Cow::Borrowed(text), Vec::new());
    }
    let mut out = String::with_capacity(text.len());
    let mut removed = Vec::new();
    let mut total = 0u32;
    let mut rest = text;
    while let Some(start) = find_open(rest) {
        let Some(end_rel) = memchr::memmem::find(&rest.as_bytes()[start + 4..], b"-->") else {
            break; // an unclosed comment is kept as text
        };
        let end = start + 4 + end_rel + 3;
        out.push_str(&rest[..start]);
        let nl = rest[start..end].bytes().filter(|b| *b == b'\n').count();
        total = total.saturating_add(u32::try_from(nl).unwrap_or(u32::MAX));
        removed.push((out.len(), total));
        rest = &rest[end..];
    }
    out.push_str(rest);
    (Cow::Owned(out), removed)
}

/// Splits `text` per docs §2.1.
pub(super) fn split(text: &str) -> Doc<'_> {
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
    let (text, removed) = strip_comments(text);
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

    fn block<'a>(d: &'a Doc<'a>) -> &'a Block<'a> {
        match &d.front {
            Front::Block(b) => b,
            other => panic!("expected a block, got {other:?}"),
        }
    }

    #[test]
    fn bom_crlf_and_leading_blank_lines() {
        let d = split("\u{feff}\r\n\r\n---\r\nname: a\r\n---\r\n\r\nbody\r\n");
        let b = block(&d);
        assert_eq!(b.text, "name: a");
        assert_eq!(b.open_line, 3);
        assert_eq!(b.lines, [4]);
        assert_eq!(d.body, "body");
    }

    #[test]
    fn lone_cr_is_a_newline() {
        let d = split("---\rname: a\r---\rbody");
        assert_eq!(block(&d).text, "name: a");
        assert_eq!(d.body, "body");
    }

    #[test]
    fn comments_removed_and_lines_kept() {
        let d = split(
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
        let d = split("---   \nname: a\n---  \nb");
        assert_eq!(block(&d).text, "name: a");
        assert_eq!(d.body, "b");
    }

    #[test]
    fn no_frontmatter_and_unclosed() {
        assert!(matches!(split("hello\n---\n").front, Front::None));
        assert!(matches!(split("").front, Front::None));
        assert!(matches!(
            split("\n---\nname: a\n").front,
            Front::Unclosed { open_line: 2 }
        ));
        // An indented `---` is not an opening line.
        assert!(matches!(split("  ---\nname: a\n---\n").front, Front::None));
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
        let d = split("---\nname: a <!-- x\n---\n");
        assert_eq!(block(&d).text, "name: a <!-- x");
    }
}

//! Request limits and the checks every handler shares: bounded, printable text fields, worker
//! ids, and quoting of caller-supplied values in error messages (docs/operations.md §8.2).
//!
//! A leaf of `grpc/`: it depends only on the domain's id type and on [`Violations`].

use super::status::{Violations, invalid};
use crate::workers::model::WorkerId;

/// Longest accepted worker id, in bytes (`wkr_` and 32 hex digits are 36).
pub const MAX_ID_BYTES: usize = 64;
/// Most bytes of a caller's value an error message quotes.
pub const MAX_QUOTED_BYTES: usize = 128;

/// `value` as an error message may show it: at most [`MAX_QUOTED_BYTES`] bytes (cut on a
/// character boundary, with `…` when cut), control characters escaped, in double quotes.
pub fn quote(value: &str) -> String {
    let mut end = value.len().min(MAX_QUOTED_BYTES);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + 8);
    out.push('"');
    for c in value[..end].chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out.push('"');
    if end < value.len() {
        out.push('…');
    }
    out
}

/// Checks a one-line text field: at most `max` bytes and no NUL or control characters (names,
/// ids, descriptions, request ids). Returns whether it passed.
pub fn check_line(field: &str, value: &str, max: usize, v: &mut Violations) -> bool {
    if value.len() > max {
        v.add(
            field,
            format!("is {} bytes; the limit is {max} bytes", value.len()),
        );
        false
    } else if let Some(c) = value.chars().find(|c| c.is_control()) {
        v.add(
            field,
            format!(
                "must not contain control characters (found {} in {})",
                c.escape_default(),
                quote(value)
            ),
        );
        false
    } else {
        true
    }
}

/// Reads a required worker id: bounded, printable, well-formed.
pub fn worker_id(field: &str, s: &str) -> Result<WorkerId, tonic::Status> {
    if s.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    let mut v = Violations::default();
    if !check_line(field, s, MAX_ID_BYTES, &mut v) {
        v.check()?;
    }
    WorkerId::parse(s).map_err(|_| {
        invalid(
            field,
            format!(
                "{} is not a worker id (expected wkr_ followed by 32 hex digits)",
                quote(s)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_bounds_and_escapes() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(quote("a\u{0}b\nc\u{1b}"), "\"a\\u{0}b\\nc\\u{1b}\"");
        let long = "é".repeat(200);
        let q = quote(&long);
        assert!(q.len() <= MAX_QUOTED_BYTES + 8, "{}", q.len());
        assert!(q.ends_with('…'));
    }

    #[test]
    fn lines_refuse_control_characters_and_length() {
        let mut v = Violations::default();
        assert!(check_line("f", "fine text", 64, &mut v));
        assert!(!check_line("f", "tab\there", 64, &mut v));
        assert!(!check_line("f", &"x".repeat(65), 64, &mut v));
        assert!(v.check().is_err());
    }

    #[test]
    fn worker_ids_are_bounded_before_they_are_quoted() {
        let err = worker_id("worker_id", &"x".repeat(1_000_000)).unwrap_err();
        assert!(err.message().len() < 300, "{}", err.message().len());
        assert!(err.message().contains("the limit is 64 bytes"));
        let err = worker_id("worker_id", "wkr_\u{1b}[31m").unwrap_err();
        assert!(
            err.message().contains("control characters"),
            "{}",
            err.message()
        );
    }
}

//! Call metadata → what the caller declared about itself (docs §5.1). Malformed values are
//! `INVALID_ARGUMENT` naming the key, never ignored.

use tonic::metadata::MetadataMap;

use crate::{
    persona::{MAX_NAME_BYTES, Spawns},
    resolve::Declared,
};

use super::status::Violations;

/// Largest accepted value of one `x-agentry-*` key, in bytes.
pub const MAX_METADATA_BYTES: usize = 8192;
/// Largest declared depth accepted (a sanity bound; real trees are shallow).
pub const MAX_DECLARED_DEPTH: u32 = 1_000;

/// The value of `key`, once, as ASCII text.
fn one<'a>(md: &'a MetadataMap, key: &str, v: &mut Violations) -> Option<&'a str> {
    let mut all = md.get_all(key).iter();
    let first = all.next()?;
    if all.next().is_some() {
        v.add(key, "must be given at most once");
        return None;
    }
    if first.len() > MAX_METADATA_BYTES {
        v.add(
            key,
            format!(
                "is {} bytes; the limit is {MAX_METADATA_BYTES} bytes",
                first.len()
            ),
        );
        return None;
    }
    match first.to_str() {
        Ok(s) => Some(s),
        Err(_) => {
            v.add(key, "must be printable ASCII");
            None
        }
    }
}

fn check_names(key: &str, names: &[String], v: &mut Violations) {
    for n in names {
        if n.len() > MAX_NAME_BYTES || n.contains(['/', '\\']) {
            v.add(key, format!("{n:?} is not a valid agent name"));
        }
    }
}

/// Reads `x-agentry-spawns`, `x-agentry-depth` and `x-agentry-blocked-agent`.
pub fn declared(md: &MetadataMap, v: &mut Violations) -> Declared {
    let mut d = Declared::default();
    if let Some(s) = one(md, "x-agentry-spawns", v) {
        let policy = Spawns::parse_policy(s);
        if let Spawns::Only(names) = &policy {
            check_names("x-agentry-spawns", names, v);
        }
        d.spawns = Some(policy);
    }
    if let Some(s) = one(md, "x-agentry-depth", v) {
        match s.trim().parse::<u32>() {
            Ok(n) if n <= MAX_DECLARED_DEPTH => d.depth = Some(n),
            Ok(n) => v.add(
                "x-agentry-depth",
                format!("{n} exceeds the limit of {MAX_DECLARED_DEPTH}"),
            ),
            Err(_) => v.add(
                "x-agentry-depth",
                format!("must be a non-negative integer, got {s:?}"),
            ),
        }
    }
    if let Some(s) = one(md, "x-agentry-blocked-agent", v) {
        let names = crate::persona::split_csv(s);
        check_names("x-agentry-blocked-agent", &names, v);
        d.blocked = names;
    }
    d
}

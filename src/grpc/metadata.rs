//! Call metadata → what the caller declared about itself (docs §5.1). Malformed values are
//! `INVALID_ARGUMENT` naming the key, never ignored.

use std::sync::LazyLock;

use tonic::metadata::{Ascii, MetadataKey, MetadataMap};

use crate::{
    persona::{MAX_NAME_BYTES, Spawns},
    resolve::Declared,
};

use super::status::Violations;

/// Largest accepted value of one `x-agentry-*` key, in bytes.
pub const MAX_METADATA_BYTES: usize = 8192;
/// Largest declared depth accepted (a sanity bound; real trees are shallow).
pub const MAX_DECLARED_DEPTH: u32 = 1_000;

/// A metadata key, parsed once: looking up a parsed key skips checking and hashing a string on
/// every call.
pub type Key = LazyLock<MetadataKey<Ascii>>;

/// What every key this module reads, but `traceparent`, starts with.
const PREFIX: &str = "x-agentry-";

/// `x-agentry-spawns`.
pub static SPAWNS: Key = LazyLock::new(|| MetadataKey::from_static("x-agentry-spawns"));
/// `x-agentry-depth`.
pub static DEPTH: Key = LazyLock::new(|| MetadataKey::from_static("x-agentry-depth"));
/// `x-agentry-blocked-agent`.
pub static BLOCKED_AGENT: Key =
    LazyLock::new(|| MetadataKey::from_static("x-agentry-blocked-agent"));
/// `x-agentry-worker-token`.
pub static WORKER_TOKEN: Key = LazyLock::new(|| MetadataKey::from_static("x-agentry-worker-token"));
/// `traceparent`.
pub static TRACEPARENT: Key = LazyLock::new(|| MetadataKey::from_static("traceparent"));

/// Whether the call carries any key this module reads. Most calls carry none: one look over the
/// few headers a call has spares the hashed lookup of each key.
pub fn carries_any(md: &MetadataMap) -> bool {
    md.as_ref().keys().any(|k| {
        let k = k.as_str();
        k.starts_with(PREFIX) || k == TRACEPARENT.as_str()
    })
}

/// The value of `key` when it is given once; given twice or more it is a violation on `key`
/// (which value would speak for the caller is not guessed).
pub fn single<'a>(
    md: &'a MetadataMap,
    key: &Key,
    v: &mut Violations,
) -> Option<&'a tonic::metadata::MetadataValue<Ascii>> {
    let mut all = md.get_all(&**key).iter();
    let first = all.next()?;
    if all.next().is_some() {
        v.add(key.as_str(), "must be given at most once");
        return None;
    }
    Some(first)
}

/// The value of `key`, once, as ASCII text.
fn one<'a>(md: &'a MetadataMap, key: &Key, v: &mut Violations) -> Option<&'a str> {
    let first = single(md, key, v)?;
    let key = key.as_str();
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
    if let Some(s) = one(md, &SPAWNS, v) {
        let policy = Spawns::parse_policy(s);
        if let Spawns::Only(names) = &policy {
            check_names("x-agentry-spawns", names, v);
        }
        d.spawns = Some(policy);
    }
    if let Some(s) = one(md, &DEPTH, v) {
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
    if let Some(s) = one(md, &BLOCKED_AGENT, v) {
        let names = crate::persona::split_csv(s);
        check_names("x-agentry-blocked-agent", &names, v);
        d.blocked = names;
    }
    d
}

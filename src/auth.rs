//! Bearer tokens → principals (docs §8.2): the tokens file, its hot reload, and the
//! [`Principal`] a request is made on behalf of.
//!
//! The file is YAML mapping each token to the principal it stands for. It is loaded once at
//! start-up (a bad file is fatal) and then polled: every [`RELOAD_INTERVAL`] its metadata (mtime,
//! size, inode, following symlinks so a Kubernetes Secret's `..data` swap is seen) is compared
//! with what was last read, and a change re-reads it. A re-read that fails keeps the previous
//! tokens and logs a warning.
//!
//! Tokens are kept only as SHA-256 digests, and looked up by digest, so a lookup never compares
//! the secret byte by byte and a memory dump does not reveal them. Error messages never contain a
//! token.
//!
//! This module does not know about gRPC: the tower layer that reads the `authorization` header
//! lives in `grpc::layers`.

use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
    time::{Duration, SystemTime},
};

use sha2::{Digest, Sha256};

/// How often the tokens file's metadata is checked for a change.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// Who a request is made on behalf of: the principal its bearer token maps to.
///
/// The auth layer puts it into the request extensions; when no tokens file is configured there
/// is none, and the caller is [`Principal::ANONYMOUS`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(pub Arc<str>);

impl Principal {
    /// The name every caller has when authentication is off.
    pub const ANONYMOUS: &'static str = "anonymous";
}

/// Why a tokens file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file could not be read (or its metadata could not be read).
    #[error("cannot read tokens file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a YAML mapping of non-empty token strings to non-empty principals.
    #[error("invalid tokens file {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong; never contains a token.
        message: String,
    },
}

/// SHA-256 of a token: the only form in which tokens are kept.
type TokenDigest = [u8; 32];

/// What identifies one version of the file on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    dev: u64,
    ino: u64,
}

impl Stamp {
    fn of(path: &Path) -> std::io::Result<Self> {
        let m = std::fs::metadata(path)?;
        Ok(Self {
            modified: m.modified().ok(),
            len: m.len(),
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// The tokens currently in force, and the version of the file they came from.
struct Loaded {
    principals: HashMap<TokenDigest, Principal>,
    stamp: Stamp,
}

/// A tokens file, loaded and kept current.
pub struct TokenFile {
    /// The configured path (`auth.tokens_file`).
    path: PathBuf,
    /// Swapped whole on a successful re-read; read on every authenticated request.
    loaded: RwLock<Loaded>,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenFile")
            .field("path", &self.path)
            .field("tokens", &self.len())
            .finish()
    }
}

fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// Parses the file's text into digest → principal. Messages name entries by position and by
/// principal, never by token.
fn parse(text: &str) -> Result<HashMap<TokenDigest, Principal>, String> {
    if text.trim().is_empty() {
        return Ok(HashMap::new());
    }
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!("line {}: ", l.line()))
            .unwrap_or_default();
        if e.to_string().contains("duplicate entry") {
            format!("{at}a token is listed twice")
        } else {
            format!("{at}not valid YAML ({})", strip_location(&e.to_string()))
        }
    })?;
    let map = value
        .as_mapping()
        .ok_or("the top level must be a mapping of token to principal")?;
    let mut out = HashMap::with_capacity(map.len());
    for (i, (token, principal)) in map.iter().enumerate() {
        let n = i + 1;
        let token = token
            .as_str()
            .ok_or_else(|| format!("entry {n}: the token must be a string"))?;
        let principal = principal
            .as_str()
            .ok_or_else(|| format!("entry {n}: the principal must be a string"))?;
        if principal.trim().is_empty() {
            return Err(format!("entry {n}: the principal must not be empty"));
        }
        if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "entry {n} (principal {principal:?}): the token must be non-empty, without \
                 spaces or control characters"
            ));
        }
        out.insert(digest(token), Principal(principal.into()));
    }
    Ok(out)
}

/// serde_yaml appends " at line L column C"; the caller puts the line first instead.
fn strip_location(message: &str) -> &str {
    message.find(" at line ").map_or(message, |i| &message[..i])
}

impl TokenFile {
    /// Reads and parses `path`. Any problem is an error naming the file.
    pub fn load(path: &Path) -> Result<Self, AuthError> {
        let loaded = Self::read(path)?;
        Ok(Self {
            path: path.to_owned(),
            loaded: RwLock::new(loaded),
        })
    }

    /// Loads the configured file, if any, and starts polling it for changes (on the current
    /// tokio runtime; the poller ends once the returned value is dropped). `None` means
    /// authentication is off.
    pub fn start(path: Option<&Path>) -> Result<Option<Arc<Self>>, AuthError> {
        let Some(path) = path else {
            return Ok(None);
        };
        let file = Arc::new(Self::load(path)?);
        tracing::info!(path = %path.display(), tokens = file.len(), "bearer-token auth on");
        file.spawn_poller();
        Ok(Some(file))
    }

    fn read(path: &Path) -> Result<Loaded, AuthError> {
        let read_err = |source| AuthError::Read {
            path: path.to_owned(),
            source,
        };
        // Stamp first: a write racing the read is then seen as a change at the next poll.
        let stamp = Stamp::of(path).map_err(read_err)?;
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        let principals = parse(&text).map_err(|message| AuthError::Invalid {
            path: path.to_owned(),
            message,
        })?;
        Ok(Loaded { principals, stamp })
    }

    /// The principal `token` stands for, if it is known.
    pub fn principal(&self, token: &str) -> Option<Principal> {
        let d = digest(token);
        self.loaded
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .principals
            .get(&d)
            .cloned()
    }

    /// How many tokens are in force.
    pub fn len(&self) -> usize {
        self.loaded
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .principals
            .len()
    }

    /// Whether no token is in force (every authenticated call will be refused).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Re-reads the file if its metadata changed since the last successful read. `Ok(true)`
    /// when new tokens are now in force; on error the previous tokens stay.
    pub fn reload_if_changed(&self) -> Result<bool, AuthError> {
        let now = Stamp::of(&self.path).map_err(|source| AuthError::Read {
            path: self.path.clone(),
            source,
        })?;
        let last = self.loaded.read().unwrap_or_else(|e| e.into_inner()).stamp;
        if now == last {
            return Ok(false);
        }
        let fresh = Self::read(&self.path).inspect_err(|_| {
            // Remember the bad version so the warning is logged once per change, not per poll.
            self.loaded.write().unwrap_or_else(|e| e.into_inner()).stamp = now;
        })?;
        *self.loaded.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(true)
    }

    fn spawn_poller(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RELOAD_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(file) = weak.upgrade() else { break };
                // Metadata and a small file: cheap enough not to need spawn_blocking.
                match file.reload_if_changed() {
                    Ok(true) => tracing::info!(
                        path = %file.path.display(),
                        tokens = file.len(),
                        "tokens file reloaded"
                    ),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "tokens file not reloaded; keeping the previous tokens");
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_mapping() {
        let m = parse("tok-a: alice\n'tok-b': bob\n").unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[&digest("tok-a")], Principal("alice".into()));
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn bad_files_are_described_without_the_token() {
        for (text, want) in [
            ("- a\n- b\n", "top level must be a mapping"),
            ("secret1: [x]\n", "entry 1: the principal must be a string"),
            ("secret1: ''\n", "entry 1: the principal must not be empty"),
            ("a: x\n'sec ret': y\n", "entry 2 (principal \"y\")"),
            ("secret1: a\nsecret1: b\n", "listed twice"),
            ("secret1: [\n", "not valid YAML"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains("secret1") && !e.contains("sec ret"), "{e}");
        }
    }

    #[test]
    fn reload_keeps_previous_tokens_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.yaml");
        std::fs::write(&path, "t1: alice\n").unwrap();
        let f = TokenFile::load(&path).unwrap();
        assert_eq!(f.principal("t1"), Some(Principal("alice".into())));
        assert!(!f.reload_if_changed().unwrap());

        std::fs::write(&path, "t1: [broken\n").unwrap();
        assert!(f.reload_if_changed().is_err());
        assert_eq!(f.principal("t1"), Some(Principal("alice".into())));
        // The bad version is remembered: no repeated error for the same file.
        assert!(!f.reload_if_changed().unwrap());

        std::fs::write(&path, "t2: bob\n").unwrap();
        assert!(f.reload_if_changed().unwrap());
        assert_eq!(f.principal("t1"), None);
        assert_eq!(f.principal("t2"), Some(Principal("bob".into())));
    }

    /// The poller on tokio's clock, paused: an edit applies at the first tick after it and not
    /// before, a broken edit keeps the tokens in force, and the poller ends with the file.
    #[tokio::test(start_paused = true)]
    async fn the_poller_applies_edits_at_its_ticks_and_ends_with_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.yaml");
        std::fs::write(&path, "t1: alice\n").unwrap();
        let alive = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let f = TokenFile::start(Some(&path)).unwrap().unwrap();
        assert_eq!(alive(), 1, "the poller");
        // Different sizes, so each write is a new stamp even within one mtime tick.
        std::fs::write(&path, "t2: bob\n").unwrap();
        tokio::time::sleep(RELOAD_INTERVAL / 2).await;
        assert_eq!(
            f.principal("t1"),
            Some(Principal("alice".into())),
            "no tick yet"
        );
        tokio::time::sleep(RELOAD_INTERVAL).await;
        assert_eq!(f.principal("t1"), None);
        assert_eq!(f.principal("t2"), Some(Principal("bob".into())));

        std::fs::write(&path, "t3: [broken\n").unwrap();
        tokio::time::sleep(RELOAD_INTERVAL * 3).await;
        assert_eq!(f.principal("t2"), Some(Principal("bob".into())));
        assert_eq!(f.len(), 1);

        drop(f);
        tokio::time::sleep(RELOAD_INTERVAL * 2).await;
        assert_eq!(alive(), 0, "the poller ended");
    }

    #[test]
    fn missing_file_names_the_path() {
        let e = TokenFile::load(Path::new("/nonexistent/tokens.yaml")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/tokens.yaml"), "{e}");
    }
}

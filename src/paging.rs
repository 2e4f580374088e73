//! Paging of listings: page sizes, and opaque page tokens that say what page comes next, bound
//! to the request parameters and to the version (or keyset cursor) of the listing, with a
//! checksum so a token that is not ours is refused instead of misread.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The decoded content of a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageToken {
    /// Index of the first item of the next page.
    #[serde(rename = "o")]
    pub offset: usize,
    /// Where the listing stands: the registry version it started at (ListAgents) or the keyset
    /// cursor `create_ms:id` of the last item returned (ListWorkers).
    #[serde(rename = "v")]
    pub at: String,
    /// Hash of the request parameters the token belongs to.
    #[serde(rename = "q")]
    pub query: String,
}

/// Why a token was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum TokenError {
    /// Not produced by this service (garbage or tampered).
    NotOurs,
    /// Produced for other request parameters.
    OtherQuery,
}

fn mac(body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(b"agentry.page-token.v1\0");
    h.update(body);
    hex::encode(&h.finalize()[..12])
}

/// Hashes the parameters a listing depends on (everything but the page fields).
pub fn query_hash(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    hex::encode(&h.finalize()[..12])
}

impl PageToken {
    /// Encodes as `base64url(json).mac`.
    pub fn encode(&self) -> String {
        let body = serde_json::to_vec(self).expect("page token serialises");
        format!("{}.{}", URL_SAFE_NO_PAD.encode(&body), mac(&body))
    }

    /// Decodes and checks a token for the given query hash.
    pub fn decode(token: &str, query: &str) -> Result<Self, TokenError> {
        let (b64, m) = token.split_once('.').ok_or(TokenError::NotOurs)?;
        let body = URL_SAFE_NO_PAD
            .decode(b64)
            .map_err(|_| TokenError::NotOurs)?;
        if mac(&body) != m {
            return Err(TokenError::NotOurs);
        }
        let t: PageToken = serde_json::from_slice(&body).map_err(|_| TokenError::NotOurs)?;
        if t.query != query {
            return Err(TokenError::OtherQuery);
        }
        Ok(t)
    }
}

/// Default page size when a request leaves it 0.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Largest accepted page size.
pub const MAX_PAGE_SIZE: usize = 1000;

/// Why a page request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// The page token was not produced by this service (garbage or tampered).
    #[error("is not a page token issued by this service")]
    NotOurs,
    /// The page token was produced for other request parameters.
    #[error("was issued for a request with different parameters")]
    OtherQuery,
    /// The listing changed between pages (a page token is bound to the version it was cut from).
    #[error(
        "the registry changed during pagination (version {from} → {to}); restart the listing without a page_token"
    )]
    Changed {
        /// The version the listing started at.
        from: String,
        /// The version now.
        to: String,
    },
}

/// What page of a listing a caller asks for: its size (already bounded) and the token of the
/// previous page (empty for the first one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// Items per page, 1..=[`MAX_PAGE_SIZE`].
    pub size: usize,
    /// The previous page's `next_page_token`, or empty.
    pub token: String,
}

impl PageRequest {
    /// The decoded token for a listing whose parameters hash to `query`; `None` on the first page.
    pub fn cursor(&self, query: &str) -> Result<Option<PageToken>, PageError> {
        if self.token.is_empty() {
            return Ok(None);
        }
        match PageToken::decode(&self.token, query) {
            Ok(t) => Ok(Some(t)),
            Err(TokenError::NotOurs) => Err(PageError::NotOurs),
            Err(TokenError::OtherQuery) => Err(PageError::OtherQuery),
        }
    }
}

/// One page cut from an ordered list that lives in a versioned snapshot (agents, commands).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// First index of the page.
    pub start: usize,
    /// One past its last index.
    pub end: usize,
    /// Whether this is the first page (which alone carries shadowed entries and diagnostics).
    pub first: bool,
    /// The next page's token, empty on the last page.
    pub next_token: String,
}

/// Cuts the page `req` asks for out of `len` items of a listing at `version` whose parameters
/// hash to `query`. A token from another version is [`PageError::Changed`].
pub fn window(
    req: &PageRequest,
    query: String,
    version: &str,
    len: usize,
) -> Result<Window, PageError> {
    let cursor = req.cursor(&query)?;
    if let Some(t) = &cursor
        && t.at != version
    {
        return Err(PageError::Changed {
            from: t.at.clone(),
            to: version.to_owned(),
        });
    }
    let start = cursor.map_or(0, |t| t.offset).min(len);
    let end = (start + req.size).min(len);
    let next_token = if end < len {
        PageToken {
            offset: end,
            at: version.to_owned(),
            query,
        }
        .encode()
    } else {
        String::new()
    };
    Ok(Window {
        start,
        end,
        first: start == 0,
        next_token,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_walk_once_and_refuse_another_version() {
        let mut req = PageRequest {
            size: 4,
            token: String::new(),
        };
        let mut seen = Vec::new();
        loop {
            let w = window(&req, query_hash(&["q"]), "v1", 10).unwrap();
            assert_eq!(w.first, seen.is_empty());
            seen.extend(w.start..w.end);
            if w.next_token.is_empty() {
                break;
            }
            req.token = w.next_token;
        }
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        let first = window(
            &PageRequest {
                size: 4,
                token: String::new(),
            },
            query_hash(&["q"]),
            "v1",
            10,
        )
        .unwrap();
        let req = PageRequest {
            size: 4,
            token: first.next_token,
        };
        assert_eq!(
            window(&req, query_hash(&["q"]), "v2", 10),
            Err(PageError::Changed {
                from: "v1".into(),
                to: "v2".into()
            })
        );
        assert_eq!(
            window(&req, query_hash(&["other"]), "v1", 10),
            Err(PageError::OtherQuery)
        );
    }

    #[test]
    fn round_trip_and_refusals() {
        let t = PageToken {
            offset: 100,
            at: "abc".into(),
            query: query_hash(&["/w", "full"]),
        };
        let s = t.encode();
        assert_eq!(PageToken::decode(&s, &t.query), Ok(t.clone()));
        assert_eq!(
            PageToken::decode(&s, &query_hash(&["/x", "full"])),
            Err(TokenError::OtherQuery)
        );
        assert_eq!(
            PageToken::decode("garbage", &t.query),
            Err(TokenError::NotOurs)
        );
        let tampered = s.replacen('e', "f", 1);
        if tampered != s {
            assert_eq!(
                PageToken::decode(&tampered, &t.query),
                Err(TokenError::NotOurs)
            );
        }
    }
}

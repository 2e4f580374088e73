//! Opaque page tokens: what page comes next, bound to the request parameters and the registry
//! version, with a checksum so a token that is not ours is refused instead of misread.

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

/// Default `page_size` when a request leaves it 0.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Largest accepted `page_size`.
pub const MAX_PAGE_SIZE: i32 = 1000;

/// Reads a request's `page_size`: 0 = the default, 1..=MAX, anything else a violation.
pub fn page_size(n: i32, v: &mut super::status::Violations) -> usize {
    match n {
        0 => DEFAULT_PAGE_SIZE,
        n if (1..=MAX_PAGE_SIZE).contains(&n) => n as usize,
        n => {
            v.add(
                "page_size",
                format!("must be between 0 and {MAX_PAGE_SIZE}, got {n}"),
            );
            DEFAULT_PAGE_SIZE
        }
    }
}

/// Reads a request's `page_token` (empty = first page); a bad one is a violation.
pub fn page_token(
    token: &str,
    query: &str,
    v: &mut super::status::Violations,
) -> Option<PageToken> {
    if token.is_empty() {
        return None;
    }
    match PageToken::decode(token, query) {
        Ok(t) => Some(t),
        Err(TokenError::NotOurs) => {
            v.add("page_token", "is not a page token issued by this service");
            None
        }
        Err(TokenError::OtherQuery) => {
            v.add(
                "page_token",
                "was issued for a request with different parameters",
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

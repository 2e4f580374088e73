//! The page, its script and its style (docs §14.2), embedded in the binary and sent with a
//! strict content security policy and an `ETag` of their content.

use std::sync::LazyLock;

use axum::{
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use sha2::{Digest, Sha256};

const PAGE: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

/// What the page may load: its own script, style, streams and nothing else.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// One embedded file: its bytes, type and quoted content hash.
struct Asset {
    body: &'static str,
    content_type: &'static str,
    etag: String,
}

impl Asset {
    fn new(body: &'static str, content_type: &'static str) -> Self {
        let hash = hex::encode(&Sha256::digest(body.as_bytes())[..12]);
        Self {
            body,
            content_type,
            etag: format!("\"{hash}\""),
        }
    }

    /// The file, or `304` when the browser has it.
    fn reply(&self, headers: &HeaderMap) -> Response {
        let fresh = headers
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|t| t.trim() == self.etag));
        let mut resp = if fresh {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            self.body.into_response()
        };
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(self.content_type),
        );
        h.insert(
            header::ETAG,
            HeaderValue::from_str(&self.etag).expect("hex etag"),
        );
        // Revalidated on every load: a new binary serves its new page at once.
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        resp
    }
}

static ASSETS: LazyLock<[Asset; 3]> = LazyLock::new(|| {
    [
        Asset::new(PAGE, "text/html; charset=utf-8"),
        Asset::new(SCRIPT, "text/javascript; charset=utf-8"),
        Asset::new(STYLE, "text/css; charset=utf-8"),
    ]
});

/// `GET /console`.
pub(super) async fn page(headers: HeaderMap) -> Response {
    ASSETS[0].reply(&headers)
}

/// `GET /console/app.js`.
pub(super) async fn script(headers: HeaderMap) -> Response {
    ASSETS[1].reply(&headers)
}

/// `GET /console/app.css`.
pub(super) async fn style(headers: HeaderMap) -> Response {
    ASSETS[2].reply(&headers)
}

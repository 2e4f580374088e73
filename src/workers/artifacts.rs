//! Artifacts (docs/a2a.md §13.1): what a worker hands back besides its result. A runner or a
//! worker reports each as a progress event of kind `artifact` whose data is one *chunk*; the
//! store assembles the chunks on the worker row (`artifacts`), bounded; a completed worker's
//! result is the artifact `result`. Pure data and checks: no I/O.

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::model::{WorkerRecord, WorkerState};

/// Bytes of all artifacts of one worker, as stored.
pub const MAX_ARTIFACT_BYTES: usize = 1 << 20;
/// Bytes of one inline file part (decoded).
pub const MAX_FILE_BYTES: usize = 256 << 10;
/// Parts of one chunk.
const MAX_PARTS: usize = 64;
/// Bytes of an id, a name, a media type or a URI.
const MAX_NAME_BYTES: usize = 2048;
/// The id of the artifact a completed worker's result is.
pub const RESULT_ID: &str = "result";

/// One artifact, assembled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifact {
    /// Unique within the worker.
    pub artifact_id: String,
    /// A name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// What it is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Its parts, in order.
    pub parts: Vec<Part>,
}

/// One part: text, a JSON value, or a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Part {
    /// Text.
    Text(String),
    /// A JSON value.
    Data(Value),
    /// A file: inline (base64) or by URI.
    File(FilePart),
}

/// A file part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilePart {
    /// Its name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Its media type.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub media_type: String,
    /// The content, base64 (standard alphabet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<String>,
    /// Where the content is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

/// One reported piece of an artifact: the `data_json` of a progress event of kind `artifact`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chunk {
    /// The artifact it belongs to.
    pub artifact_id: String,
    /// Its name (the first chunk's stays when later ones give none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Its description (likewise).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The parts this chunk carries.
    pub parts: Vec<Part>,
    /// Appends to the artifact's parts; else replaces the artifact.
    #[serde(default)]
    pub append: bool,
    /// The artifact is complete.
    #[serde(default)]
    pub last_chunk: bool,
}

fn bounded(field: &str, s: &str) -> Result<(), String> {
    if s.len() > MAX_NAME_BYTES {
        return Err(format!(
            "{field} is {} bytes; at most {MAX_NAME_BYTES}",
            s.len()
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(format!("{field} holds control characters"));
    }
    Ok(())
}

/// Reads and checks a chunk: an id, at most 64 parts, each a text, a JSON value or a file
/// with exactly one of `bytes` (base64, at most 256 KiB decoded) and `uri`.
pub fn parse_chunk(data_json: &str) -> Result<Chunk, String> {
    let chunk: Chunk = serde_json::from_str(data_json).map_err(|e| {
        format!(
            "an artifact is {{artifact_id, name, description, parts: [{{text}} | {{data}} | {{file: {{name, media_type, bytes | uri}}}}], append, last_chunk}}: {e}"
        )
    })?;
    if chunk.artifact_id.is_empty() {
        return Err("artifact_id is empty".to_owned());
    }
    if chunk.artifact_id == RESULT_ID {
        return Err(format!(
            "artifact_id {RESULT_ID:?} is the worker's result; report it as the result"
        ));
    }
    bounded("artifact_id", &chunk.artifact_id)?;
    bounded("name", &chunk.name)?;
    if chunk.parts.len() > MAX_PARTS {
        return Err(format!(
            "{} parts; at most {MAX_PARTS} in one chunk",
            chunk.parts.len()
        ));
    }
    for (i, part) in chunk.parts.iter().enumerate() {
        let Part::File(f) = part else { continue };
        bounded(&format!("parts[{i}].file.name"), &f.name)?;
        bounded(&format!("parts[{i}].file.media_type"), &f.media_type)?;
        match (&f.bytes, &f.uri) {
            (Some(b), None) => {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| format!("parts[{i}].file.bytes is not base64: {e}"))?;
                if decoded.len() > MAX_FILE_BYTES {
                    return Err(format!(
                        "parts[{i}].file is {} bytes; an inline file is at most {MAX_FILE_BYTES}",
                        decoded.len()
                    ));
                }
            }
            (None, Some(u)) => bounded(&format!("parts[{i}].file.uri"), u)?,
            _ => {
                return Err(format!(
                    "parts[{i}].file needs exactly one of bytes and uri"
                ));
            }
        }
    }
    Ok(chunk)
}

/// The artifacts assembled on a worker row (`None`: none reported).
pub fn assembled(json: Option<&str>) -> Vec<Artifact> {
    json.and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_default()
}

/// `assembled` with `chunk` taken in, as stored; `Err` with the size once over
/// [`MAX_ARTIFACT_BYTES`].
pub fn merge(assembled_json: Option<&str>, chunk: &Chunk) -> Result<String, usize> {
    let mut all = assembled(assembled_json);
    match all.iter_mut().find(|a| a.artifact_id == chunk.artifact_id) {
        Some(a) => {
            if !chunk.append {
                a.parts.clear();
            }
            a.parts.extend(chunk.parts.iter().cloned());
            if !chunk.name.is_empty() {
                a.name = chunk.name.clone();
            }
            if !chunk.description.is_empty() {
                a.description = chunk.description.clone();
            }
        }
        None => all.push(Artifact {
            artifact_id: chunk.artifact_id.clone(),
            name: chunk.name.clone(),
            description: chunk.description.clone(),
            parts: chunk.parts.clone(),
        }),
    }
    let json = serde_json::to_string(&all).expect("artifacts serialise");
    if json.len() > MAX_ARTIFACT_BYTES {
        return Err(json.len());
    }
    Ok(json)
}

/// A completed worker's result as the artifact `result`: a data part when it has a structured
/// result, else a text part.
pub fn result_artifact(w: &WorkerRecord) -> Option<Artifact> {
    if w.state != WorkerState::Completed {
        return None;
    }
    let part = match (&w.structured_result, &w.result) {
        (Some(s), _) => match serde_json::from_str::<Value>(s) {
            Ok(v) => Part::Data(v),
            Err(_) => Part::Text(s.clone()),
        },
        (None, Some(text)) => Part::Text(text.clone()),
        (None, None) => return None,
    };
    Some(Artifact {
        artifact_id: RESULT_ID.to_owned(),
        name: RESULT_ID.to_owned(),
        description: String::new(),
        parts: vec![part],
    })
}

/// Every artifact of `w`: the reported ones, then its result.
pub fn of(w: &WorkerRecord) -> Vec<Artifact> {
    let mut all = assembled(w.artifacts.as_deref());
    all.extend(result_artifact(w));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_checked() {
        let ok = parse_chunk(
            r#"{"artifact_id": "a", "name": "report", "parts": [{"text": "x"}, {"data": {"k": 1}},
                {"file": {"name": "f.txt", "media_type": "text/plain", "bytes": "aGk="}}]}"#,
        )
        .unwrap();
        assert_eq!(ok.parts.len(), 3);
        for (bad, says) in [
            (
                r#"{"artifact_id": "", "parts": []}"#,
                "artifact_id is empty",
            ),
            (
                r#"{"artifact_id": "result", "parts": []}"#,
                "is the worker's result",
            ),
            (
                r#"{"artifact_id": "a", "parts": [{"video": 1}]}"#,
                "an artifact is {",
            ),
            (
                r#"{"artifact_id": "a", "parts": [{"file": {"name": "f"}}]}"#,
                "exactly one of bytes and uri",
            ),
            (
                r#"{"artifact_id": "a", "parts": [{"file": {"bytes": "%%"}}]}"#,
                "is not base64",
            ),
            (
                r#"{"artifact_id": "a", "parts": [], "extra": 1}"#,
                "unknown field",
            ),
        ] {
            let e = parse_chunk(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_FILE_BYTES + 1]);
        let e = parse_chunk(&format!(
            r#"{{"artifact_id": "a", "parts": [{{"file": {{"bytes": "{big}"}}}}]}}"#
        ))
        .unwrap_err();
        assert!(e.contains("an inline file is at most 262144"), "{e}");
    }

    #[test]
    fn chunks_append_in_order_and_replace_without_append() {
        let c = |json: &str| parse_chunk(json).unwrap();
        let one = merge(
            None,
            &c(r#"{"artifact_id": "a", "name": "n", "parts": [{"text": "1"}]}"#),
        )
        .unwrap();
        let two = merge(
            Some(&one),
            &c(r#"{"artifact_id": "a", "parts": [{"text": "2"}], "append": true}"#),
        )
        .unwrap();
        let three = merge(
            Some(&two),
            &c(r#"{"artifact_id": "b", "parts": [{"text": "3"}]}"#),
        )
        .unwrap();
        let all = assembled(Some(&three));
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].name, "n");
        assert_eq!(
            all[0].parts,
            [Part::Text("1".into()), Part::Text("2".into())]
        );
        let replaced = merge(
            Some(&three),
            &c(r#"{"artifact_id": "a", "parts": [{"text": "new"}]}"#),
        )
        .unwrap();
        assert_eq!(
            assembled(Some(&replaced))[0].parts,
            [Part::Text("new".into())]
        );
    }

    #[test]
    fn the_whole_is_bounded() {
        let text = "x".repeat(200_000);
        let mut json: Option<String> = None;
        let mut over = None;
        for i in 0..10 {
            let chunk = parse_chunk(&format!(
                r#"{{"artifact_id": "a{i}", "parts": [{{"text": "{text}"}}]}}"#
            ))
            .unwrap();
            match merge(json.as_deref(), &chunk) {
                Ok(j) => json = Some(j),
                Err(size) => {
                    over = Some(size);
                    break;
                }
            }
        }
        assert!(over.is_some_and(|s| s > MAX_ARTIFACT_BYTES));
        assert!(json.unwrap().len() <= MAX_ARTIFACT_BYTES);
    }
}

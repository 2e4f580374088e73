//! Output schemas (docs/workers.md §6.4): one check for every schema agentry accepts — a
//! persona's `output` when the file is loaded (docs/personas.md §2.3), a request's
//! `output_schema` in `ResolveAgent` and `SpawnWorker` — and the validation of a worker's result
//! against it when the worker completes.
//!
//! A leaf: owns the JSON Schema handling and a small cache of compiled validators, and depends
//! on nothing else in the crate, so the persona parser and the worker runtime can both use it.

use std::sync::{Arc, LazyLock};

use jsonschema::Validator;
use moka::sync::Cache;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// How many validation errors a mismatch message lists before it says "and N more".
const MAX_LISTED_ERRORS: usize = 3;

/// How many compiled schemas to keep. Schemas come from persona files, so a handful are live at
/// once; the bound only guards against a stream of edited files.
const COMPILED_SCHEMAS: u64 = 256;

/// Why an `output_schema` is unusable; shown as a persona diagnostic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The text is not JSON at all.
    #[error("output schema is not JSON: {message}")]
    NotJson {
        /// 1-based line of the parse failure, for diagnostics that point into the file.
        line: usize,
        /// 1-based column of the parse failure.
        column: usize,
        /// The parser's message, which already says where (`… at line 1 column 7`).
        message: String,
    },
    /// The JSON does not conform to the JSON Schema meta-schema.
    #[error("output schema is not a valid JSON Schema: at {}: {message}", display_path(.path))]
    NotASchema {
        /// JSON pointer into the schema document where it is wrong (`""` is the root).
        path: String,
        /// What is wrong there, e.g. `"strin" is not valid under any of the schemas …`.
        message: String,
    },
    /// The schema is well-formed but cannot be compiled: an unresolvable `$ref` (remote
    /// references are never fetched), an invalid `pattern`, …
    #[error("output schema cannot be compiled: {0}")]
    Uncompilable(String),
}

/// Checks that `schema_json` is a usable JSON Schema and returns it parsed (a request's
/// `output_schema`). The compiled validator is cached for [`validate_output`].
pub fn check_schema(schema_json: &str) -> Result<Value, SchemaError> {
    let schema: Value = serde_json::from_str(schema_json).map_err(|e| SchemaError::NotJson {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    check_schema_value(&schema)?;
    Ok(schema)
}

/// Checks that an already parsed value is a usable JSON Schema: it conforms to the meta-schema
/// and compiles (remote references are never fetched). Used for a persona's `output` when the
/// file is loaded, so a broken schema is a diagnostic on the file rather than a failure on
/// every worker that uses it.
pub fn check_schema_value(schema: &Value) -> Result<(), SchemaError> {
    if let Err(err) = jsonschema::meta::validate(schema) {
        return Err(SchemaError::NotASchema {
            path: err.instance_path().as_str().to_owned(),
            message: err.to_string(),
        });
    }
    COMPILED.get_or_compile(schema)?;
    Ok(())
}

/// Validates a completed worker's stdout against its effective output schema and returns the
/// parsed document (the worker's `structured_result`).
///
/// The error is the worker's failure message: `output is not JSON: …`, or
/// `output does not match the output schema: /files: "x" is not of type "array"` listing the
/// first few violations with their instance paths.
pub fn validate_output(schema: &Value, stdout: &str) -> Result<Value, String> {
    let validator = COMPILED.get_or_compile(schema).map_err(|e| e.to_string())?;
    let instance: Value =
        serde_json::from_str(stdout.trim()).map_err(|e| format!("output is not JSON: {e}"))?;
    let (listed, more) = {
        let mut errors = validator.iter_errors(&instance);
        let listed: Vec<String> = errors
            .by_ref()
            .take(MAX_LISTED_ERRORS)
            .map(|e| format!("{}: {e}", display_path(e.instance_path().as_str())))
            .collect();
        (listed, errors.count())
    };
    if listed.is_empty() {
        return Ok(instance);
    }
    let mut message = format!(
        "output does not match the output schema: {}",
        listed.join("; ")
    );
    if more > 0 {
        message.push_str(&format!(" (and {more} more)"));
    }
    Err(message)
}

/// A JSON pointer for humans: the root is spelled out rather than left empty.
fn display_path(pointer: &str) -> &str {
    if pointer.is_empty() {
        "(root)"
    } else {
        pointer
    }
}

/// Compiled validators keyed by the SHA-256 of the schema's serialised text, so a schema shared
/// by many workers is compiled once per process. Entries never go stale (same text, same
/// validator); the capacity bound alone evicts.
struct CompiledSchemas {
    validators: Cache<[u8; 32], Arc<Validator>>,
}

static COMPILED: LazyLock<CompiledSchemas> = LazyLock::new(|| CompiledSchemas {
    validators: Cache::new(COMPILED_SCHEMAS),
});

impl CompiledSchemas {
    fn get_or_compile(&self, schema: &Value) -> Result<Arc<Validator>, SchemaError> {
        let key: [u8; 32] = Sha256::digest(schema.to_string().as_bytes()).into();
        self.validators
            .try_get_with(key, || {
                jsonschema::validator_for(schema)
                    .map(Arc::new)
                    .map_err(|e| SchemaError::Uncompilable(e.to_string()))
            })
            .map_err(|e| (*e).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    const FILES_SCHEMA: &str = r#"{
        "type": "object",
        "properties": {
            "files": {"type": "array", "items": {"type": "string"}},
            "summary": {"type": "string"}
        },
        "required": ["files"]
    }"#;

    #[test]
    fn a_valid_schema_is_returned_parsed() {
        let schema = check_schema(FILES_SCHEMA).unwrap();
        assert_eq!(schema["required"], json!(["files"]));
        assert_eq!(check_schema("true").unwrap(), json!(true));
    }

    #[test]
    fn non_json_schema_says_where() {
        let err = check_schema("{\n  \"type\": \"object\",\n  oops\n}").unwrap_err();
        let SchemaError::NotJson { line, column, .. } = &err else {
            panic!("expected NotJson, got {err:?}");
        };
        assert_eq!((*line, *column), (3, 3));
        assert!(err.to_string().starts_with("output schema is not JSON: "));
        assert!(err.to_string().contains("line 3 column 3"), "{err}");
    }

    #[test]
    fn a_schema_violating_the_meta_schema_names_the_problem() {
        let err = check_schema(r#"{"properties": {"n": {"type": "strin"}}}"#).unwrap_err();
        let SchemaError::NotASchema { path, .. } = &err else {
            panic!("expected NotASchema, got {err:?}");
        };
        assert_eq!(path, "/properties/n/type");
        assert!(
            err.to_string()
                .starts_with("output schema is not a valid JSON Schema: at /properties/n/type: "),
            "{err}"
        );

        let err = check_schema("42").unwrap_err();
        assert!(
            err.to_string().contains("at (root): "),
            "the root is named: {err}"
        );
    }

    #[test]
    fn an_uncompilable_schema_is_refused() {
        let err = check_schema(r##"{"$ref": "#/definitions/missing"}"##).unwrap_err();
        assert!(matches!(err, SchemaError::Uncompilable(_)), "{err:?}");
        let err = check_schema(r#"{"$ref": "https://example.com/remote.json"}"#).unwrap_err();
        assert!(matches!(err, SchemaError::Uncompilable(_)), "{err:?}");
        let err = check_schema(r#"{"type": "string", "pattern": "(("}"#).unwrap_err();
        assert!(matches!(err, SchemaError::Uncompilable(_)), "{err:?}");
        // An unknown meta-schema is never fetched; it is an error, not a panic.
        assert!(check_schema(r#"{"$schema": "http://example.com/custom"}"#).is_err());
    }

    #[test]
    fn matching_output_is_returned_parsed() {
        let schema = check_schema(FILES_SCHEMA).unwrap();
        let value = validate_output(&schema, "\n  {\"files\": [\"a.rs\"]}\n").unwrap();
        assert_eq!(value, json!({"files": ["a.rs"]}));
    }

    #[test]
    fn mismatching_output_lists_errors_with_paths() {
        let schema = check_schema(FILES_SCHEMA).unwrap();
        let err = validate_output(&schema, r#"{"files": "x"}"#).unwrap_err();
        assert_eq!(
            err,
            r#"output does not match the output schema: /files: "x" is not of type "array""#
        );

        let err = validate_output(&schema, r#"{"summary": 1}"#).unwrap_err();
        assert!(
            err.contains("(root): \"files\" is a required property"),
            "{err}"
        );
        assert!(
            err.contains("/summary: 1 is not of type \"string\""),
            "{err}"
        );
    }

    #[test]
    fn many_errors_are_capped() {
        let schema = check_schema(r#"{"type": "array", "items": {"type": "string"}}"#).unwrap();
        let err = validate_output(&schema, "[1, 2, 3, 4, 5]").unwrap_err();
        assert!(err.contains("/0: ") && err.contains("/2: "), "{err}");
        assert!(!err.contains("/3: "), "{err}");
        assert!(err.ends_with(" (and 2 more)"), "{err}");
    }

    #[test]
    fn non_json_output_is_reported() {
        let schema = check_schema(FILES_SCHEMA).unwrap();
        let err = validate_output(&schema, "Here are the files: a.rs").unwrap_err();
        assert!(err.starts_with("output is not JSON: "), "{err}");
        let err = validate_output(&schema, "   ").unwrap_err();
        assert!(err.starts_with("output is not JSON: "), "{err}");
    }

    #[test]
    fn an_unchecked_bad_schema_fails_validation_instead_of_panicking() {
        let schema = json!({"$ref": "#/nowhere"});
        let err = validate_output(&schema, "{}").unwrap_err();
        assert!(
            err.starts_with("output schema cannot be compiled: "),
            "{err}"
        );
    }
}

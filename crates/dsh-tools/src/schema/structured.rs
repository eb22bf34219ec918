//! The structured form of a result: what a client that reads structured content hands the
//! model.
//!
//! Agent clients differ in what of a result they pass to the model: some pass the text,
//! others (Claude Code for successes, Codex CLI for every result) pass the structured
//! content and drop the text. So the structured form carries the text as well: its first
//! field, `text`, is the whole rendered text the model would read (output, file contents,
//! matches, screens, every marker and notice; for an error, `Error: <message>`), and the
//! typed facts follow it. A client that picks either part gives the model the same words.
//!
//! [`ToolResult::structured`] builds the form; [`structured_schema`] is the output schema a
//! tool declares for it, which every result validates against, error results included
//! (an error carries `text` and `error: {name, code}` instead of the tool's facts).
//!
//! ```
//! use dsh_tools::ToolResult;
//!
//! let r = ToolResult::ok("hi\n");
//! assert_eq!(r.structured(&[]), serde_json::json!({"text": "hi\n"}));
//! ```

use serde_json::{json, Map, Value};

use crate::ToolResult;

/// The field of every structured result that holds the text the model reads.
pub const TEXT_FIELD: &str = "text";

/// The field of an error result's structured form that holds `{name, code}`.
pub const ERROR_FIELD: &str = "error";

/// What separates a result's text from a notice carried after it (a job's end).
pub const NOTICE_SEPARATOR: &str = "\n\n";

impl ToolResult {
    /// The structured form of this result with `notices` carried after its text: `text`
    /// first (the text, then each notice after a blank line), then the tool's facts
    /// ([`ToolResult::meta`]) or, for an error, `error: {name, code}`.
    pub fn structured(&self, notices: &[String]) -> Value {
        let mut text = self.text.clone();
        for notice in notices {
            text.push_str(NOTICE_SEPARATOR);
            text.push_str(notice);
        }
        let mut out = Map::new();
        out.insert(TEXT_FIELD.into(), Value::String(text));
        match (&self.error, &self.meta) {
            (Some(e), _) => {
                out.insert(ERROR_FIELD.into(), json!({"name": e.name, "code": e.code}));
            }
            (None, Some(Value::Object(facts))) => {
                for (k, v) in facts {
                    // The text is this result's; a fact of the same name cannot replace it.
                    if k != TEXT_FIELD && k != ERROR_FIELD {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            (None, _) => {}
        }
        Value::Object(out)
    }
}

/// The output schema of a tool whose successful results carry the facts `facts` describes
/// (an object schema, [`crate::Tool::output_schema`]): `text` (required, first), the
/// facts, and `error`. A success must have the facts' required fields; an error has
/// `error` instead, so both validate.
pub fn structured_schema(facts: &Value) -> Value {
    let mut properties = Map::new();
    properties.insert(
        TEXT_FIELD.into(),
        json!({
            "type": "string",
            "description": "The result as the model reads it: the same text as the content \
                            (output, markers, notices; for an error, `Error: <message>`)."
        }),
    );
    if let Some(Value::Object(props)) = facts.get("properties") {
        for (k, v) in props {
            if k != TEXT_FIELD && k != ERROR_FIELD {
                properties.insert(k.clone(), v.clone());
            }
        }
    }
    properties.insert(
        ERROR_FIELD.into(),
        json!({
            "type": "object",
            "description": "Present on an error result only: its kind and stable dsh code.",
            "properties": {"name": {"type": "string"}, "code": {"type": "string"}},
            "required": ["name", "code"]
        }),
    );
    let required: Vec<Value> = facts
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter(|k| k.as_str() != Some(TEXT_FIELD))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    schema.insert("required".into(), json!([TEXT_FIELD]));
    if !required.is_empty() {
        // A success has the tool's facts; an error has `error` in their place.
        schema.insert(
            "anyOf".into(),
            json!([{"required": required}, {"required": [ERROR_FIELD]}]),
        );
    }
    Value::Object(schema)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorInfo;

    #[test]
    fn the_text_comes_first_then_the_facts() {
        let mut r = ToolResult::ok("hello\n[exit code: 1]");
        r.meta = Some(json!({"exitCode": 1, "text": "not this"}));
        let s = r.structured(&[]);
        assert_eq!(s, json!({"text": "hello\n[exit code: 1]", "exitCode": 1}));
        assert_eq!(
            s.as_object()
                .and_then(|m| m.keys().next())
                .map(String::as_str),
            Some("text")
        );
    }

    #[test]
    fn notices_follow_the_text_after_a_blank_line() {
        let r = ToolResult::ok("done");
        let s = r.structured(&["[job bash-1 ended]".into(), "[job bash-2 ended]".into()]);
        assert_eq!(
            s["text"],
            "done\n\n[job bash-1 ended]\n\n[job bash-2 ended]"
        );
    }

    #[test]
    fn an_error_carries_its_text_and_code_and_no_facts() {
        let mut r = ToolResult::from_error(&dsh_core::HarnessError::new(
            dsh_core::ErrorCode::InvalidArgs,
            "invalid arguments: x",
        ));
        r.meta = Some(json!({"exitCode": 1}));
        assert_eq!(
            r.structured(&[]),
            json!({"text": "Error: invalid arguments: x",
                   "error": {"name": "ToolArgsError", "code": "INVALID_ARGS"}})
        );
        assert_eq!(
            r.error,
            Some(ErrorInfo {
                name: "ToolArgsError".into(),
                code: "INVALID_ARGS".into()
            })
        );
    }

    #[test]
    fn the_schema_requires_the_text_and_either_the_facts_or_the_error() {
        let facts = json!({"type": "object",
            "properties": {"job": {"type": "object"}, "output": {"type": "string"}},
            "required": ["output", "job"]});
        let s = structured_schema(&facts);
        let keys: Vec<&String> = s["properties"]
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["text", "job", "output", "error"]);
        assert_eq!(s["required"], json!(["text"]));
        assert_eq!(
            s["anyOf"],
            json!([{"required": ["output", "job"]}, {"required": ["error"]}])
        );
    }

    #[test]
    fn a_schema_without_required_facts_has_no_alternatives() {
        let s = structured_schema(&json!({"type": "object", "properties": {}, "required": []}));
        assert_eq!(s.get("anyOf"), None);
        assert_eq!(s["required"], json!(["text"]));
    }
}

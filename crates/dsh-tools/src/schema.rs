//! What the tools' arguments and results look like on the wire: argument parsing under
//! [`bounds`], JSON schemas every client's validator reads, and the [`structured`] form
//! of a result.

use dsh_core::{ErrorCode, HarnessError};
use serde_json::Value;

pub mod bounds;
pub mod structured;

/// An `INVALID_ARGS` error saying `msg`.
pub(crate) fn invalid_args(msg: impl Into<String>) -> HarnessError {
    HarnessError::new(ErrorCode::InvalidArgs, msg.into())
}

/// A tool's arguments as `T`: `INVALID_ARGS` unless `args` is a JSON object whose string
/// arguments are within their [bounds](bounds) (checked first, before anything is
/// copied) and that deserializes. The deserializer's message is quoted in part: it may
/// quote an argument.
pub(crate) fn parse_args<T>(args: &Value) -> Result<T, HarnessError>
where
    T: serde::de::DeserializeOwned + bounds::Bounded,
{
    if !args.is_object() {
        return Err(invalid_args("invalid arguments: expected a JSON object"));
    }
    bounds::check(args, T::BOUNDS)?;
    T::deserialize(args).map_err(|e| {
        invalid_args(format!(
            "invalid arguments: {}",
            dsh_core::quoted(&e.to_string())
        ))
    })
}

/// The JSON schema of a tool's argument type, each bounded string with its `maxLength`
/// (an empty object schema if it cannot be rendered, which a derived schema always can),
/// made [`portable`].
pub(crate) fn args_schema<T: schemars::JsonSchema + bounds::Bounded>() -> Value {
    let schema = serde_json::to_value(schemars::schema_for!(T))
        .unwrap_or_else(|_| serde_json::json!({"type": "object"}));
    portable(bounds::with_max_lengths(schema, T::BOUNDS))
}

/// `schema` as every client's validator reads it: no `format` outside JSON Schema's own
/// list (`uint64`, `double`: unknown formats make validators warn), and an optional
/// property as its one type rather than a union with `null` (`["string", "null"]`,
/// `anyOf: [X, {"type": "null"}]`), which some clients cannot show. Leaving an optional
/// property out is how a call omits it; `null` is still accepted.
pub(crate) fn portable(mut schema: Value) -> Value {
    const FORMATS: &[&str] = &[
        "date-time",
        "date",
        "time",
        "duration",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "uuid",
        "regex",
        "json-pointer",
    ];
    fn walk(v: &mut Value) {
        match v {
            Value::Object(map) => {
                if map
                    .get("format")
                    .and_then(Value::as_str)
                    .is_some_and(|f| !FORMATS.contains(&f))
                {
                    map.remove("format");
                }
                if let Some(Value::Array(types)) = map.get("type") {
                    let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
                    if kept.len() == 1 {
                        map.insert("type".into(), kept[0].clone());
                    }
                }
                let one = match map.get("anyOf") {
                    Some(Value::Array(alts)) => {
                        let kept: Vec<&Value> = alts
                            .iter()
                            .filter(|a| a.get("type") != Some(&Value::from("null")))
                            .collect();
                        (kept.len() == 1 && alts.len() == 2).then(|| kept[0].clone())
                    }
                    _ => None,
                };
                if let Some(Value::Object(only)) = one {
                    map.remove("anyOf");
                    for (k, v) in only {
                        map.entry(k).or_insert(v);
                    }
                }
                map.values_mut().for_each(walk);
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut schema);
    schema
}

/// `v` without a `null` anywhere: an object member that is `null` is left out (a result's
/// structured facts say what is, never what is not).
pub(crate) fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

/// An object schema with `properties` (name, schema) and `required` names.
pub(crate) fn object_schema(properties: &[(&str, Value)], required: &[&str]) -> Value {
    let props: serde_json::Map<String, Value> = properties
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    serde_json::json!({"type": "object", "properties": props, "required": required})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_portable_schema_has_no_unknown_format_and_no_union_with_null() {
        let s = portable(json!({"properties": {
            "n": {"type": ["integer", "null"], "format": "uint64", "minimum": 0},
            "t": {"type": ["number", "null"], "format": "double"},
            "w": {"type": "string", "format": "date-time"},
            "e": {"description": "d", "anyOf": [{"$ref": "#/$defs/E"}, {"type": "null"}]},
            "u": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        }}));
        assert_eq!(
            s["properties"]["n"],
            json!({"type": "integer", "minimum": 0})
        );
        assert_eq!(s["properties"]["t"], json!({"type": "number"}));
        assert_eq!(s["properties"]["w"]["format"], "date-time");
        assert_eq!(
            s["properties"]["e"],
            json!({"description": "d", "$ref": "#/$defs/E"})
        );
        assert_eq!(
            s["properties"]["u"]["anyOf"].as_array().map(Vec::len),
            Some(2)
        );
    }

    #[test]
    fn structured_facts_leave_out_what_is_not() {
        let v =
            without_nulls(json!({"a": null, "b": {"c": null, "d": 1}, "e": [null, {"f": null}]}));
        assert_eq!(v, json!({"b": {"d": 1}, "e": [null, {}]}));
    }
}

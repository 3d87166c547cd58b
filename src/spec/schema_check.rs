//! A document checked against the schema `phoenix schema` prints, for the tests that keep the
//! schema, the example file and `validate` telling the same story. It understands exactly the
//! keywords schemars emits for the raw spec types and refuses any other, so a schema that
//! grows a keyword this check would skip fails loudly instead of passing. (A general JSON
//! Schema crate cost the build 53 packages for these few keywords.)

use serde_json::Value;

/// Keywords that describe a value for people and constrain nothing.
const ANNOTATIONS: [&str; 6] = [
    "$schema",
    "$defs",
    "title",
    "description",
    "default",
    "format",
];

/// Every place `doc` breaks `schema`, as `/json/pointer: what`; empty when it conforms.
pub fn schema_errors(schema: &Value, doc: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    check(schema, schema, doc, "", &mut errors);
    errors
}

fn check(root: &Value, node: &Value, doc: &Value, at: &str, errors: &mut Vec<String>) {
    let Some(node) = node.as_object() else {
        // `true` accepts anything, `false` nothing.
        if node == &Value::Bool(false) {
            errors.push(format!("{at}: no value is allowed here"));
        }
        return;
    };
    for (keyword, value) in node {
        match keyword.as_str() {
            "$ref" => match value.as_str().and_then(|r| resolve(root, r)) {
                Some(target) => check(root, target, doc, at, errors),
                None => errors.push(format!("{at}: unresolvable $ref {value}")),
            },
            "type" => {
                let allowed: Vec<&str> = match value {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                    _ => Vec::new(),
                };
                if !allowed.iter().any(|t| is_type(doc, t)) {
                    errors.push(format!("{at}: {doc} is not of type {value}"));
                }
            }
            "anyOf" => {
                let branches = value.as_array().map(Vec::as_slice).unwrap_or_default();
                let fits = branches.iter().any(|b| {
                    let mut inner = Vec::new();
                    check(root, b, doc, at, &mut inner);
                    inner.is_empty()
                });
                if !fits {
                    errors.push(format!("{at}: {doc} matches none of anyOf"));
                }
            }
            "properties" | "additionalProperties" => {
                if keyword == "properties" || !node.contains_key("properties") {
                    check_object(root, node, doc, at, errors);
                }
            }
            "items" => {
                if let Some(items) = doc.as_array() {
                    for (i, item) in items.iter().enumerate() {
                        check(root, value, item, &format!("{at}/{i}"), errors);
                    }
                }
            }
            "minimum" => {
                if let (Some(n), Some(min)) = (doc.as_f64(), value.as_f64())
                    && n < min
                {
                    errors.push(format!("{at}: {doc} is less than the minimum of {min}"));
                }
            }
            keyword if ANNOTATIONS.contains(&keyword) => {}
            keyword => errors.push(format!(
                "{at}: the schema uses `{keyword}`, which this check does not understand"
            )),
        }
    }
}

/// `properties` and `additionalProperties` together: each key of the object is checked by
/// its property's schema, or by `additionalProperties` when it has none.
fn check_object(
    root: &Value,
    node: &serde_json::Map<String, Value>,
    doc: &Value,
    at: &str,
    errors: &mut Vec<String>,
) {
    let Some(object) = doc.as_object() else {
        return;
    };
    let properties = node.get("properties").and_then(Value::as_object);
    let additional = node.get("additionalProperties");
    for (key, value) in object {
        let path = format!("{at}/{key}");
        match (properties.and_then(|p| p.get(key)), additional) {
            (Some(schema), _) => check(root, schema, value, &path, errors),
            (None, Some(Value::Bool(false))) => {
                errors.push(format!("{at}: additional property `{key}` is not allowed"))
            }
            (None, Some(schema)) => check(root, schema, value, &path, errors),
            (None, None) => {}
        }
    }
}

/// `#/$defs/Name` within the schema.
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    root.pointer(reference.strip_prefix('#')?)
}

fn is_type(doc: &Value, name: &str) -> bool {
    match name {
        "object" => doc.is_object(),
        "array" => doc.is_array(),
        "string" => doc.is_string(),
        "boolean" => doc.is_boolean(),
        "null" => doc.is_null(),
        "number" => doc.is_number(),
        "integer" => doc.is_i64() || doc.is_u64(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_keyword_catches_what_it_constrains() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "count": {"type": ["integer", "null"], "minimum": 1},
                "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
                "either": {"anyOf": [{"type": "string"}, {"type": "boolean"}]},
            },
            "additionalProperties": false,
            "$defs": {"Tag": {"type": "string"}},
        });
        let ok = json!({"name": "a", "count": 2, "tags": ["x"], "env": {"K": "v"}, "either": true});
        assert_eq!(schema_errors(&schema, &ok), Vec::<String>::new());
        let bad = json!({"nmae": "a", "count": 0, "tags": [3], "env": {"K": 1}, "either": 2});
        let errors = schema_errors(&schema, &bad);
        assert_eq!(errors.len(), 5, "{errors:#?}");
        assert!(errors.iter().any(|e| e.contains("`nmae` is not allowed")));
        assert!(errors.iter().any(|e| e.starts_with("/count:")));
        assert!(errors.iter().any(|e| e.starts_with("/tags/0:")));
        assert!(errors.iter().any(|e| e.starts_with("/env/K:")));
        assert!(errors.iter().any(|e| e.starts_with("/either:")));
    }

    #[test]
    fn a_keyword_it_does_not_know_is_an_error_not_a_pass() {
        let schema = json!({"type": "string", "pattern": "^a"});
        let errors = schema_errors(&schema, &json!("b"));
        assert!(errors[0].contains("`pattern`"), "{errors:?}");
    }
}

//! What a constraint is made from ([`Grammar`]) and the per-model compiler that turns
//! one into a [`Constraint`].
//!
//! JSON Schemas compile with llguidance's JSON compiler in compact form: the separators
//! are `", "` and `": "` and no other whitespace is allowed between tokens, so a model
//! cannot wander into endless indentation and most structure is forced (a schema can
//! still ask for something else with llguidance's `x-guidance` key). Schemas are read
//! as llama.cpp reads them where it is stricter than JSON Schema: an object listing
//! `properties` without `additionalProperties` allows no other keys (a model would
//! otherwise invent keys without end), and numbers get digit bounds as in llama.cpp (whose JSON-Schema grammars allow at most 16 integral and 16
//! fractional digits): an integer without a bound gets ±(10^16 − 1), a number without
//! `multipleOf` gets `multipleOf: 1e-10` (the finest step llguidance represents), so a
//! model cannot run on with digits forever.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fucina_tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::TokEnv;
use llguidance::{Matcher, ParserFactory, TokenParser};
use serde_json::{json, Value};

use crate::constraint::Constraint;
use crate::error::{GrammarError, Result};
use crate::vocab::Vocab;

/// Compiled parsers kept per compiler (a server sees the same schema again and again).
const PARSER_CACHE: usize = 64;

/// A grammar a generation's output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum Grammar {
    /// A JSON Schema (draft 2020-12 keywords, `$ref`/`$defs` included).
    JsonSchema(Value),
    /// Any JSON object (OpenAI's `response_format={"type": "json_object"}`).
    JsonObject,
    /// A regular expression the whole output must match (Rust `regex` syntax).
    Regex(String),
    /// A grammar in llguidance's Lark-like syntax.
    Lark(String),
}

impl Grammar {
    /// A JSON Schema given as JSON text.
    pub fn json_schema_str(text: &str) -> Result<Grammar> {
        let v: Value = serde_json::from_str(text).map_err(|e| GrammarError::Invalid {
            kind: "JSON Schema",
            message: format!("not valid JSON: {e}"),
        })?;
        Grammar::json_schema(v)
    }

    /// A JSON Schema (an object, or `true` for any JSON value).
    pub fn json_schema(schema: Value) -> Result<Grammar> {
        match &schema {
            Value::Object(_) | Value::Bool(true) => Ok(Grammar::JsonSchema(schema)),
            other => Err(GrammarError::Invalid {
                kind: "JSON Schema",
                message: format!("a schema must be an object or `true`, got {other}"),
            }),
        }
    }

    /// What kind of grammar this is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Grammar::JsonSchema(_) | Grammar::JsonObject => "JSON Schema",
            Grammar::Regex(_) => "regex",
            Grammar::Lark(_) => "Lark grammar",
        }
    }

    fn key(&self) -> String {
        match self {
            Grammar::JsonSchema(v) => format!("j{v}"),
            Grammar::JsonObject => "o".into(),
            Grammar::Regex(r) => format!("r{r}"),
            Grammar::Lark(l) => format!("l{l}"),
        }
    }

    fn top_level(&self) -> TopLevelGrammar {
        let schema = |v: Value| TopLevelGrammar::from_json_schema(compiled_schema(v));
        match self {
            Grammar::JsonSchema(v) => schema(v.clone()),
            Grammar::JsonObject => schema(json!({"type": "object"})),
            Grammar::Regex(r) => TopLevelGrammar::from_regex(r),
            Grammar::Lark(l) => TopLevelGrammar::from_lark(l.clone()),
        }
    }
}

/// A JSON Schema as [`Grammar::JsonSchema`] compiles it: read as llama.cpp reads
/// schemas (the module doc) and with the compact separators in its `x-guidance` key
/// (unless the schema sets its own). What a Lark grammar's `%json { ... }` should embed
/// to constrain a value the same way (a tool call's arguments).
pub fn compiled_schema(mut v: Value) -> Value {
    let compact = json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
        // llama.cpp reads `oneOf` as `anyOf` (exclusivity is not checked).
        "coerce_one_of": true,
    });
    normalize(&mut v);
    match &mut v {
        Value::Object(m) => {
            // The schema's own options win; the rest are the defaults.
            if let (Value::Object(g), Value::Object(defaults)) =
                (m.entry("x-guidance").or_insert(json!({})), compact)
            {
                for (k, d) in defaults {
                    g.entry(k).or_insert(d);
                }
            }
        }
        Value::Bool(true) => v = json!({ "x-guidance": compact }),
        _ => {}
    }
    v
}

/// `schema` compiled leniently, for a schema the strict compile refused for a keyword,
/// format or pattern llguidance does not implement: llguidance ignores what it does not
/// know, and patterns with look-around (which no regex engine here runs) are dropped.
/// `None` when the schema asked to be strict (`x-guidance.lenient` set) or is not an
/// object.
fn lenient_schema(schema: &Value) -> Option<Value> {
    let explicit = schema
        .get("x-guidance")
        .and_then(|g| g.get("lenient"))
        .is_some();
    if explicit || !schema.is_object() {
        return None;
    }
    let mut v = compiled_schema(schema.clone());
    drop_look_around(&mut v);
    if let Some(Value::Object(g)) = v.get_mut("x-guidance") {
        g.insert("lenient".into(), Value::Bool(true));
    }
    Some(v)
}

/// Remove every `pattern` that uses look-around.
fn drop_look_around(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let bad = m
                .get("pattern")
                .and_then(Value::as_str)
                .is_some_and(|p| ["(?=", "(?!", "(?<=", "(?<!"].iter().any(|l| p.contains(l)));
            if bad {
                m.remove("pattern");
            }
            m.values_mut().for_each(drop_look_around);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_look_around),
        _ => {}
    }
}

/// Whether a strict compile failed only for something llguidance does not implement
/// (so a lenient compile may go through), not for a malformed schema.
fn unimplemented(e: &GrammarError) -> bool {
    match e {
        GrammarError::Unsupported { .. } => true,
        GrammarError::Invalid { message, .. } => {
            message.contains("Unknown format") || message.contains("look-around")
        }
        GrammarError::Failed(_) => false,
    }
}

/// The largest magnitude llama.cpp's JSON grammars write for an integer (16 digits).
const MAX_DIGITS_INT: i64 = 9_999_999_999_999_999;

/// The finest `multipleOf` llguidance compiles (1e-11 and below exceed its digit limit).
const NUMBER_STEP: f64 = 1e-10;

/// llama.cpp's reading of a schema, where it is tighter than JSON Schema's: an object
/// that lists `properties` and says nothing of others allows no others; integers and
/// numbers get digit bounds (module doc).
fn normalize(v: &mut Value) {
    normalize_node(v, true);
}

/// `close`: whether an object listing `properties` is closed here (not for the members of
/// an `allOf`, whose properties combine: closing each would forbid the others' keys).
fn normalize_node(v: &mut Value, close: bool) {
    let Value::Object(m) = v else {
        return;
    };
    merge_object_all_of(m);
    match m.get("type").and_then(Value::as_str) {
        Some("integer") => {
            m.entry("minimum").or_insert(json!(-MAX_DIGITS_INT));
            m.entry("maximum").or_insert(json!(MAX_DIGITS_INT));
        }
        Some("number") => {
            m.entry("multipleOf").or_insert(json!(NUMBER_STEP));
        }
        _ => {}
    }
    let open_keys = [
        "additionalProperties",
        "patternProperties",
        "unevaluatedProperties",
    ];
    if m.get("properties").is_some_and(Value::is_object)
        && !open_keys.iter().any(|k| m.contains_key(*k))
    {
        // An allOf member stays open, and says so: llguidance's merge of allOf members
        // reads a missing `additionalProperties` as closed.
        m.insert("additionalProperties".into(), Value::Bool(!close));
    }
    for (k, child) in m.iter_mut() {
        match k.as_str() {
            // Maps from names to schemas.
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                if let Value::Object(map) = child {
                    map.values_mut().for_each(normalize);
                }
            }
            // Lists of schemas.
            "anyOf" | "oneOf" | "prefixItems" => {
                if let Value::Array(list) = child {
                    list.iter_mut().for_each(normalize);
                }
            }
            "allOf" => {
                if let Value::Array(list) = child {
                    list.iter_mut().for_each(|x| normalize_node(x, false));
                }
            }
            // One schema (or, for `items` in older drafts, a list of them).
            "items"
            | "additionalItems"
            | "additionalProperties"
            | "contains"
            | "not"
            | "if"
            | "then"
            | "else"
            | "propertyNames"
            | "unevaluatedProperties"
            | "unevaluatedItems" => match child {
                Value::Array(list) => list.iter_mut().for_each(normalize),
                other => normalize(other),
            },
            _ => {}
        }
    }
}

/// An `allOf` of plain object schemas (properties and required lists only) merged into
/// its parent, as llama.cpp merges them: the object then lists every member's properties
/// and, like any object listing properties, allows no others.
fn merge_object_all_of(m: &mut serde_json::Map<String, Value>) {
    const PLAIN: [&str; 5] = ["type", "properties", "required", "title", "description"];
    let Some(Value::Array(members)) = m.get("allOf") else {
        return;
    };
    let plain = |x: &Value| {
        x.as_object().is_some_and(|o| {
            o.keys().all(|k| PLAIN.contains(&k.as_str()))
                && o.get("type").is_none_or(|t| t == "object")
                && o.get("properties").is_none_or(Value::is_object)
                && o.get("required").is_none_or(Value::is_array)
        })
    };
    if members.is_empty() || !members.iter().all(plain) {
        return;
    }
    if m.get("type").is_some_and(|t| t != "object")
        || m.get("properties").is_some_and(|p| !p.is_object())
        || m.get("required").is_some_and(|r| !r.is_array())
    {
        return;
    }
    let mut props = match m.get("properties") {
        Some(Value::Object(p)) => p.clone(),
        _ => serde_json::Map::new(),
    };
    let mut required: Vec<Value> = match m.get("required") {
        Some(Value::Array(r)) => r.clone(),
        _ => Vec::new(),
    };
    for member in members {
        if let Some(Value::Object(p)) = member.get("properties") {
            for (k, schema) in p {
                if props.get(k).is_some_and(|old| old != schema) {
                    // Two members constrain one property differently: keep the allOf.
                    return;
                }
                props.insert(k.clone(), schema.clone());
            }
        }
        if let Some(Value::Array(r)) = member.get("required") {
            for k in r {
                if !required.contains(k) {
                    required.push(k.clone());
                }
            }
        }
    }
    m.remove("allOf");
    m.insert("type".into(), json!("object"));
    m.insert("properties".into(), Value::Object(props));
    m.insert("required".into(), Value::Array(required));
}

/// Compiles grammars against one model's vocabulary (build once per model: the
/// token trie over the whole vocabulary is built here).
pub struct GrammarCompiler {
    factory: ParserFactory,
    cache: Mutex<HashMap<String, (TokenParser, Option<String>)>>,
}

impl std::fmt::Debug for GrammarCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarCompiler")
            .field("vocab", &self.factory.tok_env().tok_trie().vocab_size())
            .finish_non_exhaustive()
    }
}

impl GrammarCompiler {
    /// The compiler for `tokenizer`'s vocabulary over logits rows of `n_vocab`.
    pub fn new(tokenizer: Arc<Tokenizer>, n_vocab: usize) -> Result<GrammarCompiler> {
        let env: TokEnv = Vocab::new(tokenizer, n_vocab).into_env();
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| GrammarError::Invalid {
            kind: "vocabulary",
            message: e.to_string(),
        })?;
        factory.quiet();
        // A grammar's dead end reaches clients (a 400's message): the reason, not llguidance's
        // dump of the parser state and the whole grammar.
        factory.limits_mut().verbose_errors = false;
        Ok(GrammarCompiler {
            factory,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The size of the token set masks cover.
    pub fn vocab_size(&self) -> usize {
        self.factory.tok_env().tok_trie().vocab_size()
    }

    /// Check that `grammar` compiles (the error names what is wrong) without making
    /// a constraint. `Ok(Some(warning))`: a JSON Schema compiled only leniently (see
    /// [`GrammarCompiler::compile`]).
    pub fn check(&self, grammar: &Grammar) -> Result<Option<String>> {
        self.parser(grammar).map(|(_, w)| w)
    }

    /// A fresh constraint for one generation.
    ///
    /// A JSON Schema using keywords, formats or patterns llguidance does not implement
    /// (`uniqueItems`, `if`/`then`, `not`, look-around, an unknown `format`, ...)
    /// compiles leniently, as llama.cpp's converter reads schemas: what is not
    /// implemented is not enforced, and [`Constraint::warning`] names it. A schema
    /// whose `x-guidance` sets `lenient` (`false`: strict) is compiled as it says.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint> {
        let (parser, warning) = self.parser(grammar)?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError::compile(grammar.kind(), e));
        }
        Ok(Constraint::new(matcher, self.factory.tok_env().clone()).with_warning(warning))
    }

    fn create(&self, grammar: &Grammar, top: TopLevelGrammar) -> Result<TokenParser> {
        self.factory
            .create_parser(top)
            .map_err(|e| GrammarError::compile(grammar.kind(), e.to_string()))
    }

    fn parser(&self, grammar: &Grammar) -> Result<(TokenParser, Option<String>)> {
        let key = grammar.key();
        if let Some(p) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(p);
        }
        let built = match (self.create(grammar, grammar.top_level()), grammar) {
            (Ok(p), _) => (p, None),
            (Err(e), Grammar::JsonSchema(v)) if unimplemented(&e) => {
                let Some(lenient) = lenient_schema(v) else {
                    return Err(e);
                };
                let p = self
                    .create(grammar, TopLevelGrammar::from_json_schema(lenient))
                    .map_err(|_| e.clone())?;
                (p, Some(e.to_string()))
            }
            (Err(e), _) => return Err(e),
        };
        if let Ok(mut c) = self.cache.lock() {
            if c.len() >= PARSER_CACHE {
                c.clear();
            }
            c.insert(key, built.clone());
        }
        Ok(built)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_read_as_llama_cpp_reads_them() {
        let mut v = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 0},
                "x": {"type": "number"},
                "properties": {"type": "object", "properties": {"a": {"enum": [{"type": "integer"}]}}},
                "open": {"type": "object", "properties": {}, "additionalProperties": true},
                "pat": {"type": "object", "properties": {}, "patternProperties": {"^a": {}}},
            },
            "$defs": {"d": {"type": "object", "properties": {"q": {"type": "number", "multipleOf": 0.5}}}},
            "anyOf": [{"type": "integer"}],
            "items": [{"type": "number"}],
        });
        normalize(&mut v);
        assert_eq!(v["additionalProperties"], json!(false));
        let n = &v["properties"]["n"];
        assert_eq!(
            (n["minimum"].clone(), n["maximum"].clone()),
            (json!(0), json!(MAX_DIGITS_INT))
        );
        assert_eq!(v["properties"]["x"]["multipleOf"], json!(NUMBER_STEP));
        // A property named "properties" is a schema like any other; enum values are data.
        assert_eq!(
            v["properties"]["properties"]["additionalProperties"],
            json!(false)
        );
        assert_eq!(
            v["properties"]["properties"]["properties"]["a"]["enum"],
            json!([{"type": "integer"}])
        );
        assert_eq!(v["properties"]["open"]["additionalProperties"], json!(true));
        assert!(v["properties"]["pat"].get("additionalProperties").is_none());
        assert_eq!(v["$defs"]["d"]["additionalProperties"], json!(false));
        assert_eq!(v["$defs"]["d"]["properties"]["q"]["multipleOf"], json!(0.5));
        assert_eq!(v["anyOf"][0]["maximum"], json!(MAX_DIGITS_INT));
        assert_eq!(v["items"][0]["multipleOf"], json!(NUMBER_STEP));
        // An allOf of plain objects is merged (and closed), as llama.cpp merges it.
        let mut all = json!({"allOf": [
            {"type": "object", "properties": {"a": {}}, "required": ["a"]},
            {"properties": {"b": {}}}
        ]});
        normalize(&mut all);
        assert_eq!(
            all,
            json!({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"], "additionalProperties": false})
        );
        // Other allOf members combine their properties: none is closed on its own.
        let mut all = json!({"allOf": [{"properties": {"a": {}}, "minProperties": 1}, {"properties": {"b": {}}}]});
        normalize(&mut all);
        assert_eq!(all["allOf"][0]["additionalProperties"], json!(true));
        assert_eq!(all["allOf"][1]["additionalProperties"], json!(true));
        // An object without `properties` stays open, as in llama.cpp.
        let mut any = json!({"type": "object"});
        normalize(&mut any);
        assert_eq!(any, json!({"type": "object"}));
    }

    #[test]
    fn unsupported_keywords_are_named() {
        let e = GrammarError::compile(
            "JSON Schema",
            "Unimplemented keys: [\"if\", \"then\"]".into(),
        );
        assert_eq!(
            e,
            GrammarError::Unsupported {
                keywords: vec!["if".into(), "then".into()]
            }
        );
        assert_eq!(e.to_string(), "unsupported JSON Schema keywords: if, then");
        let e = GrammarError::compile("regex", "bad".into());
        assert_eq!(e.to_string(), "invalid regex: bad");
    }
}

//! What a constraint is made from ([`Grammar`]) and the per-model compiler that turns
//! one into a [`Constraint`].
//!
//! JSON Schemas compile with llguidance's JSON compiler in compact form: the separators
//! are `", "` and `": "` and no other whitespace is allowed between tokens, so a model
//! cannot wander into endless indentation and most structure is forced (a schema can
//! still ask for something else with llguidance's `x-guidance` key). Numbers get digit
//! bounds as in llama.cpp (whose JSON-Schema grammars allow at most 16 integral and 16
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
        let compact = json!({
            "whitespace_flexible": false,
            "item_separator": ", ",
            "key_separator": ": ",
        });
        let schema = |mut v: Value| {
            bound_digits(&mut v);
            match &mut v {
                Value::Object(m) => {
                    m.entry("x-guidance").or_insert(compact.clone());
                }
                Value::Bool(true) => v = json!({ "x-guidance": compact.clone() }),
                _ => {}
            }
            TopLevelGrammar::from_json_schema(v)
        };
        match self {
            Grammar::JsonSchema(v) => schema(v.clone()),
            Grammar::JsonObject => schema(json!({"type": "object"})),
            Grammar::Regex(r) => TopLevelGrammar::from_regex(r),
            Grammar::Lark(l) => TopLevelGrammar::from_lark(l.clone()),
        }
    }
}

/// The largest magnitude llama.cpp's JSON grammars write for an integer (16 digits).
const MAX_DIGITS_INT: i64 = 9_999_999_999_999_999;

/// The finest `multipleOf` llguidance compiles (1e-11 and below exceed its digit limit).
const NUMBER_STEP: f64 = 1e-10;

/// Bound the digits of every `integer` and `number` schema that leaves them unbounded.
fn bound_digits(v: &mut Value) {
    match v {
        Value::Object(m) => {
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
            for (k, child) in m.iter_mut() {
                // Values of these keys are data, not schemas.
                if !matches!(k.as_str(), "enum" | "const" | "default" | "examples") {
                    bound_digits(child);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(bound_digits),
        _ => {}
    }
}

/// Compiles grammars against one model's vocabulary (build once per model: the
/// token trie over the whole vocabulary is built here).
pub struct GrammarCompiler {
    factory: ParserFactory,
    cache: Mutex<HashMap<String, TokenParser>>,
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
    /// a constraint.
    pub fn check(&self, grammar: &Grammar) -> Result<()> {
        self.parser(grammar).map(|_| ())
    }

    /// A fresh constraint for one generation.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint> {
        let parser = self.parser(grammar)?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError::compile(grammar.kind(), e));
        }
        Ok(Constraint::new(matcher, self.factory.tok_env().clone()))
    }

    fn parser(&self, grammar: &Grammar) -> Result<TokenParser> {
        let key = grammar.key();
        if let Some(p) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(p);
        }
        let parser = self
            .factory
            .create_parser(grammar.top_level())
            .map_err(|e| GrammarError::compile(grammar.kind(), e.to_string()))?;
        if let Ok(mut c) = self.cache.lock() {
            if c.len() >= PARSER_CACHE {
                c.clear();
            }
            c.insert(key, parser.clone());
        }
        Ok(parser)
    }
}

//! What a constraint is made from ([`Grammar`]) and the per-model compiler that turns
//! one into a [`Constraint`].
//!
//! JSON Schemas compile with llguidance's JSON compiler in compact form: the separators
//! are `", "` and `": "` and no other whitespace is allowed between tokens, so a model
//! cannot wander into endless indentation and most structure is forced (a schema can
//! still ask for something else with llguidance's `x-guidance` key). How a schema is
//! read first (repairs, llama.cpp's tighter reading, the lenient fallbacks for what
//! llguidance does not implement) is [`crate::schema`]'s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fucina_tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::TokEnv;
use llguidance::{Matcher, ParserFactory, TokenParser};
use serde_json::{json, Value};

use crate::constraint::Constraint;
use crate::error::{GrammarError, Result};
use crate::schema::{compiled_schema, lenient_schema, Lenience};
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

    /// A JSON Schema the strict compile refused (with `strict`), compiled leniently
    /// ([`crate::schema`]'s fallbacks), each reading only if the one before fails: first
    /// keeping what it can of each unrunnable pattern, then without the keywords beside
    /// every `$ref` (a reference cycle through them is refused), last with unrunnable
    /// patterns dropped whole (a loosened one can overlap a property's name and make
    /// such a cycle, or make the schema too large). The parser and the warning naming
    /// what is not enforced, or the error that remains (`strict` itself for a schema that
    /// asked to be strict).
    fn lenient(
        &self,
        grammar: &Grammar,
        schema: &Value,
        strict: GrammarError,
    ) -> Result<(TokenParser, Option<String>)> {
        let mut last = strict.clone();
        let mut tried: Vec<Value> = Vec::new();
        for (loosen_patterns, bare_refs) in [(true, false), (true, true), (false, true)] {
            let how = Lenience {
                loosen_patterns,
                bare_refs,
            };
            let Some((v, notes)) = lenient_schema(schema, how) else {
                return Err(strict);
            };
            if tried.contains(&v) {
                continue;
            }
            match self.create(grammar, TopLevelGrammar::from_json_schema(v.clone())) {
                Ok(p) => {
                    let mut what = Vec::new();
                    if matches!(strict, GrammarError::Unsupported { .. }) || notes.is_empty() {
                        what.push(strict.to_string());
                    }
                    what.extend(notes);
                    return Ok((p, Some(what.join("; "))));
                }
                Err(e) => last = e,
            }
            tried.push(v);
        }
        Err(last)
    }

    fn parser(&self, grammar: &Grammar) -> Result<(TokenParser, Option<String>)> {
        let key = grammar.key();
        if let Some(p) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(p);
        }
        let built = match (self.create(grammar, grammar.top_level()), grammar) {
            (Ok(p), _) => (p, None),
            (Err(e), Grammar::JsonSchema(v)) => self.lenient(grammar, v, e)?,
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

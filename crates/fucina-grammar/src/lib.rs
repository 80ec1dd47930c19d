//! Constrained decoding over [llguidance]: JSON Schemas, regular expressions and Lark
//! grammars become [`Constraint`]s, logit processors that mask every token the grammar
//! forbids, force the tokens it leaves no choice in, and check speculative drafts
//! (spec §13.6, §13.9.6).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # fn demo(tokenizer: Arc<fucina_tokenizer::Tokenizer>) -> fucina_grammar::Result<()> {
//! use fucina_grammar::{Grammar, GrammarCompiler};
//! let compiler = GrammarCompiler::new(tokenizer, 262_144)?; // once per model
//! let schema = serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}});
//! let constraint = compiler.compile(&Grammar::json_schema(schema)?)?; // once per generation
//! # Ok(()) }
//! ```

mod constraint;
mod error;
mod grammar;
mod schema;
mod vocab;

pub use constraint::{Constraint, ConstraintStats, StatsHandle};
pub use error::{GrammarError, Result};
pub use grammar::{Grammar, GrammarCompiler};
pub use schema::{compiled_schema, lenient_compiled_schema};
pub use vocab::Vocab;

//! The crate's one error type: why a grammar could not be built or followed.

/// A grammar that cannot be compiled, or a constraint that cannot go on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GrammarError {
    /// The grammar text or schema is malformed (the message is llguidance's, naming
    /// the offending part).
    #[error("invalid {kind}: {message}")]
    Invalid {
        /// `"JSON Schema"`, `"regex"`, `"Lark grammar"`, `"GBNF grammar"`, ...
        kind: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The schema uses JSON Schema keywords llguidance does not implement.
    #[error("unsupported JSON Schema keyword{}: {}", if .keywords.len() == 1 { "" } else { "s" }, .keywords.join(", "))]
    Unsupported {
        /// The keywords, as spelled in the schema.
        keywords: Vec<String>,
    },
    /// The constraint failed while generating (a token the grammar rejects was
    /// committed, or the parser ran out of its step budget).
    #[error("grammar constraint failed: {0}")]
    Failed(String),
}

/// `Result` with [`GrammarError`].
pub type Result<T> = std::result::Result<T, GrammarError>;

impl GrammarError {
    /// Classify one of llguidance's compile errors.
    pub(crate) fn compile(kind: &'static str, message: String) -> GrammarError {
        if let Some(rest) = message
            .find("Unimplemented keys: ")
            .map(|at| &message[at + "Unimplemented keys: ".len()..])
        {
            let list = rest.split(']').next().unwrap_or(rest);
            let keywords: Vec<String> = list
                .trim_start_matches('[')
                .split(',')
                .map(|k| k.trim().trim_matches('"').to_string())
                .filter(|k| !k.is_empty())
                .collect();
            if !keywords.is_empty() {
                return GrammarError::Unsupported { keywords };
            }
        }
        GrammarError::Invalid { kind, message }
    }
}

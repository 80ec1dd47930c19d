//! Tokenizers built from GGUF metadata, token-ID exact against llama.cpp (spec §13.5).
//!
//! - Byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with the pretokenizer chosen by
//!   `tokenizer.ggml.pre` (qwen2, qwen35, llama3, glm4, gpt2, deepseek-v3, gpt-4o and
//!   inkling families and
//!   their aliases; an unknown name is an error listing the known ones).
//! - SentencePiece (`"llama"`) with llama.cpp's score-driven merges and byte fallback.
//! - Special tokens partitioned out first with llama.cpp's priority rules,
//!   BOS/EOS policy from metadata (overridable), decoding and a [`StreamDecoder`].
//!
//! ```no_run
//! let tok = fucina_tokenizer::Tokenizer::from_gguf("model.gguf")?;
//! let ids = tok.encode("Hello, world!", true, false)?;
//! let text = tok.decode(&ids, false)?;
//! # Ok::<(), fucina_tokenizer::TokenizerError>(())
//! ```

mod bpe;
mod cache;
mod error;
mod hash;
mod pretokenize;
mod pretokenize_regex;
mod special;
mod spm;
mod stream;
mod tokenizer;
mod unicode;
#[rustfmt::skip]
mod unicode_tables;
mod vocab;

pub use error::{Result, TokenizerError};
pub use pretokenize::Pre;
pub use stream::{StreamDecoder, Utf8Stream};
pub use tokenizer::{ParallelRunner, SpecialOverrides, Tokenizer};
pub use vocab::{attr, Kind};

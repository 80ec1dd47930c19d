//! Tokenizers built from GGUF metadata, token-ID exact against llama.cpp (spec §13.5).
//!
//! - Byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with the pretokenizer chosen by
//!   `tokenizer.ggml.pre`: every name llama.cpp knows but `whitespace` (qwen2, llama3,
//!   gpt-2, deepseek-v3, gpt-4o, tekken, default, bloom, kimi-k2, ...; see [`Pre`]). A
//!   missing name is llama.cpp's default, with a warning ([`Tokenizer::warnings`]); an
//!   unknown one is an error listing the known ones.
//! - SentencePiece-style BPE (`"gemma4"`, Gemma 4): spaces as U+2581, merges on raw
//!   UTF-8, `<0xXX>` byte fallback, newline runs split off.
//! - SentencePiece (`"llama"`) with llama.cpp's score-driven merges and byte fallback.
//! - Special tokens partitioned out first with llama.cpp's priority rules,
//!   BOS/EOS policy from metadata (overridable), decoding (piece by piece, or
//!   `llama_detokenize` with its space clean-up) and a [`StreamDecoder`].
//!
//! ```no_run
//! let tok = fucina_tokenizer::Tokenizer::from_gguf("model.gguf")?;
//! let ids = tok.encode("Hello, world!", true, false)?;
//! let text = tok.decode(&ids, false)?;
//! # Ok::<(), fucina_tokenizer::TokenizerError>(())
//! ```

mod bpe;
mod cache;
mod detokenize;
mod error;
mod hash;
mod pre_config;
mod pretokenize;
mod pretokenize_custom;
mod pretokenize_ecma;
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

//! The one error type of `fucina-tokenizer`: every bad vocabulary or bad call names
//! the key, index or id at fault.

/// Errors from building a tokenizer out of GGUF metadata, or from using it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// The GGUF file itself could not be read.
    #[error(transparent)]
    Gguf(#[from] fucina_gguf::GgufError),
    /// A required metadata key is absent.
    #[error("tokenizer metadata: missing key '{key}'")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A metadata value has the wrong type or an impossible value.
    #[error("tokenizer metadata: '{key}': {message}")]
    InvalidMetadata {
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// Two per-token arrays disagree on the vocabulary size.
    #[error(
        "tokenizer metadata: '{key}' has {len} entries but the vocabulary has {expected} tokens"
    )]
    LengthMismatch {
        /// The array that disagrees with `tokenizer.ggml.tokens`.
        key: String,
        /// Its length.
        len: usize,
        /// The number of tokens.
        expected: usize,
    },
    /// A token id in the metadata (BOS, EOS, ...) is not in the vocabulary.
    #[error("tokenizer metadata: '{key}' = {id} is out of range (vocabulary size {vocab_size})")]
    IdOutOfRange {
        /// The key.
        key: String,
        /// The id found.
        id: u64,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// `tokenizer.ggml.model` names a tokenizer family this crate does not implement.
    #[error("unsupported tokenizer model '{model}' (supported: {supported})")]
    UnsupportedModel {
        /// The model string.
        model: String,
        /// The supported ones, comma separated.
        supported: String,
    },
    /// `tokenizer.ggml.pre` names a pretokenizer this crate does not implement.
    #[error("unknown pretokenizer tokenizer.ggml.pre = '{pre}' (known: {known})")]
    UnknownPretokenizer {
        /// The value found.
        pre: String,
        /// The known names, comma separated.
        known: String,
    },
    /// A vocabulary larger than token ids can address.
    #[error("tokenizer metadata: '{key}' has {len} entries, more than the supported {max}")]
    TooLarge {
        /// The key.
        key: String,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A text too long to index with 32-bit offsets.
    #[error("input of {len} bytes is too long to tokenize in one call (limit {max} bytes)")]
    InputTooLarge {
        /// The input length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A token id passed to decode is not in the vocabulary.
    #[error("token id {id} is out of range (vocabulary size {vocab_size})")]
    InvalidTokenId {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// SentencePiece byte fallback needs a token for a byte the vocabulary lacks.
    #[error("the vocabulary has no byte-fallback token for byte 0x{byte:02X} (neither <0x{byte:02X}> nor the raw byte)")]
    MissingByteToken {
        /// The byte.
        byte: u8,
    },
    /// BOS/EOS is to be added but the vocabulary defines none.
    #[error("{which} token is to be added but the vocabulary defines none")]
    MissingSpecialToken {
        /// "BOS" or "EOS".
        which: &'static str,
    },
}

/// Result alias.
pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;

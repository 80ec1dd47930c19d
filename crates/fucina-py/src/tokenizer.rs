//! Python bindings for `fucina-tokenizer`: `Tokenizer` and its `StreamDecoder`.
//!
//! Texts may be `str` or `bytes` (llama.cpp tokenizes bytes; invalid UTF-8 is handled
//! as it does). Every call that tokenizes releases the GIL; `encode_batch` also runs
//! on all cores.

use std::path::PathBuf;
use std::sync::Arc;

use fucina_model::ThreadPool;
use fucina_tokenizer::{Kind, Tokenizer, TokenizerError, Utf8Stream};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::errors::{gguf_err, gguf_error, raise, unsupported_model_error};

/// Map a tokenizer error to the Python hierarchy: bad metadata is a `GGUFError`, an
/// unimplemented tokenizer an `UnsupportedModelError`, a bad call a `ValueError`.
pub(crate) fn tok_err(e: TokenizerError) -> PyErr {
    match e {
        TokenizerError::Gguf(g) => gguf_err(g),
        TokenizerError::UnsupportedModel { .. } | TokenizerError::UnknownPretokenizer { .. } => {
            Python::attach(|py| match unsupported_model_error(py) {
                Ok(ty) => raise(ty, e.to_string()),
                Err(err) => err,
            })
        }
        TokenizerError::InvalidTokenId { .. }
        | TokenizerError::MissingByteToken { .. }
        | TokenizerError::MissingSpecialToken { .. } => crate::errors::value_err(e.to_string()),
        other => Python::attach(|py| match gguf_error(py) {
            Ok(ty) => raise(ty, other.to_string()),
            Err(err) => err,
        }),
    }
}

/// The bytes of a `str` (UTF-8) or `bytes` argument, borrowed from the object.
fn text_bytes<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes());
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    Err(crate::errors::type_err(format!(
        "expected str or bytes, got {}",
        obj.get_type().name()?
    )))
}

/// A tokenizer read from a GGUF file's metadata (byte-level BPE or SentencePiece),
/// token-ID exact against llama.cpp.
#[pyclass(module = "fucina._core", name = "Tokenizer", frozen)]
#[derive(Clone)]
pub struct PyTokenizer {
    inner: Arc<Tokenizer>,
    /// The process's shared pool `encode_batch` runs on (the model's, for a model's
    /// tokenizer), so tokenizing never oversubscribes the cores a forward uses.
    pool: Arc<ThreadPool>,
}

impl PyTokenizer {
    /// Wrap a tokenizer built elsewhere (the model's own) with the pool it batches on.
    pub(crate) fn from_arc(inner: Arc<Tokenizer>, pool: Arc<ThreadPool>) -> Self {
        Self { inner, pool }
    }

    /// The shared tokenizer.
    pub(crate) fn arc(&self) -> &Arc<Tokenizer> {
        &self.inner
    }
}

#[pymethods]
impl PyTokenizer {
    /// Read the tokenizer from `path` (only the metadata is read).
    #[staticmethod]
    fn from_gguf(
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::path)] path: PathBuf,
    ) -> PyResult<Self> {
        let tok = py.detach(|| Tokenizer::from_gguf(&path)).map_err(tok_err)?;
        let pool = ThreadPool::shared(0).map_err(crate::llm::model_err)?;
        Ok(Self {
            inner: Arc::new(tok),
            pool,
        })
    }

    /// Token ids of `text` (`str` or `bytes`). `add_special` adds BOS/EOS as the model
    /// asks; `parse_special` turns control-token text such as `<|im_start|>` into ids.
    #[pyo3(signature = (text, *, add_special = true, parse_special = false))]
    fn encode(
        &self,
        py: Python<'_>,
        text: &Bound<'_, PyAny>,
        add_special: bool,
        parse_special: bool,
    ) -> PyResult<Vec<u32>> {
        let bytes = text_bytes(text)?;
        let tok = &self.inner;
        py.detach(|| tok.encode(bytes, add_special, parse_special))
            .map_err(tok_err)
    }

    /// `encode` over many texts, in parallel on all cores.
    #[pyo3(signature = (texts, *, add_special = true, parse_special = false))]
    fn encode_batch(
        &self,
        py: Python<'_>,
        texts: Vec<Bound<'_, PyAny>>,
        add_special: bool,
        parse_special: bool,
    ) -> PyResult<Vec<Vec<u32>>> {
        let slices = texts
            .iter()
            .map(text_bytes)
            .collect::<PyResult<Vec<&[u8]>>>()?;
        let (tok, pool) = (&self.inner, &self.pool);
        py.detach(|| {
            tok.encode_batch_on(&slices, add_special, parse_special, &|n, f| pool.run(n, f))
        })
        .map_err(tok_err)
    }

    /// The text of `ids` (invalid UTF-8 replaced by U+FFFD). Control tokens (BOS,
    /// end-of-turn, ...) are rendered only when `special`.
    #[pyo3(signature = (ids, *, special = false))]
    fn decode(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::token_ids)] ids: Vec<u32>,
        special: bool,
    ) -> PyResult<String> {
        let tok = &self.inner;
        py.detach(|| tok.decode_lossy(&ids, special))
            .map_err(tok_err)
    }

    /// The raw bytes of `ids` (a token can end in the middle of a character).
    #[pyo3(signature = (ids, *, special = false))]
    fn decode_bytes<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::args::token_ids)] ids: Vec<u32>,
        special: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let tok = &self.inner;
        let out = py.detach(|| tok.decode(&ids, special)).map_err(tok_err)?;
        Ok(PyBytes::new(py, &out))
    }

    /// The bytes token `id` renders to (llama.cpp `token_to_piece`).
    #[pyo3(signature = (id, *, special = true))]
    fn token_to_piece<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::args::token_id)] id: u32,
        special: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let piece = self.inner.token_to_piece(id, special).map_err(tok_err)?;
        Ok(PyBytes::new(py, piece))
    }

    /// The id whose vocabulary text is `text`, or None.
    fn token_to_id(&self, text: &Bound<'_, PyAny>) -> PyResult<Option<u32>> {
        Ok(self.inner.token_id(text_bytes(text)?))
    }

    /// Whether `id` ends generation (EOS, end-of-turn, ...).
    fn is_eog(&self, #[pyo3(from_py_with = crate::args::token_id)] id: u32) -> bool {
        self.inner.is_eog(id)
    }

    /// A decoder for token-by-token output that only emits complete characters.
    #[pyo3(signature = (*, special = false))]
    fn stream_decoder(&self, special: bool) -> PyStreamDecoder {
        PyStreamDecoder {
            inner: self.inner.clone(),
            special,
            stream: Utf8Stream::new(),
        }
    }

    /// Number of tokens in the vocabulary.
    #[getter]
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    /// What loading the vocabulary noticed and worked around as llama.cpp does (a
    /// missing `tokenizer.ggml.pre`, read as llama.cpp's default pretokenizer).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.inner.warnings().to_vec()
    }

    /// Beginning-of-sequence id, or None.
    #[getter]
    fn bos_id(&self) -> Option<u32> {
        self.inner.bos_id()
    }

    /// End-of-sequence id, or None.
    #[getter]
    fn eos_id(&self) -> Option<u32> {
        self.inner.eos_id()
    }

    /// End-of-turn id, or None.
    #[getter]
    fn eot_id(&self) -> Option<u32> {
        self.inner.eot_id()
    }

    /// Whether `encode(add_special=True)` prepends BOS.
    #[getter]
    fn add_bos(&self) -> bool {
        self.inner.add_bos()
    }

    /// Whether `encode(add_special=True)` appends EOS.
    #[getter]
    fn add_eos(&self) -> bool {
        self.inner.add_eos()
    }

    /// `"bpe"` (byte-level BPE) or `"spm"` (SentencePiece).
    #[getter]
    fn kind(&self) -> &'static str {
        match self.inner.kind() {
            Kind::Bpe => "bpe",
            Kind::Spm => "spm",
        }
    }

    fn __len__(&self) -> usize {
        self.inner.vocab_size()
    }

    fn __repr__(&self) -> String {
        let id = |x: Option<u32>| x.map_or("None".to_string(), |v| v.to_string());
        format!(
            "Tokenizer(kind='{}', vocab_size={}, bos_id={}, eos_id={})",
            self.kind(),
            self.inner.vocab_size(),
            id(self.inner.bos_id()),
            id(self.inner.eos_id())
        )
    }
}

/// Token-by-token detokenizer: `push(id)` returns the text completed so far (an
/// incomplete UTF-8 tail is held back), `flush()` returns what is left at the end.
#[pyclass(module = "fucina._core", name = "StreamDecoder")]
pub struct PyStreamDecoder {
    inner: Arc<Tokenizer>,
    special: bool,
    stream: Utf8Stream,
}

#[pymethods]
impl PyStreamDecoder {
    /// Add one token; return the newly complete text (possibly "").
    fn push(&mut self, #[pyo3(from_py_with = crate::args::token_id)] id: u32) -> PyResult<String> {
        let piece = self
            .inner
            .token_to_piece(id, self.special)
            .map_err(tok_err)?;
        Ok(self.stream.push(piece))
    }

    /// End of output: return any held-back bytes (an incomplete tail becomes U+FFFD).
    fn flush(&mut self) -> String {
        self.stream.flush()
    }

    /// Drop any held-back bytes.
    fn reset(&mut self) {
        self.stream.reset();
    }
}

/// Add `Tokenizer` and `StreamDecoder` to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTokenizer>()?;
    m.add_class::<PyStreamDecoder>()?;
    Ok(())
}

//! [`Tokenizer`]: the public encode/decode surface over either model, with llama.cpp's
//! `llama_tokenize` / `llama_token_to_piece` semantics.

use std::path::Path;
use std::sync::Mutex;

use fucina_gguf::{GgufFile, Metadata};

use crate::bpe::{Bpe, MergeWork};
use crate::cache::{PieceCache, MAX_KEY};
use crate::error::{Result, TokenizerError};
use crate::hash::hash_bytes;
use crate::pretokenize::{self, Cps, Pre};
use crate::special::{Fragment, PartitionWork, Specials};
use crate::spm::{Spm, SpmWork};
use crate::stream::StreamDecoder;
use crate::unicode;
use crate::vocab::{attr, Kind, Vocab};

/// Longest input per call: positions are kept as 32-bit (SentencePiece symbol links as
/// signed 32-bit) integers, and U+FFFD substitution can triple invalid bytes.
const MAX_INPUT: usize = (i32::MAX / 4) as usize;

/// Changes to the special-token policy read from the metadata.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialOverrides {
    /// BOS id to use instead of `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// EOS id to use instead of `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// Whether `add_special` prepends BOS (instead of `tokenizer.ggml.add_bos_token`).
    pub add_bos: Option<bool>,
    /// Whether `add_special` appends EOS (instead of `tokenizer.ggml.add_eos_token`).
    pub add_eos: Option<bool>,
    /// SentencePiece: prefix text with a space (instead of `tokenizer.ggml.add_space_prefix`).
    pub add_space_prefix: Option<bool>,
}

enum Model {
    Bpe(Box<Bpe>),
    Spm(Box<Spm>),
}

/// Per-thread working memory, pooled inside the tokenizer.
#[derive(Default)]
struct Scratch {
    frags: Vec<Fragment>,
    part: PartitionWork,
    text: Vec<u8>,
    escaped: Vec<u8>,
    cps: Cps,
    ends: Vec<u32>,
    tmp: Vec<u32>,
    merge: MergeWork,
    spm: SpmWork,
    cache: PieceCache,
}

/// A tokenizer built from GGUF metadata: byte-level BPE or SentencePiece, token-ID
/// exact against llama.cpp. Immutable and `Sync`: share one across threads.
pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    specials: Specials,
    pool: Mutex<Vec<Scratch>>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.vocab.kind)
            .field("pretokenizer", &self.pretokenizer())
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.vocab.bos)
            .field("eos", &self.vocab.eos)
            .finish_non_exhaustive()
    }
}

/// A parallel-for supplied by the caller: `run(n, f)` calls `f(i)` for every
/// `i < n` and returns when all have returned (e.g. a model's thread pool).
pub type ParallelRunner<'a> = dyn Fn(usize, &(dyn Fn(usize) + Sync)) + 'a;

impl Tokenizer {
    /// Read the tokenizer from a GGUF file's metadata (tensor data is not touched, so a
    /// truncated file whose header is complete works).
    pub fn from_gguf(path: impl AsRef<Path>) -> Result<Self> {
        let file = GgufFile::open_header(path)?;
        Self::from_metadata(file.metadata())
    }

    /// Build from GGUF metadata (`tokenizer.ggml.*`).
    pub fn from_metadata(md: &Metadata) -> Result<Self> {
        Self::from_metadata_with(md, SpecialOverrides::default())
    }

    /// Build from GGUF metadata with the special-token policy overridden.
    pub fn from_metadata_with(md: &Metadata, ov: SpecialOverrides) -> Result<Self> {
        let (mut vocab, merges) = Vocab::from_metadata(md)?;
        let n = vocab.texts.len();
        for (which, id) in [("override bos", ov.bos), ("override eos", ov.eos)] {
            if let Some(id) = id.filter(|&id| id as usize >= n) {
                return Err(TokenizerError::IdOutOfRange {
                    key: which.into(),
                    id: id.into(),
                    vocab_size: n,
                });
            }
        }
        vocab.bos = ov.bos.or(vocab.bos);
        vocab.eos = ov.eos.or(vocab.eos);
        vocab.add_bos = ov.add_bos.unwrap_or(vocab.add_bos);
        vocab.add_eos = ov.add_eos.unwrap_or(vocab.add_eos);
        vocab.add_space_prefix = ov.add_space_prefix.unwrap_or(vocab.add_space_prefix);
        let model = match (vocab.kind, vocab.pre) {
            (Kind::Bpe, Some(cfg)) => {
                Model::Bpe(Box::new(Bpe::new(cfg, &vocab.texts, &vocab.index, merges)?))
            }
            _ => Model::Spm(Box::new(Spm::new(&vocab))),
        };
        let specials = Specials::new(&vocab);
        Ok(Self {
            vocab,
            model,
            specials,
            pool: Mutex::new(Vec::new()),
        })
    }

    /// BPE or SentencePiece.
    pub fn kind(&self) -> Kind {
        self.vocab.kind
    }

    /// The pretokenizer family (BPE only).
    pub fn pretokenizer(&self) -> Option<Pre> {
        self.vocab.pre.map(|c| c.pre)
    }

    /// Whether this is SentencePiece-style BPE (Gemma 4): spaces are written as U+2581
    /// and merges run on raw UTF-8 with `<0xXX>` byte fallback.
    pub fn spm_style_bpe(&self) -> bool {
        self.vocab.pre.is_some_and(|c| c.spm_style)
    }

    /// What llama.cpp's loader would have warned about this vocabulary (a missing
    /// `tokenizer.ggml.pre` read as the default pretokenizer, Gemma 4's add-BOS
    /// override), in load order.
    pub fn warnings(&self) -> &[String] {
        &self.vocab.warnings
    }

    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.vocab.texts.len()
    }

    /// Beginning-of-sequence id.
    pub fn bos_id(&self) -> Option<u32> {
        self.vocab.bos
    }

    /// End-of-sequence id.
    pub fn eos_id(&self) -> Option<u32> {
        self.vocab.eos
    }

    /// End-of-turn id (from metadata or recognised by text, as llama.cpp does).
    pub fn eot_id(&self) -> Option<u32> {
        self.vocab.eot
    }

    /// Whether generating `id` ends generation (EOS, EOT and llama.cpp's other EOG tokens).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.binary_search(&id).is_ok()
    }

    /// All end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.vocab.eog
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }

    /// Whether SentencePiece encoding prefixes each text fragment that starts the input
    /// or follows a special token with a space (llama.cpp's `add_space_prefix`).
    pub fn add_space_prefix(&self) -> bool {
        self.vocab.kind == Kind::Spm && self.vocab.add_space_prefix
    }

    /// The token's text as stored in the vocabulary.
    pub fn token_text(&self, id: u32) -> Option<&[u8]> {
        ((id as usize) < self.vocab_size()).then(|| self.vocab.texts.get(id))
    }

    /// The id whose vocabulary text is `text` (the last one, for duplicates).
    pub fn token_id(&self, text: &[u8]) -> Option<u32> {
        self.vocab.index.get(text)
    }

    /// The token's attribute bits (see [`attr`](crate::attr)).
    pub fn token_attr(&self, id: u32) -> Option<u16> {
        self.vocab.attrs.get(id as usize).copied()
    }

    fn check(&self, id: u32) -> Result<()> {
        if (id as usize) < self.vocab_size() {
            Ok(())
        } else {
            Err(TokenizerError::InvalidTokenId {
                id,
                vocab_size: self.vocab_size(),
            })
        }
    }

    /// The bytes `id` renders to (llama.cpp `token_to_piece`): CONTROL and UNKNOWN
    /// tokens render as their text when `special`, else as nothing.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Result<&[u8]> {
        self.check(id)?;
        let a = self.vocab.attrs[id as usize];
        if !special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
            return Ok(&[]);
        }
        Ok(self.vocab.pieces.get(id))
    }

    /// Concatenated pieces of `ids` (what llama-cpp-python's `detokenize` and
    /// llama.cpp's streaming output give; [`detokenize`](Self::detokenize) is
    /// `llama_detokenize` with its space clean-up), appended to `out`.
    pub fn decode_into(&self, ids: &[u32], special: bool, out: &mut Vec<u8>) -> Result<()> {
        for &id in ids {
            out.extend_from_slice(self.token_to_piece(id, special)?);
        }
        Ok(())
    }

    /// Concatenated pieces of `ids` as bytes (a token can end mid-character).
    pub fn decode(&self, ids: &[u32], special: bool) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.decode_into(ids, special, &mut out)?;
        Ok(out)
    }

    /// [`decode`](Self::decode) as text, invalid UTF-8 replaced by U+FFFD.
    pub fn decode_lossy(&self, ids: &[u32], special: bool) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode(ids, special)?).into_owned())
    }

    /// llama.cpp's `llama_detokenize`: with `remove_special`, a leading BOS and a
    /// trailing EOS that the vocabulary adds are dropped; CONTROL tokens render as text
    /// when `unparse_special`; with `add_space_prefix` the first piece loses one leading
    /// space; and vocabularies whose pretokenizer sets llama.cpp's `clean_spaces`
    /// (gpt-2, llama3, default, gemma4, ...) get its clean-up of spaces before
    /// punctuation and contractions.
    pub fn detokenize(
        &self,
        ids: &[u32],
        remove_special: bool,
        unparse_special: bool,
    ) -> Result<Vec<u8>> {
        let v = &self.vocab;
        let mut ids = ids;
        let mut remove_space = v.add_space_prefix;
        if remove_special && v.add_bos && v.bos.is_some() && ids.first() == v.bos.as_ref() {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && v.add_eos && v.eos.is_some() && ids.last() == v.eos.as_ref() {
            ids = &ids[..ids.len() - 1];
        }
        let mut out = Vec::new();
        for &id in ids {
            let mut piece = self.token_to_piece(id, unparse_special)?;
            if remove_space {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
                remove_space = false;
            }
            out.extend_from_slice(piece);
        }
        if v.pre.is_some_and(|c| c.clean_spaces) {
            crate::detokenize::clean_spaces(&mut out);
        }
        Ok(out)
    }

    /// A decoder for token-by-token output that only ever emits whole characters.
    pub fn stream_decoder(&self, special: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, special)
    }

    /// Encode `text` (any bytes; invalid UTF-8 is handled as llama.cpp does).
    /// `add_special` adds BOS/EOS per the vocabulary's policy; `parse_special` lets
    /// CONTROL tokens written in the text become their ids (USER_DEFINED tokens always do).
    pub fn encode(
        &self,
        text: impl AsRef<[u8]>,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        self.encode_into(text.as_ref(), add_special, parse_special, &mut out)?;
        Ok(out)
    }

    /// [`encode`](Self::encode), appending to `out`.
    pub fn encode_into(
        &self,
        text: &[u8],
        add_special: bool,
        parse_special: bool,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let mut s = self
            .pool
            .lock()
            .map(|mut p| p.pop())
            .unwrap_or(None)
            .unwrap_or_default();
        let r = self.encode_with(&mut s, text, add_special, parse_special, out);
        if let Ok(mut p) = self.pool.lock() {
            p.push(s);
        }
        r
    }

    /// Encode many texts in parallel (one worker per available core).
    pub fn encode_batch<T: AsRef<[u8]> + Sync>(
        &self,
        texts: &[T],
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<Vec<u32>>> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.encode_batch_threads(texts, add_special, parse_special, threads)
    }

    /// Encode many texts on a caller's parallel runner: `run(n, f)` must call `f(i)`
    /// once for every `i < n` (on any threads) and return when all calls have
    /// returned. Pass the model's shared thread pool so batch tokenizing takes turns
    /// with the forward on the same cores instead of oversubscribing them.
    pub fn encode_batch_on<T: AsRef<[u8]> + Sync>(
        &self,
        texts: &[T],
        add_special: bool,
        parse_special: bool,
        run: &ParallelRunner<'_>,
    ) -> Result<Vec<Vec<u32>>> {
        let slots: Vec<std::sync::OnceLock<Result<Vec<u32>>>> =
            texts.iter().map(|_| std::sync::OnceLock::new()).collect();
        run(texts.len(), &|i| {
            let _ = slots[i].set(self.encode(&texts[i], add_special, parse_special));
        });
        slots
            .into_iter()
            .enumerate()
            // A runner that skipped an index (it must not) costs a serial encode, not a
            // wrong result.
            .map(|(i, slot)| {
                slot.into_inner()
                    .unwrap_or_else(|| self.encode(&texts[i], add_special, parse_special))
            })
            .collect()
    }

    /// [`encode_batch`](Self::encode_batch) with an explicit worker count.
    pub fn encode_batch_threads<T: AsRef<[u8]> + Sync>(
        &self,
        texts: &[T],
        add_special: bool,
        parse_special: bool,
        threads: usize,
    ) -> Result<Vec<Vec<u32>>> {
        let threads = threads.clamp(1, texts.len().max(1));
        if threads == 1 {
            return texts
                .iter()
                .map(|t| self.encode(t, add_special, parse_special))
                .collect();
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let parts: Vec<Vec<(usize, Result<Vec<u32>>)>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(t) = texts.get(i) else { break };
                            done.push((i, self.encode(t, add_special, parse_special)));
                        }
                        done
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_default())
                .collect()
        });
        let mut out: Vec<Option<Result<Vec<u32>>>> = (0..texts.len()).map(|_| None).collect();
        for (i, r) in parts.into_iter().flatten() {
            out[i] = Some(r);
        }
        out.into_iter()
            .enumerate()
            .map(|(i, r)| r.unwrap_or_else(|| self.encode(&texts[i], add_special, parse_special)))
            .collect()
    }

    fn encode_with(
        &self,
        s: &mut Scratch,
        text: &[u8],
        add_special: bool,
        parse_special: bool,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        if text.len() > MAX_INPUT {
            return Err(TokenizerError::InputTooLarge {
                len: text.len(),
                max: MAX_INPUT,
            });
        }
        let v = &self.vocab;
        if add_special && v.add_bos {
            out.push(
                v.bos
                    .ok_or(TokenizerError::MissingSpecialToken { which: "BOS" })?,
            );
        }
        let mut frags = std::mem::take(&mut s.frags);
        self.specials
            .partition(text, parse_special, &mut s.part, &mut frags);
        let mut prev_special = true;
        let mut r = Ok(());
        for f in &frags {
            match *f {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(a, b) => {
                    let piece = &text[a..b];
                    r = match &self.model {
                        Model::Bpe(bpe) => {
                            self.encode_bpe(bpe, s, piece, out);
                            Ok(())
                        }
                        Model::Spm(spm) => {
                            s.text.clear();
                            if v.add_space_prefix && prev_special {
                                s.text.extend_from_slice("\u{2581}".as_bytes());
                            }
                            escape_whitespace(piece, &mut s.text);
                            spm.encode(v, &s.text, &mut s.spm, out)
                        }
                    };
                    if r.is_err() {
                        break;
                    }
                    prev_special = false;
                }
            }
        }
        s.frags = frags;
        r?;
        if add_special && v.add_eos {
            out.push(
                v.eos
                    .ok_or(TokenizerError::MissingSpecialToken { which: "EOS" })?,
            );
        }
        Ok(())
    }

    fn encode_bpe(&self, bpe: &Bpe, s: &mut Scratch, raw: &[u8], out: &mut Vec<u32>) {
        let Scratch {
            text: norm,
            escaped,
            cps,
            ends,
            tmp,
            merge,
            cache,
            ..
        } = s;
        let spm_style = bpe.config.spm_style;
        let raw: &[u8] = if spm_style {
            escaped.clear();
            escape_whitespace(raw, escaped);
            escaped
        } else {
            raw
        };
        let text: &[u8] = if std::str::from_utf8(raw).is_ok() {
            raw
        } else {
            unicode::normalize_lenient(raw, norm);
            norm
        };
        cps.load(text);
        pretokenize::split(bpe.config.pre, cps, ends, tmp);
        let mut start = 0usize;
        for &e in ends.iter() {
            let chunk = &text[cps.offs[start] as usize..cps.offs[e as usize] as usize];
            start = e as usize;
            if chunk.len() > 1 && chunk.len() <= MAX_KEY {
                let h = hash_bytes(chunk);
                if let Some(ids) = cache.get(chunk, h) {
                    out.extend_from_slice(ids);
                    continue;
                }
                let before = out.len();
                bpe.encode(chunk, merge, out);
                cache.insert(chunk, h, &out[before..]);
            } else {
                bpe.encode(chunk, merge, out);
            }
        }
    }
}

/// SentencePiece escaping: every space becomes `▁` (U+2581).
fn escape_whitespace(text: &[u8], out: &mut Vec<u8>) {
    for &b in text {
        if b == b' ' {
            out.extend_from_slice("\u{2581}".as_bytes());
        } else {
            out.push(b);
        }
    }
}

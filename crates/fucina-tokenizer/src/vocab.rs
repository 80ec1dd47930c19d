//! The vocabulary as llama.cpp's loader leaves it: token texts, attributes, scores,
//! special ids, the add-BOS/EOS policy and the rendered piece of every token.
//!
//! Besides reading `tokenizer.ggml.*`, llama.cpp's loader adjusts attributes by token
//! text (it marks end-of-turn and FIM markers CONTROL, `unused` control tokens UNUSED,
//! ...). Those adjustments decide which tokens the special-token partitioner matches,
//! so they are reproduced here in the same order.

use fucina_gguf::{Array, Metadata, Value};

use crate::error::{Result, TokenizerError};
use crate::hash::StrMap;
use crate::pre_config::{self, PreConfig};
use crate::unicode;

/// Token attribute bits (llama.cpp's `llama_token_attr`).
pub mod attr {
    /// Unknown-token marker.
    pub const UNKNOWN: u16 = 1 << 0;
    /// Unused slot.
    pub const UNUSED: u16 = 1 << 1;
    /// An ordinary token.
    pub const NORMAL: u16 = 1 << 2;
    /// A control token (BOS, end-of-turn, ...): matched in text only with `parse_special`.
    pub const CONTROL: u16 = 1 << 3;
    /// A user-defined token: always matched in text before pretokenization.
    pub const USER_DEFINED: u16 = 1 << 4;
    /// A byte-fallback token `<0xXX>`.
    pub const BYTE: u16 = 1 << 5;
    /// Strip whitespace to the left when matched.
    pub const LSTRIP: u16 = 1 << 7;
    /// Strip whitespace to the right when matched.
    pub const RSTRIP: u16 = 1 << 8;
}

/// Token ids beyond this are refused (ids travel as `u32`; merges need headroom).
const MAX_VOCAB: usize = 1 << 30;
/// Total token text beyond this is refused (offsets are `u32`).
const MAX_TEXT_BYTES: usize = 1 << 31;

/// Tokenizer family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// BPE: byte-level (`tokenizer.ggml.model = "gpt2"`), or SentencePiece-style on raw
    /// UTF-8 (`"gemma4"`, and the gemma4 / sarvam-moe pretokenizers).
    Bpe,
    /// SentencePiece (`tokenizer.ggml.model = "llama"`).
    Spm,
}

/// Token strings packed in one buffer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Texts {
    data: Vec<u8>,
    ends: Vec<u32>,
}

impl Texts {
    pub(crate) fn push(&mut self, s: &[u8]) {
        self.data.extend_from_slice(s);
        self.ends.push(self.data.len() as u32);
    }
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }
    pub(crate) fn data_len(&self) -> usize {
        self.data.len()
    }
    /// String `id`; empty for an out-of-range id (callers check ranges first).
    pub(crate) fn get(&self, id: u32) -> &[u8] {
        let i = id as usize;
        let Some(&end) = self.ends.get(i) else {
            return &[];
        };
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.data[start as usize..end as usize]
    }
}

/// Everything about the vocabulary except the merge model.
pub(crate) struct Vocab {
    pub kind: Kind,
    pub texts: Texts,
    pub attrs: Vec<u16>,
    pub scores: Vec<f32>,
    /// Text -> id, the last id winning for duplicate texts (llama.cpp's `token_to_id`).
    pub index: StrMap,
    /// Each token rendered with `special = true`.
    pub pieces: Texts,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eog: Vec<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_space_prefix: bool,
    pub pre: Option<PreConfig>,
    /// What llama.cpp's loader would log as a warning about this vocabulary.
    pub warnings: Vec<String>,
}

fn invalid(key: &str, message: impl Into<String>) -> TokenizerError {
    TokenizerError::InvalidMetadata {
        key: key.into(),
        message: message.into(),
    }
}

fn get_bool(md: &Metadata, key: &str) -> Result<Option<bool>> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(invalid(
            key,
            format!("expected a bool, found {:?}", v.value_type()),
        )),
    }
}

/// `tokenizer.ggml.*` text lists the loader matches, and what it does with them.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP: &[&str] = &["<|file_sep|>"];
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
const ALWAYS_RENDER: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

impl Vocab {
    /// Read the vocabulary from `md` with llama.cpp's defaults and adjustments.
    pub(crate) fn from_metadata(
        md: &Metadata,
    ) -> Result<(Self, Option<&fucina_gguf::StringArray>)> {
        let model =
            md.get_str("tokenizer.ggml.model")?
                .ok_or_else(|| TokenizerError::MissingKey {
                    key: "tokenizer.ggml.model".into(),
                })?;
        let kind = match model {
            "gpt2" | "gemma4" => Kind::Bpe,
            "llama" => Kind::Spm,
            other => {
                return Err(TokenizerError::UnsupportedModel {
                    model: other.into(),
                    supported: "gpt2 (byte-level BPE), gemma4 (SentencePiece-style BPE), \
                                llama (SentencePiece)"
                        .into(),
                })
            }
        };
        // llama.cpp's "gemma4" model ignores tokenizer.ggml.pre: it is always "gemma4".
        let gemma4_model = model == "gemma4";
        let pre_name = match gemma4_model {
            true => Some("gemma4"),
            false => md.get_str("tokenizer.ggml.pre")?,
        };

        let mut warnings = Vec::new();
        let (mut bos, mut eos, mut unk) = (Some(1u32), Some(2u32), Some(0u32));
        let (mut add_bos, mut add_space_prefix) = (true, true);
        let mut pre = None;
        if kind == Kind::Bpe {
            let name = pre_name.unwrap_or("");
            let cfg = if name.is_empty() {
                warnings.push(
                    "missing tokenizer.ggml.pre: using llama.cpp's 'default' pretokenizer \
                     (llama.cpp warns that generation quality will be degraded)"
                        .to_string(),
                );
                PreConfig::from_name("default")
            } else {
                PreConfig::from_name(name)
            };
            let cfg = cfg.ok_or_else(|| TokenizerError::UnknownPretokenizer {
                pre: name.into(),
                known: pre_config::known_names(),
            })?;
            (bos, eos, unk) = match gemma4_model {
                true => (None, None, None),
                false => (
                    if cfg.no_default_bos { None } else { Some(11) },
                    Some(11),
                    None,
                ),
            };
            add_bos = cfg.add_bos_default;
            add_space_prefix = false;
            pre = Some(cfg);
        }
        let add_eos = false;
        if let Some(b) = get_bool(md, "tokenizer.ggml.add_space_prefix")? {
            add_space_prefix = b;
        }

        let tokens_key = "tokenizer.ggml.tokens";
        let tokens = md
            .get_array(tokens_key)?
            .ok_or_else(|| TokenizerError::MissingKey {
                key: tokens_key.into(),
            })?
            .as_strings()
            .ok_or_else(|| invalid(tokens_key, "expected an array of strings"))?;
        let n = tokens.len();
        if n == 0 {
            return Err(invalid(tokens_key, "the vocabulary is empty"));
        }
        if n > MAX_VOCAB {
            return Err(TokenizerError::TooLarge {
                key: tokens_key.into(),
                len: n,
                max: MAX_VOCAB,
            });
        }
        // Token bytes (plus "[EMPTY_i]" stand-ins) are indexed with 32-bit offsets.
        let text_bytes = tokens.data_len().saturating_add(n.saturating_mul(20));
        if text_bytes > MAX_TEXT_BYTES {
            return Err(TokenizerError::TooLarge {
                key: format!("{tokens_key} (bytes)"),
                len: text_bytes,
                max: MAX_TEXT_BYTES,
            });
        }
        let check_len = |key: &str, len: usize| {
            if len != n {
                Err(TokenizerError::LengthMismatch {
                    key: key.into(),
                    len,
                    expected: n,
                })
            } else {
                Ok(())
            }
        };

        let scores: Vec<f32> = match md.get_array("tokenizer.ggml.scores")? {
            None => Vec::new(),
            Some(Array::F32(v)) => {
                check_len("tokenizer.ggml.scores", v.len())?;
                v.clone()
            }
            Some(Array::I32(v)) => {
                check_len("tokenizer.ggml.scores", v.len())?;
                v.iter().map(|&x| x as f32).collect()
            }
            Some(_) => {
                return Err(invalid(
                    "tokenizer.ggml.scores",
                    "expected an f32 or i32 array",
                ))
            }
        };

        let mut attrs = vec![attr::NORMAL; n];
        match md.get_array("tokenizer.ggml.token_type")? {
            None => {}
            Some(Array::I32(types)) => {
                check_len("tokenizer.ggml.token_type", types.len())?;
                for (a, &t) in attrs.iter_mut().zip(types) {
                    *a = match t {
                        1 => attr::NORMAL,
                        2 => attr::UNKNOWN,
                        3 => attr::CONTROL,
                        4 => attr::USER_DEFINED,
                        5 => attr::UNUSED,
                        6 => attr::BYTE,
                        _ => 0,
                    };
                }
            }
            Some(_) => {
                return Err(invalid(
                    "tokenizer.ggml.token_type",
                    "expected an i32 array",
                ))
            }
        }

        let mut texts = Texts::default();
        let mut index = StrMap::with_capacity(n, tokens.data_len() + 16);
        for (i, t) in tokens.iter().enumerate() {
            if t.is_empty() {
                texts.push(format!("[EMPTY_{i}]").as_bytes());
            } else {
                texts.push(t);
            }
            index.insert(texts.get(i as u32), i as u32, true);
        }

        let merges = match kind {
            Kind::Spm => None,
            Kind::Bpe => {
                let key = "tokenizer.ggml.merges";
                match md.get_array(key)? {
                    Some(arr) => Some(
                        arr.as_strings()
                            .ok_or_else(|| invalid(key, "expected an array of strings"))?,
                    ),
                    // llama.cpp lets Kimi-K2 go without merges.
                    None if pre.is_some_and(|c| c.pre == crate::Pre::KimiK2) => None,
                    None => return Err(TokenizerError::MissingKey { key: key.into() }),
                }
            }
        };

        let mut v = Self {
            kind,
            texts,
            attrs,
            scores,
            index,
            pieces: Texts::default(),
            bos: None,
            eos: None,
            eot: None,
            eog: Vec::new(),
            add_bos,
            add_eos,
            add_space_prefix,
            pre,
            warnings,
        };

        let in_range = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        let read_id = |key: &str, default: Option<u32>| -> Result<Option<u32>> {
            match md.get_u64(key)? {
                None => Ok(default),
                Some(id) if (id as usize) < n && id <= u32::MAX as u64 => Ok(Some(id as u32)),
                Some(id) => Err(TokenizerError::IdOutOfRange {
                    key: key.into(),
                    id,
                    vocab_size: n,
                }),
            }
        };
        let key = |s: &str| format!("tokenizer.ggml.{s}");
        v.bos = read_id(&key("bos_token_id"), in_range(bos))?;
        v.eos = read_id(&key("eos_token_id"), in_range(eos))?;
        let mut eot = read_id(&key("eot_token_id"), None)?;
        let mut eom = read_id(&key("eom_token_id"), None)?;
        read_id(&key("unknown_token_id"), in_range(unk))?;
        read_id(&key("seperator_token_id"), None)?;
        read_id(&key("padding_token_id"), None)?;
        read_id(&key("mask_token_id"), None)?;
        let mut fim = [
            read_id(&key("fim_pre_token_id"), None)?,
            read_id(&key("fim_suf_token_id"), None)?,
            read_id(&key("fim_mid_token_id"), None)?,
            read_id(&key("fim_pad_token_id"), None)?,
            read_id(&key("fim_rep_token_id"), None)?,
            read_id(&key("fim_sep_token_id"), None)?,
        ];
        fim[0] = read_id(&key("prefix_token_id"), fim[0])?;
        fim[1] = read_id(&key("suffix_token_id"), fim[1])?;
        fim[2] = read_id(&key("middle_token_id"), fim[2])?;
        if let Some(b) = get_bool(md, &key("add_bos_token"))? {
            v.add_bos = b;
        }
        if let Some(b) = get_bool(md, &key("add_eos_token"))? {
            v.add_eos = b;
        }
        // llama.cpp's workaround for Gemma 4 GGUFs written with add_bos = false.
        if v.pre.is_some_and(|c| c.gemma4) && !v.add_bos {
            v.add_bos = true;
            v.warnings
                .push("tokenizer.ggml.add_bos_token overridden to true for Gemma 4".to_string());
        }

        v.adjust_attrs(&mut eot, &mut eom, &mut fim);
        v.eot = eot;
        v.adjust_strip(md);
        v.render_pieces();
        Ok((v, merges))
    }

    fn canonical(&self, id: u32) -> bool {
        self.index.get(self.texts.get(id)) == Some(id)
    }

    /// llama.cpp's text-based attribute fixes, in its order (ids iterated ascending
    /// where llama.cpp walks an unordered map; that only matters if one slot has two
    /// candidate texts that are not yet CONTROL).
    fn adjust_attrs(
        &mut self,
        eot: &mut Option<u32>,
        eom: &mut Option<u32>,
        fim: &mut [Option<u32>; 6],
    ) {
        let n = self.texts.len() as u32;
        // llama.cpp walks its text->id map; the ids it can meet are the canonical ids of
        // the listed texts, and per slot the first one found wins (here: the lowest).
        let first_of =
            |v: &Self, list: &[&str]| list.iter().filter_map(|t| v.index.get(t.as_bytes())).min();
        let [p, s, m, pad, rep, sep] = fim;
        let slots: [(&mut Option<u32>, &[&str]); 8] = [
            (eot, EOT_TEXTS),
            (eom, EOM_TEXTS),
            (p, FIM_PRE),
            (s, FIM_SUF),
            (m, FIM_MID),
            (pad, FIM_PAD),
            (rep, FIM_REP),
            (sep, FIM_SEP),
        ];
        let mut fim_eog = Vec::new();
        let mut found = [None; 8];
        for (i, (slot, list)) in slots.into_iter().enumerate() {
            if slot.is_none() {
                *slot = first_of(self, list);
                if let Some(id) = *slot {
                    self.attrs[id as usize] |= attr::CONTROL;
                }
            }
            found[i] = *slot;
            if i >= 5 {
                fim_eog.extend(*slot);
            }
        }
        let (eot, eom) = (found[0], found[1]);

        for id in 0..n {
            if self.attrs[id as usize] & attr::CONTROL != 0
                && self.texts.get(id).windows(6).any(|w| w == b"unused")
                && self.canonical(id)
            {
                self.attrs[id as usize] |= attr::UNUSED;
            }
        }

        let mut eog = fim_eog;
        for t in EOG_TEXTS {
            if let Some(id) = self.index.get(t.as_bytes()) {
                eog.push(id);
                self.attrs[id as usize] |= attr::CONTROL;
            }
        }
        for t in ALWAYS_RENDER {
            if let Some(id) = self.index.get(t.as_bytes()) {
                self.attrs[id as usize] = attr::USER_DEFINED;
            }
        }
        eog.extend([self.eos, eot, eom].into_iter().flatten());
        eog.sort_unstable();
        eog.dedup();

        let texts = &self.texts;
        let find = |t: &str, eog: &[u32]| {
            eog.iter()
                .copied()
                .find(|&id| texts.get(id) == t.as_bytes())
        };
        let has = |t: &str, eog: &[u32]| find(t, eog).is_some();
        let mut to_user_defined = None;
        if let Some(end) = find("<|end|>", &eog) {
            let call = has("<|call|>", &eog) || has("<|calls|>", &eog);
            if call && (has("<|return|>", &eog) || has("<|flush|>", &eog)) {
                eog.retain(|&i| i != end);
                to_user_defined = Some(end);
            }
        }
        let mut to_normal = None;
        if let Some(s) = find("</s>", &eog) {
            if has("<|tool_response>", &eog) || has("<|plamo:eos|>", &eog) {
                eog.retain(|&i| i != s);
                to_normal = Some(s);
            }
        }
        if let Some(id) = to_user_defined {
            self.attrs[id as usize] = attr::USER_DEFINED;
        }
        if let Some(id) = to_normal {
            self.attrs[id as usize] = attr::NORMAL;
        }
        self.eog = eog;
    }

    /// The model-name driven LSTRIP/RSTRIP attributes llama.cpp sets after loading.
    fn adjust_strip(&mut self, md: &Metadata) {
        let name = md
            .get_str("general.name")
            .ok()
            .flatten()
            .unwrap_or("")
            .to_ascii_lowercase();
        let pre = md
            .get_str("tokenizer.ggml.pre")
            .ok()
            .flatten()
            .unwrap_or("");
        let arch = md
            .get_str("general.architecture")
            .ok()
            .flatten()
            .unwrap_or("");
        let set = |v: &mut Self, text: &str, bit: u16, on: bool| {
            if let Some(id) = v.index.get(text.as_bytes()) {
                let a = &mut v.attrs[id as usize];
                *a = if on { *a | bit } else { *a & !bit };
            }
        };
        if ["jina-v2-de", "jina-v2-es", "jina-v2-code"]
            .iter()
            .any(|p| pre.contains(p))
            || ["nomic-bert-moe", "jina-bert-v3"]
                .iter()
                .any(|p| arch.contains(p))
        {
            set(self, "<mask>", attr::LSTRIP, true);
        } else if name.contains("phi-3") || name.contains("phi3") {
            for a in self.attrs.iter_mut() {
                if *a & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0 {
                    *a |= attr::RSTRIP;
                }
            }
            set(self, "</s>", attr::RSTRIP, true);
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                set(self, t, attr::RSTRIP, false);
            }
        } else if name.contains("modern-bert") {
            set(self, "[MASK]", attr::LSTRIP, true);
        }
    }

    /// llama.cpp `token_to_piece(special = true)` for every token.
    fn render_pieces(&mut self) {
        let mut pieces = Texts::default();
        let mut buf = Vec::new();
        for id in 0..self.texts.len() as u32 {
            buf.clear();
            let a = self.attrs[id as usize];
            let text = self.texts.get(id);
            if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
                buf.extend_from_slice(text);
            } else if a & attr::NORMAL != 0 {
                match self.pre {
                    None => unescape_whitespace(text, &mut buf),
                    Some(c) if c.spm_style => unescape_whitespace(text, &mut buf),
                    Some(_) => unicode::llama_decode_text(text, &mut buf),
                }
            } else if a & attr::BYTE != 0 {
                buf.push(byte_of_token(text));
            }
            pieces.push(&buf);
        }
        self.pieces = pieces;
    }
}

/// `strtol(text.substr(3, 2), 16)` as llama.cpp's `token_to_byte` reads `<0xXX>`.
pub(crate) fn byte_of_token(text: &[u8]) -> u8 {
    let digits = text.get(3..text.len().min(5)).unwrap_or(&[]);
    let mut v = 0u32;
    for &d in digits {
        match (d as char).to_digit(16) {
            Some(x) => v = v * 16 + x,
            None => break,
        }
    }
    v as u8
}

/// SentencePiece's `▁` (U+2581) back to a space.
pub(crate) fn unescape_whitespace(text: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with("\u{2581}".as_bytes()) {
            out.push(b' ');
            i += 3;
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
}

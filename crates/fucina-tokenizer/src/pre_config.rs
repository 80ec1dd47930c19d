//! `tokenizer.ggml.pre` names and what llama.cpp's loader does with each: the chunking
//! family ([`Pre`]) and the flags it sets beside it (`ignore_merges`, the add-BOS
//! default, `clean_spaces`, SentencePiece-style whitespace), one row per name as in
//! `llama_vocab::impl::load` (llama-vocab.cpp).

use crate::pretokenize::Pre;

/// How a `tokenizer.ggml.pre` name configures the BPE tokenizer, as llama.cpp's loader does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PreConfig {
    pub pre: Pre,
    /// Take a chunk that is itself a token whole, without merging (llama3 family).
    pub ignore_merges: bool,
    /// The loader's default for add_bos before metadata overrides it.
    pub add_bos_default: bool,
    /// The loader disables the default BOS id (chatglm/glm4).
    pub no_default_bos: bool,
    /// llama.cpp's `clean_spaces`: `llama_detokenize` tidies spaces around punctuation.
    pub clean_spaces: bool,
    /// SentencePiece-style BPE (llama.cpp's `escape_whitespaces` without `byte_encode`):
    /// spaces become U+2581 before merging, merges run on raw UTF-8 characters, missing
    /// bytes fall back to `<0xXX>` tokens, and pieces render U+2581 as a space.
    pub spm_style: bool,
    /// llama.cpp's Gemma 4 pretokenizer type: a newline run that is a token is taken
    /// whole, and add_bos is forced on whatever the metadata says.
    pub gemma4: bool,
}

const IGNORE_MERGES: u8 = 1;
const ADD_BOS: u8 = 2;
const NO_BOS: u8 = 4;
/// `clean_spaces` is true unless the loader clears it, so the rows name the exceptions.
const NO_CLEAN: u8 = 8;
const SPM_STYLE: u8 = 16;
const GEMMA4: u8 = 32;

/// `(name, family, flags)`, in the order of llama.cpp's loader.
const NAMES: &[(&str, Pre, u8)] = &[
    ("default", Pre::Default, 0),
    ("minicpm5", Pre::Minicpm5, IGNORE_MERGES),
    ("llama3", Pre::Llama3, IGNORE_MERGES | ADD_BOS),
    ("llama-v3", Pre::Llama3, IGNORE_MERGES | ADD_BOS),
    ("llama-bpe", Pre::Llama3, IGNORE_MERGES | ADD_BOS),
    ("falcon3", Pre::Llama3, IGNORE_MERGES | ADD_BOS),
    ("falcon-h1", Pre::Llama3, IGNORE_MERGES | ADD_BOS),
    ("pixtral", Pre::Llama3, IGNORE_MERGES | ADD_BOS),
    ("midm-2.0", Pre::Llama3, IGNORE_MERGES | ADD_BOS),
    ("lfm2", Pre::Llama3, IGNORE_MERGES | ADD_BOS),
    ("jina-v5-nano", Pre::Llama3, IGNORE_MERGES | ADD_BOS),
    ("deepseek-llm", Pre::DeepseekLlm, NO_CLEAN),
    ("deepseek-coder", Pre::DeepseekCoder, NO_CLEAN),
    ("deepseek-v3", Pre::DeepseekV3, NO_CLEAN),
    ("spark2_5", Pre::Spark25, NO_CLEAN),
    ("youtu", Pre::Youtu, NO_CLEAN | IGNORE_MERGES),
    ("falcon", Pre::Falcon, 0),
    ("mpt", Pre::Gpt2, 0),
    ("starcoder", Pre::Starcoder, 0),
    ("gpt-2", Pre::Gpt2, 0),
    ("phi-2", Pre::Gpt2, 0),
    ("jina-es", Pre::Gpt2, 0),
    ("jina-de", Pre::Gpt2, 0),
    ("gigachat", Pre::Gpt2, 0),
    ("jina-v2-es", Pre::Gpt2, 0),
    ("jina-v2-de", Pre::Gpt2, 0),
    ("a.x-4.0", Pre::Gpt2, 0),
    ("mellum", Pre::Gpt2, 0),
    ("modern-bert", Pre::Gpt2, 0),
    ("jais-2", Pre::Jais2, 0),
    ("gemma4", Pre::Gemma4, SPM_STYLE | GEMMA4),
    ("granite-embed-multi-311m", Pre::Gemma4, SPM_STYLE | GEMMA4),
    ("sarvam-moe", Pre::Gemma4, SPM_STYLE | NO_CLEAN),
    ("jina-v1-en", Pre::Gpt2, 0),
    ("jina-v2-code", Pre::Gpt2, 0),
    ("roberta-bpe", Pre::Gpt2, 0),
    ("refact", Pre::Starcoder, 0),
    ("command-r", Pre::Starcoder, NO_CLEAN),
    ("qwen2", Pre::Qwen2, NO_CLEAN),
    ("deepseek-r1-qwen", Pre::Qwen2, NO_CLEAN),
    ("kormo", Pre::Qwen2, NO_CLEAN),
    ("f2llmv2", Pre::Qwen2, NO_CLEAN),
    ("qwen35", Pre::Qwen35, NO_CLEAN),
    ("stablelm2", Pre::Qwen2, 0),
    ("olmo", Pre::Gpt2, 0),
    ("dbrx", Pre::Llama3, 0),
    ("smaug-bpe", Pre::Llama3, 0),
    ("poro-chat", Pre::Bloom, NO_CLEAN),
    ("chatglm-bpe", Pre::Llama3, NO_BOS),
    ("glm4", Pre::Llama3, NO_BOS | IGNORE_MERGES),
    ("glm5", Pre::Llama3, NO_BOS | IGNORE_MERGES),
    ("viking", Pre::Viking, NO_CLEAN),
    ("jais", Pre::Gpt2, 0),
    ("tekken", Pre::Tekken, NO_CLEAN | IGNORE_MERGES | ADD_BOS),
    ("smollm", Pre::Starcoder, NO_CLEAN),
    ("codeshell", Pre::Starcoder, 0),
    ("bloom", Pre::Bloom, 0),
    ("gpt3-finnish", Pre::Bloom, 0),
    ("exaone", Pre::Starcoder, 0),
    ("exaone4", Pre::Gpt2, 0),
    ("exaone-moe", Pre::ExaoneMoe, 0),
    ("chameleon", Pre::Chameleon, ADD_BOS | NO_CLEAN),
    ("minerva-7b", Pre::Starcoder, 0),
    ("megrez", Pre::Qwen2, 0),
    ("gpt-4o", Pre::Gpt4o, NO_CLEAN),
    ("llama4", Pre::Gpt4o, NO_CLEAN),
    ("kanana2", Pre::Gpt4o, NO_CLEAN),
    ("talkie", Pre::Gpt4o, NO_CLEAN),
    (
        "granite-embed-multi-97m",
        Pre::Inkling,
        NO_CLEAN | IGNORE_MERGES,
    ),
    ("tiny_aya", Pre::TinyAya, NO_CLEAN),
    ("cohere2moe", Pre::TinyAya, NO_CLEAN),
    ("superbpe", Pre::Superbpe, NO_CLEAN),
    ("trillion", Pre::Gpt2, NO_CLEAN),
    ("granite-docling", Pre::Gpt2, NO_CLEAN),
    ("bailingmoe", Pre::Bailingmoe, NO_CLEAN),
    ("bailingmoe2", Pre::Bailingmoe, NO_CLEAN),
    ("llada-moe", Pre::Bailingmoe, NO_CLEAN),
    ("seed-coder", Pre::SeedCoder, NO_CLEAN),
    ("hunyuan", Pre::Qwen2, NO_CLEAN),
    ("hunyuan-dense", Pre::DeepseekV3, NO_CLEAN),
    ("hy_v4", Pre::DeepseekV3, NO_CLEAN),
    ("joyai-llm", Pre::DeepseekV3, NO_CLEAN),
    ("kimi-k2", Pre::KimiK2, NO_CLEAN),
    ("ufakzeka", Pre::Ufakzeka, NO_CLEAN),
    ("grok-2", Pre::Qwen2, NO_CLEAN),
    ("afmoe", Pre::Afmoe, NO_CLEAN),
    ("laguna", Pre::Laguna, NO_CLEAN),
    ("minimax-m2", Pre::Gpt4o, NO_CLEAN),
    ("solar-open", Pre::Qwen2, NO_CLEAN),
    ("mellum2", Pre::Starcoder, 0),
    // Not a llama.cpp name: the spec's o200k variant with \p{M} in both word classes
    // (llama.cpp's granite-embed-multi-97m chunking, without its ignore_merges).
    ("inkling", Pre::Inkling, NO_CLEAN),
];

impl PreConfig {
    /// The configuration for a `tokenizer.ggml.pre` value, or `None` if not implemented.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        NAMES.iter().find(|e| e.0 == name).map(|&(_, pre, f)| Self {
            pre,
            ignore_merges: f & IGNORE_MERGES != 0,
            add_bos_default: f & ADD_BOS != 0,
            no_default_bos: f & NO_BOS != 0,
            clean_spaces: f & NO_CLEAN == 0,
            spm_style: f & SPM_STYLE != 0,
            gemma4: f & GEMMA4 != 0,
        })
    }
}

/// Every `tokenizer.ggml.pre` value this crate implements, comma separated.
pub(crate) fn known_names() -> String {
    NAMES.iter().map(|e| e.0).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_table_resolves_aliases() {
        assert_eq!(
            PreConfig::from_name("llama4").map(|c| c.pre),
            Some(Pre::Gpt4o)
        );
        assert!(PreConfig::from_name("granite-embed-multi-97m")
            .is_some_and(|c| c.pre == Pre::Inkling && c.ignore_merges));
        assert_eq!(
            PreConfig::from_name("deepseek-r1-qwen").map(|c| c.pre),
            Some(Pre::Qwen2)
        );
        assert!(PreConfig::from_name("llama-bpe").is_some_and(|c| c.ignore_merges));
        assert_eq!(PreConfig::from_name("nope"), None);
        assert!(known_names().contains("qwen35"));
    }

    #[test]
    fn flags_follow_the_loader() {
        let c = |n: &str| PreConfig::from_name(n).unwrap_or_else(|| panic!("{n}"));
        assert!(c("tekken").ignore_merges && c("tekken").add_bos_default);
        assert!(!c("tekken").clean_spaces && c("default").clean_spaces);
        assert!(c("megrez").clean_spaces && !c("qwen2").clean_spaces);
        assert!(c("gemma4").spm_style && c("gemma4").gemma4 && c("gemma4").clean_spaces);
        assert!(c("sarvam-moe").spm_style && !c("sarvam-moe").gemma4);
        assert!(c("glm4").no_default_bos && c("minicpm5").ignore_merges);
        let mut names: Vec<&str> = NAMES.iter().map(|e| e.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NAMES.len(), "a name is listed twice");
    }
}

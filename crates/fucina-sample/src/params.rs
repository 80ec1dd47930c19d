//! What a caller asks of the sampler, with llama-cpp-python's defaults and the
//! domain checks that turn bad values into named errors.

use crate::SampleError;

/// The seed a default [`SamplingParams`] carries. llama-cpp-python's default
/// (`LLAMA_DEFAULT_SEED`) means "draw a random seed"; fucina is reproducible by
/// default, so it fixes one instead. Pick another seed per request for variety.
pub const DEFAULT_SEED: u64 = 1337;

/// Sampling parameters, named and defaulted as in llama-cpp-python's
/// `Llama.create_completion` (`last_n_tokens_size` is `repeat_last_n` here).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// <= 0: greedy (argmax, RNG untouched). Default 0.8.
    pub temperature: f32,
    /// <= 0: off; larger than the vocabulary: the whole vocabulary. Default 40.
    pub top_k: i32,
    /// In [0, 1]; 1: off; 0 keeps only the most probable token. Default 0.95.
    pub top_p: f32,
    /// In [0, 1]; 0: off. Default 0.05.
    pub min_p: f32,
    /// In [0, 1]; 1: off. Default 1.0.
    pub typical_p: f32,
    /// > 0; 1: off. Default 1.0.
    pub repeat_penalty: f32,
    /// Finite. Default 0.
    pub presence_penalty: f32,
    /// Finite. Default 0.
    pub frequency_penalty: f32,
    /// >= -1; -1: every counted token; 0: penalties off. Default 64.
    pub repeat_last_n: i32,
    /// Seed of the draw stream. Default [`DEFAULT_SEED`].
    pub seed: u64,
    /// `(token, bias)` added to logits; -inf bans the token; repeated ids add up.
    pub logit_bias: Vec<(u32, f32)>,
    /// 0: the filter chain; 1 or 2: llama.cpp's Mirostat (v1 or v2) in its place, as
    /// llama-cpp-python's `mirostat_mode` (top-k, typical, top-p, min-p and the
    /// temperature are then unused; temperature <= 0 is still greedy). Default 0.
    pub mirostat_mode: u8,
    /// Mirostat's target surprise (its `mu` starts at twice this). Finite. Default 5.
    pub mirostat_tau: f32,
    /// Mirostat's learning rate. Finite. Default 0.1.
    pub mirostat_eta: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repeat_last_n: 64,
            seed: DEFAULT_SEED,
            logit_bias: Vec::new(),
            mirostat_mode: 0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
        }
    }
}

fn invalid(field: &'static str, message: String) -> SampleError {
    SampleError::InvalidParam { field, message }
}

fn unit_interval(field: &'static str, v: f32) -> Result<(), SampleError> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(invalid(field, format!("must be in [0, 1], got {v}")))
    }
}

fn finite(field: &'static str, v: f32) -> Result<(), SampleError> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(invalid(field, format!("must be finite, got {v}")))
    }
}

impl SamplingParams {
    /// Check every field against its domain for a vocabulary of `n_vocab` tokens.
    /// The error names the first offending field and its value.
    pub fn validate(&self, n_vocab: usize) -> Result<(), SampleError> {
        if n_vocab == 0 {
            return Err(invalid(
                "n_vocab",
                "the vocabulary must not be empty".into(),
            ));
        }
        if n_vocab > u32::MAX as usize {
            return Err(invalid(
                "n_vocab",
                format!("{n_vocab} tokens do not fit u32 ids"),
            ));
        }
        finite("temperature", self.temperature)?;
        unit_interval("top_p", self.top_p)?;
        unit_interval("min_p", self.min_p)?;
        unit_interval("typical_p", self.typical_p)?;
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite()) {
            return Err(invalid(
                "repeat_penalty",
                format!("must be finite and > 0, got {}", self.repeat_penalty),
            ));
        }
        finite("presence_penalty", self.presence_penalty)?;
        finite("frequency_penalty", self.frequency_penalty)?;
        if self.repeat_last_n < -1 {
            return Err(invalid(
                "repeat_last_n",
                format!("must be >= -1, got {}", self.repeat_last_n),
            ));
        }
        if self.mirostat_mode > 2 {
            return Err(invalid(
                "mirostat_mode",
                format!("must be 0 (off), 1 or 2, got {}", self.mirostat_mode),
            ));
        }
        finite("mirostat_tau", self.mirostat_tau)?;
        finite("mirostat_eta", self.mirostat_eta)?;
        for &(id, bias) in &self.logit_bias {
            if id as usize >= n_vocab {
                return Err(invalid(
                    "logit_bias",
                    format!("token id {id} is outside the vocabulary of {n_vocab}"),
                ));
            }
            // +inf would turn the softmax into inf - inf; -inf is the documented ban.
            if bias.is_nan() || bias == f32::INFINITY {
                return Err(invalid(
                    "logit_bias",
                    format!("bias for token {id} must be finite or -inf, got {bias}"),
                ));
            }
        }
        Ok(())
    }

    /// Whether this request draws (false: greedy argmax).
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }
}

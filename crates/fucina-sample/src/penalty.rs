//! Logit bias and llama.cpp's repetition penalties, applied to the row in place.
//!
//! Both touch only the tokens they name (the bias list, the penalty window),
//! never the whole vocabulary.

/// Add each `(token, bias)` to its logit in list order (repeated ids add up),
/// as llama-cpp-python's logit-bias processor does: `logit + bias` in f32.
pub fn apply_bias(logits: &mut [f32], bias: &[(u32, f32)]) {
    for &(id, b) in bias {
        if let Some(l) = logits.get_mut(id as usize) {
            *l += b;
        }
    }
}

/// Penalty settings as llama.cpp's `llama_sampler_penalties` takes them.
pub struct Penalties {
    /// Multiplies non-positive logits, divides positive ones.
    pub repeat: f32,
    /// Subtracted once per occurrence.
    pub frequency: f32,
    /// Subtracted once per distinct token present.
    pub presence: f32,
}

impl Penalties {
    /// llama.cpp skips the sampler entirely for these values.
    pub fn is_off(&self) -> bool {
        self.repeat == 1.0 && self.frequency == 0.0 && self.presence == 0.0
    }

    /// Penalise every token of `window` by its number of occurrences there.
    /// `scratch` is reused across calls (sorting it groups equal tokens
    /// without a vocabulary-sized count table). Ids outside the row are
    /// ignored: llama.cpp counts them but no candidate carries them.
    pub fn apply(&self, logits: &mut [f32], window: &[u32], scratch: &mut Vec<u32>) {
        scratch.clear();
        scratch.extend_from_slice(window);
        scratch.sort_unstable();
        let mut i = 0;
        while i < scratch.len() {
            let tok = scratch[i];
            let mut j = i + 1;
            while j < scratch.len() && scratch[j] == tok {
                j += 1;
            }
            let count = (j - i) as f32;
            if let Some(l) = logits.get_mut(tok as usize) {
                if *l <= 0.0 {
                    *l *= self.repeat;
                } else {
                    *l /= self.repeat;
                }
                // llama.cpp: float(count) * freq + float(count > 0) * present, in f32.
                *l -= count * self.frequency + self.presence;
            }
            i = j;
        }
    }
}

/// The tokens llama.cpp's penalty ring buffer would hold: the last `last_n`
/// of `counted` (-1: all of them; 0: none).
pub fn window(counted: &[u32], last_n: i32) -> &[u32] {
    match last_n {
        n if n < 0 => counted,
        n => &counted[counted.len().saturating_sub(n as usize)..],
    }
}

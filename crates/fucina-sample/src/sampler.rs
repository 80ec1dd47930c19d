//! [`Sampler`]: owns parameters, RNG and buffers, runs processors → bias →
//! penalties → (greedy argmax | the llama.cpp filter chain) → one draw.

use crate::chain::Chain;
use crate::penalty::{self, Penalties};
use crate::row;
use crate::{Candidate, LogitProcessor, Rng, SampleError, SamplingParams};

/// A configured sampler for one vocabulary. `Send`; reuse it across tokens of
/// a generation (its buffers are kept, so steady-state calls do not allocate).
pub struct Sampler {
    params: SamplingParams,
    n_vocab: usize,
    rng: Rng,
    draws: u64,
    penalty_start: usize,
    chain: Chain,
    window: Vec<u32>,
    /// Mirostat's running maximum surprise (`2 · tau` at the start of a generation).
    mu: f32,
}

impl Sampler {
    /// A sampler for rows of `n_vocab` logits; fails on invalid parameters.
    pub fn new(params: SamplingParams, n_vocab: usize) -> Result<Sampler, SampleError> {
        params.validate(n_vocab)?;
        Ok(Sampler {
            rng: Rng::new(params.seed),
            mu: 2.0 * params.mirostat_tau,
            params,
            n_vocab,
            draws: 0,
            penalty_start: 0,
            chain: Chain::default(),
            window: Vec::new(),
        })
    }

    /// The parameters in force (`seed` follows [`Sampler::reseed`]).
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Count penalties only from `history[start..]`.
    ///
    /// llama-cpp-python feeds its penalty sampler only the tokens it sampled
    /// itself (it builds a fresh sampler per `generate` call and never accepts
    /// the prompt), so for parity with it pass the prompt length here. The
    /// default, 0, counts the whole history, as llama.cpp's own CLI does when
    /// it accepts the prompt into its sampler.
    pub fn set_penalty_start(&mut self, start: usize) {
        self.penalty_start = start;
    }

    /// The index set by [`Sampler::set_penalty_start`].
    pub fn penalty_start(&self) -> usize {
        self.penalty_start
    }

    /// The full pipeline on `logits` (mutated in place: processors, bias and
    /// penalties are applied to it, NaN becomes -inf and +inf becomes f32::MAX
    /// on the sampling path), then the draw. Greedy (temperature <= 0): argmax
    /// after processors, bias and penalties, RNG untouched. Otherwise exactly
    /// one RNG draw, inverse CDF over [`Sampler::candidates`]' order.
    pub fn sample(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        processors: &mut [&mut dyn LogitProcessor],
    ) -> Result<u32, SampleError> {
        if self.params.is_greedy() {
            self.prepare(logits, history, processors)?;
            return row::argmax(logits)
                .map(|i| i as u32)
                .ok_or(SampleError::AllTokensMasked);
        }
        self.run(logits, history, processors)?;
        let toks = &self.chain.toks;
        let picked = if self.params.mirostat_mode == 0 {
            let u = self.rng.next_f64();
            self.draws += 1;
            let id = self.chain.draw(u);
            toks.iter().find(|c| c.id == id).copied().unwrap_or(toks[0])
        } else if toks.len() < 2 {
            // std::discrete_distribution over one weight returns it without a draw.
            toks[0]
        } else {
            let u = self.rng.next_f64();
            self.draws += 1;
            toks[discrete(toks, u)]
        };
        self.mirostat_update(picked.p);
        Ok(picked.id)
    }

    /// Whether [`Sampler::sample`] without processors picks exactly the first largest
    /// raw logit (NaN ignored): greedy, with no logit bias and no active penalty. Such a
    /// pick needs no other logit (a verify can take it from a greedy head).
    pub fn decides_by_argmax(&self) -> bool {
        self.params.is_greedy() && self.params.logit_bias.is_empty() && !self.penalizes()
    }

    /// `Some(k)` where [`Sampler::sample`] without processors depends only on the row's
    /// `k` largest logits (`k` = the parameters' top-k): a sampled (not greedy,
    /// not Mirostat) chain whose first active stage is a top-k of at most
    /// [`Sampler::TOP_MAX`] below the vocabulary, with no logit bias and no active
    /// penalty. Such a decision needs no other logit: [`Sampler::sample_top`] makes it
    /// from those `k` (a verify or a batch can take them from the head without
    /// computing the rest).
    pub fn decides_from_top(&self) -> Option<usize> {
        let p = &self.params;
        let k = usize::try_from(p.top_k).ok()?;
        (!p.is_greedy()
            && p.mirostat_mode == 0
            && p.logit_bias.is_empty()
            && !self.penalizes()
            && (1..=Self::TOP_MAX).contains(&k)
            && k < self.n_vocab)
            .then_some(k)
    }

    /// Largest top-k [`Sampler::decides_from_top`] takes.
    pub const TOP_MAX: usize = 128;

    /// [`Sampler::sample`]'s draw (exactly one, as there) for a sampler that
    /// [`Sampler::decides_from_top`], from the row's `k` largest logits alone: `top`
    /// their ids and values, best first, strictly decreasing and finite, and every
    /// other logit of the row strictly below the last (a tie at the cut, or anything
    /// non-finite, needs the whole row). Bitwise [`Sampler::sample`]'s token on that
    /// row: its top-k keeps exactly these, in this order, and the stages after it read
    /// only them.
    pub fn sample_top(&mut self, top: &[(u32, f32)]) -> Result<u32, SampleError> {
        let k = self.decides_from_top();
        if k != Some(top.len())
            || !top.windows(2).all(|w| w[0].1 > w[1].1)
            || !top
                .iter()
                .all(|c| c.1.is_finite() && (c.0 as usize) < self.n_vocab)
        {
            return Err(SampleError::InvalidParam {
                field: "top_k",
                message: format!(
                    "sample_top takes the row's top-k ({k:?}) as strictly decreasing finite \
                     logits of ids in the vocabulary; got {} candidates",
                    top.len()
                ),
            });
        }
        self.chain.run_top(top, &self.params)?;
        let u = self.rng.next_f64();
        self.draws += 1;
        Ok(self.chain.draw(u))
    }

    /// The repetition, frequency and presence penalties of the parameters.
    fn penalties(&self) -> Penalties {
        Penalties {
            repeat: self.params.repeat_penalty,
            frequency: self.params.frequency_penalty,
            presence: self.params.presence_penalty,
        }
    }

    /// Whether the penalties change any logit (a window and a penalty that is not off).
    fn penalizes(&self) -> bool {
        self.params.repeat_last_n != 0 && !self.penalties().is_off()
    }

    /// Mirostat's update for `token` drawn elsewhere from the set the last
    /// [`Sampler::candidates`] call left (what [`Sampler::sample`] does after its own
    /// draw); false, and no update, when the token is not in that set or Mirostat is off.
    pub fn mirostat_accept(&mut self, token: u32) -> bool {
        let drawn = self.chain.toks.iter().find(|c| c.id == token).map(|c| c.p);
        match drawn {
            Some(p) if self.params.mirostat_mode != 0 && !self.params.is_greedy() => {
                self.mirostat_update(p);
                true
            }
            _ => false,
        }
    }

    /// llama.cpp's Mirostat step after a draw of probability `p`: `mu -= eta · (−log2 p − tau)`
    /// in f32 (nothing with Mirostat off).
    fn mirostat_update(&mut self, p: f32) {
        if self.params.mirostat_mode != 0 {
            let e = -p.log2() - self.params.mirostat_tau;
            self.mu -= self.params.mirostat_eta * e;
        }
    }

    /// The kept candidates and the probabilities the draw uses: after
    /// processors, bias, penalties, top-k, typical, top-p, min-p and
    /// temperature. Sorted by logit (= probability) descending; equal logits
    /// keep llama.cpp's order when its chain leaves the set sorted (any active
    /// top-k or top-p), else go by id. `logit` is the post-temperature logit.
    /// Greedy: the argmax alone with p = 1. Never touches the RNG.
    pub fn candidates(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        processors: &mut [&mut dyn LogitProcessor],
    ) -> Result<&[Candidate], SampleError> {
        if self.params.is_greedy() {
            self.prepare(logits, history, processors)?;
            let i = row::argmax(logits).ok_or(SampleError::AllTokensMasked)?;
            self.chain.toks.clear();
            self.chain.toks.push(Candidate {
                id: i as u32,
                logit: logits[i],
                p: 1.0,
            });
            return Ok(&self.chain.toks);
        }
        self.run(logits, history, processors)?;
        Ok(&self.chain.toks)
    }

    /// Draws consumed since construction or the last [`Sampler::reseed`]
    /// (one per sampled non-greedy token).
    pub fn draws(&self) -> u64 {
        self.draws
    }

    /// Restart the draw stream from `seed` (a new generation with the same
    /// sampler); resets [`Sampler::draws`] and Mirostat's `mu`.
    pub fn reseed(&mut self, seed: u64) {
        self.params.seed = seed;
        self.rng = Rng::new(seed);
        self.draws = 0;
        self.mu = 2.0 * self.params.mirostat_tau;
    }

    fn prepare(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        processors: &mut [&mut dyn LogitProcessor],
    ) -> Result<(), SampleError> {
        if logits.len() != self.n_vocab {
            return Err(SampleError::LogitsLength {
                expected: self.n_vocab,
                got: logits.len(),
            });
        }
        for p in processors.iter_mut() {
            p.process(logits, history)?;
        }
        penalty::apply_bias(logits, &self.params.logit_bias);
        if self.penalizes() {
            let pen = self.penalties();
            let counted = &history[self.penalty_start.min(history.len())..];
            pen.apply(
                logits,
                penalty::window(counted, self.params.repeat_last_n),
                &mut self.window,
            );
        }
        Ok(())
    }

    fn run(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        processors: &mut [&mut dyn LogitProcessor],
    ) -> Result<(), SampleError> {
        self.prepare(logits, history, processors)?;
        let stats = row::sanitize(logits);
        if stats.max == f32::NEG_INFINITY {
            return Err(SampleError::AllTokensMasked);
        }
        match self.params.mirostat_mode {
            0 => self.chain.run(logits, &stats, &self.params),
            mode => self.chain.mirostat(logits, mode, self.mu),
        }
    }
}

/// libstdc++'s `std::discrete_distribution` over the candidates' p (llama.cpp's
/// Mirostat draw): weights normalised by their f64 sum, their partial sums with the
/// last set to 1, and the first partial sum `>= u`.
fn discrete(cands: &[Candidate], u: f64) -> usize {
    let total: f64 = cands.iter().map(|c| f64::from(c.p)).sum();
    let mut cum = 0.0f64;
    for (i, c) in cands.iter().enumerate().take(cands.len() - 1) {
        cum += f64::from(c.p) / total;
        if cum >= u {
            return i;
        }
    }
    cands.len() - 1
}

/// Inverse CDF: the index of the first candidate whose running f64 sum of p
/// exceeds `u * total`. Strict `>` never picks a zero-probability candidate;
/// rounding that runs off the end falls back to the last candidate with p > 0.
/// `cands` is never empty (the chain refuses an empty set).
pub(crate) fn pick(cands: &[Candidate], u: f64) -> usize {
    let total: f64 = cands.iter().map(|c| c.p as f64).sum();
    let target = u * total;
    let mut cum = 0.0f64;
    for (i, c) in cands.iter().enumerate() {
        cum += c.p as f64;
        if cum > target {
            return i;
        }
    }
    cands
        .iter()
        .rposition(|c| c.p > 0.0)
        .unwrap_or(cands.len().saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_skips_zero_probability_and_covers_the_range() {
        let c = |id, p| Candidate { id, logit: 0.0, p };
        let cands = [c(5, 0.0), c(1, 0.25), c(2, 0.75), c(9, 0.0)];
        let id = |u| cands[pick(&cands, u)].id;
        assert_eq!(id(0.0), 1);
        assert_eq!(id(0.2499), 1);
        assert_eq!(id(0.25), 2);
        assert_eq!(id(0.999_999), 2);
        // Rounding past the end: the last candidate with p > 0.
        let short = [c(4, 0.5), c(6, 0.5), c(8, 0.0)];
        assert_eq!(short[pick(&short, 1.0)].id, 6);
    }
}

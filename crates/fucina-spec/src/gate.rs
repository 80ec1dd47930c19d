//! When to speculate, and how far: the options, the cost gate and the statistics of
//! the speculative decoder (spec §13.9.1).
//!
//! The gate estimates the rolling real speedup — committed tokens per plain-step
//! equivalent of verify cost, over the last `rate_window` verify steps — turns
//! speculation off when it falls below `min_speedup`, re-probes after an exponential
//! backoff (`reprobe_after` doubling up to `reprobe_max` steps) and stays on only when
//! the probe clears `min_speedup + probe_margin`. Verify cost comes from the clock:
//! each verify's time over the rolling plain-step time, with a static table (a verify
//! of m rows costs about `1 + 0.12 (m - 1)` plain steps on CPU, where decode reads the
//! weights once for every row) until a plain step has been timed. The draft budget
//! follows the recent acceptance (a draft accepted whole doubles it), capped, once a
//! verify row has been timed, at the length that commits the most tokens per unit of
//! cost: with each draft token accepted with chance `p` given the ones before it
//! (estimated from recent verifies) and a row costing `r` plain steps, the `k` that
//! maximises `(1 + p + .. + p^k) / (1 + r·k)`; where rows are dear (a 4B model on two
//! cores) drafts that keep missing after a few tokens stay short. The gate decides
//! WHEN speculation runs, never WHAT is committed.

use std::collections::VecDeque;

/// The speculative decoder's knobs (the spec's defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct SpecOptions {
    /// Most draft tokens one verify checks.
    pub max_draft: usize,
    /// Shorter drafts fall back to a plain step.
    pub min_draft: usize,
    /// Top-K candidates per verified row fed back to the sources (0: none).
    pub topk_feedback: usize,
    /// Verify steps the speedup estimate covers.
    pub rate_window: usize,
    /// Drafted tokens the window needs before the gate judges.
    pub min_window_drafted: usize,
    /// Below this estimated speedup speculation turns off.
    pub min_speedup: f64,
    /// A probe must clear `min_speedup` by this much to turn speculation back on.
    pub probe_margin: f64,
    /// Steps off before the first re-probe (doubling per failed probe).
    pub reprobe_after: usize,
    /// Most steps off between probes.
    pub reprobe_max: usize,
    /// Verify steps one probe takes.
    pub probe_steps: usize,
    /// Follow the acceptance with the draft budget.
    pub adapt_budget: bool,
    /// Apply the economics (the on/off gate, the minimum match and guessed drafts by
    /// measured row cost). Off: draft whenever a source proposes, with the shortest
    /// matches and guesses — for exercising the verify path; speculation may then cost.
    pub economics: bool,
    /// Draft with the model's own multi-token-prediction head where it has one (GLM-4.5's
    /// `nextn` block: self-speculation) instead of the text-matching sources.
    pub mtp: bool,
}

impl Default for SpecOptions {
    fn default() -> Self {
        SpecOptions {
            max_draft: 16,
            min_draft: 2,
            topk_feedback: 8,
            rate_window: 16,
            min_window_drafted: 8,
            min_speedup: 1.0,
            probe_margin: 0.10,
            reprobe_after: 128,
            reprobe_max: 1024,
            probe_steps: 4,
            adapt_budget: true,
            economics: true,
            mtp: true,
        }
    }
}

/// The cost, in plain decode steps, of verifying `rows` rows before the clock has
/// calibrated it: decode on CPU is bound by reading the weights, read once for all rows.
fn table_cost(rows: usize) -> f64 {
    1.0 + 0.12 * rows.saturating_sub(1) as f64
}

/// Above this cost per verify row (in plain steps) exact matches must be
/// [`EXPENSIVE_MIN_MATCH`] long: shorter ones (often chance repeats) lose more than they
/// win. Below it they draft from 2 tokens on: replaying the greedy answers of
/// `benches/speculative.py`'s document task at the costs measured for Gemma 3 270M
/// (~0.15 a row), drafting from matches of 2+ tokens gives 1.93x plain against 1.56x
/// from 4+.
const SHORT_MATCH_ROW_COST: f64 = 0.25;

/// Shortest exact match drafted from where verify rows are expensive.
const EXPENSIVE_MIN_MATCH: usize = 4;

/// Decode steps between timed plain steps (the verify-cost reference).
const RECALIBRATE_STEPS: usize = 64;

/// Verify steps the window needs before a running gate judges (one unlucky draft is
/// no evidence).
const MIN_JUDGED_VERIFIES: usize = 3;

/// Smoothing of the acceptance (per sample).
const EWMA: f64 = 0.2;

/// Timed samples the plain step and the verify row cost are the median of.
const TIMED_WINDOW: usize = 5;

/// The median of the last [`TIMED_WINDOW`] timings. The noise of a clock on a shared
/// machine comes in spikes (another process's time slice, a page touched for the first
/// time): a spike among the samples moves the median nowhere, where the average this
/// replaces took the first sample in whole and a fifth of each later one. Seen on a
/// 2-core host while a compiler ran beside a Gemma 3 270M reply: per-row samples from
/// 0 to 0.36 plain steps around a cost of ~0.14, on both sides of the 0.25 at which
/// short matches stop drafting ([`CostGate::min_match`]).
#[derive(Clone, Copy, Debug, Default)]
struct RecentMedian {
    samples: [f64; TIMED_WINDOW],
    len: usize,
    next: usize,
}

impl RecentMedian {
    fn push(&mut self, x: f64) {
        self.samples[self.next] = x;
        self.next = (self.next + 1) % TIMED_WINDOW;
        self.len = (self.len + 1).min(TIMED_WINDOW);
    }

    /// The median (of an even count, the mean of the middle two); `None` before a sample.
    fn get(&self) -> Option<f64> {
        let mut v = self.samples;
        let v = &mut v[..self.len];
        v.sort_by(f64::total_cmp);
        match self.len {
            0 => None,
            n if n % 2 == 1 => Some(v[n / 2]),
            n => Some(0.5 * (v[n / 2 - 1] + v[n / 2])),
        }
    }
}

/// Where the gate stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateState {
    /// Speculating.
    On,
    /// Off for this many more steps, then probing.
    Off(usize),
    /// Probing: this many verify steps left to judge.
    Probing(usize),
}

/// The cost-aware on/off switch and draft budget.
#[derive(Clone, Debug)]
pub struct CostGate {
    opts: SpecOptions,
    state: GateState,
    /// (committed, cost in plain steps, drafted) of recent verify steps.
    window: VecDeque<(usize, f64, usize)>,
    backoff: usize,
    /// Timed plain steps, the reference verify costs are judged against.
    plain_timed: RecentMedian,
    accepted_per_verify: f64,
    /// Smoothed (accepted draft tokens, verifies that rejected one) per verify: the
    /// chance a draft token is accepted, given the ones before it were, is
    /// `accepted / (accepted + rejected)` (the truncated geometric's estimate).
    accept_rate: (f64, f64),
    /// The last verify accepted its whole draft (a copy under way: no cap).
    whole: bool,
    /// Plain steps one more verify row costs, per timed verify.
    row_timed: RecentMedian,
    /// Decode steps since the last timed plain step.
    since_plain: usize,
}

impl CostGate {
    /// A gate that starts on.
    pub fn new(opts: SpecOptions) -> CostGate {
        let backoff = opts.reprobe_after.max(1);
        let start = (2 * opts.min_draft).min(opts.max_draft).max(opts.min_draft) as f64;
        CostGate {
            opts,
            state: GateState::On,
            window: VecDeque::new(),
            backoff,
            plain_timed: RecentMedian::default(),
            accepted_per_verify: (start - 2.0) / 2.0,
            accept_rate: (4.0, 1.0),
            whole: false,
            row_timed: RecentMedian::default(),
            since_plain: 0,
        }
    }

    /// The options.
    pub fn options(&self) -> &SpecOptions {
        &self.opts
    }

    /// Where the gate stands.
    pub fn state(&self) -> GateState {
        self.state
    }

    /// Called once per decode step: whether to try drafting this step. `strong` says a
    /// source has a long exact match right now: a gate that is off probes at once
    /// instead of waiting out its backoff (text is repeating).
    pub fn allows(&mut self, strong: bool) -> bool {
        // Verify costs are judged against a timed plain step: take one first, and again
        // now and then, so the estimate follows the machine (a plain step commits a token
        // too, nothing is wasted).
        if !self.opts.economics {
            return true;
        }
        self.since_plain += 1;
        if self.plain_timed.get().is_none() || self.since_plain > RECALIBRATE_STEPS {
            return false;
        }
        if strong && matches!(self.state, GateState::Off(_)) {
            self.state = GateState::Off(0);
        }
        match self.state {
            GateState::Off(0) => {
                self.state = GateState::Probing(self.opts.probe_steps.max(1));
                self.window.clear();
                true
            }
            GateState::Off(n) => {
                self.state = GateState::Off(n - 1);
                false
            }
            _ => true,
        }
    }

    /// The most draft tokens to ask for now.
    pub fn budget(&self) -> usize {
        if !self.opts.adapt_budget {
            return self.opts.max_draft;
        }
        let b = (2.0 * self.accepted_per_verify + 2.0).ceil() as usize;
        let (lo, hi) = (
            self.opts.min_draft,
            self.opts.max_draft.max(self.opts.min_draft),
        );
        let b = b.clamp(lo, hi);
        match self.row_timed.get() {
            Some(r) if !self.whole => b.min(self.best_budget(r, lo, hi)),
            _ => b,
        }
    }

    /// The draft length that commits the most tokens per plain-step equivalent of cost
    /// under the measured acceptance `p` (each token accepted with chance `p` given
    /// the ones before it) and row cost `r`: `(1 + p + .. + p^k) / (1 + r·k)`.
    fn best_budget(&self, r: f64, lo: usize, hi: usize) -> usize {
        let (a, rej) = self.accept_rate;
        let p = (a / (a + rej).max(1e-9)).clamp(0.0, 0.999);
        let r = r.max(0.01);
        let (mut best, mut best_k) = (f64::MIN, lo);
        let (mut sum, mut term) = (1.0, 1.0);
        for k in 1..=hi {
            term *= p;
            sum += term;
            let rate = sum / (1.0 + r * k as f64);
            if k >= lo && rate > best {
                (best, best_k) = (rate, k);
            }
        }
        best_k
    }

    /// Plain steps one more verify row costs: as timed once a verify has been, before
    /// that the uncalibrated table's guess.
    pub fn verify_row_cost(&self) -> f64 {
        self.row_timed.get().unwrap_or_else(|| table_cost(2) - 1.0)
    }

    /// Plain steps one more verify row costs, as measured; pessimistic until a verify is
    /// timed (guessed drafts start off, exact matches must be longer: where rows turn
    /// out cheap, both open up at the first timed verify).
    pub fn row_cost(&self) -> f64 {
        self.row_timed.get().unwrap_or(SHORT_MATCH_ROW_COST * 2.0)
    }

    /// Whether guessing drafts (token recycling, with no exact match behind them) can
    /// pay here, their first token being accepted with probability `hit_rate` (the
    /// source's record, [`crate::SpeculationIndex::guess_hit_rate`]): a guessed 2-token
    /// chain commits about `p (1 + p)` extra tokens for two verify rows, so it pays
    /// where that beats `2 · row_cost`. Guesses run only where rows are cheap and the
    /// guesses land: measured on the five tasks of `benches/speculative.py`, Gemma 3
    /// 270M's (~0.15 a row) first guessed token was accepted in 4 of 35 recycling drafts
    /// and they lost (a miss before any hit stops them here), while the Qwen3-4B-shaped
    /// model's loops accepted 9 of 11. Before a verify is timed, no guess pays.
    pub fn guesses_pay(&self, hit_rate: f64) -> bool {
        !self.opts.economics || hit_rate * (1.0 + hit_rate) > 2.0 * self.row_cost()
    }

    /// The shortest exact match worth drafting from at the measured row cost: where a
    /// verify row costs a good part of a step, short matches (often chance repeats)
    /// lose more than they win.
    pub fn min_match(&self) -> usize {
        if !self.opts.economics || self.row_cost() < SHORT_MATCH_ROW_COST {
            2
        } else {
            EXPENSIVE_MIN_MATCH
        }
    }

    /// A plain (one-row) decode step took `secs`.
    pub fn record_plain(&mut self, secs: f64) {
        self.since_plain = 0;
        self.plain_timed.push(secs);
    }

    /// A verify of `rows` rows (the carried token and `drafted` draft tokens) took
    /// `secs`, accepted `accepted` drafts and committed `committed` tokens.
    pub fn record_verify(
        &mut self,
        rows: usize,
        drafted: usize,
        accepted: usize,
        committed: usize,
        secs: f64,
    ) {
        let cost = match self.plain_timed.get() {
            Some(p) if p > 0.0 => {
                let cost = (secs / p).max(1.0);
                if rows > 1 {
                    // The prior goes at the first timed verify.
                    self.row_timed.push((cost - 1.0) / (rows - 1) as f64);
                }
                cost
            }
            _ => table_cost(rows),
        };
        if drafted > 0 {
            let (a, rej) = &mut self.accept_rate;
            *a += EWMA * (accepted as f64 - *a);
            *rej += EWMA * (f64::from(u8::from(accepted < drafted)) - *rej);
            self.whole = accepted == drafted;
        }
        if drafted > 0 && accepted == drafted {
            // A draft accepted whole says nothing about where the copy ends: the next
            // budget doubles at once (2·accepted + 2) instead of creeping up the average,
            // which took a copied file 5 verifies to reach the 16-token cap.
            self.accepted_per_verify = self.accepted_per_verify.max(accepted as f64);
        } else {
            self.accepted_per_verify += EWMA * (accepted as f64 - self.accepted_per_verify);
        }
        self.window.push_back((committed, cost, drafted));
        while self.window.len() > self.opts.rate_window.max(1) {
            self.window.pop_front();
        }
        match self.state {
            GateState::Probing(n) if n > 1 => self.state = GateState::Probing(n - 1),
            GateState::Probing(_) => {
                if self.est_speedup() >= self.opts.min_speedup + self.opts.probe_margin {
                    self.state = GateState::On;
                    self.backoff = self.opts.reprobe_after.max(1);
                } else {
                    self.backoff = (self.backoff * 2).min(self.opts.reprobe_max.max(1));
                    self.switch_off();
                }
            }
            GateState::On => {
                let drafted: usize = self.window.iter().map(|w| w.2).sum();
                let judged =
                    self.window.len() >= MIN_JUDGED_VERIFIES.min(self.opts.rate_window.max(1));
                if judged
                    && drafted >= self.opts.min_window_drafted
                    && self.est_speedup() < self.opts.min_speedup
                {
                    self.switch_off();
                }
            }
            GateState::Off(_) => {}
        }
    }

    fn switch_off(&mut self) {
        self.state = GateState::Off(self.backoff);
        self.window.clear();
    }

    /// Committed tokens per plain-step equivalent over the window (1.0 when empty).
    pub fn est_speedup(&self) -> f64 {
        let (tokens, cost) = self
            .window
            .iter()
            .fold((0.0, 0.0), |(t, c), w| (t + w.0 as f64, c + w.1));
        if cost > 0.0 {
            tokens / cost
        } else {
            1.0
        }
    }
}

/// Lifetime counts of a speculative decoder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Decode steps (plain or verify).
    pub steps: usize,
    /// Verify steps.
    pub spec_steps: usize,
    /// Plain steps taken with the gate on (no draft, or one too short).
    pub fallback_steps: usize,
    /// Plain steps taken with the gate off.
    pub disabled_steps: usize,
    /// Draft tokens verified.
    pub drafted: usize,
    /// Draft tokens accepted.
    pub accepted: usize,
    /// Verify steps that rejected a draft token.
    pub rejected_steps: usize,
    /// Bonus tokens (every draft accepted, one more from the last row).
    pub bonus: usize,
    /// Tokens committed.
    pub committed: usize,
}

impl Stats {
    /// Tokens committed per decode step.
    pub fn tokens_per_step(&self) -> f64 {
        if self.steps == 0 {
            0.0
        } else {
            self.committed as f64 / self.steps as f64
        }
    }

    /// Accepted share of verified draft tokens.
    pub fn acceptance_rate(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_turns_off_when_verifies_do_not_pay_and_reprobes_with_backoff() {
        let opts = SpecOptions {
            reprobe_after: 4,
            reprobe_max: 8,
            probe_steps: 2,
            ..SpecOptions::default()
        };
        let mut g = CostGate::new(opts);
        g.record_plain(0.010);
        for _ in 0..3 {
            assert!(g.allows(false));
            g.record_verify(5, 4, 0, 1, 0.014);
        }
        assert_eq!(
            g.state(),
            GateState::Off(4),
            "3 verifies, 12 drafted, 3 tokens for 4.2 steps of cost"
        );
        for _ in 0..4 {
            assert!(!g.allows(false));
        }
        assert!(g.allows(false), "probe");
        g.record_verify(5, 4, 0, 1, 0.014);
        g.record_verify(5, 4, 0, 1, 0.014);
        assert_eq!(
            g.state(),
            GateState::Off(8),
            "failed probe: backoff doubled"
        );
        for _ in 0..8 {
            assert!(!g.allows(false));
        }
        assert!(g.allows(false));
        g.record_verify(5, 4, 4, 5, 0.014);
        g.record_verify(5, 4, 4, 5, 0.014);
        assert_eq!(g.state(), GateState::On);
        assert!(g.est_speedup() > 3.0);
        assert!(g.budget() > 4, "high acceptance raises the budget");
        assert_eq!(g.budget(), 10, "a draft of 4 accepted whole: 2 * 4 + 2");
        for _ in 0..12 {
            g.record_verify(5, 4, 4, 5, 0.014);
        }
        assert!(
            g.guesses_pay(0.5),
            "0.1 plain steps per extra row, as timed"
        );
        assert!(!g.guesses_pay(0.15), "guesses that seldom land do not pay");
        assert_eq!(g.min_match(), 2, "short exact matches pay at 0.1 a row");
        for _ in 0..12 {
            g.record_verify(5, 4, 4, 5, 0.040);
        }
        assert!(!g.guesses_pay(0.6), "0.75 plain steps per extra row");
        assert_eq!(g.min_match(), 4);
        g.switch_off();
        assert!(g.allows(true), "a long match probes at once");
    }

    #[test]
    fn partly_accepted_drafts_get_the_length_their_cost_pays_for() {
        // Plain step 10 ms. Verifies accept 2 or 3 tokens of each draft, then miss (a
        // quasi-loop): at 0.15 plain steps a row (a 4B model on two cores) the best
        // length is short; at 0.02 (rows nearly free) it is long; a draft accepted whole
        // lifts the cap (a copy under way doubles its budget as before).
        let run = |secs_per_row: f64| {
            let mut g = CostGate::new(SpecOptions::default());
            g.record_plain(0.010);
            for i in 0..30 {
                let (drafted, accepted) = (g.budget(), 2 + i % 2);
                let accepted = accepted.min(drafted - 1);
                let rows = drafted + 1;
                g.record_verify(
                    rows,
                    drafted,
                    accepted,
                    accepted + 1,
                    0.010 + secs_per_row * drafted as f64,
                );
            }
            g
        };
        let dear = run(0.0015);
        assert!((2..=4).contains(&dear.budget()), "{}", dear.budget());
        let cheap = run(0.0002);
        assert!(cheap.budget() >= 6, "{}", cheap.budget());
        assert!(cheap.budget() > dear.budget());
        let mut g = dear;
        let b = g.budget();
        g.record_verify(b + 1, b, b, b + 1, 0.010 + 0.0015 * b as f64);
        assert_eq!(g.budget(), (2 * b + 2).min(16), "accepted whole: no cap");
    }

    #[test]
    fn the_first_timed_verify_replaces_the_pessimistic_row_cost() {
        let mut g = CostGate::new(SpecOptions::default());
        assert!(!g.guesses_pay(0.5), "no guess before a verify is timed");
        assert_eq!(
            g.min_match(),
            EXPENSIVE_MIN_MATCH,
            "rows assumed dear until timed"
        );
        g.record_plain(0.010);
        // One verify of 5 rows at 0.15 plain steps a row (Gemma 3 270M on two cores):
        // short matches draft at once, guesses that land half the time are tried.
        g.record_verify(5, 4, 4, 5, 0.016);
        assert!((g.row_cost() - 0.15).abs() < 1e-9, "{}", g.row_cost());
        assert_eq!(g.min_match(), 2);
        assert!(g.guesses_pay(0.5));
        assert!(!g.guesses_pay(0.2));
        // The estimate is the median of the recent samples (of two, their mean).
        g.record_verify(5, 4, 4, 5, 0.012);
        assert!((g.row_cost() - 0.10).abs() < 1e-9, "{}", g.row_cost());
        // A spike (a time slice lost to another process) moves it nowhere, neither does
        // a plain step that lost one.
        g.record_verify(5, 4, 4, 5, 0.016);
        g.record_verify(5, 4, 4, 5, 0.050);
        assert!((g.row_cost() - 0.15).abs() < 1e-9, "{}", g.row_cost());
        assert_eq!(g.min_match(), 2);
        g.record_plain(0.030);
        g.record_plain(0.010);
        g.record_verify(5, 4, 4, 5, 0.016);
        assert!((g.row_cost() - 0.15).abs() < 1e-9, "{}", g.row_cost());
        assert!((g.verify_row_cost() - 0.15).abs() < 1e-9);
        for _ in 0..30 {
            g.record_verify(5, 4, 4, 5, 0.040);
        }
        assert_eq!(g.min_match(), EXPENSIVE_MIN_MATCH, "dear rows, as timed");
    }

    #[test]
    fn whole_acceptance_doubles_the_budget_and_rejections_bring_it_down() {
        let mut g = CostGate::new(SpecOptions::default());
        assert_eq!(g.budget(), 4);
        g.record_verify(5, 4, 4, 5, 0.014);
        assert_eq!(g.budget(), 10);
        g.record_verify(11, 10, 10, 11, 0.02);
        assert_eq!(g.budget(), 16, "capped at max_draft");
        for _ in 0..20 {
            g.record_verify(17, 16, 1, 2, 0.03);
        }
        assert!(
            g.budget() <= 5,
            "mostly rejected drafts shrink it: {}",
            g.budget()
        );
    }
}

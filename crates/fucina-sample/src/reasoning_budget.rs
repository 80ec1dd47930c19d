//! [`ReasoningBudget`]: a cap on the tokens a thinking model spends inside its
//! reasoning block, llama.cpp's reasoning-budget sampler (`--reasoning-budget N`,
//! the server's `reasoning_budget_tokens`, Anthropic's `thinking.budget_tokens`).
//!
//! The processor watches the committed tokens for the block's opening sequence
//! (`<think>`), counts the tokens after it, and once `budget` of them passed
//! without the closing sequence (`</think>`) it forces its `forced` tokens (an
//! optional message, then the closing sequence) one by one; after the close,
//! natural or forced, it lets everything through. A prompt whose generation prompt
//! already opened the block starts counting at once.

use crate::{LogitProcessor, SampleError};

/// Where the budget stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetState {
    /// Waiting for the opening sequence.
    Idle,
    /// Inside the block with this many tokens left.
    Counting(usize),
    /// The budget ran out: the next token is `forced[i]`.
    Forcing(usize),
    /// The block is closed: every token passes.
    Done,
}

/// The reasoning-budget processor (see the module docs).
#[derive(Clone, Debug)]
pub struct ReasoningBudget {
    start: Vec<u32>,
    end: Vec<u32>,
    forced: Vec<u32>,
    budget: usize,
    state: BudgetState,
    /// The last committed tokens, enough to match either sequence.
    recent: Vec<u32>,
    keep: usize,
}

impl ReasoningBudget {
    /// A budget of `budget` tokens for blocks opened by `start` and closed by `end`,
    /// forcing `forced` (which should end with `end`) when it runs out; `open`: the
    /// prompt already opened the block.
    ///
    /// # Errors
    /// [`SampleError::InvalidParam`] when `start`, `end` or `forced` is empty.
    pub fn new(
        start: Vec<u32>,
        end: Vec<u32>,
        forced: Vec<u32>,
        budget: usize,
        open: bool,
    ) -> Result<ReasoningBudget, SampleError> {
        for (field, seq) in [
            ("reasoning_budget.start", &start),
            ("reasoning_budget.end", &end),
            ("reasoning_budget.forced", &forced),
        ] {
            if seq.is_empty() {
                return Err(SampleError::InvalidParam {
                    field,
                    message: "the token sequence is empty".into(),
                });
            }
        }
        let keep = start.len().max(end.len());
        let mut b = ReasoningBudget {
            start,
            end,
            forced,
            budget,
            state: BudgetState::Idle,
            recent: Vec::with_capacity(2 * keep),
            keep,
        };
        if open {
            b.state = b.opened();
        }
        Ok(b)
    }

    /// The current state.
    pub fn state(&self) -> BudgetState {
        self.state
    }

    fn opened(&self) -> BudgetState {
        match self.budget {
            0 => BudgetState::Forcing(0),
            n => BudgetState::Counting(n),
        }
    }

    /// The state after `token` is committed in `state` (`recent` already holds it).
    fn next(&self, state: BudgetState, token: u32, recent: &[u32]) -> BudgetState {
        match state {
            BudgetState::Idle if recent.ends_with(&self.start) => self.opened(),
            BudgetState::Counting(_) if recent.ends_with(&self.end) => BudgetState::Done,
            BudgetState::Counting(1) => BudgetState::Forcing(0),
            BudgetState::Counting(n) => BudgetState::Counting(n - 1),
            BudgetState::Forcing(i) if self.forced.get(i) == Some(&token) => {
                if i + 1 == self.forced.len() {
                    BudgetState::Done
                } else {
                    BudgetState::Forcing(i + 1)
                }
            }
            // Another token where one was forced (only a caller skipping `process`
            // commits one): the block is left as it is.
            BudgetState::Forcing(_) => BudgetState::Done,
            s => s,
        }
    }

    fn push_recent(recent: &mut Vec<u32>, keep: usize, token: u32) {
        if recent.len() >= 2 * keep {
            recent.drain(..recent.len() - keep + 1);
        }
        recent.push(token);
    }
}

impl LogitProcessor for ReasoningBudget {
    fn process(&mut self, logits: &mut [f32], _history: &[u32]) -> Result<(), SampleError> {
        if let BudgetState::Forcing(i) = self.state {
            let want = self.forced[i] as usize;
            if want >= logits.len() {
                return Err(SampleError::Constraint(format!(
                    "reasoning budget: the forced token {want} is outside the vocabulary of {}",
                    logits.len()
                )));
            }
            for (t, l) in logits.iter_mut().enumerate() {
                if t != want {
                    *l = f32::NEG_INFINITY;
                } else if !l.is_finite() {
                    // Forced whatever the other processors and the model say of it.
                    *l = 0.0;
                }
            }
        }
        Ok(())
    }

    fn commit(&mut self, token: u32) {
        Self::push_recent(&mut self.recent, self.keep, token);
        self.state = self.next(self.state, token, &self.recent);
    }

    fn reset(&mut self) {
        self.state = BudgetState::Idle;
        self.recent.clear();
    }

    fn forced_tokens(&mut self, _history: &[u32]) -> Vec<u32> {
        match self.state {
            BudgetState::Forcing(i) => self.forced[i..].to_vec(),
            _ => Vec::new(),
        }
    }

    fn valid_prefix_len(&mut self, _history: &[u32], draft: &[u32]) -> usize {
        let (mut state, mut recent) = (self.state, self.recent.clone());
        for (n, &t) in draft.iter().enumerate() {
            if let BudgetState::Forcing(i) = state {
                if self.forced[i] != t {
                    return n;
                }
            }
            Self::push_recent(&mut recent, self.keep, t);
            state = self.next(state, t, &recent);
        }
        draft.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: u32 = 10;
    const CLOSE: u32 = 11;

    fn budget(n: usize, open: bool) -> ReasoningBudget {
        ReasoningBudget::new(vec![OPEN], vec![CLOSE], vec![7, CLOSE], n, open).unwrap()
    }

    /// Commit `tokens`, each after `process` (the forced one wins when forcing).
    fn run(b: &mut ReasoningBudget, tokens: &[u32]) -> Vec<u32> {
        let mut out = Vec::new();
        for &want in tokens {
            let mut row = vec![0.0f32; 16];
            row[want as usize] = 1.0;
            b.process(&mut row, &[]).unwrap();
            let pick = (0..16u32)
                .max_by(|&x, &y| row[x as usize].total_cmp(&row[y as usize]))
                .unwrap();
            b.commit(pick);
            out.push(pick);
        }
        out
    }

    #[test]
    fn counts_after_the_opening_and_forces_the_close() {
        let mut b = budget(3, false);
        let out = run(&mut b, &[1, OPEN, 2, 3, 4, 5, 6, 1, 2]);
        assert_eq!(out, [1, OPEN, 2, 3, 4, 7, CLOSE, 1, 2]);
        assert_eq!(b.state(), BudgetState::Done);
    }

    #[test]
    fn a_natural_close_ends_the_count() {
        let mut b = budget(3, true);
        assert_eq!(run(&mut b, &[2, CLOSE, 3, 4, 5, 6]), [2, CLOSE, 3, 4, 5, 6]);
    }

    #[test]
    fn a_zero_budget_closes_at_once() {
        let mut b = budget(0, true);
        assert_eq!(b.forced_tokens(&[]), [7, CLOSE]);
        assert_eq!(run(&mut b, &[1, 2, 3]), [7, CLOSE, 3]);
    }

    #[test]
    fn multi_token_sequences_match_across_commits() {
        let mut b = ReasoningBudget::new(vec![1, 2], vec![3, 4], vec![3, 4], 2, false).unwrap();
        assert_eq!(run(&mut b, &[2, 1, 2, 5, 6, 9, 9]), [2, 1, 2, 5, 6, 3, 4]);
        assert_eq!(b.state(), BudgetState::Done);
        let mut b = ReasoningBudget::new(vec![1, 2], vec![3, 4], vec![3, 4], 5, false).unwrap();
        assert_eq!(
            run(&mut b, &[1, 2, 3, 4, 9, 9, 9, 9, 9]),
            [1, 2, 3, 4, 9, 9, 9, 9, 9]
        );
    }

    #[test]
    fn drafts_are_valid_up_to_the_first_unforced_token() {
        let mut b = budget(2, true);
        // Two free tokens, then 7 and CLOSE are forced, then anything.
        assert_eq!(b.valid_prefix_len(&[], &[1, 2, 7, CLOSE, 5]), 5);
        assert_eq!(b.valid_prefix_len(&[], &[1, 2, 3]), 2);
        assert_eq!(b.valid_prefix_len(&[], &[1, CLOSE, 3, 3]), 4);
        // Validation does not move the state.
        assert_eq!(b.state(), BudgetState::Counting(2));
    }

    #[test]
    fn empty_sequences_are_refused() {
        assert!(ReasoningBudget::new(vec![], vec![1], vec![1], 1, false).is_err());
        assert!(ReasoningBudget::new(vec![1], vec![1], vec![], 1, false).is_err());
    }
}

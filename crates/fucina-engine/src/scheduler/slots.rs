//! Which slot a new request runs on: the prefix cache's policy, as a pure function
//! of the tokens each slot holds (so it is tested without a model).
//!
//! A free slot whose tokens share the longest prefix with the prompt is adopted (the
//! request keeps that prefix and prefills the rest); ties go to the least recently
//! used slot, so recent prefixes survive longest. When another slot (busy or free)
//! holds a longer prefix by at least `min_copy` positions, its rows are copied into
//! the chosen slot first (cross-slot prefix sharing: a shared system prompt is
//! prefilled once for all clients). Slots are matched only by token equality, never
//! by a client-supplied id, so no request can reach state it did not also send.

/// The decision for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Choice {
    /// The free slot the request runs on.
    pub(crate) slot: usize,
    /// Copy this many positions from this slot into `slot` first.
    pub(crate) copy_from: Option<(usize, usize)>,
    /// Prompt positions the request will keep instead of evaluating.
    pub(crate) keep: usize,
}

/// What the policy sees of one slot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotView<'a> {
    /// Tokens the slot's sequence holds.
    pub(crate) tokens: &'a [u32],
    /// Whether a request runs on it.
    pub(crate) busy: bool,
    /// When it was last released (larger is more recent).
    pub(crate) last_used: u64,
}

/// Positions of `prompt` a sequence holding `held` can keep: their longest common
/// prefix, capped at `prompt.len() - 1` (the last prompt token is always evaluated,
/// for its logits).
pub(crate) fn reusable(held: &[u32], prompt: &[u32]) -> usize {
    let common = held.iter().zip(prompt).take_while(|(a, b)| a == b).count();
    common.min(prompt.len().saturating_sub(1))
}

/// The slot for `prompt` (`None` when every slot is busy). With `prefix_cache` off
/// every request starts from an empty slot.
pub(crate) fn choose(
    prompt: &[u32],
    slots: &[SlotView<'_>],
    prefix_cache: bool,
    min_copy: usize,
) -> Option<Choice> {
    let keep = |s: &SlotView<'_>| {
        if prefix_cache {
            reusable(s.tokens, prompt)
        } else {
            0
        }
    };
    let (slot, own) = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.busy)
        .map(|(i, s)| (i, keep(s)))
        // Longest prefix first, then least recently used.
        .max_by(|(i, a), (j, b)| {
            a.cmp(b)
                .then_with(|| slots[*j].last_used.cmp(&slots[*i].last_used))
        })?;
    let donor = slots
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != slot)
        .map(|(i, s)| (i, keep(s)))
        .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)));
    match donor {
        Some((src, n)) if n >= own + min_copy.max(1) => Some(Choice {
            slot,
            copy_from: Some((src, n)),
            keep: n,
        }),
        _ => Some(Choice {
            slot,
            copy_from: None,
            keep: own,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(tokens: &[u32], busy: bool, last_used: u64) -> SlotView<'_> {
        SlotView {
            tokens,
            busy,
            last_used,
        }
    }

    #[test]
    fn reuse_is_capped_one_short_of_the_prompt() {
        assert_eq!(reusable(&[1, 2, 3], &[1, 2, 3]), 2);
        assert_eq!(reusable(&[1, 2, 3, 4, 5], &[1, 2, 3]), 2);
        assert_eq!(reusable(&[1, 2], &[1, 2, 3]), 2);
        assert_eq!(reusable(&[1, 9], &[1, 2, 3]), 1);
        assert_eq!(reusable(&[], &[1, 2, 3]), 0);
        assert_eq!(reusable(&[7], &[7]), 0);
    }

    #[test]
    fn the_free_slot_with_the_longest_prefix_wins() {
        let p = [1, 2, 3, 4, 5];
        let slots = [
            view(&[1, 2], false, 5),
            view(&[1, 2, 3, 4], false, 1),
            view(&[9], false, 9),
        ];
        let c = choose(&p, &slots, true, 8).unwrap();
        assert_eq!((c.slot, c.keep, c.copy_from), (1, 4, None));
    }

    #[test]
    fn ties_go_to_the_least_recently_used_slot() {
        let p = [1, 2, 3];
        let slots = [
            view(&[7, 7], false, 4),
            view(&[8], false, 2),
            view(&[9], false, 3),
        ];
        assert_eq!(choose(&p, &slots, true, 8).unwrap().slot, 1);
        // Equal prefixes too: the older slot is adopted.
        let slots = [view(&[1, 5], false, 9), view(&[1, 6], false, 3)];
        let c = choose(&p, &slots, true, 8).unwrap();
        assert_eq!((c.slot, c.keep), (1, 1));
    }

    #[test]
    fn busy_slots_are_never_chosen_but_can_donate_rows() {
        let prompt: Vec<u32> = (0..40).collect();
        let long: Vec<u32> = (0..30).chain([99]).collect();
        let slots = [view(&long, true, 0), view(&[0, 1], false, 0)];
        let c = choose(&prompt, &slots, true, 8).unwrap();
        assert_eq!((c.slot, c.copy_from, c.keep), (1, Some((0, 30)), 30));
        // A gain under min_copy is not worth a copy.
        let c = choose(&prompt, &slots, true, 29).unwrap();
        assert_eq!((c.slot, c.copy_from, c.keep), (1, None, 2));
        // Every slot busy: nothing.
        let slots = [view(&long, true, 0), view(&[], true, 0)];
        assert_eq!(choose(&prompt, &slots, true, 8), None);
    }

    #[test]
    fn rows_come_from_the_slot_with_the_longest_prefix() {
        // The busy slot 0 holds the longest prefix; of the free slots the one with a
        // one-token prefix is chosen and gets slot 0's rows.
        let prompt: Vec<u32> = (0..20).collect();
        let a: Vec<u32> = (0..19).collect();
        let slots = [view(&a, true, 0), view(&[], false, 0), view(&[0], false, 1)];
        let c = choose(&prompt, &slots, true, 4).unwrap();
        assert_eq!((c.slot, c.copy_from, c.keep), (2, Some((0, 19)), 19));
    }

    #[test]
    fn without_the_prefix_cache_nothing_is_kept() {
        let p = [1, 2, 3];
        let slots = [view(&[1, 2, 3], false, 0), view(&[1, 2, 3], true, 0)];
        let c = choose(&p, &slots, false, 1).unwrap();
        assert_eq!((c.slot, c.copy_from, c.keep), (0, None, 0));
    }
}

//! The MoE router: expert probabilities from the router logits, top-k selection
//! and the selected experts' weights, as llama.cpp's `build_moe_ffn` computes
//! them (ggml's CPU numerics, op by op):
//!
//! 1. probabilities: softmax ([`softmax_row`], ggml's `soft_max`) or sigmoid;
//! 2. selection scores: the probabilities plus the `exp_probs_b` bias, where the
//!    family has one (the bias steers selection only, never the weights);
//! 3. group limit, where the family uses it: each group scored by its two best
//!    selection scores, the experts of all but the best groups masked to −∞;
//! 4. the `n_expert_used` best selection scores, best first (ggml's descending
//!    argsort; ties keep the lower expert id first);
//! 5. weights = probabilities of the selected experts, optionally divided by their
//!    sum (clamped below at the smallest normal f16, as llama.cpp does), then
//!    optionally scaled.

use super::{Gating, GroupLimit, MoeConfig};
use crate::ops::softmax::softmax_row;

/// Smallest divisor of the weight renormalisation (llama.cpp clamps the sum to the
/// smallest normal f16 to avoid a division by zero).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// Per-row buffers of [`route`] (one per thread; sized by the expert count).
#[derive(Default, Debug)]
pub struct RouteScratch {
    sel: Vec<f32>,
    order: Vec<u32>,
    groups: Vec<f32>,
}

/// Route one token: `logits` (`n_expert` router outputs) are replaced by the
/// experts' probabilities; the selected expert ids go to `ids` and their weights to
/// `weights` (both `n_expert_used` long), best first. `bias` is the selection bias.
pub fn route(
    cfg: &MoeConfig,
    logits: &mut [f32],
    bias: Option<&[f32]>,
    ids: &mut [u32],
    weights: &mut [f32],
    s: &mut RouteScratch,
) {
    let n = cfg.n_expert;
    let k = cfg.n_expert_used;
    debug_assert!(logits.len() == n && ids.len() == k && weights.len() == k);
    let probs = logits;
    match cfg.gating {
        Gating::Softmax => softmax_row(probs),
        Gating::Sigmoid => probs.iter_mut().for_each(|v| *v = sigmoid(*v)),
    }
    s.sel.clear();
    match bias {
        Some(b) => s.sel.extend(probs.iter().zip(b).map(|(p, b)| p + b)),
        None => s.sel.extend_from_slice(probs),
    }
    if let Some(g) = cfg.group_limit {
        mask_groups(&mut s.sel, g, &mut s.order, &mut s.groups);
    }
    top_k(&s.sel, k, &mut s.order);
    for ((id, w), &e) in ids.iter_mut().zip(weights.iter_mut()).zip(&s.order) {
        *id = e;
        *w = probs[e as usize];
    }
    if cfg.norm_weights {
        let sum = sum_f32(weights).max(MIN_WEIGHT_SUM);
        weights.iter_mut().for_each(|w| *w /= sum);
    }
    if let Some(c) = cfg.weights_scale {
        weights.iter_mut().for_each(|w| *w *= c);
    }
}

/// ggml's `ggml_vec_sigmoid_f32`: `1 / (1 + e^-x)` with libm's `expf`.
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// ggml's `ggml_vec_sum_f32`: an f64 running sum, rounded once.
fn sum_f32(v: &[f32]) -> f32 {
    v.iter().map(|&x| f64::from(x)).sum::<f64>() as f32
}

/// The `k` indices of the largest `scores`, largest first (ties: lower index first),
/// into `order` (left `k` long).
fn top_k(scores: &[f32], k: usize, order: &mut Vec<u32>) {
    order.clear();
    order.extend(0..scores.len() as u32);
    let cmp = |a: &u32, b: &u32| {
        let (x, y) = (scores[*a as usize], scores[*b as usize]);
        y.total_cmp(&x).then(a.cmp(b))
    };
    if k < order.len() {
        order.select_nth_unstable_by(k, cmp);
        order.truncate(k);
    }
    order.sort_unstable_by(cmp);
}

/// Keep only the experts of the `n_groups_used` best groups (a group's score: the sum
/// of its two best scores, in f32 as ggml's `sum_rows` rounds it); the others become
/// −∞ so they are never selected.
fn mask_groups(sel: &mut [f32], g: GroupLimit, order: &mut Vec<u32>, scores: &mut Vec<f32>) {
    let per = sel.len() / g.n_groups;
    scores.clear();
    for grp in sel.chunks_exact(per) {
        top_k(grp, 2, order);
        scores.push(sum_f32(&[grp[order[0] as usize], grp[order[1] as usize]]));
    }
    top_k(scores, g.n_groups_used, order);
    for (gi, grp) in sel.chunks_exact_mut(per).enumerate() {
        if !order.contains(&(gi as u32)) {
            grp.fill(f32::NEG_INFINITY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(n: usize, k: usize) -> MoeConfig {
        MoeConfig {
            n_expert: n,
            n_expert_used: k,
            n_ff_exp: 8,
            gating: Gating::Softmax,
            norm_weights: false,
            weights_scale: None,
            group_limit: None,
            shared: None,
        }
    }

    fn logits(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 + 0.37) * (seed as f32 * 1.618 + 0.7)).sin() * 3.0)
            .collect()
    }

    /// The reference: f64 probabilities, full sort.
    fn reference(c: &MoeConfig, l: &[f32], bias: Option<&[f32]>) -> (Vec<u32>, Vec<f64>) {
        let p: Vec<f64> = match c.gating {
            Gating::Softmax => {
                let m = l.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f64> = l.iter().map(|&x| f64::from(x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                e.iter().map(|v| v / z).collect()
            }
            Gating::Sigmoid => l
                .iter()
                .map(|&x| 1.0 / (1.0 + (-f64::from(x)).exp()))
                .collect(),
        };
        let sel: Vec<f64> = match bias {
            Some(b) => p.iter().zip(b).map(|(p, b)| p + f64::from(*b)).collect(),
            None => p.clone(),
        };
        let mut allowed = vec![true; l.len()];
        if let Some(g) = c.group_limit {
            let per = l.len() / g.n_groups;
            let mut gs: Vec<(f64, usize)> = (0..g.n_groups)
                .map(|gi| {
                    let mut v: Vec<f64> = sel[gi * per..(gi + 1) * per].to_vec();
                    v.sort_by(|a, b| b.total_cmp(a));
                    (v[0] + v[1], gi)
                })
                .collect();
            gs.sort_by(|a, b| b.0.total_cmp(&a.0));
            let keep: Vec<usize> = gs[..g.n_groups_used].iter().map(|x| x.1).collect();
            for (i, a) in allowed.iter_mut().enumerate() {
                *a = keep.contains(&(i / per));
            }
        }
        let mut idx: Vec<usize> = (0..l.len()).filter(|&i| allowed[i]).collect();
        idx.sort_by(|&a, &b| sel[b].total_cmp(&sel[a]));
        idx.truncate(c.n_expert_used);
        let mut w: Vec<f64> = idx.iter().map(|&i| p[i]).collect();
        if c.norm_weights {
            let s: f64 = w.iter().sum();
            w.iter_mut().for_each(|x| *x /= s);
        }
        if let Some(s) = c.weights_scale {
            w.iter_mut().for_each(|x| *x *= f64::from(s));
        }
        (idx.into_iter().map(|i| i as u32).collect(), w)
    }

    fn check(c: &MoeConfig, bias: Option<&[f32]>) {
        let mut s = RouteScratch::default();
        for seed in 0..40 {
            let l = logits(c.n_expert, seed);
            let (want_ids, want_w) = reference(c, &l, bias);
            let mut probs = l.clone();
            let mut ids = vec![0u32; c.n_expert_used];
            let mut w = vec![0f32; c.n_expert_used];
            route(c, &mut probs, bias, &mut ids, &mut w, &mut s);
            assert_eq!(ids, want_ids, "{c:?} seed {seed}");
            for (a, b) in w.iter().zip(&want_w) {
                assert!(
                    (f64::from(*a) - b).abs() <= 1e-6 * b.abs().max(1e-3),
                    "{a} vs {b}"
                );
            }
        }
    }

    #[test]
    fn softmax_top_k_matches_reference() {
        for (n, k) in [(8, 2), (20, 2), (64, 8), (128, 8), (3, 3)] {
            check(&cfg(n, k), None);
            check(
                &MoeConfig {
                    norm_weights: true,
                    ..cfg(n, k)
                },
                None,
            );
        }
    }

    #[test]
    fn sigmoid_bias_scale_and_groups_match_reference() {
        let n = 64;
        let bias: Vec<f32> = (0..n).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.05).collect();
        let sig = MoeConfig {
            gating: Gating::Sigmoid,
            norm_weights: true,
            weights_scale: Some(2.5),
            ..cfg(n, 6)
        };
        check(&sig, Some(&bias));
        check(
            &MoeConfig {
                group_limit: Some(GroupLimit {
                    n_groups: 8,
                    n_groups_used: 3,
                }),
                ..sig
            },
            Some(&bias),
        );
    }

    #[test]
    fn bias_steers_selection_not_weights() {
        let c = MoeConfig {
            gating: Gating::Sigmoid,
            ..cfg(4, 1)
        };
        let mut bias = vec![0f32; 4];
        bias[3] = 10.0;
        let mut probs = vec![5.0, 1.0, 0.0, -5.0];
        let (mut ids, mut w) = ([0u32], [0f32]);
        route(
            &c,
            &mut probs,
            Some(&bias),
            &mut ids,
            &mut w,
            &mut RouteScratch::default(),
        );
        assert_eq!(ids, [3]);
        assert_eq!(w[0], sigmoid(-5.0));
    }

    #[test]
    fn ties_keep_the_lower_expert_first() {
        let c = cfg(6, 3);
        let mut probs = vec![1.0, 2.0, 2.0, 0.0, 2.0, 1.0];
        let (mut ids, mut w) = ([0u32; 3], [0f32; 3]);
        route(
            &c,
            &mut probs,
            None,
            &mut ids,
            &mut w,
            &mut RouteScratch::default(),
        );
        assert_eq!(ids, [1, 2, 4]);
    }
}

//! Property tests: arbitrary rows and parameters never panic, and whatever
//! comes back is a valid token or a named error.

use fucina_sample::{Sampler, SamplingParams};
use proptest::prelude::*;

fn logit() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => -30.0f32..30.0,
        1 => Just(f32::NAN),
        1 => Just(f32::NEG_INFINITY),
        1 => Just(f32::INFINITY),
        1 => prop::num::f32::ANY,
        1 => (0i32..4).prop_map(|v| v as f32),
        1 => prop_oneof![Just(1e9f32), Just(-1e9f32), Just(f32::MAX), Just(-f32::MAX)],
    ]
}

fn unit() -> impl Strategy<Value = f32> {
    prop_oneof![
        0.0f32..=1.0,
        Just(0.0f32),
        Just(1.0f32),
        prop::num::f32::ANY
    ]
}

fn params(n: usize) -> impl Strategy<Value = SamplingParams> {
    (
        prop_oneof![
            -1.0f32..5.0,
            Just(0.0f32),
            Just(1e-3f32),
            Just(100.0f32),
            prop::num::f32::ANY
        ],
        prop_oneof![-5i32..300, Just(i32::MAX), Just(i32::MIN)],
        (unit(), unit(), unit()),
        (
            prop_oneof![0.1f32..3.0, Just(1.0f32), prop::num::f32::ANY],
            -2.0f32..2.0,
            -2.0f32..2.0,
        ),
        -3i32..80,
        any::<u64>(),
        prop::collection::vec(
            (
                0u32..(n as u32 + 2),
                prop_oneof![-5.0f32..5.0, Just(f32::NEG_INFINITY)],
            ),
            0..6,
        ),
        (
            prop_oneof![2 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => 0u8..=255],
            prop_oneof![0.0f32..12.0, prop::num::f32::ANY],
            prop_oneof![0.0f32..1.0, prop::num::f32::ANY],
        ),
    )
        .prop_map(
            |(
                temperature,
                top_k,
                (top_p, min_p, typical_p),
                (repeat_penalty, presence_penalty, frequency_penalty),
                repeat_last_n,
                seed,
                logit_bias,
                (mirostat_mode, mirostat_tau, mirostat_eta),
            )| {
                SamplingParams {
                    temperature,
                    top_k,
                    top_p,
                    min_p,
                    typical_p,
                    repeat_penalty,
                    presence_penalty,
                    frequency_penalty,
                    repeat_last_n,
                    seed,
                    logit_bias,
                    mirostat_mode,
                    mirostat_tau,
                    mirostat_eta,
                }
            },
        )
}

fn case() -> impl Strategy<Value = (Vec<f32>, SamplingParams, Vec<u32>, usize)> {
    (1usize..1500).prop_flat_map(|n| {
        (
            prop::collection::vec(logit(), n),
            params(n),
            prop::collection::vec(0u32..(n as u32 + 3), 0..40),
            0usize..50,
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn never_panics_and_returns_valid_tokens((row, p, history, start) in case()) {
        let n = row.len();
        let Ok(mut s) = Sampler::new(p.clone(), n) else {
            prop_assert!(p.validate(n).is_err());
            return Ok(());
        };
        s.set_penalty_start(start);
        let mut a = row.clone();
        match s.candidates(&mut a, &history, &mut []).map(<[_]>::to_vec) {
            Ok(c) => {
                prop_assert!(!c.is_empty());
                prop_assert!(c.iter().all(|c| (c.id as usize) < n && c.p.is_finite() && c.p >= 0.0));
                let total: f32 = c.iter().map(|c| c.p).sum();
                prop_assert!((total - 1.0).abs() < 1e-3, "probabilities sum to {}", total);
                prop_assert!(c.windows(2).all(|w| w[0].logit >= w[1].logit), "not sorted");
                let ids: Vec<u32> = c.iter().filter(|c| c.p > 0.0).map(|c| c.id).collect();
                let mut b = row.clone();
                let t = s.sample(&mut b, &history, &mut []).unwrap();
                prop_assert!(ids.contains(&t) || (p.temperature <= 0.0 && c[0].id == t));
            }
            Err(e) => {
                let mut b = row.clone();
                prop_assert_eq!(s.sample(&mut b, &history, &mut []), Err(e));
            }
        }
    }

    #[test]
    fn large_tied_rows_are_consistent(levels in 1u32..40, n in 1100usize..6000, top_k in -1i32..300, top_p in 0.0f32..=1.0, seed in any::<u64>()) {
        let row: Vec<f32> = (0..n as u32).map(|i| ((i.wrapping_mul(2_654_435_761) >> 7) % levels) as f32 * 0.5).collect();
        let p = SamplingParams { top_k, top_p, min_p: 0.0, seed, ..Default::default() };
        let mut s = Sampler::new(p, n).unwrap();
        let c = s.candidates(&mut row.clone(), &[], &mut []).unwrap().to_vec();
        // Everything kept is at least as likely as everything dropped.
        let kept_min = c.iter().map(|c| row[c.id as usize]).fold(f32::INFINITY, f32::min);
        let mut is_kept = vec![false; n];
        for k in &c {
            is_kept[k.id as usize] = true;
        }
        prop_assert!(row.iter().zip(&is_kept).all(|(&l, &k)| k || l <= kept_min));
        if top_k > 0 {
            prop_assert!(c.len() <= top_k as usize);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The reasoning budget's draft check agrees with its mask: every token of the valid
    /// prefix passes `process` when its turn comes, the first token past it does not, and
    /// the forced tokens it offers are what the mask then allows.
    #[test]
    fn reasoning_budget_drafts_agree_with_its_mask(
        start in prop::collection::vec(0u32..5, 1..3),
        end in prop::collection::vec(0u32..5, 1..3),
        message in prop::collection::vec(0u32..8, 0..3),
        budget in 0usize..6,
        open in any::<bool>(),
        draft in prop::collection::vec(0u32..8, 0..24),
    ) {
        use fucina_sample::{LogitProcessor, ReasoningBudget};
        let forced: Vec<u32> = message.iter().chain(&end).copied().collect();
        let mut b = ReasoningBudget::new(start, end, forced, budget, open).unwrap();
        let n = b.clone().valid_prefix_len(&[], &draft);
        prop_assert!(n <= draft.len());
        for (k, &t) in draft.iter().enumerate().take(n + 1) {
            let offered = b.forced_tokens(&[]);
            let mut row = vec![0f32; 8];
            b.process(&mut row, &[]).unwrap();
            let allowed: Vec<u32> = (0..8u32).filter(|&i| row[i as usize].is_finite()).collect();
            if let Some(&next) = offered.first() {
                prop_assert_eq!(allowed, vec![next]);
            } else {
                prop_assert_eq!(allowed.len(), 8);
            }
            let passes = row[t as usize].is_finite();
            prop_assert_eq!(passes, k < n, "token {} at {} (valid prefix {})", t, k, n);
            if !passes {
                break;
            }
            b.commit(t);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Where a sampler decides from the row's top-k (`decides_from_top`), its
    /// `sample_top` on the row's k largest logits draws the token `sample` draws on
    /// the whole row, from the same RNG state, token after token.
    #[test]
    fn sample_top_is_sample_on_the_whole_row(
        n in 8usize..400,
        rows in prop::collection::vec(any::<u64>(), 1..6),
        k in 1i32..140,
        temperature in prop_oneof![0.05f32..3.0, Just(1.0f32)],
        top_p in prop_oneof![0.05f32..1.0, Just(1.0f32)],
        min_p in prop_oneof![0.0f32..0.5, Just(0.0f32)],
        typical_p in prop_oneof![0.05f32..1.0, Just(1.0f32)],
        seed in any::<u64>(),
        step in 0.05f32..3.0,
    ) {
        let p = SamplingParams {
            temperature,
            top_k: k,
            top_p,
            min_p,
            typical_p,
            seed,
            ..SamplingParams::default()
        };
        let mut whole = Sampler::new(p.clone(), n).expect("params");
        let mut top = Sampler::new(p, n).expect("params");
        let Some(kk) = whole.decides_from_top() else {
            prop_assert!(k as usize >= n || k as usize > Sampler::TOP_MAX);
            return Ok(());
        };
        prop_assert_eq!(kk, k as usize);
        for r in rows {
            // A row of distinct values: a permutation (from the seed `r`) of spaced logits.
            let mut order: Vec<usize> = (0..n).collect();
            let mut s = r;
            for i in (1..n).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                order.swap(i, (s >> 33) as usize % (i + 1));
            }
            let mut row = vec![0f32; n];
            for (rank, &i) in order.iter().enumerate() {
                row[i] = 5.0 - step * rank as f32;
            }
            let mut cands: Vec<(u32, f32)> = row.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
            cands.sort_by(|a, b| b.1.total_cmp(&a.1));
            cands.truncate(kk);
            let want = whole.sample(&mut row.clone(), &[], &mut []).expect("sample");
            let got = top.sample_top(&cands).expect("sample_top");
            prop_assert_eq!(got, want);
            prop_assert_eq!(top.draws(), whole.draws());
        }
    }
}

#[test]
fn sample_top_refuses_what_it_cannot_decide() {
    let p = SamplingParams {
        top_k: 3,
        ..SamplingParams::default()
    };
    let mut s = Sampler::new(p, 10).expect("params");
    assert_eq!(s.decides_from_top(), Some(3));
    // Wrong count, a tie, a non-finite value, an id outside the vocabulary.
    for top in [
        vec![(0, 3.0), (1, 2.0)],
        vec![(0, 3.0), (1, 2.0), (2, 2.0)],
        vec![(0, f32::INFINITY), (1, 2.0), (2, 1.0)],
        vec![(0, 3.0), (1, 2.0), (12, 1.0)],
    ] {
        assert!(s.sample_top(&top).is_err(), "{top:?}");
    }
    assert_eq!(s.draws(), 0);
    // Greedy, penalties, a bias, Mirostat, no top-k: the whole row is needed.
    for p in [
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        SamplingParams {
            repeat_penalty: 1.1,
            ..SamplingParams::default()
        },
        SamplingParams {
            logit_bias: vec![(1, 2.0)],
            ..SamplingParams::default()
        },
        SamplingParams {
            mirostat_mode: 2,
            ..SamplingParams::default()
        },
        SamplingParams {
            top_k: 0,
            ..SamplingParams::default()
        },
    ] {
        assert_eq!(
            Sampler::new(p, 10).expect("params").decides_from_top(),
            None
        );
    }
}

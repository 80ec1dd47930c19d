//! The draw follows the distribution `candidates()` reports: chi-square
//! goodness-of-fit over 20,000+ seeded draws for several parameter sets.

use fucina_sample::{Rng, Sampler, SamplingParams};

/// Significance level of each test. With fixed seeds the outcome is
/// deterministic; α only says how unlucky a correct sampler would have to be
/// for a given seed to fail (one in a thousand per parameter set).
const ALPHA: f64 = 1e-3;
/// z such that P(N(0, 1) > z) = ALPHA (standard normal table).
const Z_ALPHA: f64 = 3.090_232;
/// Bins expected to receive fewer draws than this are pooled into one, the
/// usual validity condition of the chi-square approximation.
const MIN_EXPECTED: f64 = 5.0;
const DRAWS: usize = 40_000;

/// Upper-α quantile of chi-square with `k` degrees of freedom by the
/// Wilson–Hilferty cube approximation (relative error well under 1% for
/// k >= 3 at this α, far inside the margin between a fair and a biased draw).
fn chi2_critical(k: usize) -> f64 {
    let k = k as f64;
    let a = 2.0 / (9.0 * k);
    k * (1.0 - a + Z_ALPHA * a.sqrt()).powi(3)
}

fn normal_row(n: usize, sigma: f64, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let u1 = 1.0 - rng.next_f64();
            let u2 = rng.next_f64();
            (sigma * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
        })
        .collect()
}

/// Sample `DRAWS` tokens and test the counts against `candidates()`.
fn check(name: &str, params: SamplingParams, row: &[f32], history: &[u32]) {
    let mut s = Sampler::new(params, row.len()).unwrap();
    let mut logits = row.to_vec();
    let cands = s
        .candidates(&mut logits, history, &mut [])
        .unwrap()
        .to_vec();
    assert!(
        cands.len() >= 3,
        "{name}: want a few candidates, got {}",
        cands.len()
    );
    let mut counts = vec![0usize; row.len()];
    for _ in 0..DRAWS {
        logits.copy_from_slice(row);
        counts[s.sample(&mut logits, history, &mut []).unwrap() as usize] += 1;
    }
    assert_eq!(s.draws(), DRAWS as u64);
    let kept: usize = cands.iter().map(|c| counts[c.id as usize]).sum();
    assert_eq!(kept, DRAWS, "{name}: drew tokens outside the candidate set");
    let (mut chi2, mut bins) = (0.0, 0usize);
    let (mut pool_obs, mut pool_exp) = (0.0, 0.0);
    for c in &cands {
        let e = c.p as f64 * DRAWS as f64;
        let o = counts[c.id as usize] as f64;
        if e < MIN_EXPECTED {
            pool_obs += o;
            pool_exp += e;
        } else {
            chi2 += (o - e) * (o - e) / e;
            bins += 1;
        }
    }
    if pool_exp > 0.0 {
        chi2 += (pool_obs - pool_exp) * (pool_obs - pool_exp) / pool_exp.max(MIN_EXPECTED);
        bins += 1;
    }
    let dof = bins - 1;
    let crit = chi2_critical(dof);
    println!("{name}: {} candidates, {bins} bins, chi2 = {chi2:.1}, critical({dof}, α={ALPHA}) = {crit:.1}", cands.len());
    assert!(
        chi2 < crit,
        "{name}: chi2 {chi2:.1} >= {crit:.1} with {dof} degrees of freedom"
    );
}

#[test]
fn critical_values_match_tables() {
    // Upper 0.1% points of chi-square (standard tables): 10 → 29.588, 30 → 59.703, 100 → 149.449.
    for (k, table) in [(10, 29.588), (30, 59.703), (100, 149.449)] {
        let c = chi2_critical(k);
        assert!((c - table).abs() / table < 0.01, "k={k}: {c} vs {table}");
    }
}

#[test]
fn defaults_on_a_small_row() {
    check(
        "defaults",
        SamplingParams {
            seed: 1,
            ..Default::default()
        },
        &normal_row(64, 2.0, 10),
        &[],
    );
}

#[test]
fn nucleus_at_high_temperature() {
    let p = SamplingParams {
        top_k: 0,
        top_p: 0.9,
        min_p: 0.0,
        temperature: 1.5,
        seed: 2,
        ..Default::default()
    };
    check("top_p .9, temp 1.5", p, &normal_row(300, 1.5, 11), &[]);
}

#[test]
fn min_p_only() {
    let p = SamplingParams {
        top_k: 0,
        top_p: 1.0,
        min_p: 0.1,
        temperature: 0.7,
        seed: 3,
        ..Default::default()
    };
    check("min_p .1, temp .7", p, &normal_row(200, 1.0, 12), &[]);
}

#[test]
fn typical_with_penalties() {
    let p = SamplingParams {
        top_k: 0,
        typical_p: 0.7,
        min_p: 0.0,
        repeat_penalty: 1.3,
        presence_penalty: 0.2,
        seed: 4,
        ..Default::default()
    };
    check(
        "typical .7 + penalties",
        p,
        &normal_row(100, 1.0, 13),
        &[1, 2, 3, 2, 50],
    );
}

#[test]
fn full_softmax() {
    let p = SamplingParams {
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        temperature: 1.0,
        seed: 5,
        ..Default::default()
    };
    check("no filters", p, &normal_row(40, 1.0, 14), &[]);
}

#[test]
fn large_vocabulary_top_p_window() {
    let mut row = normal_row(20_000, 3.0, 15);
    for (i, v) in [(17usize, 14.0f32), (9_000, 13.5), (12_345, 13.0)] {
        row[i] = v;
    }
    let p = SamplingParams {
        top_k: 0,
        top_p: 0.95,
        min_p: 0.0,
        seed: 6,
        ..Default::default()
    };
    check("top_p .95 on 20k tokens", p, &row, &[]);
}

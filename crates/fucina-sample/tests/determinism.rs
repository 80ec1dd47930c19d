//! Reproducibility: a seed fixes the token sequence, each sampled token costs
//! exactly one draw, greedy and `candidates()` cost none.

use fucina_sample::{Sampler, SamplingParams};

fn row(step: u32) -> Vec<f32> {
    (0..500u32)
        .map(|i| (((i * 7_919 + step * 104_729) % 1_000) as f32) / 150.0)
        .collect()
}

fn run(s: &mut Sampler, steps: u32) -> Vec<u32> {
    let mut history = Vec::new();
    for step in 0..steps {
        let mut l = row(step);
        let t = s.sample(&mut l, &history, &mut []).unwrap();
        history.push(t);
    }
    history
}

fn params(seed: u64) -> SamplingParams {
    SamplingParams {
        top_k: 0,
        top_p: 0.99,
        min_p: 0.0,
        temperature: 1.2,
        seed,
        ..Default::default()
    }
}

#[test]
fn same_seed_same_tokens() {
    let a = run(&mut Sampler::new(params(9), 500).unwrap(), 200);
    let b = run(&mut Sampler::new(params(9), 500).unwrap(), 200);
    assert_eq!(a, b);
    let c = run(&mut Sampler::new(params(10), 500).unwrap(), 200);
    assert_ne!(a, c, "different seeds should give different sequences");
}

#[test]
fn one_draw_per_sampled_token() {
    let mut s = Sampler::new(params(1), 500).unwrap();
    run(&mut s, 37);
    assert_eq!(s.draws(), 37);
    // A single surviving candidate still costs its draw, as in llama.cpp.
    let mut one = Sampler::new(
        SamplingParams {
            top_k: 1,
            ..params(1)
        },
        500,
    )
    .unwrap();
    run(&mut one, 5);
    assert_eq!(one.draws(), 5);
}

#[test]
fn greedy_draws_nothing_and_takes_the_first_maximum() {
    let mut s = Sampler::new(
        SamplingParams {
            temperature: 0.0,
            ..params(1)
        },
        4,
    )
    .unwrap();
    let mut l = [1.0, 3.0, 3.0, 2.0];
    assert_eq!(s.sample(&mut l, &[], &mut []).unwrap(), 1);
    assert_eq!(s.draws(), 0);
    let mut neg = Sampler::new(
        SamplingParams {
            temperature: -1.0,
            ..params(1)
        },
        4,
    )
    .unwrap();
    assert_eq!(
        neg.sample(&mut [0.0, 0.5, -1.0, 0.4], &[], &mut [])
            .unwrap(),
        1
    );
    assert_eq!(neg.draws(), 0);
    let c = neg
        .candidates(&mut [0.0, 0.5, -1.0, 0.4], &[], &mut [])
        .unwrap();
    assert_eq!((c.len(), c[0].id, c[0].p), (1, 1, 1.0));
}

#[test]
fn candidates_leave_the_stream_alone() {
    let mut a = Sampler::new(params(3), 500).unwrap();
    let mut b = Sampler::new(params(3), 500).unwrap();
    for step in 0..50 {
        let mut l = row(step);
        let _ = b.candidates(&mut l.clone(), &[], &mut []).unwrap();
        let ta = a.sample(&mut l.clone(), &[], &mut []).unwrap();
        let tb = b.sample(&mut l, &[], &mut []).unwrap();
        assert_eq!(ta, tb);
    }
    assert_eq!(a.draws(), b.draws());
}

#[test]
fn reseed_restarts_the_stream() {
    let mut s = Sampler::new(params(5), 500).unwrap();
    let first = run(&mut s, 30);
    s.reseed(5);
    assert_eq!(s.draws(), 0);
    assert_eq!(s.params().seed, 5);
    assert_eq!(run(&mut s, 30), first);
}

#[test]
fn sampled_tokens_are_candidates() {
    let mut s = Sampler::new(
        SamplingParams {
            seed: 8,
            ..Default::default()
        },
        500,
    )
    .unwrap();
    for step in 0..100 {
        let mut l = row(step);
        let kept: Vec<u32> = s
            .candidates(&mut l.clone(), &[], &mut [])
            .unwrap()
            .iter()
            .map(|c| c.id)
            .collect();
        let t = s.sample(&mut l, &[], &mut []).unwrap();
        assert!(kept.contains(&t), "step {step}: {t} not in {kept:?}");
    }
}

#[test]
fn sampler_and_processors_are_send() {
    fn send<T: Send>() {}
    send::<Sampler>();
    send::<Box<dyn fucina_sample::LogitProcessor>>();
}

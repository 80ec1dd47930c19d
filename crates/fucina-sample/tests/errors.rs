//! Bad input is a named error, never a panic or a garbage token.

use fucina_sample::{LogitProcessor, SampleError, Sampler, SamplingParams};

fn field_of(p: SamplingParams, n_vocab: usize) -> (&'static str, String) {
    match Sampler::new(p, n_vocab) {
        Err(e @ SampleError::InvalidParam { field, .. }) => (field, e.to_string()),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("accepted invalid parameters"),
    }
}

#[test]
fn every_invalid_field_is_named_with_its_value() {
    let d = SamplingParams::default;
    let cases: Vec<(SamplingParams, &str, &str)> = vec![
        (
            SamplingParams {
                temperature: f32::NAN,
                ..d()
            },
            "temperature",
            "NaN",
        ),
        (
            SamplingParams {
                temperature: f32::INFINITY,
                ..d()
            },
            "temperature",
            "inf",
        ),
        (SamplingParams { top_p: 1.5, ..d() }, "top_p", "1.5"),
        (SamplingParams { top_p: -0.1, ..d() }, "top_p", "-0.1"),
        (
            SamplingParams {
                top_p: f32::NAN,
                ..d()
            },
            "top_p",
            "NaN",
        ),
        (SamplingParams { min_p: 2.0, ..d() }, "min_p", "2"),
        (
            SamplingParams {
                min_p: f32::NAN,
                ..d()
            },
            "min_p",
            "NaN",
        ),
        (
            SamplingParams {
                typical_p: -1.0,
                ..d()
            },
            "typical_p",
            "-1",
        ),
        (
            SamplingParams {
                repeat_penalty: 0.0,
                ..d()
            },
            "repeat_penalty",
            "0",
        ),
        (
            SamplingParams {
                repeat_penalty: -2.0,
                ..d()
            },
            "repeat_penalty",
            "-2",
        ),
        (
            SamplingParams {
                repeat_penalty: f32::NAN,
                ..d()
            },
            "repeat_penalty",
            "NaN",
        ),
        (
            SamplingParams {
                repeat_penalty: f32::INFINITY,
                ..d()
            },
            "repeat_penalty",
            "inf",
        ),
        (
            SamplingParams {
                presence_penalty: f32::NAN,
                ..d()
            },
            "presence_penalty",
            "NaN",
        ),
        (
            SamplingParams {
                frequency_penalty: f32::NEG_INFINITY,
                ..d()
            },
            "frequency_penalty",
            "-inf",
        ),
        (
            SamplingParams {
                repeat_last_n: -2,
                ..d()
            },
            "repeat_last_n",
            "-2",
        ),
        (
            SamplingParams {
                logit_bias: vec![(10, 1.0)],
                ..d()
            },
            "logit_bias",
            "10",
        ),
        (
            SamplingParams {
                logit_bias: vec![(1, f32::NAN)],
                ..d()
            },
            "logit_bias",
            "NaN",
        ),
        (
            SamplingParams {
                logit_bias: vec![(1, f32::INFINITY)],
                ..d()
            },
            "logit_bias",
            "inf",
        ),
    ];
    for (p, field, value) in cases {
        let (got, msg) = field_of(p, 10);
        assert_eq!(got, field, "{msg}");
        assert!(
            msg.contains(field) && msg.contains(value),
            "message `{msg}` should name {field} and {value}"
        );
    }
    assert_eq!(field_of(d(), 0).0, "n_vocab");
}

#[test]
fn edge_values_are_accepted() {
    let d = SamplingParams::default;
    for p in [
        SamplingParams { top_p: 0.0, ..d() },
        SamplingParams {
            top_p: 1.0,
            min_p: 1.0,
            typical_p: 0.0,
            ..d()
        },
        SamplingParams {
            temperature: -3.0,
            top_k: i32::MIN,
            ..d()
        },
        SamplingParams {
            top_k: i32::MAX,
            repeat_last_n: -1,
            ..d()
        },
        SamplingParams {
            logit_bias: vec![(9, f32::NEG_INFINITY), (9, -1.0)],
            ..d()
        },
    ] {
        assert!(Sampler::new(p.clone(), 10).is_ok(), "{p:?}");
        assert_eq!(p.validate(10), Ok(()));
    }
}

struct BanAll;
impl LogitProcessor for BanAll {
    fn process(&mut self, logits: &mut [f32], _history: &[u32]) -> Result<(), SampleError> {
        logits.fill(f32::NEG_INFINITY);
        Ok(())
    }
}

struct Fails;
impl LogitProcessor for Fails {
    fn process(&mut self, _logits: &mut [f32], _history: &[u32]) -> Result<(), SampleError> {
        Err(SampleError::Processor("grammar rejected the prefix".into()))
    }
}

#[test]
fn masked_rows_are_errors_in_every_mode() {
    let d = SamplingParams::default;
    for p in [
        d(),
        SamplingParams {
            temperature: 0.0,
            ..d()
        },
        SamplingParams { top_k: 0, ..d() },
    ] {
        let mut s = Sampler::new(p.clone(), 8).unwrap();
        let row = [0.5f32, 1.0, -2.0, 3.0, 0.0, 0.0, 1.5, 2.0];
        assert_eq!(
            s.sample(&mut row.clone(), &[], &mut [&mut BanAll]),
            Err(SampleError::AllTokensMasked)
        );
        assert_eq!(
            s.sample(&mut [f32::NAN; 8], &[], &mut []),
            Err(SampleError::AllTokensMasked)
        );
        assert_eq!(
            s.sample(&mut [f32::NEG_INFINITY; 8], &[], &mut []),
            Err(SampleError::AllTokensMasked)
        );
        let mut mixed = [
            f32::NAN,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::NAN,
            f32::NAN,
            f32::NAN,
        ];
        assert_eq!(
            s.candidates(&mut mixed, &[], &mut []).err(),
            Some(SampleError::AllTokensMasked)
        );
        let ban = SamplingParams {
            logit_bias: (0..8).map(|t| (t, f32::NEG_INFINITY)).collect(),
            ..p
        };
        let mut b = Sampler::new(ban, 8).unwrap();
        assert_eq!(
            b.sample(&mut row.clone(), &[], &mut []),
            Err(SampleError::AllTokensMasked)
        );
        assert_eq!(s.draws(), 0, "a failed call consumes no draw");
    }
}

#[test]
fn nan_logits_are_banned_tokens() {
    let mut s = Sampler::new(
        SamplingParams {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..Default::default()
        },
        4,
    )
    .unwrap();
    let mut row = [f32::NAN, 1.0, f32::NAN, 0.5];
    let c = s.candidates(&mut row, &[], &mut []).unwrap();
    // With every filter off llama.cpp keeps banned tokens too, at p = 0.
    assert_eq!(
        c.iter()
            .filter(|c| c.p > 0.0)
            .map(|c| c.id)
            .collect::<Vec<_>>(),
        [1, 3]
    );
    assert!(c
        .iter()
        .all(|c| c.p.is_finite() && (c.p > 0.0 || c.logit == f32::NEG_INFINITY)));
    let mut g = Sampler::new(
        SamplingParams {
            temperature: 0.0,
            ..Default::default()
        },
        4,
    )
    .unwrap();
    assert_eq!(
        g.sample(&mut [f32::NAN, 1.0, f32::NAN, 2.0], &[], &mut []),
        Ok(3)
    );
}

#[test]
fn infinite_logits_share_the_mass() {
    let mut s = Sampler::new(
        SamplingParams {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..Default::default()
        },
        4,
    )
    .unwrap();
    let c = s
        .candidates(&mut [f32::INFINITY, 1.0, f32::INFINITY, 0.5], &[], &mut [])
        .unwrap();
    let p: f32 = c
        .iter()
        .filter(|c| c.id == 0 || c.id == 2)
        .map(|c| c.p)
        .sum();
    assert!(
        (p - 1.0).abs() < 1e-6 && c.iter().all(|c| c.p.is_finite()),
        "{c:?}"
    );
}

#[test]
fn length_and_processor_errors() {
    let mut s = Sampler::new(SamplingParams::default(), 8).unwrap();
    assert_eq!(
        s.sample(&mut [0.0; 7], &[], &mut []),
        Err(SampleError::LogitsLength {
            expected: 8,
            got: 7
        })
    );
    let e = s.sample(&mut [0.0; 8], &[], &mut [&mut Fails]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "logit processor failed: grammar rejected the prefix"
    );
    let msg = SampleError::LogitsLength {
        expected: 8,
        got: 7,
    }
    .to_string();
    assert!(msg.contains('8') && msg.contains('7'), "{msg}");
}

/// Records what it was shown: processors see the raw row, before bias and penalties.
struct Spy(Vec<f32>);
impl LogitProcessor for Spy {
    fn process(&mut self, logits: &mut [f32], _history: &[u32]) -> Result<(), SampleError> {
        self.0 = logits.to_vec();
        logits[0] += 1.0;
        Ok(())
    }
}

#[test]
fn processors_run_before_bias_and_penalties() {
    let p = SamplingParams {
        logit_bias: vec![(1, 2.0)],
        repeat_penalty: 2.0,
        temperature: 0.0,
        ..Default::default()
    };
    let mut s = Sampler::new(p, 3).unwrap();
    let mut spy = Spy(Vec::new());
    let mut row = [1.0f32, 1.0, 4.0];
    s.sample(&mut row, &[2, 2], &mut [&mut spy]).unwrap();
    assert_eq!(spy.0, [1.0, 1.0, 4.0]);
    // processor (+1 on 0), bias (+2 on 1), then the penalty divides token 2's positive logit.
    assert_eq!(row, [2.0, 3.0, 2.0]);
}

#[test]
fn penalty_start_excludes_the_prompt() {
    let p = SamplingParams {
        repeat_penalty: 4.0,
        temperature: 0.0,
        ..Default::default()
    };
    let mut s = Sampler::new(p, 3).unwrap();
    let history = [0u32, 0, 0, 2];
    let mut row = [3.0f32, 1.0, 2.0];
    s.sample(&mut row, &history, &mut []).unwrap();
    assert_eq!(row, [0.75, 1.0, 0.5]);
    s.set_penalty_start(3);
    let mut row = [3.0f32, 1.0, 2.0];
    assert_eq!(s.sample(&mut row, &history, &mut []).unwrap(), 0);
    assert_eq!(row, [3.0, 1.0, 0.5]);
}

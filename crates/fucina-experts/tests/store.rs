//! The expert store over a plain file of known bytes: experts come back byte for
//! byte, a shrunk file is an error (never garbage), a replayed trace reproduces
//! the live counts for every policy option, the flat-histogram guard, and
//! Belady bounds every policy of the sweep on random traces (proptest).

use std::path::{Path, PathBuf};

use fucina_experts::{
    replay_live, sweep, Eviction, ExpertError, ExpertStore, ExpertStoreBuilder, Histogram, Policy,
    StackSpec, StoreOptions, SweepOptions, Trace,
};
use proptest::prelude::*;

const N_EXPERT: usize = 8;
/// Bytes of one expert in the three stacks.
const SIZES: [u64; 3] = [96, 96, 64];

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fx-store-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

/// A file of 2 layers × 3 stacks × 8 experts behind a 100-byte header; byte `i`
/// of the file is `i * 7 % 251`.
fn write_file(dir: &Path) -> (PathBuf, Vec<u8>) {
    let total = 100 + 2 * N_EXPERT as u64 * SIZES.iter().sum::<u64>();
    let bytes: Vec<u8> = (0..total).map(|i| (i * 7 % 251) as u8).collect();
    let path = dir.join("model.gguf");
    std::fs::write(&path, &bytes).expect("write");
    (path, bytes)
}

fn stacks(layer: usize) -> Vec<StackSpec> {
    let mut offset = 100 + layer as u64 * N_EXPERT as u64 * SIZES.iter().sum::<u64>();
    SIZES
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let s = StackSpec {
                name: format!("blk.{layer}.stack{i}"),
                part: 0,
                offset,
                stride: size,
                expert_bytes: size,
                n_expert: N_EXPERT,
            };
            offset += size * N_EXPERT as u64;
            s
        })
        .collect()
}

fn store(path: &Path, options: StoreOptions) -> ExpertStore {
    let mut b = ExpertStoreBuilder::new(&[path.to_owned()], 3, options).expect("builder");
    b.register(0, stacks(0)).expect("layer 0");
    b.register(2, stacks(1)).expect("layer 2");
    b.build().expect("build")
}

fn expected(bytes: &[u8], layer_slot: usize, expert: u32, stack: usize) -> Vec<u8> {
    let s = &stacks(layer_slot)[stack];
    let at = (s.offset + u64::from(expert) * s.stride) as usize;
    bytes[at..at + s.expert_bytes as usize].to_vec()
}

#[test]
fn experts_come_back_byte_for_byte_and_counts_replay() {
    let dir = tmp("bytes");
    let (path, bytes) = write_file(&dir);
    for (io_threads, eviction, prefetch) in [
        (0, Eviction::Lru, false),
        (2, Eviction::Heat { decay: 0.8 }, true),
        (3, Eviction::Lru, true),
    ] {
        let options = StoreOptions {
            slots_per_layer: Some(3),
            eviction: Some(eviction),
            io_threads,
            prefetch,
            trace: Some(dir.join("t.trace")),
            ..StoreOptions::default()
        };
        let s = store(&path, options);
        let mut seen = 0;
        for step in 0..40u32 {
            for (layer, slot) in [(0usize, 0usize), (2, 1)] {
                let used: Vec<(u32, u32)> = (0..4)
                    .map(|k| ((step * 3 + k * 5 + layer as u32) % N_EXPERT as u32, 1 + k))
                    .collect::<std::collections::BTreeMap<_, _>>()
                    .into_iter()
                    .collect();
                s.with_experts::<ExpertError>(layer, &used, |c| {
                    for (&(e, _), b) in c.experts.iter().zip(c.bytes) {
                        for st in 0..3 {
                            let r = s.stack_range(layer, st).expect("range");
                            assert_eq!((**b).as_ref()[r], expected(&bytes, slot, e, st)[..]);
                        }
                        seen += 1;
                    }
                    Ok(())
                })
                .expect("call");
                if layer == 0 {
                    s.prefetch(2, &[(step % 8), (step + 1) % 8])
                        .expect("prefetch");
                }
            }
        }
        assert!(seen > 0);
        let stats = s.stats();
        s.finish().expect("finish");
        let trace = Trace::load(&dir.join("t.trace")).expect("trace");
        assert_eq!(replay_live(&trace).expect("replay"), stats.counts);
        assert!(
            stats.counts.misses > 0 && stats.counts.hits > 0,
            "{stats:?}"
        );
        if prefetch && io_threads > 0 {
            assert!(stats.counts.prefetch_loads > 0, "{stats:?}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_shrunk_file_is_an_error_then_and_at_registration() {
    let dir = tmp("short");
    let (path, bytes) = write_file(&dir);
    let s = store(
        &path,
        StoreOptions {
            slots_per_layer: Some(2),
            ..StoreOptions::default()
        },
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    f.set_len(bytes.len() as u64 - 10).expect("truncate");
    // Expert 7 of layer 2's last stack ends the file: a short read.
    let err = s
        .with_experts::<ExpertError>(2, &[(7, 1)], |_| panic!("no bytes for a short read"))
        .expect_err("short read");
    assert!(matches!(err, ExpertError::ShortRead { .. }), "{err}");
    // Earlier experts still read.
    s.with_experts::<ExpertError>(2, &[(0, 1)], |c| {
        assert_eq!(c.bytes.len(), 1);
        Ok(())
    })
    .expect("intact expert");
    // And again: the failed expert was forgotten, not cached.
    assert!(s
        .with_experts::<ExpertError>(2, &[(7, 1)], |_| Ok(()))
        .is_err());
    let mut b = ExpertStoreBuilder::new(std::slice::from_ref(&path), 3, StoreOptions::default())
        .expect("b");
    let err = b.register(2, stacks(1)).expect_err("past the end");
    assert!(err.to_string().contains("blk.1.stack2"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn auto_pin_declines_on_a_flat_histogram_and_pins_a_skewed_one() {
    let dir = tmp("pins");
    let (path, _) = write_file(&dir);
    let hist = dir.join("model.gguf.experts");
    let per = SIZES.iter().sum::<u64>();
    let options = StoreOptions {
        cache_bytes: Some(per * 8),
        histogram: Some(hist.clone()),
        ..StoreOptions::default()
    };
    let flat = Histogram {
        counts: vec![vec![50; N_EXPERT], vec![], vec![49; N_EXPERT]],
    };
    flat.save(&hist).expect("save");
    let stats = store(&path, options.clone()).stats();
    assert!(stats.pins_declined_flat && stats.pinned == 0, "{stats:?}");
    assert_eq!(stats.slots_per_layer, 4);
    assert!(stats.report().contains("auto-pin declined"));
    let mut skewed = flat.clone();
    skewed.counts[0] = vec![900, 800, 1, 1, 1, 1, 1, 1];
    skewed.counts[2] = vec![1, 1, 1, 700, 1, 1, 1, 1];
    skewed.save(&hist).expect("save");
    let s = store(&path, options);
    let stats = s.stats();
    assert!(!stats.pins_declined_flat && stats.pinned > 0, "{stats:?}");
    s.with_experts::<ExpertError>(0, &[(0, 3)], |_| Ok(()))
        .expect("call");
    drop(s);
    let after = Histogram::load(&hist).expect("load").expect("written");
    assert_eq!(after.counts[0][0], 903);
    // An unwritable histogram is a note in the report, not an error.
    let s = store(
        &path,
        StoreOptions {
            histogram: Some(dir.join("no-such-dir/model.gguf.experts")),
            ..StoreOptions::default()
        },
    );
    s.finish().expect("the histogram is only a cache");
    assert!(s.stats().report().contains("usage histogram not saved"));
    std::fs::remove_dir_all(&dir).ok();
}

fn random_trace(calls: &[(bool, Vec<u8>)]) -> Trace {
    let shape = fucina_experts::cache::LayerShape {
        n_expert: 12,
        slots: 3,
        expert_bytes: 5,
    };
    let mut t = Trace::new(vec![shape, shape], Eviction::Lru, Vec::new());
    for (layer, experts) in calls {
        let mut set: Vec<(u32, u32)> = experts
            .iter()
            .map(|&e| (u32::from(e % 12), u32::from(e / 12) + 1))
            .collect();
        set.sort_by_key(|x| x.0);
        set.dedup_by_key(|x| x.0);
        t.events.push(fucina_experts::Event::Call {
            layer: usize::from(*layer),
            experts: set,
        });
    }
    t
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn belady_bounds_every_policy_at_every_capacity(
        calls in prop::collection::vec((any::<bool>(), prop::collection::vec(0u8..48, 1..6)), 1..120),
        decay in 0.3f64..1.0,
    ) {
        let t = random_trace(&calls);
        let rows = sweep(&t, &SweepOptions {
            slots: vec![1, 2, 3, 5, 8, 12],
            heat_decay: Some(decay),
            pins_from: None,
        }).expect("sweep");
        for c in [1, 2, 3, 5, 8, 12] {
            let at: Vec<_> = rows.iter().filter(|r| r.slots == c).collect();
            let best = at.iter().find(|r| r.policy == Policy::Belady).expect("belady").hits;
            for r in &at {
                prop_assert!(r.hits <= best, "{:?} beats belady ({best}) at {c}", r);
            }
        }
    }
}

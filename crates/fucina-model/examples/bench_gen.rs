//! Prefill and decode speed of a GGUF model: `bench_gen [path] [threads] [prompt] [decode] [reps]`
//! (defaults: the Gemma 3 270M test model, 2 threads, 512 prompt tokens, 64 decoded
//! tokens, 3 repetitions). Prints each repetition and the median tok/s.

use std::sync::Arc;
use std::time::Instant;

use fucina_engine::{argmax, Session};
use fucina_model::{KvDtype, Model, ModelOptions};

fn arg(args: &[String], i: usize, default: usize) -> usize {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = match args.get(1).filter(|s| s.as_str() != "-") {
        Some(p) => p.into(),
        None => fucina_testdata::gemma3_270m(),
    };
    let threads = arg(&args, 2, 2);
    let n_prompt = arg(&args, 3, 512).max(1);
    let n_decode = arg(&args, 4, 64);
    let reps = arg(&args, 5, 3).max(1);
    let t = Instant::now();
    let model = Arc::new(Model::load(&path, ModelOptions::with_threads(threads))?);
    println!("load {:.3} s", t.elapsed().as_secs_f64());
    // Steady-state speed: the background repacking finished first.
    let t = Instant::now();
    model.wait_repacked();
    println!(
        "repacked {:.0} MB in another {:.3} s",
        model.repacked_bytes() as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let n_vocab = model.config().n_vocab as u32;
    let prompt: Vec<u32> = (0..n_prompt as u32)
        .map(|i| 2 + (i * 7919) % (n_vocab - 2))
        .collect();
    let mut s = Session::new(model, n_prompt + n_decode + 8, KvDtype::F16)?;
    let (mut pre, mut dec) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        s.reset();
        let t = Instant::now();
        let mut next = argmax(s.eval(&prompt, false)?);
        let tp = n_prompt as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        for _ in 0..n_decode {
            next = argmax(s.eval(&[next], false)?);
        }
        let td = n_decode as f64 / t.elapsed().as_secs_f64().max(1e-9);
        println!("rep {rep}: prefill {tp:.1} tok/s, decode {td:.1} tok/s");
        pre.push(tp);
        dec.push(td);
    }
    println!(
        "median: prefill {:.1} tok/s ({n_prompt} tokens), decode {:.1} tok/s, {threads} threads",
        median(pre),
        median(dec)
    );
    Ok(())
}

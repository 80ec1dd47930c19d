//! Compile JSON Schema files against a GGUF's vocabulary: ok / ok with a warning / error.
//!
//!     cargo run --release -p fucina-grammar --example schema_probe -- MODEL.gguf SCHEMA.json...
use std::sync::Arc;
use std::time::Instant;

use fucina_gguf::GgufFile;
use fucina_grammar::{Grammar, GrammarCompiler};
use fucina_tokenizer::Tokenizer;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let f = GgufFile::open_header(&args[0]).expect("model");
    let tok = Arc::new(Tokenizer::from_metadata(f.metadata()).expect("tokenizer"));
    let n = tok.vocab_size();
    let c = GrammarCompiler::new(tok, n).expect("compiler");
    let (mut ok, mut warn, mut err) = (0, 0, 0);
    for p in &args[1..] {
        let name = std::path::Path::new(p)
            .file_name()
            .unwrap()
            .to_string_lossy();
        let text = std::fs::read_to_string(p).unwrap();
        let t = Instant::now();
        let r = Grammar::json_schema_str(&text).and_then(|g| c.check(&g));
        let dt = t.elapsed().as_secs_f64();
        let (tag, msg) = match r {
            Ok(None) => {
                ok += 1;
                ("ok", String::new())
            }
            Ok(Some(w)) => {
                warn += 1;
                ("ok-warn", w)
            }
            Err(e) => {
                err += 1;
                ("ERR", e.to_string())
            }
        };
        let msg: String = msg.replace('\n', " | ").chars().take(220).collect();
        println!("{tag:8} {dt:6.2}s {name:40} {msg}");
    }
    println!("ok {ok}  ok-warn {warn}  error {err}");
}

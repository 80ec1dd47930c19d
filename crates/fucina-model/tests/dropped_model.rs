//! A dropped model leaves its file alone: the background repacking thread is
//! stopped and joined by the drop, so the file may then be truncated or replaced.
//! (A read of a mapped page past a shrunk file's end is SIGBUS: had the repacking
//! thread still been reading the mapping, this test binary would die.) Its own
//! binary: it sets `FUCINA_REPACK`, which no other test may see.

use std::time::Duration;

use fucina_model::{Model, ModelOptions};

#[test]
fn a_dropped_model_no_longer_reads_its_file() {
    let src = fucina_testdata::gemma3_270m();
    let dir = std::env::temp_dir().join(format!("fm-dropped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join("model.gguf");
    // Every packed layout, whatever this CPU runs faster: the thread's first job is
    // then the largest matrix (the 262144 x 640 Q8_0 head), tens of milliseconds of
    // reading the mapping.
    std::env::set_var("FUCINA_REPACK", "all");
    for _ in 0..2 {
        std::fs::copy(&src, &p).expect("copy the model");
        let model = Model::load(&p, ModelOptions::with_threads(1)).expect("load");
        // Let the repacking thread get into its first matrix.
        std::thread::sleep(Duration::from_millis(5));
        drop(model);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .expect("open");
        f.set_len(0).expect("truncate");
        drop(f);
        // Time for a thread still reading the mapping to fault.
        std::thread::sleep(Duration::from_millis(200));
    }
    std::env::remove_var("FUCINA_REPACK");
    std::fs::remove_dir_all(&dir).ok();
}

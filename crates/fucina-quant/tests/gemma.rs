//! Every tensor of the real Gemma 3 270M Q4_K_M GGUF dequantizes to exactly the
//! float32 bytes gguf-py produces (compared through the committed SHA-256 goldens).

mod common;

use common::{f32_bytes, load, Sha256};
use fucina_gguf::GgufFile;
use fucina_quant::dequantize;

#[test]
fn gemma_tensors_match_gguf_py() {
    let (lines, _) = load();
    let want: std::collections::HashMap<&str, (&str, &str)> = lines
        .iter()
        .filter(|f| f[0] == "tensor")
        .map(|f| (f[1].as_str(), (f[2].as_str(), f[4].as_str())))
        .collect();
    let file = GgufFile::open(fucina_testdata::gemma3_270m()).expect("open Gemma");
    assert_eq!(want.len(), file.tensors().len(), "one golden per tensor");
    let mut mismatched = Vec::new();
    for (name, info) in file.tensors() {
        let (ty, hash) = want
            .get(name.as_str())
            .unwrap_or_else(|| panic!("no golden for {name}"));
        assert_eq!(*ty, info.ggml_type.name(), "{name}");
        let raw = file.tensor_bytes(name).expect("tensor bytes");
        let n = fucina_quant::elements_in(info.ggml_type, raw.len()).expect("whole blocks");
        let mut h = Sha256::new();
        // Dequantize in row-aligned chunks to bound memory (the output head is 670 MB as f32).
        let bpb = info.ggml_type.type_size() as usize;
        let chunk_blocks = (1 << 20) / info.ggml_type.block_size() as usize;
        let mut out = Vec::new();
        for c in raw.chunks(chunk_blocks * bpb) {
            out.resize(
                fucina_quant::elements_in(info.ggml_type, c.len()).expect("blocks"),
                0f32,
            );
            dequantize(info.ggml_type, c, &mut out).expect("dequantize");
            h.update(&f32_bytes(&out));
        }
        assert!(n > 0);
        if h.hex() != *hash {
            mismatched.push(name.clone());
        }
    }
    assert!(
        mismatched.is_empty(),
        "tensors differing from gguf-py: {mismatched:?}"
    );
}

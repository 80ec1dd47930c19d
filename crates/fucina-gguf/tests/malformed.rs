//! Hand-made malformed files: each must fail with the right error, naming what and where.

mod common;

use common::{all_types_file, B};
use fucina_gguf::{GgufError, GgufFile, OpenOptions};

fn open(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
    GgufFile::from_bytes(bytes, OpenOptions::default())
}

fn open_header(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
    GgufFile::from_bytes(
        bytes,
        OpenOptions {
            tensors: false,
            splits: false,
        },
    )
}

/// Assert the error message contains every fragment (the "what" and the "where").
#[track_caller]
fn expect_err(r: Result<GgufFile, GgufError>, fragments: &[&str]) -> GgufError {
    let e = r.expect_err("malformed input was accepted");
    let msg = e.to_string();
    for f in fragments {
        assert!(msg.contains(f), "error {msg:?} does not mention {f:?}");
    }
    e
}

fn one_kv(value_type: u32, value: B) -> Vec<u8> {
    B::header(3, 0, 1)
        .str(b"k")
        .u32(value_type)
        .bytes(&value.0)
        .0
}

#[test]
fn empty_file() {
    expect_err(open(vec![]), &["truncated", "magic", "byte 0"]);
}

#[test]
fn short_magic() {
    expect_err(open(b"GGU".to_vec()), &["truncated", "magic"]);
}

#[test]
fn bad_magic() {
    let e = expect_err(
        open(B::default().bytes(b"GGML").u32(3).0),
        &["not a GGUF file"],
    );
    assert!(matches!(e, GgufError::BadMagic { found } if &found == b"GGML"));
}

#[test]
fn version_1_is_unsupported() {
    let e = expect_err(open(B::header(1, 0, 0).0), &["version 1"]);
    assert!(matches!(e, GgufError::UnsupportedVersion { version: 1 }));
}

#[test]
fn version_4_is_unsupported() {
    expect_err(open(B::header(4, 0, 0).0), &["version 4"]);
}

#[test]
fn big_endian_file() {
    expect_err(
        open(B::header(3u32.swap_bytes(), 0, 0).0),
        &["big-endian", "byte 4"],
    );
}

#[test]
fn truncated_counts() {
    expect_err(
        open(B::default().bytes(b"GGUF").u32(3).u32(0).0),
        &["tensor count", "byte 8"],
    );
}

#[test]
fn huge_tensor_count() {
    expect_err(
        open(B::header(3, u64::MAX, 0).0),
        &["tensor count is 18446744073709551615", "byte 8"],
    );
}

#[test]
fn huge_kv_count() {
    expect_err(
        open(B::header(3, 0, 1 << 40).0),
        &["key/value count", "byte 16"],
    );
}

#[test]
fn lying_key_length() {
    let bytes = B::header(3, 0, 1).u64(1 << 50).bytes(b"key").zeros(16).0;
    expect_err(
        open(bytes),
        &[
            "key of metadata entry 0",
            "byte 32",
            "needs 1125899906842624 bytes",
        ],
    );
}

#[test]
fn key_not_utf8() {
    let bytes = B::header(3, 0, 1).str(&[0xff, 0xfe]).u32(4).u32(1).0;
    expect_err(
        open(bytes),
        &["metadata key 0 is not valid UTF-8", "byte 24"],
    );
}

#[test]
fn unknown_value_type() {
    expect_err(
        open(one_kv(13, B::default().u32(0))),
        &["unknown metadata value type 13", "byte 33"],
    );
}

#[test]
fn string_value_past_eof() {
    expect_err(
        open(one_kv(8, B::default().u64(100).bytes(b"short"))),
        &["value of 'k'", "needs 100 bytes"],
    );
}

#[test]
fn lying_array_count() {
    let bytes = one_kv(9, B::default().u32(4).u64(1 << 60));
    expect_err(
        open(bytes),
        &[
            "element count of value of 'k'",
            "1152921504606846976",
            "byte 41",
        ],
    );
}

#[test]
fn array_of_unknown_type() {
    expect_err(
        open(one_kv(9, B::default().u32(77).u64(0))),
        &["unknown metadata value type 77"],
    );
}

#[test]
fn bool_not_0_or_1() {
    expect_err(
        open(one_kv(7, B::default().u8(2))),
        &["bool byte is 2", "byte 37"],
    );
}

#[test]
fn bool_array_with_bad_byte() {
    expect_err(
        open(one_kv(9, B::default().u32(7).u64(3).bytes(&[1, 0, 9]))),
        &["[2]: bool byte is 9", "byte 51"],
    );
}

#[test]
fn duplicate_key() {
    let bytes = B::header(3, 0, 2).kv_u32("a", 1).kv_u32("a", 2).0;
    expect_err(open(bytes), &["duplicate metadata key 'a'", "byte 41"]);
}

#[test]
fn arrays_nested_too_deep() {
    let mut v = B::default();
    for _ in 0..40 {
        v = v.u32(9).u64(1);
    }
    expect_err(open(one_kv(9, v.u32(4).u64(0))), &["nested deeper than 32"]);
}

#[test]
fn alignment_not_power_of_two() {
    let bytes = B::header(3, 0, 1).kv_u32("general.alignment", 48).0;
    expect_err(
        open(bytes),
        &["general.alignment", "power of two", "U32(48)"],
    );
}

#[test]
fn alignment_of_wrong_type() {
    let bytes = B::header(3, 0, 1)
        .str(b"general.alignment")
        .u32(8)
        .str(b"32")
        .0;
    expect_err(open(bytes), &["general.alignment", "UINT32"]);
}

#[test]
fn too_many_dims() {
    let bytes = B::header(3, 1, 0).tensor("t", &[1, 1, 1, 1, 1], 0, 0).0;
    expect_err(open(bytes), &["tensor 't' has 5 dimensions", "byte 33"]);
}

#[test]
fn removed_ggml_type() {
    let bytes = B::header(3, 1, 0)
        .tensor("t", &[32], 4, 0)
        .pad(32)
        .zeros(64)
        .0;
    expect_err(open(bytes), &["unknown ggml type 4", "byte 45"]);
}

#[test]
fn partial_block() {
    let bytes = B::header(3, 1, 0)
        .tensor("t", &[30, 2], 2, 0)
        .pad(32)
        .zeros(64)
        .0;
    expect_err(
        open(bytes),
        &["first dimension 30", "block size 32", "Q4_0"],
    );
}

#[test]
fn misaligned_offset() {
    let bytes = B::header(3, 1, 0)
        .tensor("t", &[4], 0, 4)
        .pad(32)
        .zeros(64)
        .0;
    expect_err(
        open(bytes),
        &[
            "data offset 4 is not a multiple of the alignment 32",
            "byte 49",
        ],
    );
}

#[test]
fn element_count_overflow() {
    let bytes = B::header(3, 1, 0).tensor("t", &[1 << 40, 1 << 40], 0, 0).0;
    expect_err(open(bytes), &["element count overflows"]);
}

#[test]
fn dim_above_i64() {
    let bytes = B::header(3, 1, 0).tensor("t", &[u64::MAX], 0, 0).0;
    expect_err(open(bytes), &["dimension 0 is 18446744073709551615"]);
}

#[test]
fn tensor_name_not_utf8() {
    let bytes = B::header(3, 1, 0)
        .str(&[0xc3])
        .u32(1)
        .u64(4)
        .u32(0)
        .u64(0)
        .0;
    expect_err(
        open(bytes),
        &["name of tensor 0 is not valid UTF-8", "byte 24"],
    );
}

#[test]
fn duplicate_tensor_name() {
    let bytes = B::header(3, 2, 0)
        .tensor("t", &[8], 0, 0)
        .tensor("t", &[8], 0, 32)
        .pad(32)
        .zeros(64)
        .0;
    expect_err(open(bytes), &["duplicate tensor name 't'"]);
}

#[test]
fn truncated_tensor_info() {
    let mut bytes = B::header(3, 1, 0).tensor("t", &[8, 8], 0, 0).0;
    bytes.truncate(bytes.len() - 3);
    expect_err(open(bytes), &["data offset of tensor 't'", "truncated"]);
}

#[test]
fn tensor_data_past_eof() {
    // Data section starts at 64; the tensor needs 256 bytes but only 16 follow.
    let bytes = B::header(3, 1, 0)
        .tensor("blk.0.w", &[8, 8], 0, 0)
        .pad(32)
        .zeros(16)
        .0;
    let len = bytes.len();
    expect_err(
        open(bytes.clone()),
        &[
            "tensor 'blk.0.w'",
            "lies past the end of the file",
            &format!("({len} bytes)"),
        ],
    );
    // A header-only open accepts the file; the data itself is still refused.
    let f = open_header(bytes).expect("header-only open reads a file with missing data");
    assert!(!f.is_full());
    assert!(f
        .tensor_bytes("blk.0.w")
        .unwrap_err()
        .to_string()
        .contains("past the end"));
    assert!(f.validate_data().is_err());
}

#[test]
fn overlapping_tensors() {
    let bytes = B::header(3, 2, 0)
        .tensor("a", &[16], 0, 0)
        .tensor("b", &[16], 0, 32)
        .pad(32)
        .zeros(128)
        .0;
    expect_err(open(bytes), &["tensor 'b'", "overlaps tensor 'a'"]);
}

#[test]
fn offset_plus_size_overflow() {
    let bytes = B::header(3, 1, 0)
        .tensor("t", &[8], 0, u64::MAX - 31)
        .pad(32)
        .0;
    expect_err(open(bytes), &["tensor 't'", "past the end"]);
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let full = all_types_file();
    let f = open(full.clone()).expect("the reference file opens");
    // Padding after the last tensor is optional; every byte before its end is needed.
    let data_end = f
        .tensors()
        .values()
        .map(|t| t.offset + t.n_bytes)
        .max()
        .unwrap();
    let needed = (f.parts()[0].header().data_offset + data_end) as usize;
    assert!(needed < full.len());
    for cut in 0..full.len() {
        let r = open(full[..cut].to_vec());
        assert_eq!(
            r.is_err(),
            cut < needed,
            "truncation at {cut} of {} (data ends at {needed})",
            full.len()
        );
    }
}

#[test]
fn split_count_without_split_name() {
    let dir = std::env::temp_dir().join(format!("fucina-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.gguf");
    let bytes = B::header(3, 0, 2)
        .str(b"split.count")
        .u32(2)
        .u16_pad(2)
        .kv_u32("split.no", 0)
        .0;
    std::fs::write(&path, bytes).unwrap();
    let e = GgufFile::open(&path).unwrap_err();
    assert!(
        e.to_string().contains("not PREFIX-NNNNN-of-NNNNN.gguf"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn split_with_missing_part() {
    let dir = std::env::temp_dir().join(format!("fucina-split-missing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m-00001-of-00002.gguf");
    let bytes = B::header(3, 0, 2)
        .str(b"split.count")
        .u32(2)
        .u16_pad(2)
        .str(b"split.no")
        .u32(2)
        .u16_pad(0)
        .0;
    std::fs::write(&path, bytes).unwrap();
    let e = GgufFile::open(&path).unwrap_err();
    assert!(
        matches!(e, GgufError::Io { ref path, .. } if path.ends_with("m-00002-of-00002.gguf")),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_file_is_io_error() {
    let e = GgufFile::open("/nonexistent/model.gguf").unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/model.gguf"));
}

#[test]
fn directory_is_named_as_one() {
    let dir = std::env::temp_dir();
    let e = GgufFile::open(&dir).unwrap_err();
    assert!(
        matches!(e, GgufError::Io { ref source, .. } if source.kind() == std::io::ErrorKind::IsADirectory),
        "{e}"
    );
    assert!(
        e.to_string().contains("is a directory, not a GGUF file"),
        "{e}"
    );
}

trait U16Pad {
    fn u16_pad(self, v: u16) -> Self;
}

impl U16Pad for B {
    /// A u16 value (the type id must already be written as UINT16 = 2 by the caller).
    fn u16_pad(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
}

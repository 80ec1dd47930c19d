//! Byte-level builders shared by the integration tests: hand-made GGUF images
//! with exactly the (possibly wrong) fields a test wants.

#![allow(dead_code)]

use fucina_gguf::{Array, GgmlType, GgufWriter, StringArray, Value};

/// A little-endian byte builder.
#[derive(Default, Clone)]
pub struct B(pub Vec<u8>);

impl B {
    /// Append a byte.
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    /// Append a little-endian u32.
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Append a little-endian u64.
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Append raw bytes.
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    /// A GGUF string: u64 length + bytes.
    pub fn str(self, s: &[u8]) -> Self {
        self.u64(s.len() as u64).bytes(s)
    }
    /// Magic, version, tensor count, kv count.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        B::default()
            .bytes(b"GGUF")
            .u32(version)
            .u64(n_tensors)
            .u64(n_kv)
    }
    /// A u32 key/value pair.
    pub fn kv_u32(self, key: &str, v: u32) -> Self {
        self.str(key.as_bytes()).u32(4).u32(v)
    }
    /// A tensor info.
    pub fn tensor(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Self {
        let mut b = self.str(name.as_bytes()).u32(dims.len() as u32);
        for &d in dims {
            b = b.u64(d);
        }
        b.u32(ty).u64(offset)
    }
    /// Pad to `align` with zeros.
    pub fn pad(mut self, align: usize) -> Self {
        while self.0.len() % align != 0 {
            self.0.push(0);
        }
        self
    }
    /// Append `n` zero bytes.
    pub fn zeros(mut self, n: usize) -> Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}

/// A valid file with one key of every value type (nested arrays included) and
/// three tensors of different types.
pub fn all_types_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::string("llama"));
    w.set("t.u8", Value::U8(200));
    w.set("t.i8", Value::I8(-100));
    w.set("t.u16", Value::U16(60000));
    w.set("t.i16", Value::I16(-30000));
    w.set("t.u32", Value::U32(4_000_000_000));
    w.set("t.i32", Value::I32(-2_000_000_000));
    w.set("t.f32", Value::F32(1.5));
    w.set("t.bool", Value::Bool(true));
    w.set("t.string", Value::string("héllo ✓"));
    w.set("t.u64", Value::U64(u64::MAX));
    w.set("t.i64", Value::I64(i64::MIN));
    w.set("t.f64", Value::F64(-2.25));
    w.set("t.arr_u32", Value::Array(Array::U32(vec![1, 2, 3])));
    w.set("t.arr_f32", Value::Array(Array::F32(vec![0.5, -1.0])));
    w.set("t.arr_bool", Value::Array(Array::Bool(vec![true, false])));
    w.set(
        "t.arr_str",
        Value::Array(Array::String(
            ["a", "", "ccc"].iter().collect::<StringArray>(),
        )),
    );
    w.set("t.arr_empty_i16", Value::Array(Array::I16(vec![])));
    w.set(
        "t.nested",
        Value::Array(Array::Array(vec![
            Array::U8(vec![1, 2]),
            Array::String(["x"].iter().collect()),
        ])),
    );
    let f32s: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.add_tensor("a.f32", GgmlType::F32, &[4, 2], f32s).unwrap();
    w.add_tensor("b.q8_0", GgmlType::Q8_0, &[32, 3], vec![7u8; 34 * 3])
        .unwrap();
    w.add_tensor("c.f16", GgmlType::F16, &[5], vec![1u8; 10])
        .unwrap();
    w.to_bytes().unwrap()
}

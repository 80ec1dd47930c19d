//! Metadata values: scalars, strings (raw bytes, usually UTF-8) and typed, possibly nested arrays.
//!
//! Arrays are stored as one typed vector (numbers) or one byte buffer plus offsets
//! (strings), so a 262k-entry vocabulary costs two allocations, not 262k.

use crate::types::ValueType;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    /// Raw string bytes. GGUF says UTF-8; real vocabularies occasionally are not, so
    /// the bytes are kept verbatim and [`Value::as_str`] checks.
    String(Vec<u8>),
    U64(u64),
    I64(i64),
    F64(f64),
    Array(Array),
}

/// A homogeneous array; the variant is the element type, kept even when empty so
/// a file round-trips byte for byte.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(StringArray),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    /// An array of arrays; each inner array has its own element type.
    Array(Vec<Array>),
}

/// An array of byte strings packed into one buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StringArray {
    data: Vec<u8>,
    /// `ends[i]` is the end of string `i` in `data`; string `i` starts at `ends[i-1]` (or 0).
    ends: Vec<usize>,
}

impl StringArray {
    /// An empty array with room for `n` strings totalling `bytes` bytes.
    pub fn with_capacity(n: usize, bytes: usize) -> Self {
        Self {
            data: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(n),
        }
    }

    /// Append one string.
    pub fn push(&mut self, s: &[u8]) {
        self.data.extend_from_slice(s);
        self.ends.push(self.data.len());
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no strings.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// String `i` as bytes.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.data[start..end])
    }

    /// Iterate over the strings as bytes.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.len()).map(move |i| self.get(i).unwrap_or_default())
    }

    /// Total bytes of string data.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }
}

impl<S: AsRef<[u8]>> FromIterator<S> for StringArray {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let mut out = StringArray::default();
        for s in iter {
            out.push(s.as_ref());
        }
        out
    }
}

impl Value {
    /// The value's type tag.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
            Value::Array(_) => ValueType::Array,
        }
    }

    /// A string value as UTF-8 text (`None` if not a string or not valid UTF-8).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// An integer value (any integer width, or bool) as i128, so every integer fits.
    pub fn as_int(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            Value::Bool(v) => v.into(),
            _ => return None,
        })
    }

    /// A float value (f32 or f64) as f64.
    pub fn as_float(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    /// An array value.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// Convenience constructor for a UTF-8 string value.
    pub fn string(s: impl Into<String>) -> Self {
        Value::String(s.into().into_bytes())
    }
}

impl Array {
    /// Element type tag.
    pub fn item_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
            Array::Array(_) => ValueType::Array,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Array(v) => v.len(),
        }
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a scalar [`Value`] (strings copied); `None` for nested arrays or out of range.
    pub fn get(&self, i: usize) -> Option<Value> {
        Some(match self {
            Array::U8(v) => Value::U8(*v.get(i)?),
            Array::I8(v) => Value::I8(*v.get(i)?),
            Array::U16(v) => Value::U16(*v.get(i)?),
            Array::I16(v) => Value::I16(*v.get(i)?),
            Array::U32(v) => Value::U32(*v.get(i)?),
            Array::I32(v) => Value::I32(*v.get(i)?),
            Array::F32(v) => Value::F32(*v.get(i)?),
            Array::Bool(v) => Value::Bool(*v.get(i)?),
            Array::String(v) => Value::String(v.get(i)?.to_vec()),
            Array::U64(v) => Value::U64(*v.get(i)?),
            Array::I64(v) => Value::I64(*v.get(i)?),
            Array::F64(v) => Value::F64(*v.get(i)?),
            Array::Array(v) => Value::Array(v.get(i)?.clone()),
        })
    }

    /// The integer elements as i128 (any integer or bool element type), or `None` for
    /// float, string and nested arrays.
    pub fn to_ints(&self) -> Option<Vec<i128>> {
        fn conv<T: Copy + Into<i128>>(v: &[T]) -> Vec<i128> {
            v.iter().map(|&x| x.into()).collect()
        }
        Some(match self {
            Array::U8(v) => conv(v),
            Array::I8(v) => conv(v),
            Array::U16(v) => conv(v),
            Array::I16(v) => conv(v),
            Array::U32(v) => conv(v),
            Array::I32(v) => conv(v),
            Array::U64(v) => conv(v),
            Array::I64(v) => conv(v),
            Array::Bool(v) => conv(v),
            _ => return None,
        })
    }

    /// The string elements, if this is a string array.
    pub fn as_strings(&self) -> Option<&StringArray> {
        match self {
            Array::String(s) => Some(s),
            _ => None,
        }
    }

    /// The f32 elements, if this is an f32 array.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            Array::F32(v) => Some(v),
            _ => None,
        }
    }
}

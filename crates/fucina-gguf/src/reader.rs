//! Parsing of the GGUF header: magic, version, key/value section and tensor infos.
//!
//! Every length and count read from the file is checked against the bytes that
//! remain before anything is allocated, so a hostile header cannot make us
//! allocate more than a small multiple of the file size.

use crate::error::{GgufError, Result};
use crate::metadata::Metadata;
use crate::types::{GgmlType, ValueType};
use crate::value::{Array, StringArray, Value};

/// The four magic bytes at the start of every GGUF file.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`: tensors have at most this many dimensions.
pub const MAX_DIMS: u32 = 4;
/// Nesting limit for arrays of arrays; deeper files are rejected rather than
/// risking stack exhaustion (no real model nests more than one level).
pub const MAX_ARRAY_DEPTH: usize = 32;

/// One tensor's entry in the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Dimensions, ggml order (`ne`): fastest-varying first.
    pub dims: Vec<u64>,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Bytes of data.
    pub n_bytes: u64,
    /// Which file of a split model holds the data (0 for single files).
    pub part: usize,
}

impl TensorInfo {
    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Shape in row-major (numpy) order: the reverse of `dims`.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }
}

/// The parsed header of one GGUF file.
#[derive(Clone, Debug)]
pub struct Header {
    /// Format version (2 or 3).
    pub version: u32,
    /// Key/value metadata in file order.
    pub metadata: Metadata,
    /// Tensor infos in file order (`part` is 0; the split loader renumbers).
    pub tensors: Vec<TensorInfo>,
    /// Data alignment (`general.alignment` or 32).
    pub alignment: u64,
    /// Absolute byte offset where the tensor infos start (the end of the key/value section).
    pub tensor_infos_offset: u64,
    /// Absolute byte offset where the data section starts.
    pub data_offset: u64,
}

/// A bounds-checked little-endian reader over a byte slice.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn pos(&self) -> u64 {
        self.pos as u64
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let available = self.remaining() as u64;
        if n > available {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos(),
                needed: n,
                available,
            });
        }
        let n = n as usize; // n <= remaining, which is a usize
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A GGUF string: u64 length then bytes.
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let len = self.u64(&|| format!("length of {}", what()))?;
        self.take(len, what)
    }

    /// A count of elements of at least `min_size` bytes each, checked against the bytes left.
    fn count(&mut self, min_size: usize, what: &dyn Fn() -> String) -> Result<usize> {
        let at = self.pos();
        let n = self.u64(what)?;
        let need = n.checked_mul(min_size as u64);
        match need {
            Some(need) if need <= self.remaining() as u64 => Ok(n as usize),
            _ => Err(GgufError::malformed(
                at,
                format!(
                    "{} is {n}, but {} bytes remain (each entry needs at least {min_size})",
                    what(),
                    self.remaining()
                ),
            )),
        }
    }
}

fn value_type(c: &mut Cursor<'_>, what: &dyn Fn() -> String) -> Result<ValueType> {
    let at = c.pos();
    let id = c.u32(what)?;
    ValueType::from_u32(id).ok_or_else(|| {
        GgufError::malformed(at, format!("{}: unknown metadata value type {id}", what()))
    })
}

fn read_scalar(c: &mut Cursor<'_>, ty: ValueType, what: &dyn Fn() -> String) -> Result<Value> {
    Ok(match ty {
        ValueType::U8 => Value::U8(c.array::<1>(what)?[0]),
        ValueType::I8 => Value::I8(c.array::<1>(what)?[0] as i8),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array(what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array(what)?)),
        ValueType::U32 => Value::U32(c.u32(what)?),
        ValueType::I32 => Value::I32(i32::from_le_bytes(c.array(what)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array(what)?)),
        ValueType::Bool => {
            let at = c.pos();
            match c.array::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => {
                    return Err(GgufError::malformed(
                        at,
                        format!("{}: bool byte is {b}, not 0 or 1", what()),
                    ))
                }
            }
        }
        ValueType::String => Value::String(c.string(what)?.to_vec()),
        ValueType::U64 => Value::U64(c.u64(what)?),
        ValueType::I64 => Value::I64(i64::from_le_bytes(c.array(what)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array(what)?)),
        ValueType::Array => Value::Array(read_array(c, 0, what)?),
    })
}

fn fixed<T, const N: usize>(
    c: &mut Cursor<'_>,
    n: usize,
    what: &dyn Fn() -> String,
    conv: fn([u8; N]) -> T,
) -> Result<Vec<T>> {
    // `count` already checked n * N <= remaining, so this take cannot fail and the
    // allocation is bounded by the file.
    let bytes = c.take((n * N) as u64, what)?;
    Ok(bytes
        .chunks_exact(N)
        .map(|ch| {
            let mut a = [0u8; N];
            a.copy_from_slice(ch);
            conv(a)
        })
        .collect())
}

/// An array body: item type, count, items.
fn read_array(c: &mut Cursor<'_>, depth: usize, what: &dyn Fn() -> String) -> Result<Array> {
    if depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::malformed(
            c.pos(),
            format!("{}: arrays nested deeper than {MAX_ARRAY_DEPTH}", what()),
        ));
    }
    let item = value_type(c, &|| format!("item type of {}", what()))?;
    let n = c.count(item.min_size(), &|| format!("element count of {}", what()))?;
    Ok(match item {
        ValueType::U8 => Array::U8(fixed(c, n, what, |b: [u8; 1]| b[0])?),
        ValueType::I8 => Array::I8(fixed(c, n, what, |b: [u8; 1]| b[0] as i8)?),
        ValueType::U16 => Array::U16(fixed(c, n, what, u16::from_le_bytes)?),
        ValueType::I16 => Array::I16(fixed(c, n, what, i16::from_le_bytes)?),
        ValueType::U32 => Array::U32(fixed(c, n, what, u32::from_le_bytes)?),
        ValueType::I32 => Array::I32(fixed(c, n, what, i32::from_le_bytes)?),
        ValueType::F32 => Array::F32(fixed(c, n, what, f32::from_le_bytes)?),
        ValueType::U64 => Array::U64(fixed(c, n, what, u64::from_le_bytes)?),
        ValueType::I64 => Array::I64(fixed(c, n, what, i64::from_le_bytes)?),
        ValueType::F64 => Array::F64(fixed(c, n, what, f64::from_le_bytes)?),
        ValueType::Bool => {
            let at = c.pos();
            let bytes = c.take(n as u64, what)?;
            if let Some(i) = bytes.iter().position(|&b| b > 1) {
                return Err(GgufError::malformed(
                    at + i as u64,
                    format!("{}[{i}]: bool byte is {}, not 0 or 1", what(), bytes[i]),
                ));
            }
            Array::Bool(bytes.iter().map(|&b| b == 1).collect())
        }
        ValueType::String => {
            let mut out = StringArray::with_capacity(n, c.remaining().min(1 << 20));
            for i in 0..n {
                out.push(c.string(&|| format!("{}[{i}]", what()))?);
            }
            Array::String(out)
        }
        ValueType::Array => {
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                out.push(read_array(c, depth + 1, &|| format!("{}[{i}]", what()))?);
            }
            Array::Array(out)
        }
    })
}

/// How much of the header to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Extent {
    /// Check tensor data ranges against the file length.
    Full,
    /// Stop after tensor infos: the data section may be absent (partial download).
    HeaderOnly,
}

/// Parse a whole header from the start of `buf` (the file, or its first bytes).
pub(crate) fn parse_header(buf: &[u8], extent: Extent) -> Result<Header> {
    let mut c = Cursor::new(buf);
    let magic: [u8; 4] = c.array(&|| "magic".into())?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32(&|| "version".into())?;
    match version {
        2 | 3 => {}
        v if v & 0xFFFF == 0 && v != 0 => {
            return Err(GgufError::malformed(
                4,
                format!(
                "version field {v:#x} looks byte-swapped: big-endian GGUF files are not supported"
            ),
            ))
        }
        v => return Err(GgufError::UnsupportedVersion { version: v }),
    }
    // A tensor info takes at least 8 (name len) + 4 (n_dims) + 4 (type) + 8 (offset) bytes.
    let n_tensors = c.count(24, &|| "tensor count".into())?;
    // A key/value pair takes at least 8 (key len) + 4 (type) + 1 (smallest value) bytes.
    let n_kv = c.count(13, &|| "metadata key/value count".into())?;

    let mut metadata = Metadata::with_capacity(n_kv);
    for i in 0..n_kv {
        let key_at = c.pos();
        let key_bytes = c.string(&|| format!("key of metadata entry {i}"))?;
        let key = std::str::from_utf8(key_bytes)
            .map_err(|e| {
                GgufError::malformed(key_at, format!("metadata key {i} is not valid UTF-8: {e}"))
            })?
            .to_owned();
        let what = || format!("value of '{key}'");
        let ty = value_type(&mut c, &what)?;
        let value = read_scalar(&mut c, ty, &what)?;
        if metadata.contains_key(&key) {
            return Err(GgufError::malformed(
                key_at,
                format!("duplicate metadata key '{key}'"),
            ));
        }
        metadata.insert(key, value);
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(other) => {
            return Err(GgufError::InvalidValue {
                key: "general.alignment".into(),
                message: format!("must be a UINT32 power of two, found {other:?}"),
            })
        }
    };

    let tensor_infos_offset = c.pos();
    let mut tensors = Vec::with_capacity(n_tensors);
    let mut seen = std::collections::HashSet::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let info_at = c.pos();
        let name_bytes = c.string(&|| format!("name of tensor {i}"))?;
        let name = std::str::from_utf8(name_bytes)
            .map_err(|e| {
                GgufError::malformed(
                    info_at,
                    format!("name of tensor {i} is not valid UTF-8: {e}"),
                )
            })?
            .to_owned();
        let dims_at = c.pos();
        let n_dims = c.u32(&|| format!("dimension count of tensor '{name}'"))?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::malformed(
                dims_at,
                format!("tensor '{name}' has {n_dims} dimensions (ggml allows at most {MAX_DIMS})"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            let dim_at = c.pos();
            let dim = c.u64(&|| format!("dimension {d} of tensor '{name}'"))?;
            if dim > i64::MAX as u64 {
                return Err(GgufError::malformed(
                    dim_at,
                    format!("tensor '{name}' dimension {d} is {dim} (> i64::MAX)"),
                ));
            }
            dims.push(dim);
        }
        let type_at = c.pos();
        let type_id = c.u32(&|| format!("type of tensor '{name}'"))?;
        let ggml_type = GgmlType::from_u32(type_id).ok_or_else(|| {
            GgufError::malformed(
                type_at,
                format!("tensor '{name}' has unknown ggml type {type_id}"),
            )
        })?;
        let offset_at = c.pos();
        let offset = c.u64(&|| format!("data offset of tensor '{name}'"))?;
        if dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .is_none_or(|n| n > i64::MAX as u64)
        {
            return Err(GgufError::malformed(
                dims_at,
                format!("tensor '{name}' element count overflows: dims {dims:?}"),
            ));
        }
        let n_bytes = ggml_type.tensor_bytes(&dims).ok_or_else(|| {
            GgufError::malformed(
                dims_at,
                format!(
                    "tensor '{name}' of type {ggml_type} has first dimension {} that is not a multiple of the block size {}",
                    dims.first().copied().unwrap_or(1),
                    ggml_type.block_size()
                ),
            )
        })?;
        if offset % alignment != 0 {
            return Err(GgufError::malformed(
                offset_at,
                format!("tensor '{name}' data offset {offset} is not a multiple of the alignment {alignment}"),
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(GgufError::malformed(
                info_at,
                format!("duplicate tensor name '{name}'"),
            ));
        }
        tensors.push(TensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            n_bytes,
            part: 0,
        });
    }

    let data_offset = c.pos().div_ceil(alignment) * alignment;
    let header = Header {
        version,
        metadata,
        tensors,
        alignment,
        tensor_infos_offset,
        data_offset,
    };
    if extent == Extent::Full {
        check_data_ranges(&header, buf.len() as u64)?;
    }
    Ok(header)
}

/// Every tensor's data must lie inside the file and no two may overlap.
pub(crate) fn check_data_ranges(header: &Header, file_len: u64) -> Result<()> {
    let data_len = file_len.saturating_sub(header.data_offset);
    // Report the first tensor in file order whose data is out of range.
    for t in &header.tensors {
        let end = t.offset.checked_add(t.n_bytes);
        if end.is_none_or(|end| end > data_len) {
            return Err(GgufError::tensor(
                &t.name,
                format!(
                    "data at bytes {}..{} lies past the end of the file ({file_len} bytes): the file is truncated or its header is wrong",
                    header.data_offset.saturating_add(t.offset),
                    header.data_offset.saturating_add(t.offset).saturating_add(t.n_bytes),
                ),
            ));
        }
    }
    let mut order: Vec<&TensorInfo> = header.tensors.iter().filter(|t| t.n_bytes > 0).collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.offset + a.n_bytes > b.offset {
            return Err(GgufError::tensor(
                &b.name,
                format!(
                    "data at offset {} overlaps tensor '{}' (offset {}, {} bytes)",
                    b.offset, a.name, a.offset, a.n_bytes
                ),
            ));
        }
    }
    Ok(())
}

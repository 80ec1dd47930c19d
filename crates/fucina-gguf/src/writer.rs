//! `GgufWriter`: builds GGUF v3 (or v2) files in the layout gguf-py and llama.cpp write:
//! header, key/values, tensor infos, padding to the alignment, then each tensor's
//! data padded to the alignment. Files are written to a temporary sibling and
//! renamed into place, so a failed write never clobbers an existing file.

use std::borrow::Cow;
use std::io::{self, Write};
use std::path::Path;

use crate::error::{GgufError, Result};
use crate::file::{GgufFile, Part};
use crate::metadata::Metadata;
use crate::reader::{DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS};
use crate::types::GgmlType;
use crate::value::{Array, Value};

struct PendingTensor<'a> {
    name: String,
    dims: Vec<u64>,
    ggml_type: GgmlType,
    data: Cow<'a, [u8]>,
}

/// Accumulates metadata and tensors, then writes one GGUF file.
pub struct GgufWriter<'a> {
    version: u32,
    metadata: Metadata,
    tensors: Vec<PendingTensor<'a>>,
}

impl Default for GgufWriter<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> GgufWriter<'a> {
    /// An empty GGUF v3 writer.
    pub fn new() -> Self {
        Self {
            version: 3,
            metadata: Metadata::default(),
            tensors: Vec::new(),
        }
    }

    /// Write a v2 file instead of v3 (same layout; for round-tripping old files).
    pub fn set_version(&mut self, version: u32) -> Result<()> {
        if !(2..=3).contains(&version) {
            return Err(GgufError::Writer(format!(
                "can only write GGUF versions 2 and 3, not {version}"
            )));
        }
        self.version = version;
        Ok(())
    }

    /// A writer holding one part's metadata and tensors, borrowing the tensor bytes:
    /// writing it reproduces a file written in the standard layout byte for byte.
    pub fn from_part(file: &'a GgufFile, part: usize) -> Result<Self> {
        let p: &Part = file.parts().get(part).ok_or_else(|| {
            GgufError::Writer(format!(
                "the model has {} parts, not {}",
                file.parts().len(),
                part + 1
            ))
        })?;
        let header = p.header();
        let mut w = GgufWriter {
            version: header.version,
            metadata: header.metadata.clone(),
            tensors: Vec::new(),
        };
        for t in &header.tensors {
            let info = file.tensor(&t.name)?;
            w.add_tensor(
                &t.name,
                t.ggml_type,
                &t.dims,
                Cow::Borrowed(file.info_bytes(info)?),
            )?;
        }
        Ok(w)
    }

    /// The same writer owning copies of every borrowed tensor's bytes, so it no longer
    /// borrows the file it was made from.
    pub fn into_owned(self) -> GgufWriter<'static> {
        GgufWriter {
            version: self.version,
            metadata: self.metadata,
            tensors: self
                .tensors
                .into_iter()
                .map(|t| PendingTensor {
                    name: t.name,
                    dims: t.dims,
                    ggml_type: t.ggml_type,
                    data: Cow::Owned(t.data.into_owned()),
                })
                .collect(),
        }
    }

    /// The metadata to be written (mutable: insert, replace or remove keys).
    pub fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    /// Set a key (new keys are appended; existing keys keep their place).
    pub fn set(&mut self, key: impl Into<String>, value: Value) {
        self.metadata.insert(key, value);
    }

    /// Add a tensor with dims in ggml order (fastest-varying first).
    pub fn add_tensor(
        &mut self,
        name: &str,
        ggml_type: GgmlType,
        dims: &[u64],
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<()> {
        let data = data.into();
        if dims.len() > MAX_DIMS as usize {
            return Err(GgufError::Writer(format!(
                "tensor '{name}' has {} dims (max {MAX_DIMS})",
                dims.len()
            )));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::Writer(format!("duplicate tensor name '{name}'")));
        }
        let expected = ggml_type.tensor_bytes(dims).ok_or_else(|| {
            GgufError::Writer(format!(
                "tensor '{name}': dims {dims:?} do not fit type {ggml_type} (block size {})",
                ggml_type.block_size()
            ))
        })?;
        if expected != data.len() as u64 {
            return Err(GgufError::Writer(format!(
                "tensor '{name}': {ggml_type} {dims:?} needs {expected} bytes, got {}",
                data.len()
            )));
        }
        self.tensors.push(PendingTensor {
            name: name.into(),
            dims: dims.to_vec(),
            ggml_type,
            data,
        });
        Ok(())
    }

    fn alignment(&self) -> Result<u64> {
        match self.metadata.get("general.alignment") {
            None => Ok(DEFAULT_ALIGNMENT),
            Some(Value::U32(a)) if a.is_power_of_two() => Ok(u64::from(*a)),
            Some(other) => Err(GgufError::Writer(format!(
                "general.alignment must be a UINT32 power of two, not {other:?}"
            ))),
        }
    }

    /// Serialize to any writer.
    pub fn write_to(&self, out: &mut impl Write) -> Result<()> {
        let align = self.alignment()?;
        let io = |e: io::Error| GgufError::Writer(e.to_string());
        let mut header = Vec::with_capacity(1 << 16);
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&self.version.to_le_bytes());
        header.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in self.metadata.iter() {
            put_str(&mut header, key.as_bytes());
            header.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            put_value(&mut header, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(&mut header, t.name.as_bytes());
            header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                header.extend_from_slice(&d.to_le_bytes());
            }
            header.extend_from_slice(&t.ggml_type.id().to_le_bytes());
            header.extend_from_slice(&offset.to_le_bytes());
            offset += (t.data.len() as u64).div_ceil(align) * align;
        }
        pad(&mut header, align);
        out.write_all(&header).map_err(io)?;
        let zeros = vec![0u8; align as usize];
        for t in &self.tensors {
            out.write_all(&t.data).map_err(io)?;
            let rem = (t.data.len() as u64 % align) as usize;
            if rem != 0 {
                out.write_all(&zeros[..align as usize - rem]).map_err(io)?;
            }
        }
        Ok(())
    }

    /// Serialize to memory.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        Ok(out)
    }

    /// Write to `path` atomically: a temporary file in the same directory, synced, then
    /// renamed over `path`.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let file_name = path
            .file_name()
            .ok_or_else(|| GgufError::Writer(format!("{} is not a file path", path.display())))?;
        let tmp = path.with_file_name(format!(
            ".{}.tmp-{}",
            file_name.to_string_lossy(),
            std::process::id()
        ));
        let result = (|| {
            let file = std::fs::File::create(&tmp).map_err(|e| GgufError::io(&tmp, e))?;
            let mut buf = io::BufWriter::with_capacity(1 << 20, file);
            self.write_to(&mut buf)?;
            let file = buf
                .into_inner()
                .map_err(|e| GgufError::io(&tmp, e.into_error()))?;
            file.sync_all().map_err(|e| GgufError::io(&tmp, e))?;
            std::fs::rename(&tmp, path).map_err(|e| GgufError::io(path, e))
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

fn pad(buf: &mut Vec<u8>, align: u64) {
    let len = buf.len() as u64;
    buf.resize((len.div_ceil(align) * align) as usize, 0);
}

fn put_str(buf: &mut Vec<u8>, s: &[u8]) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s);
}

fn put_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => buf.push(*x),
        Value::I8(x) => buf.push(*x as u8),
        Value::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => buf.push(u8::from(*x)),
        Value::String(s) => put_str(buf, s),
        Value::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::Array(a) => put_array(buf, a),
    }
}

fn put_array(buf: &mut Vec<u8>, a: &Array) {
    buf.extend_from_slice(&(a.item_type() as u32).to_le_bytes());
    buf.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each_le {
        ($v:expr) => {
            for x in $v {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => buf.extend_from_slice(v),
        Array::I8(v) => each_le!(v),
        Array::U16(v) => each_le!(v),
        Array::I16(v) => each_le!(v),
        Array::U32(v) => each_le!(v),
        Array::I32(v) => each_le!(v),
        Array::F32(v) => each_le!(v),
        Array::Bool(v) => buf.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => {
            for s in v.iter() {
                put_str(buf, s);
            }
        }
        Array::U64(v) => each_le!(v),
        Array::I64(v) => each_le!(v),
        Array::F64(v) => each_le!(v),
        Array::Array(v) => {
            for inner in v {
                put_array(buf, inner);
            }
        }
    }
}

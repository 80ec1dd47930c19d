//! Binding GGUF tensors, by llama.cpp's tensor names, to typed weights (spec §13.2).
//!
//! A [`Linear`] keeps the tensor's bytes where they are (the mmapped file, shared
//! through an `Arc`) in their GGUF precision: nothing is widened at load time, so
//! binding a model is a metadata walk. A stacked MoE tensor (`[in, out, n_expert]`)
//! binds as one `Linear` per expert over that expert's block of rows of the same
//! mapping ([`Linear::bind_stack`]). The one exception is [`Linear::repack`]: Q4_K,
//! Q8_0 and Q6_K matrices the kernels have an interleaved form for are copied, still
//! in their type's bits, into interleaved 8-row groups (the model does it at load; bitwise the same results),
//! and the file's pages of the original rows leave the resident set. Norm weights and
//! biases are small and are read into `Vec<f32>`. A streamed expert is the same
//! `Linear` over bytes the expert store read ([`Linear::with_bytes`]).

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use fucina_gguf::{GgmlType, GgufFile, TensorInfo};
use fucina_quant::{DotEntry, Kernels, Packed};

use crate::{ModelError, Result};

/// A `[out, in]` weight matrix in its GGUF block format, borrowed from the file.
#[derive(Clone)]
pub struct Linear {
    name: Arc<str>,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    file: Arc<GgufFile>,
    part: usize,
    range: Range<usize>,
    dot: DotEntry,
    /// The interleaved form once made (shared by clones; set at most once).
    packed: Arc<OnceLock<Packed>>,
    /// Bytes read elsewhere (a streamed expert): `range` indexes these instead of
    /// the file. Such a matrix is never repacked.
    owned: Option<OwnedBytes>,
    /// One matrix of a 3-D tensor ([`Linear::bind_stack`]): never repacked (experts
    /// stay row blocks of the mapping; a 3-D `mul_mat` weight such as MLA's
    /// `attn_v_b` is one ggml never repacks, so its kernels keep the unpacked order).
    stacked: bool,
}

/// Bytes a [`Linear`] can multiply with instead of its mapping.
pub type OwnedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

impl std::fmt::Debug for Linear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Linear")
            .field("name", &self.name)
            .field("ty", &self.ty)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish()
    }
}

impl Linear {
    /// Bind tensor `name` as an `[rows (out), cols (in)]` matrix: GGUF dims must be
    /// exactly `[cols, rows]` (ggml order) and the type must have a dot kernel.
    pub fn bind(file: &Arc<GgufFile>, name: &str, rows: usize, cols: usize) -> Result<Linear> {
        let mut one = Linear::bind_blocks(file, name, rows, cols, None)?;
        one.pop()
            .ok_or_else(|| ModelError::MissingTensor(name.to_owned()))
    }

    /// Bind a 1-D tensor of exactly `cols` elements as a one-row matrix (a
    /// projection to one output, e.g. Qwen2-MoE's shared-expert gate).
    pub fn bind_row(file: &Arc<GgufFile>, name: &str, cols: usize) -> Result<Linear> {
        let mut one = Linear::bind_blocks(file, name, 1, cols, Some(0))?;
        one.pop()
            .ok_or_else(|| ModelError::MissingTensor(name.to_owned()))
    }

    /// Bind a stacked tensor of `n` matrices (MoE experts: GGUF dims exactly
    /// `[cols, rows, n]`, ggml order) as `n` matrices, matrix `i` being the `i`-th
    /// block of `rows` rows of the mapping: nothing is copied or widened. Each is
    /// named `name[i]` in errors.
    pub fn bind_stack(
        file: &Arc<GgufFile>,
        name: &str,
        n: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Vec<Linear>> {
        Linear::bind_blocks(file, name, rows, cols, Some(n))
    }

    /// [`Linear::bind`] (`stack: None`, dims `[cols, rows]`),
    /// [`Linear::bind_stack`] (`Some(n)`, dims `[cols, rows, n]`) or
    /// [`Linear::bind_row`] (`Some(0)`, `rows == 1`, dims `[cols]`).
    fn bind_blocks(
        file: &Arc<GgufFile>,
        name: &str,
        rows: usize,
        cols: usize,
        stack: Option<usize>,
    ) -> Result<Vec<Linear>> {
        let info = tensor_info(file, name)?;
        let mut expected = vec![cols as u64, rows as u64];
        match stack {
            Some(0) => expected.truncate(1),
            Some(n) => expected.push(n as u64),
            None => {}
        }
        let shape_err = || ModelError::WeightShape {
            name: name.to_owned(),
            found: info.dims.clone(),
            expected: expected.clone(),
        };
        if info.dims != expected {
            return Err(shape_err());
        }
        let format =
            fucina_quant::format(info.ggml_type).ok_or(ModelError::UnsupportedWeightType {
                name: name.to_owned(),
                ty: info.ggml_type,
                why: "unknown block format",
            })?;
        if format.dot.is_none() || format.dequantize.is_none() {
            return Err(ModelError::UnsupportedWeightType {
                name: name.to_owned(),
                ty: info.ggml_type,
                why: "no dot product for this type",
            });
        }
        if cols % format.block_size != 0 {
            return Err(ModelError::UnsupportedWeightType {
                name: name.to_owned(),
                ty: info.ggml_type,
                why: "row length is not a whole number of blocks",
            });
        }
        let dot = Kernels::from_env()?.entry(info.ggml_type)?;
        let row_bytes = cols / format.block_size * format.type_size;
        let (part, range) = locate(file, info)?;
        let n = stack.filter(|&n| n > 0).unwrap_or(1);
        let block = row_bytes.checked_mul(rows).ok_or_else(shape_err)?;
        if block.checked_mul(n) != Some(range.len()) {
            return Err(shape_err());
        }
        let linear = |i: usize| Linear {
            name: match stack {
                Some(n) if n > 0 => format!("{name}[{i}]").into(),
                _ => name.into(),
            },
            ty: info.ggml_type,
            rows,
            cols,
            row_bytes,
            file: Arc::clone(file),
            part,
            range: range.start + i * block..range.start + (i + 1) * block,
            dot,
            packed: Arc::new(OnceLock::new()),
            owned: None,
            stacked: stack.is_some_and(|n| n > 0),
        };
        Ok((0..n).map(linear).collect())
    }

    /// The matrix split after row `at` into two views of the same mapping (a
    /// fused gate/up expert's halves); `None` when `at` is not inside the matrix.
    pub fn split_rows(&self, at: usize, names: [&str; 2]) -> Option<(Linear, Linear)> {
        if at == 0 || at >= self.rows {
            return None;
        }
        let mid = self.range.start + at * self.row_bytes;
        let part = |name: &str, rows: usize, range: Range<usize>| Linear {
            name: name.into(),
            rows,
            range,
            packed: Arc::new(OnceLock::new()),
            ..self.clone()
        };
        Some((
            part(names[0], at, self.range.start..mid),
            part(names[1], self.rows - at, mid..self.range.end),
        ))
    }

    /// Whether [`Linear::repack`] would repack this matrix (a type and ISA with
    /// packed kernels, rows % 8 == 0: fucina-quant's [`Packed::supported`]; not a
    /// matrix of a 3-D tensor).
    pub fn repackable(&self) -> bool {
        self.owned.is_none() && !self.stacked && Packed::supported(&self.dot, self.rows)
    }

    /// Repack the matrix for the matmul kernels (fucina-quant's `repack`: Q4_K, Q8_0
    /// and Q6_K as interleaved 8-row groups) when [`Linear::repackable`]; the file's pages of the
    /// row-major bytes are then released from the resident set (reading
    /// [`Linear::bytes`] faults them back in). Results are bitwise unchanged, so the
    /// matmuls may switch to the packed form at any moment.
    pub fn repack(&self) -> Result<()> {
        match self.repack_job() {
            Some(job) => job.run(),
            None => Ok(()),
        }
    }

    /// The work of [`Linear::repack`] as a job another thread can run (it holds only
    /// shared handles), or `None` when there is nothing to do.
    pub fn repack_job(&self) -> Option<RepackJob> {
        if self.packed.get().is_some() || !self.repackable() {
            return None;
        }
        Some(RepackJob {
            file: Arc::clone(&self.file),
            part: self.part,
            range: self.range.clone(),
            dot: self.dot,
            rows: self.rows,
            cols: self.cols,
            slot: Arc::clone(&self.packed),
        })
    }

    /// Bytes a multiply with this matrix reads: the packed form's once there is one
    /// (more than the file's for widened Q4_0 / Q5_0), else the row-major bytes'.
    pub fn stream_bytes(&self) -> usize {
        self.packed()
            .map_or_else(|| self.bytes().len(), |p| p.bytes().len())
    }

    /// The repacked form, once [`Linear::repack`] (or its job) has made it.
    pub fn packed(&self) -> Option<&Packed> {
        match self.owned {
            None => self.packed.get(),
            Some(_) => None,
        }
    }

    /// This matrix (same name, type and shape) over `bytes[range]` instead of
    /// the mapping: an expert the expert store read. `range` must hold exactly
    /// the matrix's bytes.
    pub fn with_bytes(&self, bytes: OwnedBytes, range: Range<usize>) -> Result<Linear> {
        let want = self.rows * self.row_bytes;
        if range.len() != want || range.end > (*bytes).as_ref().len() {
            return Err(ModelError::InvalidBatch(format!(
                "'{}': {} streamed bytes for a {want}-byte matrix",
                self.name,
                range.len()
            )));
        }
        Ok(Linear {
            range,
            owned: Some(bytes),
            ..self.clone()
        })
    }

    /// Where the matrix's bytes lie in the model: the file part and the byte range
    /// in that file (`None` once it is over other bytes).
    pub fn file_range(&self) -> Option<(usize, Range<usize>)> {
        match self.owned {
            None => Some((self.part, self.range.clone())),
            Some(_) => None,
        }
    }

    /// The dot kernel (and activation format) this weight multiplies with.
    pub fn dot(&self) -> &DotEntry {
        &self.dot
    }

    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The block format.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }
    /// Output features (rows).
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Input features (columns).
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// All rows' bytes, row-major.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        // The range was validated against this part's bytes (or the owned bytes) at
        // bind time and both are immutable, so the slice is in bounds.
        match &self.owned {
            None => &self.file.parts()[self.part].bytes()[self.range.clone()],
            Some(b) => &(**b).as_ref()[self.range.clone()],
        }
    }

    /// Dequantize row `i` into `out` (`out.len() == cols`): the embedding lookup.
    pub fn dequantize_row(&self, i: usize, out: &mut [f32]) -> Result<()> {
        if i >= self.rows {
            return Err(ModelError::InvalidBatch(format!(
                "row {i} of '{}' ({} rows)",
                self.name, self.rows
            )));
        }
        let b = &self.bytes()[i * self.row_bytes..(i + 1) * self.row_bytes];
        fucina_quant::dequantize(self.ty, b, out)?;
        Ok(())
    }
}

/// The repacking of one [`Linear`] ([`Linear::repack_job`]), runnable on any thread.
pub struct RepackJob {
    file: Arc<GgufFile>,
    part: usize,
    range: Range<usize>,
    dot: DotEntry,
    rows: usize,
    cols: usize,
    slot: Arc<OnceLock<Packed>>,
}

impl RepackJob {
    /// Bytes the job repacks.
    pub fn len(&self) -> usize {
        self.range.len()
    }

    /// Whether this CPU runs the packed form faster ([`Packed::pays_off`]; the first
    /// call for a type may measure it, about 10 ms).
    pub fn pays_off(&self) -> bool {
        Packed::pays_off(&self.dot)
    }

    /// Bytes the packed form takes beyond the row-major ones: 0, except for Q4_0 and
    /// Q5_0 (widened to Q8_0 blocks: fucina-quant's [`Packed::packed_len`]).
    pub fn growth(&self) -> usize {
        Packed::packed_len(&self.dot, self.rows, self.cols).saturating_sub(self.range.len())
    }

    /// Whether the job has no bytes to repack.
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    /// Repack, publish the packed form to the `Linear` (and its clones), release the
    /// file's pages of the row-major bytes. Nothing to do once the weights are gone
    /// (every `Linear` sharing the slot dropped) or already packed.
    pub fn run(self) -> Result<()> {
        if self.slot.get().is_some() || Arc::strong_count(&self.slot) == 1 {
            return Ok(());
        }
        let part = &self.file.parts()[self.part];
        let bytes = &part.bytes()[self.range.clone()];
        let base = self.range.start;
        // Each packed slice's source pages leave the resident set at once (matmuls
        // still reading the row-major bytes fault them back in: same bytes), so the
        // peak grows by the packed copy only, not by the whole source as well.
        let release = |r: Range<usize>| part.release(base + r.start..base + r.end);
        if let Some(p) = Packed::new_releasing(&self.dot, bytes, self.rows, self.cols, release)? {
            if self.slot.set(p).is_ok() {
                part.release(self.range.clone());
            }
        }
        Ok(())
    }
}

fn tensor_info<'a>(file: &'a GgufFile, name: &str) -> Result<&'a TensorInfo> {
    file.tensors()
        .get(name)
        .ok_or_else(|| ModelError::MissingTensor(name.to_owned()))
}

fn locate(file: &GgufFile, info: &TensorInfo) -> Result<(usize, Range<usize>)> {
    let bytes = file.info_bytes(info)?;
    let part = &file.parts()[info.part];
    let base = part.bytes().as_ptr() as usize;
    let start = bytes.as_ptr() as usize - base;
    Ok((info.part, start..start + bytes.len()))
}

/// Whether the file holds tensor `name`.
pub fn has_tensor(file: &GgufFile, name: &str) -> bool {
    file.tensors().contains_key(name)
}

/// Read a 1-D tensor of exactly `len` elements (F32/F16/BF16) into f32.
pub fn load_vector(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>> {
    load_small(file, name, &[len as u64], len)
}

/// Read a small 2-D tensor of GGUF dims exactly `[cols, rows]` (F32/F16/BF16) into
/// `rows × cols` f32, row-major (a DeltaNet layer's convolution kernel).
pub fn load_small_matrix(
    file: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<Vec<f32>> {
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| ModelError::WeightShape {
            name: name.to_owned(),
            found: Vec::new(),
            expected: vec![cols as u64, rows as u64],
        })?;
    load_small(file, name, &[cols as u64, rows as u64], n)
}

fn load_small(file: &GgufFile, name: &str, dims: &[u64], len: usize) -> Result<Vec<f32>> {
    let info = tensor_info(file, name)?;
    if info.dims.as_slice() != dims {
        return Err(ModelError::WeightShape {
            name: name.to_owned(),
            found: info.dims.clone(),
            expected: dims.to_vec(),
        });
    }
    if !matches!(
        info.ggml_type,
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16
    ) {
        return Err(ModelError::UnsupportedWeightType {
            name: name.to_owned(),
            ty: info.ggml_type,
            why: "vectors must be F32, F16 or BF16",
        });
    }
    let mut out = vec![0f32; len];
    fucina_quant::dequantize(info.ggml_type, file.info_bytes(info)?, &mut out)?;
    Ok(out)
}

/// [`load_vector`] when the tensor is present, `None` when it is absent.
pub fn load_vector_opt(file: &GgufFile, name: &str, len: usize) -> Result<Option<Vec<f32>>> {
    if has_tensor(file, name) {
        load_vector(file, name, len).map(Some)
    } else {
        Ok(None)
    }
}

/// `blk.{il}.{suffix}`: the GGUF per-layer tensor name.
pub fn layer_name(il: usize, suffix: &str) -> String {
    format!("blk.{il}.{suffix}")
}

//! Python bindings for `fucina-gguf`: `GGUFFile`, `TensorInfo`, `GGUFWriter`, `read_gguf_header`.

use std::path::PathBuf;
use std::sync::Arc;

use fucina_gguf::{
    Array, GgmlType, GgufFile, GgufWriter, OpenOptions, TensorInfo, Value, ValueType,
};
use numpy::ndarray::ArrayView1;
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::errors::{gguf_err, gguf_error, raise};

fn gguf_value_error(msg: String) -> PyErr {
    Python::attach(|py| match gguf_error(py) {
        Ok(ty) => raise(ty, msg),
        Err(e) => e,
    })
}

/// Convert a metadata value to plain Python objects (lists for arrays).
pub(crate) fn value_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::U8(x) => x.into_pyobject(py)?.into_any(),
        Value::I8(x) => x.into_pyobject(py)?.into_any(),
        Value::U16(x) => x.into_pyobject(py)?.into_any(),
        Value::I16(x) => x.into_pyobject(py)?.into_any(),
        Value::U32(x) => x.into_pyobject(py)?.into_any(),
        Value::I32(x) => x.into_pyobject(py)?.into_any(),
        Value::U64(x) => x.into_pyobject(py)?.into_any(),
        Value::I64(x) => x.into_pyobject(py)?.into_any(),
        Value::F32(x) => f64::from(*x).into_pyobject(py)?.into_any(),
        Value::F64(x) => x.into_pyobject(py)?.into_any(),
        Value::Bool(x) => PyBool::new(py, *x).to_owned().into_any(),
        Value::String(s) => str_or_bytes(py, s),
        Value::Array(a) => array_to_py(py, a)?.into_any(),
    })
}

fn str_or_bytes<'py>(py: Python<'py>, s: &[u8]) -> Bound<'py, PyAny> {
    match std::str::from_utf8(s) {
        Ok(t) => PyString::new(py, t).into_any(),
        Err(_) => PyBytes::new(py, s).into_any(),
    }
}

fn array_to_py<'py>(py: Python<'py>, a: &Array) -> PyResult<Bound<'py, PyList>> {
    match a {
        Array::U8(v) => PyList::new(py, v),
        Array::I8(v) => PyList::new(py, v),
        Array::U16(v) => PyList::new(py, v),
        Array::I16(v) => PyList::new(py, v),
        Array::U32(v) => PyList::new(py, v),
        Array::I32(v) => PyList::new(py, v),
        Array::U64(v) => PyList::new(py, v),
        Array::I64(v) => PyList::new(py, v),
        Array::F32(v) => PyList::new(py, v.iter().map(|&x| f64::from(x))),
        Array::F64(v) => PyList::new(py, v),
        Array::Bool(v) => PyList::new(py, v),
        Array::String(v) => PyList::new(py, v.iter().map(|s| str_or_bytes(py, s))),
        Array::Array(v) => PyList::new(
            py,
            v.iter()
                .map(|inner| array_to_py(py, inner))
                .collect::<PyResult<Vec<_>>>()?,
        ),
    }
}

/// gguf-py-style type name: `UINT32`, `ARRAY[STRING]`, `ARRAY[ARRAY[INT32]]`.
fn type_name(v: &Value) -> String {
    fn arr(a: &Array) -> String {
        match a {
            Array::Array(inner) => match inner.first() {
                Some(first) => format!("ARRAY[{}]", arr(first)),
                None => "ARRAY[ARRAY]".into(),
            },
            other => format!("ARRAY[{}]", other.item_type().name()),
        }
    }
    match v {
        Value::Array(a) => arr(a),
        other => other.value_type().name().into(),
    }
}

/// Keeps a mapped file alive for as long as numpy arrays view its bytes.
#[pyclass(frozen, module = "fucina._core")]
struct MappedFile {
    #[allow(dead_code)] // held for its Drop: the arrays borrow from this map
    inner: Arc<GgufFile>,
}

/// A tensor's header entry.
#[pyclass(frozen, get_all, module = "fucina._core", name = "TensorInfo")]
pub struct PyTensorInfo {
    /// Tensor name.
    name: String,
    /// ggml type name (`"Q4_K"`).
    #[pyo3(name = "type")]
    ggml_type: String,
    /// ggml type id.
    type_id: u32,
    /// Dimensions in ggml order (fastest-varying first), as stored in the file.
    dims: Vec<u64>,
    /// Shape in numpy (row-major) order: `dims` reversed.
    shape: Vec<u64>,
    /// Number of elements.
    n_elements: u64,
    /// Bytes of data.
    n_bytes: u64,
    /// Absolute byte offset of the data in its file.
    offset: u64,
    /// Index of the split part holding the data.
    part: usize,
}

#[pymethods]
impl PyTensorInfo {
    fn __repr__(&self) -> String {
        format!(
            "TensorInfo(name={:?}, type={}, shape={:?}, n_bytes={})",
            self.name, self.ggml_type, self.shape, self.n_bytes
        )
    }
}

fn info_to_py(file: &GgufFile, t: &TensorInfo) -> PyTensorInfo {
    let data_offset = file
        .parts()
        .get(t.part)
        .map_or(0, |p| p.header().data_offset);
    PyTensorInfo {
        name: t.name.clone(),
        ggml_type: t.ggml_type.name().into(),
        type_id: t.ggml_type.id(),
        dims: t.dims.clone(),
        shape: t.shape(),
        n_elements: t.n_elements(),
        n_bytes: t.n_bytes,
        offset: data_offset + t.offset,
        part: t.part,
    }
}

/// A GGUF model file (all parts of a split model), memory-mapped.
#[pyclass(module = "fucina._core", name = "GGUFFile")]
pub struct PyGgufFile {
    inner: Option<Arc<GgufFile>>,
    metadata: Option<Py<PyDict>>,
    tensors: Option<Py<PyDict>>,
}

impl PyGgufFile {
    fn file(&self) -> PyResult<&Arc<GgufFile>> {
        self.inner
            .as_ref()
            .ok_or_else(|| gguf_value_error("I/O operation on a closed GGUFFile".into()))
    }

    pub(crate) fn open(py: Python<'_>, path: PathBuf, tensors: bool) -> PyResult<Self> {
        let file = py
            .detach(|| {
                GgufFile::open_with(
                    &path,
                    OpenOptions {
                        tensors,
                        splits: true,
                    },
                )
            })
            .map_err(gguf_err)?;
        Ok(Self {
            inner: Some(Arc::new(file)),
            metadata: None,
            tensors: None,
        })
    }
}

#[pymethods]
impl PyGgufFile {
    #[new]
    #[pyo3(signature = (path, *, tensors = true))]
    fn new(
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::path)] path: PathBuf,
        tensors: bool,
    ) -> PyResult<Self> {
        Self::open(py, path, tensors)
    }

    /// All metadata as a dict of plain Python values (built on first access).
    #[getter]
    fn metadata(&mut self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        if let Some(d) = &self.metadata {
            return Ok(d.clone_ref(py));
        }
        let file = self.file()?.clone();
        let d = PyDict::new(py);
        for (k, v) in file.metadata().iter() {
            d.set_item(k, value_to_py(py, v)?)?;
        }
        let d = d.unbind();
        self.metadata = Some(d.clone_ref(py));
        Ok(d)
    }

    /// Metadata value types by key, in gguf-py naming (`"UINT32"`, `"ARRAY[STRING]"`).
    #[getter]
    fn metadata_types(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.file()?.metadata().iter() {
            d.set_item(k, type_name(v))?;
        }
        Ok(d.unbind())
    }

    /// One metadata value, or `default` when absent.
    #[pyo3(signature = (key, default = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self.file()?.metadata().get(key) {
            Some(v) => value_to_py(py, v),
            None => Ok(default.unwrap_or_else(|| py.None().into_bound(py))),
        }
    }

    /// Tensor infos by name, in file order.
    #[getter]
    fn tensors(&mut self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        if let Some(d) = &self.tensors {
            return Ok(d.clone_ref(py));
        }
        let file = self.file()?.clone();
        let d = PyDict::new(py);
        for (name, t) in file.tensors() {
            d.set_item(name, Py::new(py, info_to_py(&file, t))?)?;
        }
        let d = d.unbind();
        self.tensors = Some(d.clone_ref(py));
        Ok(d)
    }

    /// A tensor's raw bytes as a read-only, zero-copy `uint8` numpy array.
    fn tensor_bytes<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let file = self.file()?.clone();
        let bytes = file.tensor_bytes(name).map_err(gguf_err)?;
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        let owner = Bound::new(py, MappedFile { inner: file })?;
        // SAFETY: `ptr..ptr+len` lies inside the map owned by `owner.inner`; the array
        // keeps `owner` alive as its base object, so the bytes outlive every view. The
        // map is read-only, so the array is marked non-writeable below before it escapes.
        let view = unsafe { ArrayView1::from_shape_ptr(len, ptr) };
        // SAFETY: as above: the container keeps the borrowed memory alive.
        let arr = unsafe { PyArray1::<u8>::borrow_from_array(&view, owner.into_any()) };
        let kwargs = PyDict::new(py);
        kwargs.set_item("write", false)?;
        arr.call_method("setflags", (), Some(&kwargs))?;
        Ok(arr.into_any())
    }

    /// A tensor as a numpy array in numpy (row-major) shape.
    ///
    /// By default the array is a zero-copy view: F32/F16/F64/I8..I64 get their numpy
    /// dtype; BF16 comes as its raw `uint16` bit patterns; quantized types come as raw
    /// blocks, `uint8` of shape `(*shape[:-1], bytes_per_row)` (gguf-py's convention).
    /// With `dequantize=True` every float or quantized type is decoded to a new
    /// float32 array (bit-identical to gguf-py's `gguf.quants.dequantize`).
    #[pyo3(signature = (name, *, dequantize = false))]
    fn tensor<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        dequantize: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let file = self.file()?.clone();
        let info = file.tensor(name).map_err(gguf_err)?;
        let shape_tuple = PyTuple::new(py, info.shape())?;
        if dequantize && info.ggml_type != GgmlType::F32 {
            let bytes = file.info_bytes(info).map_err(gguf_err)?;
            let n = usize::try_from(info.n_elements()).map_err(|_| {
                gguf_value_error(format!("tensor '{name}' is too large for this platform"))
            })?;
            let mut out = vec![0f32; n];
            py.detach(|| fucina_quant::dequantize(info.ggml_type, bytes, &mut out))
                .map_err(crate::quant::quant_err)?;
            return numpy::PyArray1::from_vec(py, out)
                .into_any()
                .call_method1("reshape", (shape_tuple,));
        }
        let raw = self.tensor_bytes(py, name)?;
        let mut shape: Vec<u64> = info.shape();
        let dtype = match info.ggml_type {
            GgmlType::F32 => "float32",
            GgmlType::F16 => "float16",
            GgmlType::F64 => "float64",
            GgmlType::BF16 => "uint16",
            GgmlType::I8 => "int8",
            GgmlType::I16 => "int16",
            GgmlType::I32 => "int32",
            GgmlType::I64 => "int64",
            t => {
                if let Some(last) = shape.last_mut() {
                    *last = *last / t.block_size() * t.type_size();
                }
                "uint8"
            }
        };
        let typed = raw.call_method1("view", (dtype,))?;
        typed.call_method1("reshape", (PyTuple::new(py, shape)?,))
    }

    /// GGUF format version.
    #[getter]
    fn version(&self) -> PyResult<u32> {
        Ok(self.file()?.version())
    }

    /// Tensor data alignment in bytes.
    #[getter]
    fn alignment(&self) -> PyResult<u64> {
        Ok(self.file()?.alignment())
    }

    /// Paths of the files (one per split part).
    #[getter]
    fn paths(&self) -> PyResult<Vec<PathBuf>> {
        Ok(self
            .file()?
            .parts()
            .iter()
            .filter_map(|p| p.path().map(PathBuf::from))
            .collect())
    }

    /// Absolute offset of the data section in each part.
    #[getter]
    fn data_offsets(&self) -> PyResult<Vec<u64>> {
        Ok(self
            .file()?
            .parts()
            .iter()
            .map(|p| p.header().data_offset)
            .collect())
    }

    /// Whether tensor data ranges were validated (False after a header-only open).
    #[getter]
    fn tensors_validated(&self) -> PyResult<bool> {
        Ok(self.file()?.is_full())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_none()
    }

    /// Release the file. Arrays already returned stay valid until they are dropped.
    fn close(&mut self) {
        self.inner = None;
        self.metadata = None;
        self.tensors = None;
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, PyTuple>) -> bool {
        self.close();
        false
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.file()?.tensors().len())
    }

    fn __contains__(&self, name: &str) -> PyResult<bool> {
        Ok(self.file()?.tensors().contains_key(name))
    }

    fn __repr__(&self) -> String {
        match &self.inner {
            None => "GGUFFile(<closed>)".into(),
            Some(f) => format!(
                "GGUFFile({:?}, architecture={:?}, n_tensors={}, n_kv={})",
                f.parts()
                    .first()
                    .and_then(|p| p.path())
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                f.metadata().architecture().unwrap_or("?"),
                f.tensors().len(),
                f.metadata().len()
            ),
        }
    }
}

/// Parse only the header and key/value section of a GGUF file (tensor data may be absent).
#[pyfunction]
fn read_gguf_header(
    py: Python<'_>,
    #[pyo3(from_py_with = crate::args::path)] path: PathBuf,
) -> PyResult<PyGgufFile> {
    PyGgufFile::open(py, path, false)
}

fn parse_value_type(name: &str) -> PyResult<ValueType> {
    (0..=12)
        .filter_map(ValueType::from_u32)
        .find(|t| t.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| gguf_value_error(format!("unknown GGUF value type {name:?}")))
}

fn infer_type(obj: &Bound<'_, PyAny>) -> PyResult<ValueType> {
    Ok(if obj.is_instance_of::<PyBool>() {
        ValueType::Bool
    } else if obj.is_instance_of::<PyInt>() {
        let v: i128 = obj.extract()?;
        if i32::try_from(v).is_ok() {
            ValueType::I32
        } else if i64::try_from(v).is_ok() {
            ValueType::I64
        } else {
            ValueType::U64
        }
    } else if obj.is_instance_of::<PyFloat>() {
        ValueType::F32
    } else if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        ValueType::String
    } else if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        ValueType::Array
    } else {
        return Err(gguf_value_error(format!(
            "cannot store a {} in GGUF metadata",
            obj.get_type().name()?
        )));
    })
}

fn py_string(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    Ok(obj.extract::<String>()?.into_bytes())
}

fn py_to_value(obj: &Bound<'_, PyAny>, ty: ValueType, item: Option<ValueType>) -> PyResult<Value> {
    let bad = |e: PyErr| {
        gguf_value_error(format!(
            "value {obj} does not fit GGUF type {}: {e}",
            ty.name()
        ))
    };
    Ok(match ty {
        ValueType::U8 => Value::U8(obj.extract().map_err(bad)?),
        ValueType::I8 => Value::I8(obj.extract().map_err(bad)?),
        ValueType::U16 => Value::U16(obj.extract().map_err(bad)?),
        ValueType::I16 => Value::I16(obj.extract().map_err(bad)?),
        ValueType::U32 => Value::U32(obj.extract().map_err(bad)?),
        ValueType::I32 => Value::I32(obj.extract().map_err(bad)?),
        ValueType::U64 => Value::U64(obj.extract().map_err(bad)?),
        ValueType::I64 => Value::I64(obj.extract().map_err(bad)?),
        ValueType::F32 => Value::F32(obj.extract::<f64>().map_err(bad)? as f32),
        ValueType::F64 => Value::F64(obj.extract().map_err(bad)?),
        ValueType::Bool => Value::Bool(obj.extract().map_err(bad)?),
        ValueType::String => Value::String(py_string(obj).map_err(bad)?),
        ValueType::Array => Value::Array(py_to_array(obj, item)?),
    })
}

fn py_to_array(obj: &Bound<'_, PyAny>, item: Option<ValueType>) -> PyResult<Array> {
    let items: Vec<Bound<'_, PyAny>> = obj.try_iter()?.collect::<PyResult<_>>()?;
    let item = match (item, items.first()) {
        (Some(t), _) => t,
        (None, Some(first)) => infer_type(first)?,
        (None, None) => {
            return Err(gguf_value_error(
                "an empty array needs an explicit item_type".into(),
            ))
        }
    };
    macro_rules! typed {
        ($variant:ident) => {
            Array::$variant(
                items
                    .iter()
                    .map(|x| match py_to_value(x, item, None)? {
                        Value::$variant(v) => Ok(v),
                        _ => unreachable!("py_to_value returns the requested type"),
                    })
                    .collect::<PyResult<_>>()?,
            )
        };
    }
    Ok(match item {
        ValueType::U8 => typed!(U8),
        ValueType::I8 => typed!(I8),
        ValueType::U16 => typed!(U16),
        ValueType::I16 => typed!(I16),
        ValueType::U32 => typed!(U32),
        ValueType::I32 => typed!(I32),
        ValueType::U64 => typed!(U64),
        ValueType::I64 => typed!(I64),
        ValueType::F32 => typed!(F32),
        ValueType::F64 => typed!(F64),
        ValueType::Bool => typed!(Bool),
        ValueType::String => Array::String(
            items
                .iter()
                .map(py_string)
                .collect::<PyResult<Vec<_>>>()?
                .iter()
                .collect(),
        ),
        ValueType::Array => Array::Array(
            items
                .iter()
                .map(|x| py_to_array(x, None))
                .collect::<PyResult<_>>()?,
        ),
    })
}

fn parse_ggml_type(obj: &Bound<'_, PyAny>) -> PyResult<GgmlType> {
    let t = if let Ok(id) = obj.extract::<u32>() {
        GgmlType::from_u32(id)
    } else {
        let name: String = obj.extract()?;
        GgmlType::from_name(&name)
    };
    t.ok_or_else(|| gguf_value_error(format!("unknown ggml type {obj}")))
}

fn numpy_ggml_type(dtype: &str) -> Option<GgmlType> {
    Some(match dtype {
        "float32" => GgmlType::F32,
        "float16" => GgmlType::F16,
        "float64" => GgmlType::F64,
        "int8" => GgmlType::I8,
        "int16" => GgmlType::I16,
        "int32" => GgmlType::I32,
        "int64" => GgmlType::I64,
        _ => return None,
    })
}

/// Builds a GGUF file: metadata in insertion order, then tensors.
#[pyclass(module = "fucina._core", name = "GGUFWriter")]
pub struct PyGgufWriter {
    inner: GgufWriter<'static>,
}

#[pymethods]
impl PyGgufWriter {
    #[new]
    #[pyo3(signature = (version = 3))]
    fn new(version: u32) -> PyResult<Self> {
        let mut inner = GgufWriter::new();
        inner.set_version(version).map_err(gguf_err)?;
        Ok(Self { inner })
    }

    /// A writer holding a copy of one part of an open file (metadata and tensors).
    #[staticmethod]
    #[pyo3(signature = (file, part = 0))]
    fn from_file(file: &PyGgufFile, part: usize) -> PyResult<Self> {
        let inner = GgufWriter::from_part(file.file()?, part)
            .map_err(gguf_err)?
            .into_owned();
        Ok(Self { inner })
    }

    /// Set a metadata key. `type` is a GGUF value type name (`"UINT32"`, `"STRING"`,
    /// `"ARRAY"`, ...); when omitted it is inferred like gguf-py (int → INT32,
    /// float → FLOAT32, str → STRING, list → ARRAY). `item_type` types array elements.
    #[pyo3(signature = (key, value, r#type = None, item_type = None))]
    fn add(
        &mut self,
        key: String,
        value: &Bound<'_, PyAny>,
        r#type: Option<&str>,
        item_type: Option<&str>,
    ) -> PyResult<()> {
        let ty = match r#type {
            Some(t) => parse_value_type(t)?,
            None => infer_type(value)?,
        };
        let item = item_type.map(parse_value_type).transpose()?;
        let v = py_to_value(value, ty, item)?;
        self.inner.set(key, v);
        Ok(())
    }

    /// Add a tensor. A numpy array of float32/float16/float64/int8..int64 infers its
    /// type and shape; raw block bytes need `ggml_type` and the logical `shape` (numpy order).
    #[pyo3(signature = (name, data, ggml_type = None, shape = None))]
    fn add_tensor(
        &mut self,
        name: &str,
        data: &Bound<'_, PyAny>,
        ggml_type: Option<&Bound<'_, PyAny>>,
        shape: Option<Vec<u64>>,
    ) -> PyResult<()> {
        let (t, shape, bytes) = match ggml_type {
            Some(t) => {
                let t = parse_ggml_type(t)?;
                let shape = match shape {
                    Some(s) => s,
                    None => data.getattr("shape")?.extract()?,
                };
                let bytes: Vec<u8> = match data.cast::<PyBytes>() {
                    Ok(b) => b.as_bytes().to_vec(),
                    Err(_) => data
                        .call_method0("tobytes")?
                        .cast::<PyBytes>()?
                        .as_bytes()
                        .to_vec(),
                };
                (t, shape, bytes)
            }
            None => {
                let dtype: String = data.getattr("dtype")?.getattr("name")?.extract()?;
                let t = numpy_ggml_type(&dtype).ok_or_else(|| {
                    gguf_value_error(format!(
                        "tensor '{name}': numpy dtype {dtype} needs an explicit ggml_type"
                    ))
                })?;
                let shape = match shape {
                    Some(s) => s,
                    None => data.getattr("shape")?.extract()?,
                };
                let bytes = data
                    .call_method0("tobytes")?
                    .cast::<PyBytes>()?
                    .as_bytes()
                    .to_vec();
                (t, shape, bytes)
            }
        };
        let dims: Vec<u64> = shape.into_iter().rev().collect();
        self.inner
            .add_tensor(name, t, &dims, bytes)
            .map_err(gguf_err)
    }

    /// Write the file atomically (temporary file, then rename).
    fn write(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::path)] path: PathBuf,
    ) -> PyResult<()> {
        py.detach(|| self.inner.write_file(&path)).map_err(gguf_err)
    }

    /// The file's bytes.
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = py.detach(|| self.inner.to_bytes()).map_err(gguf_err)?;
        Ok(PyBytes::new(py, &bytes))
    }
}

/// Register the GGUF classes and functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGgufFile>()?;
    m.add_class::<PyTensorInfo>()?;
    m.add_class::<PyGgufWriter>()?;
    m.add_function(wrap_pyfunction!(read_gguf_header, m)?)?;
    Ok(())
}

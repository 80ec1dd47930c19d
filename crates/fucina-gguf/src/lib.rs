//! GGUF read/write for fucina: memory-mapped, split-aware, safe on hostile input.
//!
//! ```no_run
//! let file = fucina_gguf::GgufFile::open("model.gguf")?;
//! println!("{:?}", file.metadata().architecture());
//! for (name, info) in file.tensors() {
//!     println!("{name}: {} {:?}", info.ggml_type, info.dims);
//! }
//! # Ok::<(), fucina_gguf::GgufError>(())
//! ```

mod error;
mod file;
mod metadata;
mod reader;
mod types;
mod value;
mod writer;

pub use error::{GgufError, Result};
pub use file::{
    split_path, GgufFile, OpenOptions, Part, SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS_COUNT,
};
pub use metadata::{Metadata, ZeroPolicy};
pub use reader::{Header, TensorInfo, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS};
pub use types::{GgmlType, ValueType};
pub use value::{Array, StringArray, Value};
pub use writer::GgufWriter;

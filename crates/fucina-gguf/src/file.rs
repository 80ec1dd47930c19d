//! `GgufFile`: an opened model (one file or all parts of a split model), memory-mapped.
//!
//! Opening parses only the header; tensor data stays in the page cache until a
//! caller touches it, so opening a multi-GB model costs milliseconds.

use std::fs::File;
use std::ops::Deref;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use memmap2::Mmap;

use crate::error::{GgufError, Result};
use crate::metadata::Metadata;
use crate::reader::{check_data_ranges, parse_header, Extent, Header, TensorInfo};

/// Keys that describe how a model is split across files.
pub const SPLIT_NO: &str = "split.no";
/// Number of files in a split model.
pub const SPLIT_COUNT: &str = "split.count";
/// Number of tensors across all files of a split model.
pub const SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// Bytes a file's header is read from: a memory map or an owned buffer.
enum Backing {
    Mmap(Mmap),
    Owned(Vec<u8>),
}

impl Deref for Backing {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// One physical file of a (possibly split) model.
pub struct Part {
    path: Option<PathBuf>,
    bytes: Backing,
    header: Header,
}

impl Part {
    /// The file's path (`None` for in-memory files).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// This file's own header (metadata and tensor infos, `part` indices local).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Tell the OS this process will not read `range` of the file's bytes soon: its
    /// pages leave the process's resident set (they stay in the page cache). A hint:
    /// the bytes stay valid, and reading them again faults them back in from the
    /// file. Only the whole pages inside `range` are released; no-op for in-memory
    /// files, out-of-range requests and systems without `madvise`.
    pub fn release(&self, range: std::ops::Range<usize>) {
        #[cfg(unix)]
        if let Backing::Mmap(m) = &self.bytes {
            const PAGE: usize = 4096;
            let base = m.as_ptr() as usize;
            let start = (base + range.start).next_multiple_of(PAGE) - base;
            let end = ((base + range.end.min(m.len())) / PAGE * PAGE).saturating_sub(base);
            if start < end {
                // SAFETY: the map is a read-only shared file mapping: MADV_DONTNEED
                // only drops this process's page-table entries, and any later read
                // of those addresses faults the same file bytes back in, so every
                // `&[u8]` borrowed from the map keeps its contents.
                let _ = unsafe {
                    m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
                };
            }
        }
        #[cfg(not(unix))]
        let _ = range;
    }
}

/// How to open a file.
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    /// Validate that every tensor's data lies in the file (a full open). With `false`
    /// only the header is parsed: partial downloads and vocab-only files open fine,
    /// and [`GgufFile::tensor_bytes`] checks ranges per call instead.
    pub tensors: bool,
    /// Open every part of a split model (`*-00001-of-00003.gguf`) as one.
    pub splits: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            tensors: true,
            splits: true,
        }
    }
}

/// An opened GGUF model.
pub struct GgufFile {
    parts: Vec<Part>,
    tensors: IndexMap<String, TensorInfo>,
    full: bool,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field(
                "paths",
                &self
                    .parts
                    .iter()
                    .map(|p| p.path.clone())
                    .collect::<Vec<_>>(),
            )
            .field("n_tensors", &self.tensors.len())
            .field("n_kv", &self.metadata().len())
            .finish()
    }
}

fn map_file(path: &Path) -> Result<Backing> {
    let file = File::open(path).map_err(|e| GgufError::io(path, e))?;
    let meta = file.metadata().map_err(|e| GgufError::io(path, e))?;
    if meta.is_dir() {
        // Opening a directory succeeds on Unix and mapping it fails with ENODEV ("No such
        // device"): name what is wrong instead.
        return Err(GgufError::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "is a directory, not a GGUF file",
            ),
        ));
    }
    let len = meta.len();
    if len == 0 {
        // mmap of an empty file fails on some platforms; an empty buffer gives the
        // proper "truncated" error instead.
        return Ok(Backing::Owned(Vec::new()));
    }
    // SAFETY: the map is read-only and lives as long as this `GgufFile`. If another
    // process truncates or rewrites the file while it is mapped, reads may fault or
    // see new bytes; that is the standard contract of every mmap-based model loader
    // (llama.cpp included) and model files are not modified in place.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| GgufError::io(path, e))?;
    Ok(Backing::Mmap(map))
}

/// If `path` is named like a split part (`PREFIX-00002-of-00005.gguf`), the prefix.
fn split_prefix(path: &Path) -> Option<String> {
    let s = path.to_str()?;
    let stem = s.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = rest.rsplit_once('-')?;
    let digits = |x: &str| x.len() == 5 && x.bytes().all(|b| b.is_ascii_digit());
    (digits(count) && digits(no)).then(|| prefix.to_owned())
}

/// The path of part `i` (0-based) of `count`, in llama.cpp's naming scheme.
pub fn split_path(prefix: &str, i: usize, count: usize) -> PathBuf {
    PathBuf::from(format!("{prefix}-{:05}-of-{count:05}.gguf", i + 1))
}

impl GgufFile {
    /// Open a model with full validation, following split parts.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::default())
    }

    /// Parse only the header (metadata and tensor infos) without checking that the
    /// tensor data is present: for tokenizers, `fucina info` and partial downloads.
    pub fn open_header(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(
            path,
            OpenOptions {
                tensors: false,
                splits: true,
            },
        )
    }

    /// Open with explicit options.
    pub fn open_with(path: impl AsRef<Path>, options: OpenOptions) -> Result<Self> {
        let path = path.as_ref();
        let extent = if options.tensors {
            Extent::Full
        } else {
            Extent::HeaderOnly
        };
        let first = Self::load_part(path, extent)?;
        let count = first.header.metadata.get_u64(SPLIT_COUNT)?.unwrap_or(1);
        if !options.splits || count <= 1 {
            return Self::assemble(vec![first], options.tensors);
        }
        let prefix = split_prefix(path).ok_or_else(|| GgufError::Split {
            path: path.to_owned(),
            message: format!(
                "{SPLIT_COUNT} is {count} but the file name is not PREFIX-NNNNN-of-NNNNN.gguf"
            ),
        })?;
        let count = usize::try_from(count)
            .ok()
            .filter(|&c| c <= 99_999)
            .ok_or_else(|| GgufError::Split {
                path: path.to_owned(),
                message: format!("{SPLIT_COUNT} {count} is out of range"),
            })?;
        let mut parts = Vec::with_capacity(count);
        let mut first = Some(first);
        for i in 0..count {
            let p = split_path(&prefix, i, count);
            // The part the caller named is already parsed; load the others.
            let part = match first.take_if(|f| f.path.as_deref() == Some(p.as_path())) {
                Some(f) => f,
                None => Self::load_part(&p, extent)?,
            };
            parts.push(part);
        }
        for (i, part) in parts.iter().enumerate() {
            let md = &part.header.metadata;
            let p = part.path.clone().unwrap_or_default();
            let no = md.get_u64(SPLIT_NO)?;
            let c = md.get_u64(SPLIT_COUNT)?;
            if no != Some(i as u64) || c != Some(count as u64) {
                return Err(GgufError::Split {
                    path: p,
                    message: format!(
                        "expected {SPLIT_NO}={i} and {SPLIT_COUNT}={count}, found {no:?} and {c:?}"
                    ),
                });
            }
        }
        let file = Self::assemble(parts, options.tensors)?;
        if let Some(total) = file.metadata().get_u64(SPLIT_TENSORS_COUNT)? {
            if total != file.tensors.len() as u64 {
                return Err(GgufError::Split {
                    path: path.to_owned(),
                    message: format!(
                        "{SPLIT_TENSORS_COUNT} is {total} but the parts hold {} tensors",
                        file.tensors.len()
                    ),
                });
            }
        }
        Ok(file)
    }

    /// Parse an in-memory GGUF image (tests, fuzzing, files received over a socket).
    pub fn from_bytes(bytes: Vec<u8>, options: OpenOptions) -> Result<Self> {
        let extent = if options.tensors {
            Extent::Full
        } else {
            Extent::HeaderOnly
        };
        let header = parse_header(&bytes, extent)?;
        Self::assemble(
            vec![Part {
                path: None,
                bytes: Backing::Owned(bytes),
                header,
            }],
            options.tensors,
        )
    }

    fn load_part(path: &Path, extent: Extent) -> Result<Part> {
        let bytes = map_file(path)?;
        let header = parse_header(&bytes, extent).map_err(|e| match e {
            GgufError::Io { .. } => e,
            other => with_path(path, other),
        })?;
        Ok(Part {
            path: Some(path.to_owned()),
            bytes,
            header,
        })
    }

    fn assemble(parts: Vec<Part>, full: bool) -> Result<Self> {
        let n: usize = parts.iter().map(|p| p.header.tensors.len()).sum();
        let mut tensors = IndexMap::with_capacity(n);
        for (i, part) in parts.iter().enumerate() {
            for t in &part.header.tensors {
                let info = TensorInfo {
                    part: i,
                    ..t.clone()
                };
                if tensors.insert(t.name.clone(), info).is_some() {
                    return Err(GgufError::Split {
                        path: part.path.clone().unwrap_or_default(),
                        message: format!("tensor '{}' appears in more than one part", t.name),
                    });
                }
            }
        }
        Ok(Self {
            parts,
            tensors,
            full,
        })
    }

    /// Metadata of the model (the first part's key/value section).
    pub fn metadata(&self) -> &Metadata {
        &self.parts[0].header.metadata
    }

    /// GGUF version of the first part.
    pub fn version(&self) -> u32 {
        self.parts[0].header.version
    }

    /// Data alignment of the first part.
    pub fn alignment(&self) -> u64 {
        self.parts[0].header.alignment
    }

    /// All tensor infos of all parts, in file order.
    pub fn tensors(&self) -> &IndexMap<String, TensorInfo> {
        &self.tensors
    }

    /// One tensor's info.
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.tensors
            .get(name)
            .ok_or_else(|| GgufError::NoSuchTensor { name: name.into() })
    }

    /// The physical files, in split order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Whether tensor data ranges were validated at open (a full open).
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// A tensor's raw bytes (zero-copy view into the map). After a header-only open,
    /// a tensor whose data is not in the file is an error.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let info = self.tensor(name)?;
        self.info_bytes(info)
    }

    /// The raw bytes behind a tensor info from this file.
    pub fn info_bytes(&self, info: &TensorInfo) -> Result<&[u8]> {
        let part = self
            .parts
            .get(info.part)
            .ok_or_else(|| GgufError::NoSuchTensor {
                name: info.name.clone(),
            })?;
        let start = part.header.data_offset.checked_add(info.offset);
        let end = start.and_then(|s| s.checked_add(info.n_bytes));
        match (start, end) {
            (Some(s), Some(e)) if e <= part.bytes.len() as u64 => {
                Ok(&part.bytes[s as usize..e as usize])
            }
            _ => Err(GgufError::tensor(
                &info.name,
                format!(
                    "data lies past the end of the file ({} bytes)",
                    part.bytes.len()
                ),
            )),
        }
    }

    /// Re-run the full data-range validation (after a header-only open).
    pub fn validate_data(&self) -> Result<()> {
        for part in &self.parts {
            check_data_ranges(&part.header, part.bytes.len() as u64).map_err(|e| {
                match &part.path {
                    Some(p) => with_path(p, e),
                    None => e,
                }
            })?;
        }
        Ok(())
    }

    /// Total bytes of tensor data.
    pub fn tensor_data_bytes(&self) -> u64 {
        self.tensors.values().map(|t| t.n_bytes).sum()
    }
}

/// Prefix a parse error's message with the file it came from.
fn with_path(path: &Path, e: GgufError) -> GgufError {
    match e {
        GgufError::Malformed { offset, message } => GgufError::Malformed {
            offset,
            message: format!("{}: {message}", path.display()),
        },
        GgufError::Tensor { name, message } => GgufError::Tensor {
            name,
            message: format!("{message} [{}]", path.display()),
        },
        GgufError::Truncated {
            what,
            offset,
            needed,
            available,
        } => GgufError::Truncated {
            what: format!("{} in {}", what, path.display()),
            offset,
            needed,
            available,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_names_parse() {
        assert_eq!(
            split_prefix(Path::new("/m/model-00002-of-00003.gguf")).as_deref(),
            Some("/m/model")
        );
        assert_eq!(split_prefix(Path::new("/m/model.gguf")), None);
        assert_eq!(split_prefix(Path::new("/m/model-2-of-3.gguf")), None);
        assert_eq!(
            split_path("/m/model", 0, 3),
            PathBuf::from("/m/model-00001-of-00003.gguf")
        );
    }
}

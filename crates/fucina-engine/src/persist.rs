//! The crash-safe KV sidecar (spec §13.4 `kv_persist`, format FUXKV001): a
//! conversation's token history and KV rows in an append-only file, so it reopens
//! warm after a restart with nothing prefilled again.
//!
//! Layout (little-endian): a fixed header — magic `FUXKV001`, the record count (u64,
//! at byte 8), the model's fingerprint (u64), the cache dtype and layer count (u32
//! each), every layer's `n_head_kv`, `head_dim_k`, `head_dim_v` (u32 each), the
//! record size (u64) and a checksum of all of it but the count (u64) — then one
//! record per position: the token id (u32) and the position's KV bytes in the
//! cache's own dtype ([`KvCache::read_record`]).
//!
//! A hybrid model's cache (Gated DeltaNet layers) also holds a recurrent state that
//! exists only at its length. Its header then also describes every recurrent layer
//! (convolution kernel, key and value heads and dims, value-head order: u32 each)
//! and the state size (u64) before the checksum, and a state region follows the
//! header: the position the state belongs to (u64) and the state
//! ([`KvCache::read_recurrent_state`]); records follow it. A sync marks the region
//! invalid (position `u64::MAX`) before rewriting it and publishes its position
//! before the record count, so only a state matching the published records is ever
//! resumed; anything else resets the file. Caches without recurrent layers write
//! exactly the layout above.
//!
//! Writes publish the record count last: new records are written (and synced)
//! first, then the count, so a process killed mid-append leaves the old count over
//! a valid prefix, and a torn tail past the count is never read. A rewind (the next
//! turn keeps less than the file holds) lowers the count before anything is
//! overwritten. On open, a file whose header is corrupted, from another model or of
//! another geometry is not loaded: it is reset, and the reason is returned for the
//! caller to warn with.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use fucina_model::{KvCache, KvDtype, LayerSpec, Model};

use crate::error::{EngineError, Result};

const MAGIC: &[u8; 8] = b"FUXKV001";
const COUNT_AT: u64 = 8;

/// A 64-bit FNV-1a hash (stable across builds and platforms, unlike `std`'s hasher).
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn bytes(mut self, b: &[u8]) -> Fnv {
        for &x in b {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }
    fn u64(self, x: u64) -> Fnv {
        self.bytes(&x.to_le_bytes())
    }
}

/// Bytes of each tensor's data sampled into the fingerprint (two random-weight
/// models of the same shapes differ in them).
const SAMPLE_BYTES: usize = 32;

/// A fingerprint of `model`: its tensors' names, types, shapes and offsets and the
/// first and last bytes of every tensor's data.
pub fn model_fingerprint(model: &Model) -> u64 {
    let file = model.file();
    let mut h = Fnv::new().u64(model.config().n_vocab as u64);
    for info in file.tensors().values() {
        h = h.bytes(info.name.as_bytes()).u64(info.ggml_type as u64);
        for &d in &info.dims {
            h = h.u64(d);
        }
        h = h.u64(info.offset).u64(info.n_bytes);
        if let Ok(data) = file.info_bytes(info) {
            let n = data.len().min(SAMPLE_BYTES);
            h = h.bytes(&data[..n]).bytes(&data[data.len() - n..]);
        }
    }
    h.0
}

/// What a sidecar describes: the header minus the record count.
fn header(fingerprint: u64, cache: &KvCache) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&fingerprint.to_le_bytes());
    let dtype: u32 = match cache.dtype() {
        KvDtype::F16 => 1,
        KvDtype::F32 => 0,
        KvDtype::Q8_0 => 8,
    };
    out.extend_from_slice(&dtype.to_le_bytes());
    let geoms = cache.geometries();
    out.extend_from_slice(&(geoms.len() as u32).to_le_bytes());
    for g in &geoms {
        for d in [g.n_head_kv, g.head_dim_k, g.head_dim_v] {
            out.extend_from_slice(&(d as u32).to_le_bytes());
        }
    }
    out.extend_from_slice(&(cache.record_bytes() as u64).to_le_bytes());
    let state = cache.recurrent_state_bytes();
    if state > 0 {
        let recurrent: Vec<_> = cache
            .specs()
            .into_iter()
            .filter_map(|s| match s {
                LayerSpec::Recurrent(g) => Some(g),
                _ => None,
            })
            .collect();
        out.extend_from_slice(&(recurrent.len() as u32).to_le_bytes());
        for g in recurrent {
            let sh = g.shape;
            let order = u32::from(sh.order == fucina_model::ops::deltanet::VHeadOrder::Grouped);
            for d in [g.conv_kernel, sh.n_k_heads, sh.n_v_heads, sh.dk, sh.dv] {
                out.extend_from_slice(&(d as u32).to_le_bytes());
            }
            out.extend_from_slice(&order.to_le_bytes());
        }
        out.extend_from_slice(&(state as u64).to_le_bytes());
    }
    let sum = Fnv::new().bytes(&out[..8]).bytes(&out[16..]).0;
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Bytes of the recurrent-state region after the header (0 without recurrent layers).
fn state_region(cache: &KvCache) -> usize {
    match cache.recurrent_state_bytes() {
        0 => 0,
        n => 8 + n,
    }
}

/// The region for `cache`'s state at its length: its position, then the state.
fn region_bytes(cache: &KvCache) -> Vec<u8> {
    let mut out = Vec::with_capacity(state_region(cache));
    out.extend_from_slice(&(cache.len() as u64).to_le_bytes());
    cache.read_recurrent_state(&mut out);
    out
}

impl Opened {
    /// The KV bytes of each resumed position, in order (for [`crate::SeqPool::restore`]).
    pub fn records(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.body.chunks_exact(self.record_len).map(|rec| &rec[4..])
    }

    /// The recurrent state at the resumed length (empty without recurrent layers).
    pub fn recurrent_state(&self) -> &[u8] {
        &self.state
    }
}

/// Why a stored header `have` does not describe `want` (None: it does).
fn check_header(have: &[u8], want: &[u8]) -> Option<String> {
    if have.len() != want.len() || have[..8] != MAGIC[..] {
        return Some("it is not a fucina KV sidecar (bad magic)".into());
    }
    let n = have.len();
    let sum = Fnv::new().bytes(&have[..8]).bytes(&have[16..n - 8]).0;
    if have[n - 8..] != sum.to_le_bytes() {
        return Some("its header is corrupted (checksum mismatch)".into());
    }
    if have[16..24] != want[16..24] {
        return Some("it was written for another model".into());
    }
    if have[24..n - 8] != want[24..n - 8] {
        return Some("it was written for a KV cache of another geometry or dtype".into());
    }
    None
}

/// The whole state of a sequence (`tokens` and `cache`'s rows for them) as one
/// FUXKV001 image in memory: what a sidecar file holds, for `save_state` APIs.
pub fn encode_state(cache: &KvCache, tokens: &[u32], fingerprint: u64) -> Result<Vec<u8>> {
    let n = tokens.len().min(cache.len());
    let mut out = header(fingerprint, cache);
    out[8..16].copy_from_slice(&(n as u64).to_le_bytes());
    if state_region(cache) > 0 {
        if n != cache.len() {
            return Err(EngineError::InvalidArgument {
                field: "tokens",
                message: format!(
                    "{} tokens for a recurrent state at position {}",
                    tokens.len(),
                    cache.len()
                ),
            });
        }
        out.extend_from_slice(&region_bytes(cache));
    }
    out.reserve(n * (4 + cache.record_bytes()));
    for (pos, &t) in tokens.iter().enumerate().take(n) {
        out.extend_from_slice(&t.to_le_bytes());
        cache.read_record(pos, &mut out)?;
    }
    Ok(out)
}

/// The tokens and KV records of an [`encode_state`] image for a cache shaped like
/// `cache` of the model with `fingerprint`; an error saying why it does not fit.
pub fn decode_state<'a>(
    bytes: &'a [u8],
    cache: &KvCache,
    fingerprint: u64,
) -> Result<(Vec<u32>, Vec<&'a [u8]>)> {
    decode_state_full(bytes, cache, fingerprint).map(|(t, r, _)| (t, r))
}

/// [`decode_state`] with the recurrent state the image holds (empty without
/// recurrent layers).
pub fn decode_state_full<'a>(
    bytes: &'a [u8],
    cache: &KvCache,
    fingerprint: u64,
) -> Result<RestoredState<'a>> {
    let want = header(fingerprint, cache);
    let bad = |message: String| EngineError::InvalidArgument {
        field: "state",
        message,
    };
    let have = bytes
        .get(..want.len())
        .ok_or_else(|| bad("it is shorter than its header".into()))?;
    if let Some(why) = check_header(have, &want) {
        return Err(bad(why));
    }
    let count = u64::from_le_bytes(have[8..16].try_into().unwrap_or_default());
    let record_len = 4 + cache.record_bytes();
    let region = state_region(cache);
    let (state, body) = bytes[want.len()..]
        .split_at_checked(region)
        .ok_or_else(|| bad("it is shorter than its recurrent state".into()))?;
    let state = match state.split_at_checked(8) {
        None => state,
        Some((pos, s)) => {
            if u64::from_le_bytes(pos.try_into().unwrap_or_default()) != count {
                return Err(bad(format!(
                    "its recurrent state is not at its {count} positions"
                )));
            }
            s
        }
    };
    if (body.len() / record_len) as u64 != count || body.len() % record_len != 0 {
        return Err(bad(format!(
            "it holds {} bytes of records, not the {count} its header says",
            body.len()
        )));
    }
    let tokens = record_tokens(body, record_len);
    Ok((
        tokens,
        body.chunks_exact(record_len).map(|r| &r[4..]).collect(),
        state,
    ))
}

/// Tokens, per-position KV records and recurrent state of a decoded image.
pub type RestoredState<'a> = (Vec<u32>, Vec<&'a [u8]>, &'a [u8]);

/// The token ids of records laid end to end (each: token id, then KV bytes).
fn record_tokens(body: &[u8], record_len: usize) -> Vec<u32> {
    body.chunks_exact(record_len)
        .map(|r| u32::from_le_bytes([r[0], r[1], r[2], r[3]]))
        .collect()
}

/// A sequence's sidecar file, open for appends.
#[derive(Debug)]
pub struct KvSidecar {
    path: PathBuf,
    file: File,
    header_len: u64,
    /// Bytes of the recurrent-state region after the header (0: none).
    state_len: u64,
    record_len: u64,
    /// The tokens of the records the published count covers.
    stored: Vec<u32>,
}

/// What opening a sidecar found.
#[derive(Debug)]
pub struct Opened {
    /// The sidecar, ready for [`KvSidecar::sync`].
    pub sidecar: KvSidecar,
    /// Tokens of the resumed positions (empty for a fresh file).
    pub tokens: Vec<u32>,
    /// The resumed records as stored (token id, then KV bytes, each).
    body: Vec<u8>,
    record_len: usize,
    /// The resumed recurrent state (empty without recurrent layers).
    state: Vec<u8>,
    /// Why an existing file was not loaded (it has been reset), for a warning.
    pub ignored: Option<String>,
}

fn io_err(path: &Path, e: std::io::Error) -> EngineError {
    EngineError::Persist {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl KvSidecar {
    /// Open (or create) the sidecar at `path` for a cache shaped like `cache` of the
    /// model with `fingerprint`, loading what a compatible file holds: at most the
    /// published count, fewer when the file was torn short of it. A file holding more
    /// positions than `capacity` is an error (it is left as it is).
    pub fn open(path: &Path, cache: &KvCache, fingerprint: u64, capacity: usize) -> Result<Opened> {
        let want = header(fingerprint, cache);
        let mut sidecar = KvSidecar::at(path, cache, want.len(), false)?;
        let len = sidecar.file.metadata().map_err(|e| io_err(path, e))?.len();
        let mut have = vec![0u8; want.len()];
        let ignored = if len == 0 {
            None
        } else if len < want.len() as u64 {
            Some("it is shorter than its header".to_string())
        } else {
            sidecar
                .file
                .read_exact(&mut have)
                .map_err(|e| io_err(path, e))?;
            check_header(&have, &want)
        };
        let fresh = |mut sidecar: KvSidecar, ignored: Option<String>| -> Result<Opened> {
            sidecar.reset(&want)?;
            let record_len = sidecar.record_len as usize;
            Ok(Opened {
                sidecar,
                tokens: Vec::new(),
                body: Vec::new(),
                record_len,
                state: Vec::new(),
                ignored,
            })
        };
        if ignored.is_some() || len == 0 {
            return fresh(sidecar, ignored);
        }
        let count = u64::from_le_bytes(have[8..16].try_into().unwrap_or_default());
        let records_at = sidecar.header_len + sidecar.state_len;
        let complete = len.saturating_sub(records_at) / sidecar.record_len;
        let n = count.min(complete);
        let mut state = Vec::new();
        if sidecar.state_len > 0 && n > 0 {
            let mut region = vec![0u8; sidecar.state_len as usize];
            if len < records_at {
                return fresh(
                    sidecar,
                    Some("it is shorter than its recurrent state".into()),
                );
            }
            sidecar
                .file
                .read_exact(&mut region)
                .map_err(|e| io_err(path, e))?;
            let at = u64::from_le_bytes(region[..8].try_into().unwrap_or_default());
            if at != n {
                return fresh(
                    sidecar,
                    Some("its recurrent state does not match its records".into()),
                );
            }
            state = region.split_off(8);
        } else if sidecar.state_len > 0 {
            sidecar
                .file
                .seek(SeekFrom::Start(records_at))
                .map_err(|e| io_err(path, e))?;
        }
        if n > capacity as u64 {
            return Err(EngineError::Persist {
                path: path.to_path_buf(),
                message: format!(
                    "it holds {n} positions and the context holds {capacity}: open it with a larger n_ctx"
                ),
            });
        }
        let mut body = vec![0u8; (n * sidecar.record_len) as usize];
        sidecar
            .file
            .read_exact(&mut body)
            .map_err(|e| io_err(path, e))?;
        let record_len = sidecar.record_len as usize;
        let tokens = record_tokens(&body, record_len);
        if n < count {
            // A torn tail: publish the prefix that is really there.
            sidecar.write_count(n)?;
        }
        sidecar.stored = tokens.clone();
        Ok(Opened {
            sidecar,
            tokens,
            body,
            record_len,
            state,
            ignored: None,
        })
    }

    /// Write `tokens` and `cache`'s rows for them to a NEW sidecar at `path` (a
    /// snapshot: built beside it and renamed over it, so `path` is always either the
    /// old file or the complete new one).
    pub fn snapshot(path: &Path, cache: &KvCache, tokens: &[u32], fingerprint: u64) -> Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let want = header(fingerprint, cache);
        let mut s = KvSidecar::at(&tmp, cache, want.len(), true)?;
        s.reset(&want)?;
        s.sync(cache, tokens)?;
        std::fs::rename(&tmp, path).map_err(|e| io_err(path, e))
    }

    /// The file at `path` (created if absent; emptied with `truncate`) for records of
    /// `cache`'s shape after a header of `header_len` bytes.
    fn at(path: &Path, cache: &KvCache, header_len: usize, truncate: bool) -> Result<KvSidecar> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(truncate)
            .open(path)
            .map_err(|e| io_err(path, e))?;
        Ok(KvSidecar {
            path: path.to_path_buf(),
            file,
            header_len: header_len as u64,
            state_len: state_region(cache) as u64,
            record_len: 4 + cache.record_bytes() as u64,
            stored: Vec::new(),
        })
    }

    fn reset(&mut self, header: &[u8]) -> Result<()> {
        let path = self.path.clone();
        let f = &mut self.file;
        f.set_len(0).map_err(|e| io_err(&path, e))?;
        f.seek(SeekFrom::Start(0)).map_err(|e| io_err(&path, e))?;
        f.write_all(header).map_err(|e| io_err(&path, e))?;
        if self.state_len > 0 {
            let mut region = vec![0u8; self.state_len as usize];
            region[..8].copy_from_slice(&u64::MAX.to_le_bytes());
            f.write_all(&region).map_err(|e| io_err(&path, e))?;
        }
        f.sync_data().map_err(|e| io_err(&path, e))?;
        self.stored.clear();
        Ok(())
    }

    /// Rewrite the recurrent-state region with `cache`'s state (position `n`, or
    /// left invalid when the cache's state is not at `n`): invalidated and synced
    /// first, so a torn write is never taken for a valid state.
    fn write_state(&mut self, cache: &KvCache, n: usize) -> Result<()> {
        let path = self.path.clone();
        let at = self.header_len;
        let f = &mut self.file;
        f.seek(SeekFrom::Start(at)).map_err(|e| io_err(&path, e))?;
        f.write_all(&u64::MAX.to_le_bytes())
            .map_err(|e| io_err(&path, e))?;
        f.sync_data().map_err(|e| io_err(&path, e))?;
        if n != cache.len() {
            return Ok(());
        }
        let region = region_bytes(cache);
        f.write_all(&region[8..]).map_err(|e| io_err(&path, e))?;
        f.sync_data().map_err(|e| io_err(&path, e))?;
        f.seek(SeekFrom::Start(at)).map_err(|e| io_err(&path, e))?;
        f.write_all(&region[..8]).map_err(|e| io_err(&path, e))?;
        f.sync_data().map_err(|e| io_err(&path, e))
    }

    fn write_count(&mut self, n: u64) -> Result<()> {
        let path = self.path.clone();
        let f = &mut self.file;
        f.seek(SeekFrom::Start(COUNT_AT))
            .map_err(|e| io_err(&path, e))?;
        f.write_all(&n.to_le_bytes())
            .map_err(|e| io_err(&path, e))?;
        f.sync_data().map_err(|e| io_err(&path, e))
    }

    /// Positions the file's published count covers.
    pub fn len(&self) -> usize {
        self.stored.len()
    }

    /// Whether the file holds no position.
    pub fn is_empty(&self) -> bool {
        self.stored.is_empty()
    }

    /// Make the file hold exactly `tokens` and `cache`'s rows for them (the
    /// sequence's state): the positions it shares with the file are kept, the count
    /// is lowered first if the sequence rewound below it, new records are appended
    /// and synced, and the new count is published last.
    pub fn sync(&mut self, cache: &KvCache, tokens: &[u32]) -> Result<()> {
        let n = tokens.len().min(cache.len());
        let keep = self
            .stored
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(n);
        // A recurrent state changes with every computation, even over the same
        // tokens: it is rewritten on every sync.
        if keep == self.stored.len() && keep == n && self.state_len == 0 {
            return Ok(());
        }
        if keep < self.stored.len() {
            self.write_count(keep as u64)?;
            self.stored.truncate(keep);
        }
        let path = self.path.clone();
        let mut buf = Vec::with_capacity((n - keep) * self.record_len as usize);
        for (pos, &token) in tokens.iter().enumerate().take(n).skip(keep) {
            buf.extend_from_slice(&token.to_le_bytes());
            cache.read_record(pos, &mut buf)?;
        }
        let at = self.header_len + self.state_len + keep as u64 * self.record_len;
        let f = &mut self.file;
        f.seek(SeekFrom::Start(at)).map_err(|e| io_err(&path, e))?;
        f.write_all(&buf).map_err(|e| io_err(&path, e))?;
        f.sync_data().map_err(|e| io_err(&path, e))?;
        if self.state_len > 0 {
            self.write_state(cache, n)?;
        }
        self.write_count(n as u64)?;
        self.stored.extend_from_slice(&tokens[keep..n]);
        Ok(())
    }

    /// Forget everything the file holds (a conversation reset).
    pub fn clear(&mut self) -> Result<()> {
        if !self.stored.is_empty() {
            self.write_count(0)?;
            self.stored.clear();
        }
        Ok(())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fucina_model::KvGeometry;

    fn cache(n: usize) -> KvCache {
        let g = [KvGeometry {
            n_head_kv: 1,
            head_dim_k: 32,
            head_dim_v: 32,
        }];
        let mut c = KvCache::new(&g, 8, KvDtype::F16).unwrap();
        for pos in 0..n {
            let row: Vec<f32> = (0..32).map(|i| (i + pos) as f32 * 0.5).collect();
            c.write(0, pos, &row, &row).unwrap();
            c.advance(1).unwrap();
        }
        c
    }

    #[test]
    fn a_sidecar_of_another_model_is_reset_not_loaded() {
        let path =
            std::env::temp_dir().join(format!("fucina-sidecar-{}.fuxkv", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let full = cache(3);
        let mut s = KvSidecar::open(&path, &full, 1, 8).unwrap().sidecar;
        s.sync(&full, &[7, 8, 9]).unwrap();
        let same = KvSidecar::open(&path, &cache(0), 1, 8).unwrap();
        assert_eq!(
            (same.tokens.clone(), same.ignored.clone()),
            (vec![7, 8, 9], None)
        );
        assert_eq!(same.records().count(), 3);
        assert!(
            KvSidecar::open(&path, &cache(0), 1, 2).is_err(),
            "more than the context holds"
        );
        let other = KvSidecar::open(&path, &cache(0), 2, 8).unwrap();
        assert!(other.tokens.is_empty());
        assert!(other.ignored.unwrap().contains("another model"));
        let after = KvSidecar::open(&path, &cache(0), 1, 8).unwrap();
        assert!(
            after.tokens.is_empty() && after.ignored.is_some(),
            "reset for the other model"
        );
        std::fs::write(&path, b"FUXKV001").unwrap();
        let short = KvSidecar::open(&path, &cache(0), 1, 8).unwrap();
        assert!(short.ignored.unwrap().contains("shorter"));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_state_image_round_trips_and_refuses_what_does_not_fit() {
        let full = cache(3);
        let image = encode_state(&full, &[4, 5, 6], 9).unwrap();
        let (tokens, records) = decode_state(&image, &cache(0), 9).unwrap();
        assert_eq!(tokens, vec![4, 5, 6]);
        let mut back = cache(0);
        back.push_records(&records).unwrap();
        let mut a = Vec::new();
        let mut b = Vec::new();
        for pos in 0..3 {
            full.read_record(pos, &mut a).unwrap();
            back.read_record(pos, &mut b).unwrap();
        }
        assert_eq!(a, b);
        let err =
            |bytes: &[u8], fp: u64| decode_state(bytes, &cache(0), fp).unwrap_err().to_string();
        assert!(err(&image, 8).contains("another model"));
        assert!(err(&image[..image.len() - 1], 9).contains("records"));
        assert!(err(&image[..10], 9).contains("shorter"));
        let mut bad = image.clone();
        bad[40] ^= 1;
        assert!(err(&bad, 9).contains("corrupted"));
    }
}

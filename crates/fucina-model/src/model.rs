//! A loaded model: config, bound weights (mmapped, GGUF precision) and the
//! thread pool its forward runs on. Selected by `general.architecture`.
//!
//! After load, the matrices the kernels have an interleaved form for (Q4_K; Q8_0,
//! Q6_K and, widened to Q8_0 blocks within [`WIDEN_BUDGET`], Q4_0 / Q5_0 on AVX-512) are
//! repacked (fucina-quant's `repack`: faster decode) by a background thread, each
//! matrix switching to its packed form when ready; the results are bitwise the same
//! either way, so the model is usable at once ([`Model::wait_repacked`] waits for the
//! thread; dropping the model stops it after the matrix it is on). A layout whose
//! packed kernel this CPU runs no faster than the row-major one is left alone
//! (fucina-quant's `Packed::pays_off`, measured once per process:
//! Q6_K on Zen 4, say). `FUCINA_REPACK=sync` repacks during load instead (on the
//! pool's threads), `FUCINA_REPACK=all` (or `all-sync`) repacks every matrix that has
//! a packed layout whether it pays off or not (tests of the packed kernels),
//! `FUCINA_REPACK=0` keeps every matrix in the file's row-major form.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fucina_gguf::GgufFile;

use fucina_experts::{ExpertStore, ExpertStoreBuilder};

use crate::config::{Activation, Config, Family};
use crate::families::{self, LayerWeights, Presence};
use crate::ffn::{Lookahead, MoeStream};
use crate::kv_cache::{KvCache, KvDtype};
use crate::parallel::ThreadPool;
use crate::weights::{has_tensor, load_vector, load_vector_opt, Linear, RepackJob};
use crate::{ModelError, Result};

/// Most memory that widening Q4_0 / Q5_0 matrices to packed Q8_0 blocks may add to a
/// model, as a fraction of its file: a K-quant mix's few legacy fallback matrices
/// (Gemma 3 270M's Q5_0 projections: 24 MB on a 253 MB file) widen, a model quantized
/// to Q5_0 throughout (55% more) keeps its file's size.
pub const WIDEN_BUDGET: f64 = 0.25;

/// Whether widening would add `growth` bytes, more than [`WIDEN_BUDGET`] of a
/// `file_bytes` model (then no matrix widens: the row-major kernels compute the same
/// results).
fn widened_too_large(growth: usize, file_bytes: usize) -> bool {
    growth as f64 > WIDEN_BUDGET * file_bytes as f64
}

/// Environment variable that turns load-time repacking off (`0`).
pub const REPACK_ENV: &str = "FUCINA_REPACK";

/// Load-time options.
#[derive(Clone, Debug, Default)]
pub struct ModelOptions {
    /// Threads for the forward (0: the machine's available parallelism). Ignored when
    /// `pool` is given.
    pub n_threads: usize,
    /// The thread pool to compute on. `None`: the process-wide pool of `n_threads`
    /// threads ([`ThreadPool::shared`]), so every model of the process (a draft model,
    /// a server's models) takes turns on the same cores instead of oversubscribing them.
    pub pool: Option<Arc<ThreadPool>>,
    /// Compute the tanh GELU of GeGLU families (Gemma 3, Gemma 4: FFN and per-layer
    /// embedding gate) in f32, as transformers' `gelu_pytorch_tanh` does, instead of
    /// through ggml's f16 lookup table. Off by default: the default numerics are
    /// llama.cpp's; the transformers-parity tests turn it on.
    pub f32_gelu: bool,
    /// Stream the MoE experts through an expert store with these options instead
    /// of borrowing them from the mapping (`None`: resident; see
    /// [`fucina_experts`]). The model's file must be on disk.
    pub moe_stream: Option<fucina_experts::StoreOptions>,
}

impl ModelOptions {
    /// Options computing on the shared pool of `n_threads` threads (0: all cores).
    pub fn with_threads(n_threads: usize) -> ModelOptions {
        ModelOptions {
            n_threads,
            pool: None,
            f32_gelu: false,
            moe_stream: None,
        }
    }
}

/// A model ready to run.
pub struct Model {
    pub(crate) config: Config,
    pub(crate) file: Arc<GgufFile>,
    pub(crate) tok_embd: Linear,
    pub(crate) output: Linear,
    pub(crate) output_norm: Vec<f32>,
    pub(crate) output_bias: Option<Vec<f32>>,
    pub(crate) layers: Vec<LayerWeights>,
    /// Per-layer embeddings (Gemma 4 E2B/E4B).
    pub(crate) ple: Option<crate::ple::PleWeights>,
    /// The multi-token-prediction head (GLM-4.5's `nextn` block).
    pub(crate) mtp: Option<crate::mtp::MtpWeights>,
    pub(crate) pool: Arc<ThreadPool>,
    /// The background repacking thread, until [`Model::wait_repacked`] (or the drop)
    /// joins it.
    repack: Mutex<Option<Repacker>>,
    /// The expert store the MoE layers stream from, when streaming.
    experts: Option<Arc<ExpertStore>>,
}

/// The background repacking thread and its stop flag.
struct Repacker {
    handle: std::thread::JoinHandle<()>,
    stop: Arc<AtomicBool>,
}

impl Drop for Model {
    /// Stop the repacking thread and wait for the matrix it is on: once a model is
    /// dropped no thread of it reads the file's mapping, so the file may be replaced
    /// or truncated (a mapped page past a shrunk file's end is SIGBUS, not an error).
    fn drop(&mut self) {
        let repacker = self
            .repack
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(r) = repacker {
            r.stop.store(true, Ordering::Relaxed);
            let _ = r.handle.join();
        }
    }
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("family", &self.config.family)
            .field("n_layer", &self.config.n_layer)
            .field("n_embd", &self.config.n_embd)
            .field("n_vocab", &self.config.n_vocab)
            .field("n_threads", &self.pool.n_threads())
            .finish()
    }
}

impl Model {
    /// Open and bind the GGUF at `path`.
    pub fn load(path: impl AsRef<Path>, options: ModelOptions) -> Result<Model> {
        let file = GgufFile::open(path)?;
        Model::from_file(Arc::new(file), options)
    }

    /// Bind an opened GGUF file.
    pub fn from_file(file: Arc<GgufFile>, options: ModelOptions) -> Result<Model> {
        let md = file.metadata();
        let arch = md
            .architecture()
            .ok_or_else(|| ModelError::InvalidConfig("general.architecture is missing".into()))?;
        let family = Family::from_arch(arch)?;
        let spec = families::spec(family);

        let embd = file
            .tensors()
            .get("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        let n_vocab = match embd.dims.as_slice() {
            [_, v] => usize::try_from(*v)
                .map_err(|_| ModelError::InvalidConfig(format!("vocabulary of {v} rows")))?,
            d => {
                return Err(ModelError::WeightShape {
                    name: "token_embd.weight".into(),
                    found: d.to_vec(),
                    expected: vec![0, 0],
                })
            }
        };
        let mut config = Config::from_metadata(md, family, n_vocab)?;
        if options.f32_gelu && config.activation == Activation::GeluTanh {
            config.activation = Activation::GeluTanhF32;
        }
        let e = config.n_embd;
        let tok_embd = Linear::bind(&file, "token_embd.weight", n_vocab, e)?;
        let output = if has_tensor(&file, "output.weight") {
            Linear::bind(&file, "output.weight", n_vocab, e)?
        } else {
            tok_embd.clone()
        };
        let output_norm = load_vector(&file, "output_norm.weight", e)?;
        let output_bias = match spec.output_bias {
            Presence::Absent => None,
            _ => load_vector_opt(&file, "output.bias", n_vocab)?,
        };
        let rope_freqs = families::bind_rope_freqs(&file, &config, &spec)?;
        let mut layers = (0..config.n_layer)
            .map(|il| families::bind_layer(&file, &config, &spec, il, rope_freqs.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let experts = match &options.moe_stream {
            Some(o) => attach_store(&file, &mut layers, o.clone())?,
            None => None,
        };
        let ple = match config.n_embd_per_layer {
            0 => None,
            n_pl => Some(crate::ple::PleWeights::bind(
                &file,
                config.n_layer,
                e,
                n_pl,
            )?),
        };
        let mtp = match family {
            Family::Glm4Moe => {
                let n_blocks = md
                    .meta_int_opt(arch, "block_count", fucina_gguf::ZeroPolicy::AcceptZero)
                    .and_then(|v| usize::try_from(v).ok())
                    .unwrap_or(config.n_layer);
                crate::mtp::MtpWeights::bind(&file, &config, &spec, &output_norm, n_blocks)?
            }
            _ => None,
        };
        let pool = match options.pool {
            Some(pool) => pool,
            None => ThreadPool::shared(options.n_threads)?,
        };
        let mut jobs: Vec<RepackJob> = matmul_weights(&layers, &output, ple.as_ref())
            .chain(mtp.iter().flat_map(|m| m.resident_matrices()))
            .filter_map(Linear::repack_job)
            .collect();
        jobs.sort_by_key(|j| std::cmp::Reverse(j.len()));
        let mode = std::env::var(REPACK_ENV).unwrap_or_default();
        let mode = mode.trim();
        // `all`, `all-sync`: every layout, whether or not it pays off on this CPU.
        let every = mode.starts_with("all");
        let file_bytes: usize = file.parts().iter().map(|p| p.bytes().len()).sum();
        let growth: usize = jobs.iter().map(RepackJob::growth).sum();
        if !every && widened_too_large(growth, file_bytes) {
            jobs.retain(|j| j.growth() == 0);
        }
        let repack = match mode {
            "0" => None,
            "sync" | "all-sync" => {
                jobs.retain(|j| every || j.pays_off());
                run_jobs_on(&pool, jobs)?;
                None
            }
            _ if jobs.is_empty() => None,
            _ => {
                let stop = Arc::new(AtomicBool::new(false));
                let stopped = Arc::clone(&stop);
                let handle = std::thread::Builder::new()
                    .name("fucina-repack".into())
                    .spawn(move || {
                        // Whether a layout pays off is measured here, off the load path.
                        for job in jobs {
                            if stopped.load(Ordering::Relaxed) {
                                break;
                            }
                            if every || job.pays_off() {
                                // A failed repack (out of memory) keeps the row-major
                                // form, which computes the same results.
                                let _ = job.run();
                            }
                        }
                    })
                    .map_err(|e| {
                        ModelError::InvalidConfig(format!("cannot start the repacking thread: {e}"))
                    })?;
                Some(Repacker { handle, stop })
            }
        };
        Ok(Model {
            config,
            file,
            tok_embd,
            output,
            output_norm,
            output_bias,
            layers,
            ple,
            mtp,
            pool,
            repack: Mutex::new(repack),
            experts,
        })
    }

    /// The expert store the MoE experts stream from (`None`: resident).
    pub fn expert_store(&self) -> Option<&Arc<ExpertStore>> {
        self.experts.as_ref()
    }

    /// Block until the load-time repacking (see the module doc) has finished. The
    /// model computes the same results before and after; this only settles its speed
    /// (benchmarks, tests of the packed path).
    pub fn wait_repacked(&self) {
        let repacker = self.repack.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(r) = repacker {
            let _ = r.handle.join();
        }
    }

    /// Bytes of weights in the interleaved form so far.
    pub fn repacked_bytes(&self) -> usize {
        matmul_weights(&self.layers, &self.output, self.ple.as_ref())
            .filter_map(|w| w.packed())
            .map(|p| p.bytes().len())
            .sum()
    }

    /// The hyperparameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The bound weights of every layer.
    pub fn layers(&self) -> &[LayerWeights] {
        &self.layers
    }

    /// The underlying GGUF file (metadata, tokenizer vocabulary).
    pub fn file(&self) -> &Arc<GgufFile> {
        &self.file
    }

    /// Threads the forward runs on.
    pub fn n_threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// The thread pool the forward runs on (shared with the process's other models).
    pub fn pool(&self) -> &Arc<ThreadPool> {
        &self.pool
    }

    /// A KV cache for one sequence of up to `capacity` positions.
    pub fn new_cache(&self, capacity: usize, dtype: KvDtype) -> Result<KvCache> {
        KvCache::for_config(&self.config, capacity, dtype)
    }

    /// Bytes of weight data a decode step reads (every matrix once, of a MoE layer
    /// the router and the routed experts; the head once), in the form the kernels read:
    /// a repacked matrix's packed bytes (more than the file's for widened Q4_0 / Q5_0).
    pub fn weight_bytes_per_token(&self) -> usize {
        let attn: usize = self
            .layers
            .iter()
            .flat_map(|l| l.mixer.matrices())
            .map(|w| w.stream_bytes())
            .sum();
        let ffn: usize = self.layers.iter().map(|l| l.ffn.bytes_per_token()).sum();
        let ple: usize = self.ple.as_ref().map_or(0, |p| {
            let per_layer: usize = self
                .layers
                .iter()
                .filter_map(|l| l.ple.as_ref())
                .map(|l| l.gate.stream_bytes() + l.proj.stream_bytes())
                .sum();
            p.proj.stream_bytes() + p.table.row_bytes() + per_layer
        });
        attn + ffn + ple + self.output.stream_bytes()
    }
}

/// Every matrix each decode step multiplies with in full: each layer's projections
/// (of a MoE layer, the router; experts are borrowed from the mapping, never
/// repacked; per-layer-embedding projections), the per-layer-embedding model
/// projection, then the output head.
fn matmul_weights<'a>(
    layers: &'a [LayerWeights],
    output: &'a Linear,
    ple: Option<&'a crate::ple::PleWeights>,
) -> impl Iterator<Item = &'a Linear> {
    layers
        .iter()
        .flat_map(|l| {
            l.mixer
                .matrices()
                .into_iter()
                .chain(l.ffn.resident_matrices())
                .chain(l.ple.iter().flat_map(|p| [&p.gate, &p.proj]))
        })
        .chain(ple.map(|p| &p.proj))
        .chain([output])
}

/// Open an expert store over the model's files, register every MoE layer's expert
/// stacks and point the layers at it (each with the next MoE layer's router for the
/// lookahead). `None` for a model without experts.
fn attach_store(
    file: &GgufFile,
    layers: &mut [LayerWeights],
    options: fucina_experts::StoreOptions,
) -> Result<Option<Arc<ExpertStore>>> {
    let paths = file
        .parts()
        .iter()
        .map(|p| p.path().map(Path::to_path_buf))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            ModelError::InvalidConfig("streaming experts needs the model in a file".into())
        })?;
    let mut builder = ExpertStoreBuilder::new(&paths, layers.len(), options)?;
    let mut moe_layers = Vec::new();
    for (il, l) in layers.iter_mut().enumerate() {
        if let Some(moe) = l.ffn.moe_mut() {
            crate::ffn::moe_stream::register(&mut builder, il, moe)?;
            moe_layers.push(il);
        }
    }
    if moe_layers.is_empty() {
        return Ok(None);
    }
    let store = Arc::new(builder.build()?);
    for (i, &il) in moe_layers.iter().enumerate() {
        let lookahead = match moe_layers.get(i + 1) {
            Some(&next) => layers[next].ffn.moe_mut().map(|m| Lookahead {
                layer: next,
                router: m.gate_inp.clone(),
                k: m.config.n_expert_used,
            }),
            None => None,
        };
        if let Some(moe) = layers[il].ffn.moe_mut() {
            moe.stream = Some(MoeStream {
                store: Arc::clone(&store),
                layer: il,
                lookahead,
            });
        }
    }
    Ok(Some(store))
}

/// Run repacking jobs on the pool's threads (each job one task).
fn run_jobs_on(pool: &ThreadPool, jobs: Vec<RepackJob>) -> Result<()> {
    let slots: Vec<Mutex<Option<RepackJob>>> =
        jobs.into_iter().map(|j| Mutex::new(Some(j))).collect();
    let err: Mutex<Option<ModelError>> = Mutex::new(None);
    pool.run(slots.len(), &|i| {
        let job = slots[i].lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(Err(e)) = job.map(RepackJob::run) {
            *err.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
        }
    });
    match err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::widened_too_large;

    #[test]
    fn widening_stays_within_its_budget() {
        // Gemma 3 270M Q4_K_M: 43.6 MB of Q5_0 widen by 12/22 on a 253 MB file.
        let q5 = 43_591_680;
        assert!(!widened_too_large(q5 * 12 / 22, 253_000_000));
        // A model quantized to Q5_0 throughout grows by 55%; Q4_0 throughout by 89%.
        assert!(widened_too_large(q5 * 12 / 22, q5));
        assert!(widened_too_large(18 * 16 / 18, 18));
        assert!(!widened_too_large(0, 0));
    }
}

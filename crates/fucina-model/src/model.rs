//! A loaded model: config, bound weights (mmapped, GGUF precision) and the
//! thread pool its forward runs on. Selected by `general.architecture`.
//!
//! At load, the Q4_K matrices the kernels have an interleaved form for are repacked
//! (fucina-quant's `repack`, on the pool's threads; bitwise the same results, faster
//! decode). `FUCINA_REPACK=0` keeps every matrix in the file's row-major form.

use std::path::Path;
use std::sync::{Arc, Mutex};

use fucina_gguf::GgufFile;

use crate::config::{Config, Family};
use crate::families::{self, LayerWeights, Presence};
use crate::kv_cache::{KvCache, KvDtype};
use crate::parallel::ThreadPool;
use crate::weights::{has_tensor, load_vector, load_vector_opt, Linear};
use crate::{ModelError, Result};

/// Environment variable that turns load-time repacking off (`0`).
pub const REPACK_ENV: &str = "FUCINA_REPACK";

/// Load-time options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelOptions {
    /// Threads for the forward (0: the machine's available parallelism).
    pub n_threads: usize,
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
    pub(crate) pool: ThreadPool,
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
        let config = Config::from_metadata(md, family, n_vocab)?;
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
        let mut output = output;
        let pool = ThreadPool::new(options.n_threads)?;
        if std::env::var(REPACK_ENV).map_or(true, |v| v.trim() != "0") {
            let mut targets: Vec<&mut Linear> = layers
                .iter_mut()
                .flat_map(|l| {
                    [
                        &mut l.wq,
                        &mut l.wk,
                        &mut l.wv,
                        &mut l.wo,
                        &mut l.gate,
                        &mut l.up,
                        &mut l.down,
                    ]
                })
                .chain([&mut output])
                .filter(|w| w.repackable())
                .collect();
            repack_all(&pool, &mut targets)?;
        }
        Ok(Model {
            config,
            file,
            tok_embd,
            output,
            output_norm,
            output_bias,
            layers,
            pool,
        })
    }

    /// The hyperparameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The underlying GGUF file (metadata, tokenizer vocabulary).
    pub fn file(&self) -> &Arc<GgufFile> {
        &self.file
    }

    /// Threads the forward runs on.
    pub fn n_threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// A KV cache for one sequence of up to `capacity` positions.
    pub fn new_cache(&self, capacity: usize, dtype: KvDtype) -> Result<KvCache> {
        KvCache::for_config(&self.config, capacity, dtype)
    }

    /// Bytes of weight data a decode step reads (every matrix once; the head once).
    pub fn weight_bytes_per_token(&self) -> usize {
        let layer: usize = self
            .layers
            .iter()
            .map(|l| {
                [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down]
                    .iter()
                    .map(|w| w.bytes().len())
                    .sum::<usize>()
            })
            .sum();
        layer + self.output.bytes().len()
    }
}

/// Repack `targets` on the pool's threads, largest first (each matrix is one task).
fn repack_all(pool: &ThreadPool, targets: &mut [&mut Linear]) -> Result<()> {
    targets.sort_by_key(|w| std::cmp::Reverse(w.bytes().len()));
    let slots: Vec<Mutex<&mut Linear>> = targets.iter_mut().map(|w| Mutex::new(&mut **w)).collect();
    let err: Mutex<Option<ModelError>> = Mutex::new(None);
    pool.run(slots.len(), &|i| {
        let mut w = slots[i].lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = w.repack() {
            *err.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
        }
    });
    match err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

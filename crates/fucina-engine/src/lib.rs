//! The per-token loop and its state, over `fucina-model`, `fucina-sample` and
//! `fucina-tokenizer`: the [`SeqPool`] of sequences (truncate, fork, copy-prefix),
//! the single-sequence [`Session`], [`Generation`], which prefills a prompt,
//! samples, stops and stream-decodes — the seam speculation, grammar and the
//! server's scheduler drive — [`Conversation`] (one sequence across turns with
//! prefix reuse and the crash-safe [`KvSidecar`]), [`step_batch`] (lockstep
//! decoding of many streams in one forward) and the continuous-batching
//! [`Scheduler`] a server runs requests on.
//!
//! ```no_run
//! use std::sync::Arc;
//! use fucina_engine::{Generation, GenerationOptions, SeqPool};
//! use fucina_model::{KvDtype, Model, ModelOptions};
//! use fucina_tokenizer::Tokenizer;
//! let model = Arc::new(Model::load("model.gguf", ModelOptions::with_threads(2))?);
//! let tokenizer = Arc::new(Tokenizer::from_metadata(model.file().metadata())?);
//! let mut pool = SeqPool::new(Arc::clone(&model), 2048, KvDtype::F16)?;
//! let prompt = tokenizer.encode("The capital of France is", true, false)?;
//! let mut g = Generation::new(&mut pool, tokenizer, &prompt, GenerationOptions::default(), vec![])?;
//! while let Some(step) = g.step(&mut pool, &mut [], &mut |_, _| {})? {
//!     print!("{}", step.text);
//! }
//! g.release(&mut pool);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod batch;
pub mod conversation;
mod error;
pub mod generation;
pub mod logprobs;
mod mtp_draft;
pub mod persist;
pub mod pool;
pub mod scheduler;
pub mod session;
mod speculate;
pub mod stop;

pub use batch::step_batch;
pub use conversation::{Conversation, Resumed};
pub use error::{EngineError, Result};
pub use fucina_spec::{GateState, SpecOptions, Stats as SpecStats};
pub use generation::{FinishReason, Generation, GenerationOptions, Step};
pub use logprobs::{log_probs, prompt_logprobs, TokenLogprobs, MAX_TOP_LOGPROBS};
pub use persist::{
    decode_state, decode_state_full, encode_state, model_fingerprint, KvSidecar, RestoredState,
};
pub use pool::{Captured, Pooling, SeqId, SeqPool, DEFAULT_N_BATCH};
pub use scheduler::{Event, Metrics, Outcome, Request, RequestHandle, Scheduler, SchedulerConfig};
pub use session::{argmax, Session};

//! Reading experts: positioned reads (`pread`) of exact byte counts, optionally
//! dropped from the page cache afterwards (`posix_fadvise(DONTNEED)`, so
//! streaming experts does not evict the pages of the mmapped dense weights), a
//! small pool of reader threads for parallel misses and prefetches, and the
//! ticket a reader fills and the forward waits on.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};

use crate::{ExpertError, Result};

/// One opened file of the model (a part of a split GGUF).
#[derive(Debug)]
pub(crate) struct Source {
    pub(crate) path: PathBuf,
    pub(crate) file: File,
    pub(crate) len: u64,
}

impl Source {
    pub(crate) fn open(path: PathBuf) -> Result<Source> {
        let file = File::open(&path).map_err(|e| ExpertError::io(&path, "open", &e))?;
        let len = file
            .metadata()
            .map_err(|e| ExpertError::io(&path, "stat", &e))?
            .len();
        Ok(Source { path, file, len })
    }

    /// Fill `buf` from `offset`; fewer bytes than asked (the file ends) is an
    /// error, never a partly filled buffer handed on. `uncached`: advise the
    /// kernel to drop the pages just read.
    pub(crate) fn read_exact(
        &self,
        buf: &mut [u8],
        offset: u64,
        uncached: bool,
        what: (&str, u32),
    ) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => {
                    return Err(ExpertError::ShortRead {
                        stack: what.0.to_owned(),
                        expert: what.1,
                        offset,
                        wanted: buf.len(),
                        got: done,
                    })
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ExpertError::io(&self.path, "read", &e)),
            }
        }
        if uncached {
            drop_cached(&self.file, offset, buf.len());
        }
        Ok(())
    }
}

/// Advise the kernel that `len` bytes at `offset` will not be read again soon
/// (only whole pages inside the range are dropped; mapped pages stay).
#[cfg(target_os = "linux")]
fn drop_cached(file: &File, offset: u64, len: usize) {
    use std::os::fd::AsRawFd;
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return;
    };
    // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is
    // open for the life of `file`. The advice is a hint and its result is ignored.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), off, len, libc::POSIX_FADV_DONTNEED);
    }
}

#[cfg(not(target_os = "linux"))]
fn drop_cached(_file: &File, _offset: u64, _len: usize) {}

/// An expert's bytes once read: its stacks back to back.
#[derive(Debug)]
pub struct ExpertBytes {
    bytes: Vec<u8>,
}

impl ExpertBytes {
    pub(crate) fn new(bytes: Vec<u8>) -> ExpertBytes {
        ExpertBytes { bytes }
    }
}

impl AsRef<[u8]> for ExpertBytes {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// The result of one expert read, filled once by a reader.
#[derive(Debug, Default)]
pub(crate) struct Ticket {
    state: Mutex<Option<Result<Arc<ExpertBytes>>>>,
    done: Condvar,
}

impl Ticket {
    pub(crate) fn finish(&self, r: Result<Arc<ExpertBytes>>) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        self.done.notify_all();
    }

    pub(crate) fn is_done(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    pub(crate) fn wait(&self) -> Result<Arc<ExpertBytes>> {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = g.as_ref() {
                return r.clone();
            }
            g = self.done.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Reader threads taking jobs from one queue (none: jobs run on the caller).
#[derive(Debug)]
pub(crate) struct IoPool {
    tx: Mutex<Option<Sender<Job>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl IoPool {
    pub(crate) fn new(n: usize) -> Result<IoPool> {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = (0..n)
            .map(|i| {
                let rx: Arc<Mutex<Receiver<Job>>> = Arc::clone(&rx);
                std::thread::Builder::new()
                    .name(format!("fucina-experts-io-{i}"))
                    .spawn(move || loop {
                        let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => break,
                        }
                    })
                    .map_err(|e| ExpertError::io("<thread>", "spawn an io thread", &e))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(IoPool {
            tx: Mutex::new(Some(tx)),
            threads,
        })
    }

    /// Whether jobs run on reader threads.
    pub(crate) fn is_async(&self) -> bool {
        !self.threads.is_empty()
    }

    /// Run `job` on a reader thread (on this thread without readers).
    pub(crate) fn submit(&self, job: Job) {
        if !self.is_async() {
            job();
            return;
        }
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = tx.as_ref() {
            if let Err(e) = tx.send(job) {
                // The readers are gone (only during teardown): run it here.
                (e.0)();
            }
        }
    }
}

impl Drop for IoPool {
    fn drop(&mut self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

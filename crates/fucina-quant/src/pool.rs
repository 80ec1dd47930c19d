//! A persistent thread pool built for per-token latency: workers are started once,
//! spin briefly waiting for the next job (a decode step issues one matmul after
//! another, microseconds apart), then park on a condition variable so an idle
//! process burns no CPU. The calling thread takes part as worker 0, so a job on an
//! `n`-thread pool uses `n − 1` pool threads plus the caller.
//!
//! Jobs claim their work themselves (an atomic counter over chunks): a worker that
//! arrives after the work is gone simply does not join, so the caller never waits
//! for a thread the OS has descheduled — only for threads that are running a share.
//!
//! Measured against rayon on GEMV (see `examples/gemv_bench.rs`): the spin-then-park
//! pool wins on small matrices where rayon's wake-up and work-stealing dominate, and
//! ties on large ones; see the crate report for the numbers.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{QuantError, Result};

/// How long an idle worker spins before parking.
const SPIN: Duration = Duration::from_micros(200);

type Job = dyn Fn(usize) + Sync;

/// Keeps what the caller writes once per job and what workers write apart on
/// separate cache-line pairs (the adjacent-line prefetcher moves lines in pairs).
#[repr(align(128))]
struct Padded<T>(T);

/// Written by the caller once per job, read by spinning workers.
struct Post {
    /// Incremented once per job; workers run each epoch once.
    epoch: AtomicU64,
    /// Epoch of the job workers may still join; 0 once the caller has closed it.
    open: AtomicU64,
    /// The current job: a pointer to the caller's lifetime-erased `&Job` (on its
    /// stack); see `run` for why it is valid whenever `open` names the epoch.
    job: AtomicPtr<&'static Job>,
}

/// Written by workers.
struct Tally {
    /// Pool threads currently inside a job.
    active: AtomicUsize,
    /// Workers parked (or about to park) on `wake`: the caller notifies only then,
    /// so a job posted to spinning workers costs no system call.
    sleepers: AtomicUsize,
    /// Set when a worker's share of the job panicked.
    panicked: AtomicBool,
}

struct Shared {
    post: Padded<Post>,
    tally: Padded<Tally>,
    shutdown: AtomicBool,
    /// Parking: the mutex guards nothing but the sleep/wake handshake.
    park: Mutex<()>,
    wake: Condvar,
}

/// A fixed set of worker threads that run `Fn(thread_index)` jobs.
pub struct ThreadPool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    n_threads: usize,
    /// Serialises `run` calls from different threads.
    running: Mutex<()>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("n_threads", &self.n_threads)
            .finish()
    }
}

impl ThreadPool {
    /// A pool running jobs on `n_threads` threads in total (the caller plus
    /// `n_threads − 1` workers); `n_threads` is at least 1.
    pub fn new(n_threads: usize) -> Result<ThreadPool> {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            post: Padded(Post {
                epoch: AtomicU64::new(0),
                open: AtomicU64::new(0),
                job: AtomicPtr::new(std::ptr::null_mut()),
            }),
            tally: Padded(Tally {
                active: AtomicUsize::new(0),
                sleepers: AtomicUsize::new(0),
                panicked: AtomicBool::new(false),
            }),
            shutdown: AtomicBool::new(false),
            park: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut threads = Vec::with_capacity(n_threads - 1);
        for index in 1..n_threads {
            let shared = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name(format!("fucina-quant-{index}"))
                .spawn(move || worker(&shared, index))
                .map_err(|e| QuantError::Pool(format!("cannot start worker {index}: {e}")))?;
            threads.push(handle);
        }
        Ok(ThreadPool {
            shared,
            threads,
            n_threads,
            running: Mutex::new(()),
        })
    }

    /// Threads a job runs on (including the caller).
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Run `job(i)` on the calling thread (`i = 0`) and on every pool thread that
    /// wakes up before the caller has finished its own call (`i` = 1..n); return when
    /// all of those have finished. `job` must claim its work (e.g. from an atomic
    /// counter) so that any subset of threads completes it. A panic in any share is
    /// re-raised here.
    pub fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        if self.n_threads == 1 {
            job(0);
            return;
        }
        let _serial = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let (post, tally) = (&self.shared.post.0, &self.shared.tally.0);
        // SAFETY: the erased reference (and `slot`, which holds it on this stack
        // frame) is reachable only through `post.job`, and a worker dereferences that
        // pointer only between incrementing `active` and decrementing it, and only
        // after seeing `open` equal to this call's epoch. This function stores the
        // pointer before opening the epoch, closes it (`open = 0`) after its own share,
        // then waits for `active == 0` before returning. All of `open` / `active` are
        // SeqCst, so a worker either joined before the close (and is waited for) or
        // reads `open` after it (and does not touch the job). So neither the erased
        // `'static` nor `slot` is used after `job` and this frame end.
        let erased: &'static Job =
            unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static Job>(job) };
        let slot: &'static Job = erased;
        post.job
            .store(std::ptr::from_ref(&slot).cast_mut(), Ordering::SeqCst);
        let epoch = post.epoch.load(Ordering::Relaxed) + 1;
        post.open.store(epoch, Ordering::SeqCst);
        post.epoch.store(epoch, Ordering::SeqCst);
        // A worker increments `sleepers` (SeqCst) before its last look at `epoch`
        // under the park lock: either it sees this epoch, or this load sees it.
        if tally.sleepers.load(Ordering::SeqCst) != 0 {
            let _g = self.shared.park.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| job(0)));
        post.open.store(0, Ordering::SeqCst);
        let mut spins = 0u32;
        while tally.active.load(Ordering::SeqCst) != 0 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        post.job.store(std::ptr::null_mut(), Ordering::Relaxed);
        let worker_panicked = tally.panicked.swap(false, Ordering::AcqRel);
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if worker_panicked {
            panic!("a fucina-quant pool worker panicked");
        }
    }
}

fn worker(shared: &Shared, index: usize) {
    let (post, tally) = (&shared.post.0, &shared.tally.0);
    let mut seen = 0u64;
    loop {
        // Spin, then park, until a new epoch (or shutdown) arrives.
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            if post.epoch.load(Ordering::Acquire) != seen {
                break;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) && start.elapsed() > SPIN {
                let g = shared.park.lock().unwrap_or_else(|e| e.into_inner());
                tally.sleepers.fetch_add(1, Ordering::SeqCst);
                if post.epoch.load(Ordering::SeqCst) == seen
                    && !shared.shutdown.load(Ordering::Acquire)
                {
                    drop(shared.wake.wait(g).unwrap_or_else(|e| e.into_inner()));
                }
                tally.sleepers.fetch_sub(1, Ordering::SeqCst);
            } else {
                std::hint::spin_loop();
            }
        }
        seen = post.epoch.load(Ordering::Acquire);
        tally.active.fetch_add(1, Ordering::SeqCst);
        if post.open.load(Ordering::SeqCst) == seen {
            let job = post.job.load(Ordering::SeqCst);
            // SAFETY: `open` names this epoch, so the caller of `run` is still inside
            // it (it waits for `active`, incremented above, to drop to 0) and `job`
            // points at its live `&Job` (stored before `open`; see `run`).
            if let Some(job) = unsafe { job.as_ref() } {
                if catch_unwind(AssertUnwindSafe(|| job(index))).is_err() {
                    tally.panicked.store(true, Ordering::Release);
                }
            }
        }
        tally.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _g = self.shared.park.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run a job of `n` unit tasks claimed from a counter; returns per-task hit counts.
    fn claimed(pool: &ThreadPool, n: usize) -> Vec<usize> {
        let next = AtomicUsize::new(0);
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        pool.run(&|_| loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        hits.iter().map(|h| h.load(Ordering::Relaxed)).collect()
    }

    #[test]
    fn every_task_runs_exactly_once() {
        let pool = ThreadPool::new(3).expect("pool");
        for _ in 0..500 {
            assert!(claimed(&pool, 64).iter().all(|&h| h == 1));
        }
        // After the workers have parked, a job still completes.
        std::thread::sleep(Duration::from_millis(5));
        assert!(claimed(&pool, 1000).iter().all(|&h| h == 1));
    }

    #[test]
    fn workers_share_long_jobs() {
        let pool = ThreadPool::new(2).expect("pool");
        let seen = Mutex::new(std::collections::BTreeSet::new());
        for _ in 0..50 {
            let next = AtomicUsize::new(0);
            pool.run(&|i| {
                while next.fetch_add(1, Ordering::Relaxed) < 200 {
                    std::thread::sleep(Duration::from_micros(50));
                    seen.lock().unwrap_or_else(|e| e.into_inner()).insert(i);
                }
            });
        }
        assert_eq!(
            seen.into_inner().unwrap_or_else(|e| e.into_inner()).len(),
            2
        );
    }

    #[test]
    fn parked_workers_are_woken_for_every_job() {
        let pool = ThreadPool::new(3).expect("pool");
        for round in 0..40 {
            if round % 2 == 0 {
                // Long enough for every worker to stop spinning and park.
                std::thread::sleep(SPIN * 3);
            }
            // The caller's share waits until both workers have shown up.
            let joined = AtomicUsize::new(0);
            pool.run(&|i| {
                if i != 0 {
                    joined.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                let start = Instant::now();
                while joined.load(Ordering::SeqCst) < 2 {
                    assert!(
                        start.elapsed() < Duration::from_secs(10),
                        "round {round}: a worker was not woken"
                    );
                    std::thread::yield_now();
                }
            });
        }
    }

    #[test]
    fn a_worker_panic_is_reraised_and_the_pool_survives() {
        let pool = ThreadPool::new(2).expect("pool");
        let r = catch_unwind(AssertUnwindSafe(|| pool.run(&|_| panic!("boom"))));
        assert!(r.is_err());
        assert!(claimed(&pool, 100).iter().all(|&h| h == 1));
    }
}

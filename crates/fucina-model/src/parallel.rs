//! A small persistent thread pool for the forward: `run(n_tasks, f)` calls
//! `f(0..n_tasks)` across the caller and the workers and returns when all are done.
//!
//! Workers spin briefly on an epoch counter before parking, so the ~100 parallel
//! sections of one decode step do not pay a thread wake-up each (spawning scoped
//! threads per matmul costs tens of microseconds a call). Tasks are handed out by
//! an atomic counter; what a task computes never depends on which thread runs it,
//! so results are identical for any thread count.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

type TaskFn = dyn Fn(usize) + Sync;

/// Spins before a worker parks (a decode step's sections are microseconds apart).
const SPIN_LIMIT: u32 = 1 << 16;

struct Shared {
    epoch: AtomicUsize,
    job: UnsafeCell<Option<*const TaskFn>>,
    n_tasks: AtomicUsize,
    next: AtomicUsize,
    busy: AtomicUsize,
    shutdown: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the thread inside `ThreadPool::run` while no
// worker reads it (all workers are idle: `busy == 0` and the epoch is unchanged),
// and read by workers only between the epoch bump and their `busy` decrement,
// during which `run` does not return or write it. The pointee is `Sync`.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

/// A fixed set of worker threads plus the calling thread.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    n_threads: usize,
    run_lock: Mutex<()>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("n_threads", &self.n_threads)
            .finish()
    }
}

impl ThreadPool {
    /// A pool computing on `n_threads` threads in total (the caller counts as one;
    /// 0 means the machine's available parallelism).
    pub fn new(n_threads: usize) -> ThreadPool {
        let n_threads = if n_threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            n_threads
        };
        let shared = Arc::new(Shared {
            epoch: AtomicUsize::new(0),
            job: UnsafeCell::new(None),
            n_tasks: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            busy: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..n_threads)
            .filter_map(|i| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("fucina-worker-{i}"))
                    .spawn(move || worker(&s, 0))
                    .ok()
            })
            .collect::<Vec<_>>();
        let n_threads = workers.len() + 1;
        ThreadPool {
            shared,
            workers,
            n_threads,
            run_lock: Mutex::new(()),
        }
    }

    /// Threads that compute (workers + caller).
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Call `f(i)` for every `i` in `0..n_tasks`, in parallel; returns when all calls
    /// have returned. A panic in `f` on a worker aborts the process (workers cannot
    /// unwind into the caller), so `f` must not panic.
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if n_tasks == 0 {
            return;
        }
        if self.workers.is_empty() || n_tasks == 1 {
            for i in 0..n_tasks {
                f(i);
            }
            return;
        }
        // One parallel section at a time per pool (a poisoned lock only means an
        // earlier caller panicked; the pool state is still consistent).
        let _guard = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: erase the closure's lifetime for the workers; it stays alive until
        // this function returns, and this function returns only after every worker
        // has decremented `busy` for this epoch, i.e. stopped touching it.
        let ptr: *const TaskFn =
            unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const TaskFn>(f) };
        // SAFETY: all workers are idle (busy == 0 after the previous run), so none is
        // reading `job` now.
        unsafe { *s.job.get() = Some(ptr) };
        s.n_tasks.store(n_tasks, Ordering::Relaxed);
        s.next.store(0, Ordering::Relaxed);
        s.busy.store(self.workers.len(), Ordering::Relaxed);
        {
            let _l = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.epoch.fetch_add(1, Ordering::Release);
            s.wake.notify_all();
        }
        loop {
            let i = s.next.fetch_add(1, Ordering::Relaxed);
            if i >= n_tasks {
                break;
            }
            f(i);
        }
        let mut spins = 0u32;
        while s.busy.load(Ordering::Acquire) != 0 {
            spins = spins.wrapping_add(1);
            if spins < SPIN_LIMIT {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _l = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.epoch.fetch_add(1, Ordering::Release);
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A worker's loop. `seen` is the epoch at construction (0), passed in rather than
/// read here: a thread may start after the first `run` has already bumped the
/// epoch, and reading it then would make the worker skip that run and the caller
/// wait for it forever.
fn worker(s: &Shared, mut seen: usize) {
    loop {
        let mut spins = 0u32;
        loop {
            let e = s.epoch.load(Ordering::Acquire);
            if e != seen {
                seen = e;
                break;
            }
            spins += 1;
            if spins < SPIN_LIMIT {
                std::hint::spin_loop();
                continue;
            }
            let l = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            if s.epoch.load(Ordering::Acquire) == seen {
                let _unused = s.wake.wait(l).unwrap_or_else(|e| e.into_inner());
            }
            spins = 0;
        }
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: the epoch moved, so `run` published `job` before the Release bump
        // we Acquired, and keeps the closure alive until we decrement `busy`.
        let job = unsafe { *s.job.get() };
        let n = s.n_tasks.load(Ordering::Relaxed);
        if let Some(f) = job {
            loop {
                let i = s.next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                // SAFETY: see above; the pointee outlives this use.
                unsafe { (*f)(i) };
            }
        }
        s.busy.fetch_sub(1, Ordering::Release);
    }
}

/// A raw pointer to a mutable slice that parallel tasks write disjoint parts of.
#[derive(Clone, Copy)]
pub(crate) struct SharedMut<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: tasks only write disjoint index ranges (each caller documents why), so
// sharing the pointer across threads cannot create overlapping mutable access.
unsafe impl<T: Send> Sync for SharedMut<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for SharedMut<T> {}

impl<T> SharedMut<T> {
    pub(crate) fn new(s: &mut [T]) -> Self {
        SharedMut {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }

    /// Write `v` at index `i`.
    ///
    /// # Safety
    /// No other thread may access index `i` concurrently, and the original slice
    /// must outlive the call.
    #[inline]
    pub(crate) unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len, "SharedMut index");
        // SAFETY: in bounds (asserted); exclusivity is the caller's contract.
        unsafe { self.ptr.add(i).write(v) }
    }

    /// The sub-slice `start..start + len`.
    ///
    /// # Safety
    /// No two live slices obtained from this pointer may overlap, and the original
    /// slice must outlive them.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(
            start <= self.len && len <= self.len - start,
            "SharedMut range"
        );
        // SAFETY: in bounds (asserted); exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once() {
        let pool = ThreadPool::new(3);
        for n in [0usize, 1, 2, 7, 100] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n={n}");
        }
    }

    #[test]
    fn disjoint_writes() {
        let pool = ThreadPool::new(2);
        let mut out = vec![0usize; 1000];
        let p = SharedMut::new(&mut out);
        pool.run(10, &|t| {
            // SAFETY: task t owns indices t*100..t*100+100.
            let s = unsafe { p.slice(t * 100, 100) };
            for (j, v) in s.iter_mut().enumerate() {
                *v = t * 100 + j;
            }
        });
        assert!(out.iter().enumerate().all(|(i, v)| i == *v));
    }
}

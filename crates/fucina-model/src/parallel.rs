//! Parallel sections of the forward on fucina-quant's persistent thread pool:
//! `run(n_tasks, f)` calls `f(0..n_tasks)` across the threads that show up and
//! returns when all tasks are done.
//!
//! Tasks are claimed from an atomic counter, so a thread the OS has descheduled
//! (two cores shared with other processes) never holds the others back: the ones
//! running simply take its share. What a task computes never depends on which
//! thread runs it, so results are identical for any thread count.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::Result;

/// A fixed set of threads (the caller counts as one).
#[derive(Debug)]
pub struct ThreadPool {
    inner: fucina_quant::ThreadPool,
}

impl ThreadPool {
    /// A pool computing on `n_threads` threads in total (0: the machine's available
    /// parallelism).
    pub fn new(n_threads: usize) -> Result<ThreadPool> {
        Ok(ThreadPool {
            inner: fucina_quant::ThreadPool::new(resolve_threads(n_threads))?,
        })
    }

    /// The process-wide pool of `n_threads` threads (0: the machine's available
    /// parallelism): models loaded with the same thread count share one pool, whose
    /// `run` calls are serialised, so two models never oversubscribe the cores. The
    /// pool lives while any model holds it.
    pub fn shared(n_threads: usize) -> Result<Arc<ThreadPool>> {
        static POOLS: Mutex<Vec<Weak<ThreadPool>>> = Mutex::new(Vec::new());
        let n = resolve_threads(n_threads);
        let mut pools = POOLS.lock().unwrap_or_else(|p| p.into_inner());
        pools.retain(|w| w.strong_count() > 0);
        if let Some(pool) = pools
            .iter()
            .filter_map(Weak::upgrade)
            .find(|p| p.n_threads() == n)
        {
            return Ok(pool);
        }
        let pool = Arc::new(ThreadPool::new(n)?);
        pools.push(Arc::downgrade(&pool));
        Ok(pool)
    }

    /// Threads that compute (workers + caller).
    pub fn n_threads(&self) -> usize {
        self.inner.n_threads()
    }

    /// Call `f(i)` for every `i` in `0..n_tasks`, in parallel; returns when all calls
    /// have returned.
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if n_tasks <= 1 || self.n_threads() == 1 {
            (0..n_tasks).for_each(f);
            return;
        }
        let next = AtomicUsize::new(0);
        self.inner.run(&|_thread| loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n_tasks {
                break;
            }
            f(i);
        });
    }
}

/// `n_threads`, or the machine's available parallelism for 0.
fn resolve_threads(n_threads: usize) -> usize {
    if n_threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        n_threads
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

    /// Ask for the cache lines of `start..start + len` in a writable state (a hint:
    /// nothing is read or written; an out-of-range request is ignored).
    #[inline]
    pub(crate) fn prefetch_write(&self, start: usize, len: usize) {
        #[cfg(target_arch = "x86_64")]
        if len > 0 && start <= self.len && len <= self.len - start {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0};
            let first = self.ptr.wrapping_add(start) as usize;
            let last = first + len * std::mem::size_of::<T>() - 1;
            // Every line the range touches, from the one holding its first byte.
            for line in (first & !63..=last).step_by(64) {
                // SAFETY: a prefetch is a hint; it neither reads nor faults.
                unsafe { _mm_prefetch::<_MM_HINT_ET0>(line as *const i8) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (start, len);
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
        let pool = ThreadPool::new(3).unwrap();
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
        let pool = ThreadPool::new(2).unwrap();
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

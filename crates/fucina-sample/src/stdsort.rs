//! Re-implementations of GNU libstdc++'s `std::sort`, `std::partial_sort` and
//! heap algorithms, element move for element move.
//!
//! Why: llama.cpp sorts candidates with these unstable algorithms, so among
//! equal logits *which* token survives a top-k cut, and in which order tied
//! tokens enter top-p's running sum, is whatever libstdc++'s introsort and
//! heap moves leave behind. Matching llama-cpp-python (built with GCC on
//! Linux) on ties therefore means replaying the same moves. The algorithms are
//! written from their documented behaviour (introsort with a 16-element
//! threshold, median-of-three pivot, unguarded partition, final insertion
//! sort; binary heaps with hole sifting). Index guards that libstdc++ omits
//! ("unguarded" loops) are kept as cheap bounds checks so a comparator that is
//! not a strict weak order can reorder but never index out of bounds.

/// libstdc++'s `_S_threshold`: partitions at or below this size are left to
/// the final insertion sort.
const THRESHOLD: usize = 16;

/// `std::sort(v, comp)` as libstdc++ does it (`comp(a, b)` = "a goes before b").
pub fn sort<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], comp: &mut F) {
    if v.len() < 2 {
        return;
    }
    let depth = 2 * (usize::BITS - 1 - v.len().leading_zeros()) as usize;
    introsort_loop(v, depth, comp);
    final_insertion_sort(v, comp);
}

/// `std::partial_sort(v.begin(), v.begin() + middle, v.end(), comp)`: the first
/// `middle` elements end sorted; the rest are left in heap-select order.
pub fn partial_sort<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], middle: usize, comp: &mut F) {
    let middle = middle.min(v.len());
    heap_select(v, middle, comp);
    sort_heap(&mut v[..middle], comp);
}

fn introsort_loop<T: Copy, F: FnMut(&T, &T) -> bool>(
    mut v: &mut [T],
    mut depth: usize,
    comp: &mut F,
) {
    while v.len() > THRESHOLD {
        if depth == 0 {
            let n = v.len();
            partial_sort(v, n, comp);
            return;
        }
        depth -= 1;
        let cut = unguarded_partition_pivot(v, comp);
        let whole = std::mem::take(&mut v);
        let (lo, hi) = whole.split_at_mut(cut);
        introsort_loop(hi, depth, comp);
        v = lo;
    }
}

fn unguarded_partition_pivot<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    comp: &mut F,
) -> usize {
    let n = v.len();
    let mid = n / 2;
    move_median_to_first(v, 0, 1, mid, n - 1, comp);
    unguarded_partition(v, 1, n, 0, comp)
}

fn move_median_to_first<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    result: usize,
    a: usize,
    b: usize,
    c: usize,
    comp: &mut F,
) {
    let pick = if comp(&v[a], &v[b]) {
        if comp(&v[b], &v[c]) {
            b
        } else if comp(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if comp(&v[a], &v[c]) {
        a
    } else if comp(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(result, pick);
}

fn unguarded_partition<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    mut first: usize,
    mut last: usize,
    pivot: usize,
    comp: &mut F,
) -> usize {
    loop {
        while first < v.len() - 1 && comp(&v[first], &v[pivot]) {
            first += 1;
        }
        last -= 1;
        while last > 0 && comp(&v[pivot], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn final_insertion_sort<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], comp: &mut F) {
    if v.len() > THRESHOLD {
        insertion_sort(&mut v[..THRESHOLD], comp);
        for i in THRESHOLD..v.len() {
            unguarded_linear_insert(v, i, comp);
        }
    } else {
        insertion_sort(v, comp);
    }
}

fn insertion_sort<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], comp: &mut F) {
    for i in 1..v.len() {
        if comp(&v[i], &v[0]) {
            let val = v[i];
            v.copy_within(0..i, 1);
            v[0] = val;
        } else {
            unguarded_linear_insert(v, i, comp);
        }
    }
}

fn unguarded_linear_insert<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    mut last: usize,
    comp: &mut F,
) {
    let val = v[last];
    while last > 0 && comp(&val, &v[last - 1]) {
        v[last] = v[last - 1];
        last -= 1;
    }
    v[last] = val;
}

/// `std::make_heap`: a max-heap under `comp` (the root is the element every
/// other one goes before, i.e. the "smallest" in output order).
pub fn make_heap<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], comp: &mut F) {
    let len = v.len();
    if len < 2 {
        return;
    }
    let mut parent = (len - 2) / 2;
    loop {
        let value = v[parent];
        adjust_heap(v, parent, len, value, comp);
        if parent == 0 {
            return;
        }
        parent -= 1;
    }
}

/// libstdc++'s `__adjust_heap`: move the hole at `hole` down to a leaf along
/// the larger children, then sift `value` up from there (not a plain sift-down:
/// the leaf-first walk is what fixes the tie order).
pub fn adjust_heap<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    mut hole: usize,
    len: usize,
    value: T,
    comp: &mut F,
) {
    let top = hole;
    let mut second = hole;
    while len >= 1 && second < (len - 1) / 2 {
        second = 2 * (second + 1);
        if comp(&v[second], &v[second - 1]) {
            second -= 1;
        }
        v[hole] = v[second];
        hole = second;
    }
    if len >= 2 && len % 2 == 0 && second == (len - 2) / 2 {
        second = 2 * (second + 1);
        v[hole] = v[second - 1];
        hole = second - 1;
    }
    push_heap(v, hole, top, value, comp);
}

fn push_heap<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    mut hole: usize,
    top: usize,
    value: T,
    comp: &mut F,
) {
    while hole > top {
        let parent = (hole - 1) / 2;
        if !comp(&v[parent], &value) {
            break;
        }
        v[hole] = v[parent];
        hole = parent;
    }
    v[hole] = value;
}

fn heap_select<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], middle: usize, comp: &mut F) {
    make_heap(&mut v[..middle], comp);
    for i in middle..v.len() {
        if middle > 0 && comp(&v[i], &v[0]) {
            // libstdc++'s __pop_heap(first, middle, i): the root goes to i and the
            // newcomer is sifted in from the root.
            let value = v[i];
            v[i] = v[0];
            adjust_heap(&mut v[..middle], 0, middle, value, comp);
        }
    }
}

/// `std::sort_heap`: repeatedly pop the root to the back.
pub fn sort_heap<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], comp: &mut F) {
    let mut last = v.len();
    while last > 1 {
        last -= 1;
        let value = v[last];
        v[last] = v[0];
        adjust_heap(&mut v[..last], 0, last, value, comp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    #[test]
    fn sort_orders_like_a_sort() {
        let mut seed = 1;
        for n in [0usize, 1, 2, 5, 16, 17, 33, 100, 1000, 5000] {
            let mut v: Vec<(u32, u32)> = (0..n as u32)
                .map(|i| ((lcg(&mut seed) % 50) as u32, i))
                .collect();
            sort(&mut v, &mut |a, b| a.0 < b.0);
            assert!(v.windows(2).all(|w| w[0].0 <= w[1].0), "n={n}");
            let mut ids: Vec<u32> = v.iter().map(|x| x.1).collect();
            ids.sort();
            assert_eq!(ids, (0..n as u32).collect::<Vec<_>>());
        }
    }

    #[test]
    fn partial_sort_keeps_the_smallest_prefix() {
        let mut seed = 9;
        for (n, m) in [(10usize, 3usize), (100, 40), (1000, 128), (7, 7), (5, 0)] {
            let mut v: Vec<u32> = (0..n).map(|_| (lcg(&mut seed) % 30) as u32).collect();
            let mut want = v.clone();
            want.sort();
            partial_sort(&mut v, m, &mut |a, b| a < b);
            assert_eq!(&v[..m], &want[..m]);
        }
    }

    #[test]
    fn non_strict_comparator_never_panics() {
        let mut seed = 3;
        for n in [2usize, 17, 64, 300] {
            let mut v: Vec<u32> = (0..n).map(|_| (lcg(&mut seed) % 7) as u32).collect();
            sort(&mut v, &mut |a, b| a <= b);
            sort(&mut v, &mut |_, _| true);
            partial_sort(&mut v, n / 2, &mut |_, _| true);
        }
    }
}

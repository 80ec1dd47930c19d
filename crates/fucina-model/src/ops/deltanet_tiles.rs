//! SIMD register tiles for the chunked delta rule's four block products
//! ([`super::deltanet::Products`]), one body for every vector width: a few rows ×
//! two vectors of columns of accumulators stay in registers while the shared matrix
//! rows stream past, so each state / `v'` / `U` row is loaded once per tile of rows
//! instead of once per row. Every element still takes [`Plain`]'s multiplies and adds
//! (separate multiply and add/subtract instructions, never fused) in [`Plain`]'s
//! order, so the results are its bits.
//!
//! [`Tiles<Ymm, 4, 2>`] is the AVX2 instance (16-column tiles; 2-row tiles for the
//! two-accumulator `inter` product so its 8 accumulators fit in the 16 `ymm`
//! registers), [`Tiles<Zmm, 4, 4>`] the AVX-512 one (32-column tiles). Shapes whose
//! column count is not a multiple of the tile width take [`Plain`].

// The AVX-512 intrinsics are stable since 1.89: the floor fucina-quant (a dependency)
// already sets, so this crate's own 1.85 is never the effective one.
#![allow(clippy::incompatible_msrv)]

use core::arch::x86_64::*;
use core::marker::PhantomData;

use super::deltanet::{Plain, Products};

/// One SIMD register of f32 lanes and the five operations the tiles use. The
/// methods call the ISA's intrinsics and are always inlined into the
/// `#[target_feature]` body that runs them (the delta-rule bodies), which is where
/// the intrinsics get their features; calling them anywhere else is unsound.
pub(crate) trait Lanes: Copy {
    /// f32 lanes per register.
    const LANES: usize;
    /// Whether this CPU has the register's instructions.
    fn available() -> bool;
    /// # Safety
    /// `LANES` readable floats at `p`; the CPU has the ISA ([`Lanes::available`]).
    unsafe fn load(p: *const f32) -> Self;
    /// # Safety
    /// `LANES` writable floats at `p`; the CPU has the ISA.
    unsafe fn store(self, p: *mut f32);
    /// A non-temporal store (weakly ordered: fence before publishing).
    ///
    /// # Safety
    /// As [`Lanes::store`], and `p` aligned to the register's size.
    unsafe fn stream(self, p: *mut f32);
    fn splat(x: f32) -> Self;
    fn zero() -> Self;
    fn add(self, b: Self) -> Self;
    fn sub(self, b: Self) -> Self;
    fn mul(self, b: Self) -> Self;
}

/// An AVX2 `ymm` register (8 lanes).
#[derive(Clone, Copy)]
pub(crate) struct Ymm(__m256);

/// An AVX-512 `zmm` register (16 lanes).
#[derive(Clone, Copy)]
pub(crate) struct Zmm(__m512);

// Every `unsafe` block in the two impls below: the intrinsics need the
// register's ISA, which the tiles check (`Lanes::available`) before running any of
// them; pointer validity is the caller's contract on `load` / `store`.
impl Lanes for Ymm {
    const LANES: usize = 8;
    #[inline(always)]
    fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: see the note above the impls.
        unsafe { Ymm(_mm256_loadu_ps(p)) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: see the note above the impls.
        unsafe { _mm256_storeu_ps(p, self.0) }
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut f32) {
        // SAFETY: see the note above the impls.
        unsafe { _mm256_stream_ps(p, self.0) }
    }
    #[inline(always)]
    fn splat(x: f32) -> Self {
        // SAFETY: see the note above the impls.
        unsafe { Ymm(_mm256_set1_ps(x)) }
    }
    #[inline(always)]
    fn zero() -> Self {
        // SAFETY: see the note above the impls.
        unsafe { Ymm(_mm256_setzero_ps()) }
    }
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        // SAFETY: see the note above the impls.
        unsafe { Ymm(_mm256_add_ps(self.0, b.0)) }
    }
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        // SAFETY: see the note above the impls.
        unsafe { Ymm(_mm256_sub_ps(self.0, b.0)) }
    }
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        // SAFETY: see the note above the impls.
        unsafe { Ymm(_mm256_mul_ps(self.0, b.0)) }
    }
}

impl Lanes for Zmm {
    const LANES: usize = 16;
    #[inline(always)]
    fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: see the note above the impls.
        unsafe { Zmm(_mm512_loadu_ps(p)) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: see the note above the impls.
        unsafe { _mm512_storeu_ps(p, self.0) }
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut f32) {
        // SAFETY: see the note above the impls.
        unsafe { _mm512_stream_ps(p, self.0) }
    }
    #[inline(always)]
    fn splat(x: f32) -> Self {
        // SAFETY: see the note above the impls.
        unsafe { Zmm(_mm512_set1_ps(x)) }
    }
    #[inline(always)]
    fn zero() -> Self {
        // SAFETY: see the note above the impls.
        unsafe { Zmm(_mm512_setzero_ps()) }
    }
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        // SAFETY: see the note above the impls.
        unsafe { Zmm(_mm512_add_ps(self.0, b.0)) }
    }
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        // SAFETY: see the note above the impls.
        unsafe { Zmm(_mm512_sub_ps(self.0, b.0)) }
    }
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        // SAFETY: see the note above the impls.
        unsafe { Zmm(_mm512_mul_ps(self.0, b.0)) }
    }
}

/// The tiled products on registers `L`: `R`-row tiles (`RI` rows for `inter`), two
/// registers of columns each. Callable anywhere: each product checks the ISA and the
/// shape and falls back to [`Plain`].
pub(crate) struct Tiles<L, const R: usize, const RI: usize>(PhantomData<L>);

/// Two registers of columns.
type Pair<L> = [L; 2];

#[inline(always)]
unsafe fn ld<L: Lanes>(p: *const f32) -> Pair<L> {
    // SAFETY: the caller guarantees 2·LANES readable floats at `p`.
    unsafe { [L::load(p), L::load(p.add(L::LANES))] }
}

#[inline(always)]
unsafe fn st<L: Lanes>(p: *mut f32, v: Pair<L>) {
    // SAFETY: the caller guarantees 2·LANES writable floats at `p`.
    unsafe {
        v[0].store(p);
        v[1].store(p.add(L::LANES));
    }
}

/// `acc − c·v` per lane (multiply, then subtract: `x -= c * v`).
#[inline(always)]
fn sub_mul<L: Lanes>(acc: Pair<L>, c: L, v: Pair<L>) -> Pair<L> {
    [acc[0].sub(c.mul(v[0])), acc[1].sub(c.mul(v[1]))]
}

/// `acc + c·v` per lane (multiply, then add: `x += c * v`).
#[inline(always)]
fn add_mul<L: Lanes>(acc: Pair<L>, c: L, v: Pair<L>) -> Pair<L> {
    [acc[0].add(c.mul(v[0])), acc[1].add(c.mul(v[1]))]
}

impl<L: Lanes, const R: usize, const RI: usize> Tiles<L, R, RI> {
    /// Columns per tile.
    const W: usize = 2 * L::LANES;
}

impl<L: Lanes, const R: usize, const RI: usize> Products for Tiles<L, R, RI> {
    #[inline(always)]
    fn store_decayed_streaming(
        src: &[f32],
        state: &mut [f32],
        k: &[f32],
        q: &[f32],
        delta: &[f32],
        decay: f32,
        o: &mut [f32],
    ) -> bool {
        let dv = delta.len();
        if !L::available() || dv % L::LANES != 0 || (state.as_ptr() as usize) % (4 * L::LANES) != 0
        {
            return false;
        }
        assert!(
            o.len() == dv
                && src.len() >= k.len() * dv
                && state.len() >= k.len() * dv
                && q.len() >= k.len(),
            "store_decayed_streaming: short buffers"
        );
        let vdecay = L::splat(decay);
        for (i, (&ki, &qi)) in k.iter().zip(q).enumerate() {
            let (vk, vq) = (L::splat(ki), L::splat(qi));
            for j in (0..dv).step_by(L::LANES) {
                // SAFETY: `i·dv + j + LANES ≤ k.len()·dv` floats of `src` / `state` and
                // `j + LANES ≤ dv` of `delta` / `o` (asserted); `state`'s rows start on
                // register-size boundaries (checked) and `j` keeps them there; the ISA
                // was detected above.
                unsafe {
                    let y = L::load(src.as_ptr().add(i * dv + j));
                    let d = L::load(delta.as_ptr().add(j));
                    let v = y.mul(vdecay).add(vk.mul(d));
                    v.stream(state.as_mut_ptr().add(i * dv + j));
                    let oj = o.as_mut_ptr().add(j);
                    L::load(oj).add(v.mul(vq)).store(oj);
                }
            }
        }
        // Streaming stores are weakly ordered: fence them before the pool's release of
        // this task publishes the state to other threads.
        // SAFETY: SSE, part of every x86_64 CPU.
        unsafe { _mm_sfence() };
        true
    }

    #[inline(always)]
    fn dot8(a: &[f32], b: &[f32]) -> f32 {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return Plain::dot8(a, b);
        }
        // SAFETY: AVX2 detected.
        unsafe { dot8_ymm(a, b) }
    }

    #[inline(always)]
    fn solve_lower(a: &[f32], l: usize, u: &mut [f32], uw: usize) {
        if uw % Self::W != 0 || !L::available() {
            return Plain::solve_lower(a, l, u, uw);
        }
        assert!(
            a.len() >= l * l && u.len() >= l * uw,
            "solve_lower: short buffers"
        );
        // SAFETY: the ISA is detected; every access is below l·l of `a` and l·uw of
        // `u` (tiles cover rows < l and columns < uw, both checked above).
        unsafe {
            let mut t0 = 0;
            while t0 + R <= l {
                solve_tile::<L, R>(a.as_ptr(), l, u.as_mut_ptr(), uw, t0);
                t0 += R;
            }
            while t0 < l {
                solve_tile::<L, 1>(a.as_ptr(), l, u.as_mut_ptr(), uw, t0);
                t0 += 1;
            }
        }
    }

    #[inline(always)]
    fn inter(
        state: &[f32],
        dk: usize,
        dv: usize,
        u: &[f32],
        qe: &[f32],
        l: usize,
        vnew: &mut [f32],
        o: &mut [f32],
    ) {
        if dv % Self::W != 0 || !L::available() {
            return Plain::inter(state, dk, dv, u, qe, l, vnew, o);
        }
        let uw = dv + dk;
        assert!(
            state.len() >= dk * dv
                && u.len() >= l * uw
                && qe.len() >= l * dk
                && vnew.len() >= l * dv
                && o.len() >= l * dv,
            "inter: short buffers"
        );
        // SAFETY: the ISA is detected; rows < l, columns < dv, state rows < dk, all
        // within the lengths checked above.
        unsafe {
            let p = (state.as_ptr(), u.as_ptr(), qe.as_ptr());
            let (v, op) = (vnew.as_mut_ptr(), o.as_mut_ptr());
            let mut t0 = 0;
            while t0 + RI <= l {
                inter_tile::<L, RI>(p, dk, dv, t0, v, op);
                t0 += RI;
            }
            while t0 < l {
                inter_tile::<L, 1>(p, dk, dv, t0, v, op);
                t0 += 1;
            }
        }
    }

    #[inline(always)]
    fn intra(qk: &[f32], l: usize, vnew: &[f32], dv: usize, o: &mut [f32]) {
        if dv % Self::W != 0 || !L::available() {
            return Plain::intra(qk, l, vnew, dv, o);
        }
        assert!(
            qk.len() >= l * l && vnew.len() >= l * dv && o.len() >= l * dv,
            "intra: short buffers"
        );
        // SAFETY: the ISA is detected; rows < l, columns < dv, within the checked
        // lengths.
        unsafe {
            let mut t0 = 0;
            while t0 + R <= l {
                intra_tile::<L, R>(qk.as_ptr(), l, vnew.as_ptr(), dv, o.as_mut_ptr(), t0);
                t0 += R;
            }
            while t0 < l {
                intra_tile::<L, 1>(qk.as_ptr(), l, vnew.as_ptr(), dv, o.as_mut_ptr(), t0);
                t0 += 1;
            }
        }
    }

    #[inline(always)]
    fn update(
        state: &mut [f32],
        dk: usize,
        dv: usize,
        decay: f32,
        kc: &[f32],
        l: usize,
        vnew: &[f32],
    ) {
        if dv % Self::W != 0 || !L::available() {
            return Plain::update(state, dk, dv, decay, kc, l, vnew);
        }
        assert!(
            state.len() >= dk * dv && kc.len() >= dk * l && vnew.len() >= l * dv,
            "update: short buffers"
        );
        // SAFETY: the ISA is detected; state rows < dk, columns < dv, t < l, within
        // the checked lengths.
        unsafe {
            let (s, k, v) = (state.as_mut_ptr(), kc.as_ptr(), vnew.as_ptr());
            let mut i0 = 0;
            while i0 + R <= dk {
                update_tile::<L, R>(s, dv, decay, k, l, v, i0);
                i0 += R;
            }
            while i0 < dk {
                update_tile::<L, 1>(s, dv, decay, k, l, v, i0);
                i0 += 1;
            }
        }
    }
}

/// [`super::deltanet::dot8`] with its eight lanes in one `ymm`: lane `l` sums
/// `a[8c + l]·b[8c + l]` over `c` in order, then the same pairwise reduction and tail.
#[target_feature(enable = "avx2")]
#[inline]
fn dot8_ymm(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let n8 = n / 8 * 8;
    let mut acc = _mm256_setzero_ps();
    for (ca, cb) in a[..n8].chunks_exact(8).zip(b[..n8].chunks_exact(8)) {
        // SAFETY: each chunk has 8 readable floats.
        let (va, vb) = unsafe { (_mm256_loadu_ps(ca.as_ptr()), _mm256_loadu_ps(cb.as_ptr())) };
        acc = _mm256_add_ps(acc, _mm256_mul_ps(va, vb));
    }
    // ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)).
    let lo = _mm256_castps256_ps128(acc);
    let hi = _mm256_extractf128_ps::<1>(acc);
    let p = _mm_add_ps(lo, hi); // [l0+l4, l1+l5, l2+l6, l3+l7]
    let q = _mm_add_ps(p, _mm_movehdup_ps(p)); // [p0+p1, _, p2+p3, _]
    let r = _mm_add_ss(q, _mm_movehl_ps(q, q)); // (p0+p1) + (p2+p3)
    let mut s = _mm_cvtss_f32(r);
    for (x, y) in a[n8..n].iter().zip(&b[n8..n]) {
        s += x * y;
    }
    s
}

/// Rows `t0..t0 + N` of the forward substitution, every tile of `uw`'s columns.
#[inline(always)]
unsafe fn solve_tile<L: Lanes, const N: usize>(
    a: *const f32,
    l: usize,
    u: *mut f32,
    uw: usize,
    t0: usize,
) {
    // SAFETY: (whole body) rows t0 + k < l, columns j0 + W ≤ uw, s < t0 + k < l.
    unsafe {
        for j0 in (0..uw).step_by(2 * L::LANES) {
            let mut acc = [[L::zero(); 2]; N];
            for (k, ak) in acc.iter_mut().enumerate() {
                *ak = ld(u.add((t0 + k) * uw + j0));
            }
            for s in 0..t0 {
                let us = ld(u.add(s * uw + j0));
                for (k, ak) in acc.iter_mut().enumerate() {
                    *ak = sub_mul(*ak, L::splat(*a.add((t0 + k) * l + s)), us);
                }
            }
            for k in 1..N {
                for s in 0..k {
                    let c = L::splat(*a.add((t0 + k) * l + t0 + s));
                    acc[k] = sub_mul(acc[k], c, acc[s]);
                }
            }
            for (k, ak) in acc.iter().enumerate() {
                st(u.add((t0 + k) * uw + j0), *ak);
            }
        }
    }
}

/// Rows `t0..t0 + N` of `v' = U_v − U_k S` and `o = qe S`, every tile of `dv`'s
/// columns.
#[inline(always)]
unsafe fn inter_tile<L: Lanes, const N: usize>(
    (state, u, qe): (*const f32, *const f32, *const f32),
    dk: usize,
    dv: usize,
    t0: usize,
    vnew: *mut f32,
    o: *mut f32,
) {
    let uw = dv + dk;
    // SAFETY: (whole body) rows t0 + k < l, columns < dv, i < dk (the caller's checks).
    unsafe {
        for j0 in (0..dv).step_by(2 * L::LANES) {
            let mut va = [[L::zero(); 2]; N];
            let mut oa = [[L::zero(); 2]; N];
            for (k, vk) in va.iter_mut().enumerate() {
                *vk = ld(u.add((t0 + k) * uw + j0));
            }
            for i in 0..dk {
                let sv = ld(state.add(i * dv + j0));
                for k in 0..N {
                    let c = L::splat(*u.add((t0 + k) * uw + dv + i));
                    let q = L::splat(*qe.add((t0 + k) * dk + i));
                    va[k] = sub_mul(va[k], c, sv);
                    oa[k] = add_mul(oa[k], q, sv);
                }
            }
            for k in 0..N {
                st(vnew.add((t0 + k) * dv + j0), va[k]);
                st(o.add((t0 + k) * dv + j0), oa[k]);
            }
        }
    }
}

/// Rows `t0..t0 + N` of `o_t += Σ_{s≤t} qk[t][s]·v'_s`, every tile of `dv`'s columns.
#[inline(always)]
unsafe fn intra_tile<L: Lanes, const N: usize>(
    qk: *const f32,
    l: usize,
    vnew: *const f32,
    dv: usize,
    o: *mut f32,
    t0: usize,
) {
    // SAFETY: (whole body) rows t0 + k < l, s ≤ t0 + k, columns < dv.
    unsafe {
        for j0 in (0..dv).step_by(2 * L::LANES) {
            let mut oa = [[L::zero(); 2]; N];
            for (k, ok) in oa.iter_mut().enumerate() {
                *ok = ld(o.add((t0 + k) * dv + j0));
            }
            for s in 0..=t0 {
                let vs = ld(vnew.add(s * dv + j0));
                for (k, ok) in oa.iter_mut().enumerate() {
                    *ok = add_mul(*ok, L::splat(*qk.add((t0 + k) * l + s)), vs);
                }
            }
            for (k, ok) in oa.iter_mut().enumerate().skip(1) {
                for s in t0 + 1..=t0 + k {
                    let vs = ld(vnew.add(s * dv + j0));
                    *ok = add_mul(*ok, L::splat(*qk.add((t0 + k) * l + s)), vs);
                }
            }
            for (k, ok) in oa.iter().enumerate() {
                st(o.add((t0 + k) * dv + j0), *ok);
            }
        }
    }
}

/// State rows `i0..i0 + N` of `S ← decay·S + Σ_t kc[·][t]·v'_t`, every tile of
/// columns.
#[inline(always)]
unsafe fn update_tile<L: Lanes, const N: usize>(
    state: *mut f32,
    dv: usize,
    decay: f32,
    kc: *const f32,
    l: usize,
    vnew: *const f32,
    i0: usize,
) {
    let d = L::splat(decay);
    // SAFETY: (whole body) state rows i0 + k < dk, columns < dv, t < l.
    unsafe {
        for j0 in (0..dv).step_by(2 * L::LANES) {
            let mut sa = [[L::zero(); 2]; N];
            for (k, sk) in sa.iter_mut().enumerate() {
                let v: Pair<L> = ld(state.add((i0 + k) * dv + j0));
                *sk = [v[0].mul(d), v[1].mul(d)];
            }
            for t in 0..l {
                let vt = ld(vnew.add(t * dv + j0));
                for (k, sk) in sa.iter_mut().enumerate() {
                    *sk = add_mul(*sk, L::splat(*kc.add((i0 + k) * l + t)), vt);
                }
            }
            for (k, sk) in sa.iter().enumerate() {
                st(state.add((i0 + k) * dv + j0), *sk);
            }
        }
    }
}

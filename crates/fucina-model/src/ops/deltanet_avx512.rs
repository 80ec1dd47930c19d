//! AVX-512 register tiles for the chunked delta rule's four block products
//! ([`super::deltanet::Products`]): 4 rows × 32 columns of accumulators stay in
//! registers while the shared matrix rows stream past, so each state / `v'` / `U` row
//! is loaded once per 4 output rows instead of once per row. Every element still
//! takes [`Plain`]'s multiplies and adds (separate `vmulps` and `vaddps`/`vsubps`,
//! never fused) in [`Plain`]'s order, so the results are its bits.
//!
//! Shapes whose column count is not a multiple of 32 take [`Plain`].

// The AVX-512 intrinsics are stable since 1.89: the floor fucina-quant (a dependency)
// already sets, so this crate's own 1.85 is never the effective one.
#![allow(clippy::incompatible_msrv)]

use core::arch::x86_64::*;

use super::deltanet::{Plain, Products};

/// The tiled products (callable only where AVX-512F exists: each checks).
pub(crate) struct Avx512Tiles;

/// Rows per tile.
const R: usize = 4;
/// Columns per tile (two vectors).
const W: usize = 32;

fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

impl Products for Avx512Tiles {
    #[inline(always)]
    fn dot8(a: &[f32], b: &[f32]) -> f32 {
        if !has_avx512() {
            return Plain::dot8(a, b);
        }
        // SAFETY: AVX-512F (and so AVX2) detected.
        unsafe { dot8_ymm(a, b) }
    }

    #[inline(always)]
    fn solve_lower(a: &[f32], l: usize, u: &mut [f32], uw: usize) {
        if uw % W != 0 || !has_avx512() {
            return Plain::solve_lower(a, l, u, uw);
        }
        assert!(
            a.len() >= l * l && u.len() >= l * uw,
            "solve_lower: short buffers"
        );
        // SAFETY: AVX-512F detected; every access is below l·l of `a` and l·uw of `u`
        // (tiles cover rows < l and columns < uw, both checked above).
        unsafe {
            let mut t0 = 0;
            while t0 + R <= l {
                solve_tile::<R>(a.as_ptr(), l, u.as_mut_ptr(), uw, t0);
                t0 += R;
            }
            while t0 < l {
                solve_tile::<1>(a.as_ptr(), l, u.as_mut_ptr(), uw, t0);
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
        if dv % W != 0 || !has_avx512() {
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
        // SAFETY: AVX-512F detected; rows < l, columns < dv, state rows < dk, all
        // within the lengths checked above.
        unsafe {
            let p = (state.as_ptr(), u.as_ptr(), qe.as_ptr());
            let (v, op) = (vnew.as_mut_ptr(), o.as_mut_ptr());
            let mut t0 = 0;
            while t0 + R <= l {
                inter_tile::<R>(p, dk, dv, t0, v, op);
                t0 += R;
            }
            while t0 < l {
                inter_tile::<1>(p, dk, dv, t0, v, op);
                t0 += 1;
            }
        }
    }

    #[inline(always)]
    fn intra(qk: &[f32], l: usize, vnew: &[f32], dv: usize, o: &mut [f32]) {
        if dv % W != 0 || !has_avx512() {
            return Plain::intra(qk, l, vnew, dv, o);
        }
        assert!(
            qk.len() >= l * l && vnew.len() >= l * dv && o.len() >= l * dv,
            "intra: short buffers"
        );
        // SAFETY: AVX-512F detected; rows < l, columns < dv, within the checked lengths.
        unsafe {
            let mut t0 = 0;
            while t0 + R <= l {
                intra_tile::<R>(qk.as_ptr(), l, vnew.as_ptr(), dv, o.as_mut_ptr(), t0);
                t0 += R;
            }
            while t0 < l {
                intra_tile::<1>(qk.as_ptr(), l, vnew.as_ptr(), dv, o.as_mut_ptr(), t0);
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
        if dv % W != 0 || !has_avx512() {
            return Plain::update(state, dk, dv, decay, kc, l, vnew);
        }
        assert!(
            state.len() >= dk * dv && kc.len() >= dk * l && vnew.len() >= l * dv,
            "update: short buffers"
        );
        // SAFETY: AVX-512F detected; state rows < dk, columns < dv, t < l, within the
        // checked lengths.
        unsafe {
            let (s, k, v) = (state.as_mut_ptr(), kc.as_ptr(), vnew.as_ptr());
            let mut i0 = 0;
            while i0 + R <= dk {
                update_tile::<R>(s, dv, decay, k, l, v, i0);
                i0 += R;
            }
            while i0 < dk {
                update_tile::<1>(s, dv, decay, k, l, v, i0);
                i0 += 1;
            }
        }
    }
}

/// [`super::deltanet::dot8`] with its eight lanes in one `ymm`: lane `l` sums
/// `a[8c + l]·b[8c + l]` over `c` in order, then the same pairwise reduction and tail.
#[target_feature(enable = "avx2,avx512f")]
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

#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn ld(p: *const f32) -> [__m512; 2] {
    // SAFETY: the caller guarantees 32 readable floats at `p`.
    unsafe { [_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16))] }
}

#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn st(p: *mut f32, v: [__m512; 2]) {
    // SAFETY: the caller guarantees 32 writable floats at `p`.
    unsafe {
        _mm512_storeu_ps(p, v[0]);
        _mm512_storeu_ps(p.add(16), v[1]);
    }
}

/// `acc − c·v` per lane (multiply, then subtract: `x -= c * v`).
#[target_feature(enable = "avx512f")]
#[inline]
fn sub_mul(acc: [__m512; 2], c: __m512, v: [__m512; 2]) -> [__m512; 2] {
    [
        _mm512_sub_ps(acc[0], _mm512_mul_ps(c, v[0])),
        _mm512_sub_ps(acc[1], _mm512_mul_ps(c, v[1])),
    ]
}

/// `acc + c·v` per lane (multiply, then add: `x += c * v`).
#[target_feature(enable = "avx512f")]
#[inline]
fn add_mul(acc: [__m512; 2], c: __m512, v: [__m512; 2]) -> [__m512; 2] {
    [
        _mm512_add_ps(acc[0], _mm512_mul_ps(c, v[0])),
        _mm512_add_ps(acc[1], _mm512_mul_ps(c, v[1])),
    ]
}

/// Rows `t0..t0 + N` of the forward substitution, every 32-column tile of `uw`.
#[target_feature(enable = "avx512f")]
unsafe fn solve_tile<const N: usize>(a: *const f32, l: usize, u: *mut f32, uw: usize, t0: usize) {
    // SAFETY: (whole body) rows t0 + k < l, columns j0 + 32 ≤ uw, s < t0 + k < l.
    unsafe {
        for j0 in (0..uw).step_by(W) {
            let mut acc = [[_mm512_setzero_ps(); 2]; N];
            for (k, ak) in acc.iter_mut().enumerate() {
                *ak = ld(u.add((t0 + k) * uw + j0));
            }
            for s in 0..t0 {
                let us = ld(u.add(s * uw + j0));
                for (k, ak) in acc.iter_mut().enumerate() {
                    *ak = sub_mul(*ak, _mm512_set1_ps(*a.add((t0 + k) * l + s)), us);
                }
            }
            for k in 1..N {
                for s in 0..k {
                    let c = _mm512_set1_ps(*a.add((t0 + k) * l + t0 + s));
                    acc[k] = sub_mul(acc[k], c, acc[s]);
                }
            }
            for (k, ak) in acc.iter().enumerate() {
                st(u.add((t0 + k) * uw + j0), *ak);
            }
        }
    }
}

/// Rows `t0..t0 + N` of `v' = U_v − U_k S` and `o = qe S`, every 32-column tile of `dv`.
#[target_feature(enable = "avx512f")]
unsafe fn inter_tile<const N: usize>(
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
        for j0 in (0..dv).step_by(W) {
            let mut va = [[_mm512_setzero_ps(); 2]; N];
            let mut oa = [[_mm512_setzero_ps(); 2]; N];
            for (k, vk) in va.iter_mut().enumerate() {
                *vk = ld(u.add((t0 + k) * uw + j0));
            }
            for i in 0..dk {
                let sv = ld(state.add(i * dv + j0));
                for k in 0..N {
                    let c = _mm512_set1_ps(*u.add((t0 + k) * uw + dv + i));
                    let q = _mm512_set1_ps(*qe.add((t0 + k) * dk + i));
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

/// Rows `t0..t0 + N` of `o_t += Σ_{s≤t} qk[t][s]·v'_s`, every 32-column tile of `dv`.
#[target_feature(enable = "avx512f")]
unsafe fn intra_tile<const N: usize>(
    qk: *const f32,
    l: usize,
    vnew: *const f32,
    dv: usize,
    o: *mut f32,
    t0: usize,
) {
    // SAFETY: (whole body) rows t0 + k < l, s ≤ t0 + k, columns < dv.
    unsafe {
        for j0 in (0..dv).step_by(W) {
            let mut oa = [[_mm512_setzero_ps(); 2]; N];
            for (k, ok) in oa.iter_mut().enumerate() {
                *ok = ld(o.add((t0 + k) * dv + j0));
            }
            for s in 0..=t0 {
                let vs = ld(vnew.add(s * dv + j0));
                for (k, ok) in oa.iter_mut().enumerate() {
                    *ok = add_mul(*ok, _mm512_set1_ps(*qk.add((t0 + k) * l + s)), vs);
                }
            }
            for (k, ok) in oa.iter_mut().enumerate().skip(1) {
                for s in t0 + 1..=t0 + k {
                    let vs = ld(vnew.add(s * dv + j0));
                    *ok = add_mul(*ok, _mm512_set1_ps(*qk.add((t0 + k) * l + s)), vs);
                }
            }
            for (k, ok) in oa.iter().enumerate() {
                st(o.add((t0 + k) * dv + j0), *ok);
            }
        }
    }
}

/// State rows `i0..i0 + N` of `S ← decay·S + Σ_t kc[·][t]·v'_t`, every 32-column tile.
#[target_feature(enable = "avx512f")]
unsafe fn update_tile<const N: usize>(
    state: *mut f32,
    dv: usize,
    decay: f32,
    kc: *const f32,
    l: usize,
    vnew: *const f32,
    i0: usize,
) {
    let d = _mm512_set1_ps(decay);
    // SAFETY: (whole body) state rows i0 + k < dk, columns < dv, t < l.
    unsafe {
        for j0 in (0..dv).step_by(W) {
            let mut sa = [[_mm512_setzero_ps(); 2]; N];
            for (k, sk) in sa.iter_mut().enumerate() {
                let v = ld(state.add((i0 + k) * dv + j0));
                *sk = [_mm512_mul_ps(v[0], d), _mm512_mul_ps(v[1], d)];
            }
            for t in 0..l {
                let vt = ld(vnew.add(t * dv + j0));
                for (k, sk) in sa.iter_mut().enumerate() {
                    *sk = add_mul(*sk, _mm512_set1_ps(*kc.add((i0 + k) * l + t)), vt);
                }
            }
            for (k, sk) in sa.iter().enumerate() {
                st(state.add((i0 + k) * dv + j0), *sk);
            }
        }
    }
}

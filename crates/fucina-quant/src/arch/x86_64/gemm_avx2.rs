//! AVX2 + FMA + F16C multi-row (GEMM) block kernels, bitwise equal to `avx2`'s
//! single-row kernels. The Q8_0-activation types (Q4_0, Q5_0, Q8_0) take tiles of 2
//! weight rows × up to 4 activation rows below [`GROUP_MIN`] activation rows (decode,
//! a small verify batch: the weights stream from memory) and one weight row × up to
//! 8 regrouped activation rows from there on ([`legacy_rows`]: compute-bound batches);
//! Q6_K one weight row × 6 activation rows, the other K-quants one × 4.

use super::gemm_blocks::gemm_kernels;

gemm_kernels!("avx2,fma,f16c", 2, 4, 4);

tile_entry!(q4_0_tiles, q4_0_tile);
tile_entry!(q5_0_tiles, q5_0_tile);
tile_entry!(q8_0_tiles, q8_0_tile);

/// Activation rows per Q6_K weight row ([`q6_k_q8_k`]): 6 keeps the integer sums and
/// a half super-block's assembled quants in registers (one thread, Zen 4, GMAC/s by
/// rows: 1: 23, 2: 34, 4: 40, 5 and 6: 48, 7: 43, 8: 38).
const RK6: usize = 6;

// Q6_K: one weight row × `RK6` activation rows (a super-block's 6-bit quants are
// assembled once for all of them).
tile_entry!(q6_k_q8_k, rows q6_k_rows_ymm, RK6);

// The integer primitives of `avx2` (kept identical: the bitwise tests compare them).

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_i8(x: __m256i, y: __m256i) -> __m256i {
    let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn madd_acc(acc: __m256i, p16: __m256i, s16: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(p16, s16))
}

/// The Q8_0-activation tile for small batches: the shared 256-bit body (`off` is not
/// needed: `dot_i8` takes signed quants).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn legacy_tile<const W: usize, const N: usize>(
    w: &[&[u8]; W],
    ts: usize,
    a: &[&[u8]; N],
    _off: i8,
    decode: impl Fn(&[u8]) -> __m256i,
) -> [[f32; W]; N] {
    legacy_tile_ymm(w, ts, a, decode)
}

/// Q4_K rows: the shared 256-bit body.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q4_k_rows<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
    q4_k_rows_ymm(w, a)
}

/// Fewest activation rows that [`legacy_rows`] takes; fewer go through the 2 × 4
/// tiles. Measured on a 2-core Zen 4 (AVX2, 2 threads, Gemma 3 270M, a pinned forward
/// against a one-row step): 2 rows cost 1.29 steps through the tiles and 1.40
/// regrouped, 3 rows 1.78 and 1.67, 8 rows 4.07 and 3.17.
const GROUP_MIN: usize = 3;

macro_rules! legacy_entry {
    ($name:ident, $tiles:ident, $ts:literal, $quants:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn $name(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
            if out.len() < GROUP_MIN * ws.len() {
                $tiles(ws, acts, stride, out);
            } else {
                legacy_rows(ws, acts, stride, out, $ts, |x| $quants(x));
            }
        }
    };
}

legacy_entry!(q4_0_q8_0, q4_0_tiles, 18, q4_0_quants);
legacy_entry!(q5_0_q8_0, q5_0_tiles, 22, q5_0_quants);
legacy_entry!(q8_0_q8_0, q8_0_tiles, 34, q8_0_quants);

/// Activation rows per [`Group`] (8 accumulators in [`legacy_row`]).
const G: usize = 8;

/// The Q8_0-activation kernels (`ts` bytes per weight block, `decode` its 32 signed
/// quants; the scale is its first f16): `out[t * ws.len() + i]` = the single-row
/// `q*_q8_0(ws[i], act_t)`.
///
/// Per weight block and activation row the single-row kernel spends a sign, a
/// `maddubs`, a `madd`, a conversion and an FMA, plus the scale product `d_w · d_a`
/// and the widening of both f16 scales. Here the activation rows go in groups of
/// [`G`], copied once per call into a [`Group`]: per block the rows' quants side by
/// side and their scales widened, so a weight block's eight scale products are one
/// multiply (read back per row by a broadcast load) and its decoding, `|q|` and scale
/// are shared by the group. The arithmetic per output is the single-row kernel's.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn legacy_rows(
    ws: &[&[u8]],
    acts: &[u8],
    stride: usize,
    out: &mut [f32],
    ts: usize,
    decode: impl Fn(&[u8]) -> __m256i + Copy,
) {
    let nw = ws.len();
    if nw == 0 {
        return;
    }
    let nt = out.len() / nw;
    GROUP.with_borrow_mut(|group| {
        for t0 in (0..nt).step_by(G) {
            let n = (nt - t0).min(G);
            group.fill(&acts[(t0 * stride).min(acts.len())..], stride, n);
            for (i, w) in ws.iter().enumerate() {
                let nb = group.scales.len().min(w.len() / ts);
                let g = (&group.quants[..nb], &group.scales[..nb]);
                let mut vals = [0f32; G];
                macro_rules! rows {
                    ($n:literal) => {
                        vals[..$n].copy_from_slice(&legacy_row::<$n>(w, ts, g, decode))
                    };
                }
                match n {
                    8 => rows!(8),
                    7 => rows!(7),
                    6 => rows!(6),
                    5 => rows!(5),
                    4 => rows!(4),
                    3 => rows!(3),
                    2 => rows!(2),
                    _ => rows!(1),
                }
                for (t, v) in vals[..n].iter().enumerate() {
                    out[(t0 + t) * nw + i] = *v;
                }
            }
        }
    });
}

std::thread_local! {
    /// The calling thread's [`Group`] buffers, kept across calls.
    static GROUP: core::cell::RefCell<Group> = core::cell::RefCell::default();
}

/// Up to [`G`] Q8_0 activation rows regrouped by block: block `b`'s quants of row `t`
/// at `quants[b][t]`, its scale widened at `scales[b][t]` (rows past the group's are
/// zero).
#[derive(Default)]
struct Group {
    quants: Vec<[[u8; 32]; G]>,
    scales: Vec<[f32; G]>,
}

impl Group {
    /// Regroup the `n` rows at `a`, `stride` bytes apart, over the blocks all of them
    /// hold.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn fill(&mut self, a: &[u8], stride: usize, n: usize) {
        let nb = a.len().saturating_sub((n - 1) * stride).min(stride) / 34;
        self.quants.clear();
        self.scales.clear();
        for b in 0..nb {
            let mut q = [[0u8; 32]; G];
            let mut h = [0u16; G];
            for t in 0..n {
                let y = &a[t * stride + 34 * b..t * stride + 34 * b + 34];
                h[t] = u16::from_le_bytes([y[0], y[1]]);
                // SAFETY: `q[t]` is 32 writable bytes; `storeu` needs no alignment.
                unsafe { _mm256_storeu_si256(q[t].as_mut_ptr().cast(), load_i256(&y[2..])) };
            }
            let mut f = [0f32; G];
            // SAFETY: `h` is 8 readable u16 and `f` 8 writable f32; neither needs
            // alignment.
            unsafe {
                let v = _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr().cast()));
                _mm256_storeu_ps(f.as_mut_ptr(), v);
            }
            self.quants.push(q);
            self.scales.push(f);
        }
    }
}

/// One weight row against the first `N` rows of a [`Group`] (its blocks' quants and
/// widened scales): [`legacy_rows`]' register tile.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn legacy_row<const N: usize>(
    w: &[u8],
    ts: usize,
    (quants, scales): (&[[[u8; 32]; G]], &[[f32; G]]),
    decode: impl Fn(&[u8]) -> __m256i,
) -> [f32; N] {
    let nb = scales.len().min(quants.len());
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    // With several rows, block b's scale products are stored into `d[b % 2]` one
    // block ahead: a load right after the store would wait for it (a store does not
    // forward to a narrower load at an offset).
    let mut d = [[0f32; G]; 2];
    let dp = d.as_mut_ptr().cast::<f32>();
    let products = |b: usize, slot: usize| {
        let x = &w[b * ts..b * ts + 2];
        // SAFETY: `scales[b]` is 8 readable f32 and `d[slot]` (slot < 2) 8 writable
        // ones; neither needs alignment.
        unsafe {
            let dy = _mm256_loadu_ps(scales[b].as_ptr());
            _mm256_storeu_ps(dp.add(G * slot), _mm256_mul_ps(f16x8(x, 0), dy));
        }
    };
    if N > 1 && nb > 0 {
        products(0, 0);
    }
    for (b, y) in quants[..nb].iter().enumerate() {
        let x = &w[b * ts..(b + 1) * ts];
        if N < 4 {
            // Few rows per weight byte: the weights stream from memory faster than
            // the hardware prefetchers fetch them.
            prefetch_ahead(x);
        }
        if N > 1 && b + 1 < nb {
            products(b + 1, (b + 1) % 2);
        }
        let q = decode(x);
        let aq = _mm256_sign_epi8(q, q);
        let db = dp.wrapping_add(G * (b % 2));
        macro_rules! row {
            ($t:literal) => {
                if $t < N {
                    let dt = if N == 1 {
                        _mm256_mul_ps(f16x8(x, 0), _mm256_set1_ps(scales[b][0]))
                    } else {
                        // SAFETY: `db` is `d[b % 2]`, 8 readable f32.
                        unsafe { broadcast_at::<$t>(db) }
                    };
                    let yv = load_i256(&y[$t]);
                    let p =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(yv, q)), ones);
                    acc[$t] = _mm256_fmadd_ps(dt, _mm256_cvtepi32_ps(p), acc[$t]);
                }
            };
        }
        row!(0);
        row!(1);
        row!(2);
        row!(3);
        row!(4);
        row!(5);
        row!(6);
        row!(7);
    }
    core::array::from_fn(|t| hsum(acc[t]))
}

/// `vbroadcastss` from memory: `p[T]` in all 8 lanes, through a load port. Written as
/// `asm!` so that the compiler cannot forward a value just stored there into
/// registers and broadcast it with two shuffles (vector ALU slots) instead.
///
/// # Safety
/// `p[..=T]` must be readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn broadcast_at<const T: usize>(p: *const f32) -> __m256 {
    let v: __m256;
    // SAFETY: the caller guarantees `p[T]` is readable; the asm reads only those 4
    // bytes.
    unsafe {
        core::arch::asm!(
            "vbroadcastss {v}, dword ptr [{p} + {o}]",
            v = lateout(ymm_reg) v,
            p = in(reg) p,
            o = const 4 * T,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    v
}

//! Multi-row block dot kernels shared by the AVX2 and AVX-512 GEMM modules: a tile of
//! weight rows against `R` activation rows at once (`WR` weight rows for the Q8_0
//! activation types, one for K-quants). Each weight block is decoded once and reused
//! for every activation row; every output keeps its own accumulators and runs exactly
//! the per-lane arithmetic of the single-row kernel in `blocks.rs` (same integer
//! primitives, same float multiply, FMA and horizontal-sum order), so each output is
//! bitwise the single-row dot's result. Integer sums are exact, so only the float
//! sequence per output has to match; `tests::multi_row_equals_single_row` checks it.
//!
//! The invoking module provides `dot_i8` and `madd_acc` (its ISA's integer primitives,
//! identical to the single-row module's), `q4_k_rows` (Q4_K rows: `q4_k_rows_ymm` here,
//! or a wider one), `legacy_tile` (the Q8_0-activation tile:
//! `legacy_tile_ymm` here, or a wider one; `off` is a bias that makes the decoded
//! quants unsigned, for kernels that need it), the tile entries `q6_k_q8_k` (e.g.
//! `tile_entry!(q6_k_q8_k, rows q6_k_rows_ymm)`, or its own driver) and `q4_0_q8_0`, `q5_0_q8_0`,
//! `q8_0_q8_0` (e.g. `tile_entry!(q8_0_q8_0, q8_0_tile)`, or a kernel of its own), and
//! the tile shape `$wr × $r`.

macro_rules! gemm_kernels {
    ($feat:literal, $wr:literal, $r:literal, $rk:literal) => {
        use core::arch::x86_64::*;

        /// Weight rows per register block of the Q8_0-activation kernels.
        const WR: usize = $wr;
        /// Activation rows per register block of the Q8_0-activation kernels.
        const R: usize = $r;
        /// Activation rows per register block of the K-quant kernels.
        const RK: usize = $rk;

        crate::arch::x86_64::primitives::simd_primitives!($feat);

        /// Q8_0-activation kernels (Q4_0, Q5_0, Q8_0 weights) on a tile of `W` weight
        /// rows × `N` activation rows: `decode` turns a weight block of `ts` bytes into
        /// its 32 signed quants (the scale is its first f16). Each activation block is
        /// loaded once for all `W` weight rows, each weight block decoded once for all
        /// `N` activation rows. Result `[t][i]`: activation row `t`, weight row `i`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn legacy_tile_ymm<const W: usize, const N: usize>(
            w: &[&[u8]; W],
            ts: usize,
            a: &[&[u8]; N],
            decode: impl Fn(&[u8]) -> __m256i,
        ) -> [[f32; W]; N] {
            let mut acc = [[_mm256_setzero_ps(); W]; N];
            let nb = w.iter().fold(usize::MAX, |n, x| n.min(x.len() / ts));
            let nb = a.iter().fold(nb, |n, y| n.min(y.len() / 34));
            for b in 0..nb {
                if N < R {
                    prefetch_next_tile(w, ts, b);
                }
                let mut q = [_mm256_setzero_si256(); W];
                let mut dx = [_mm256_setzero_ps(); W];
                for i in 0..W {
                    let x = &w[i][b * ts..(b + 1) * ts];
                    q[i] = decode(x);
                    dx[i] = f16x8(x, 0);
                }
                for (acc, y) in acc.iter_mut().zip(a) {
                    let y = &y[34 * b..34 * b + 34];
                    let yv = load_i256(&y[2..34]);
                    let dy = f16x8(y, 0);
                    for i in 0..W {
                        let p = dot_i8(q[i], yv);
                        acc[i] = _mm256_fmadd_ps(
                            _mm256_mul_ps(dx[i], dy),
                            _mm256_cvtepi32_ps(p),
                            acc[i],
                        );
                    }
                }
            }
            let mut out = [[0f32; W]; N];
            for (o, acc) in out.iter_mut().zip(acc) {
                for (o, acc) in o.iter_mut().zip(acc) {
                    *o = hsum(acc);
                }
            }
            out
        }

        /// For fewer activation rows than a full tile (decode, a verify batch: weights
        /// streamed from memory, little work per byte): at block
        /// `b`, prefetch the `b`-th `W·ts` bytes past the end of the last weight row,
        /// i.e. the next tile's rows when the matrix's rows are contiguous (they are in
        /// a GGUF tensor). A tile reads its short rows as `W` interleaved streams, which
        /// the hardware prefetchers follow poorly; without this a Q8_0 GEMV from memory
        /// ran at a quarter of the bandwidth. Prefetches never fault, so addresses past
        /// the matrix are harmless; they are computed with `wrapping_add` and never
        /// dereferenced.
        #[target_feature(enable = $feat)]
        #[inline]
        fn prefetch_next_tile<const W: usize>(w: &[&[u8]; W], ts: usize, b: usize) {
            let Some(last) = w.last() else { return };
            let next = last.as_ptr().wrapping_add(last.len() + b * W * ts);
            for off in (0..W * ts).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(off).cast());
            }
        }

        /// Software prefetch distance of the K-quant row kernels (bytes past the
        /// current super-block). Row-major rows follow each other, so this runs on
        /// into the next rows. With fewer than `RK` activation rows (decode, a small
        /// verify batch) the kernels outrun the hardware prefetchers: on a 2-core Zen 4
        /// VM (AVX2) the Qwen output head (Q6_K 151936x2048) took 14.5 ms without it
        /// and 10.2-10.9 ms with 2 KiB (1-4 KiB measured), Q4_K 4096x4096 499 → 430 µs.
        const PF_ROWS: usize = 2048;

        /// Prefetch the cache lines `PF_ROWS` past super-block `x` (a hint: addresses
        /// past the end of the matrix are never dereferenced).
        #[target_feature(enable = $feat)]
        #[inline]
        fn prefetch_ahead(x: &[u8]) {
            let p = x.as_ptr().wrapping_add(PF_ROWS);
            for off in (0..x.len()).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off).cast());
            }
        }

        /// A Q4_0 block's 32 signed quants (−8..=7).
        #[target_feature(enable = $feat)]
        #[inline]
        fn q4_0_quants(x: &[u8]) -> __m256i {
            _mm256_sub_epi8(nibbles(&x[2..18]), _mm256_set1_epi8(8))
        }

        /// A Q5_0 block's 32 signed quants (−16..=15).
        #[target_feature(enable = $feat)]
        #[inline]
        fn q5_0_quants(x: &[u8]) -> __m256i {
            let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
            let hb = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
            _mm256_sub_epi8(_mm256_or_si256(nibbles(&x[6..22]), hb), _mm256_set1_epi8(16))
        }

        /// A Q8_0 block's 32 signed quants.
        #[target_feature(enable = $feat)]
        #[inline]
        fn q8_0_quants(x: &[u8]) -> __m256i {
            load_i256(&x[2..34])
        }

        #[target_feature(enable = $feat)]
        #[inline]
        fn q4_0_tile<const W: usize, const N: usize>(
            w: &[&[u8]; W],
            a: &[&[u8]; N],
        ) -> [[f32; W]; N] {
            legacy_tile(w, 18, a, 8, |x| q4_0_quants(x))
        }

        #[target_feature(enable = $feat)]
        #[inline]
        fn q5_0_tile<const W: usize, const N: usize>(
            w: &[&[u8]; W],
            a: &[&[u8]; N],
        ) -> [[f32; W]; N] {
            legacy_tile(w, 22, a, 16, |x| q5_0_quants(x))
        }

        #[target_feature(enable = $feat)]
        #[inline]
        fn q8_0_tile<const W: usize, const N: usize>(
            w: &[&[u8]; W],
            a: &[&[u8]; N],
        ) -> [[f32; W]; N] {
            legacy_tile(w, 34, a, -128, |x| q8_0_quants(x))
        }

        /// Exact sum of the eight i32 lanes (as `blocks.rs`).
        #[target_feature(enable = $feat)]
        #[inline]
        fn hsum_i32(v: __m256i) -> i32 {
            let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
            let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
            _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
        }

        /// Q4_K / Q5_K (`ts` bytes per super-block): `q(x, j, hi)` gives the unsigned
        /// quants of sub-block `2j + hi` of weight block `x`. With `scalar_f` the float
        /// steps are scalar (one FMA per super-block into each of two accumulators, as
        /// the single-row Q4_K kernel), else 8-lane (as the single-row Q5_K kernel).
        #[target_feature(enable = $feat)]
        #[inline]
        fn k45_rows<const N: usize>(
            w: &[u8],
            ts: usize,
            a: &[&[u8]; N],
            scalar_f: bool,
            q: impl Fn(&[u8], usize, bool) -> __m256i,
        ) -> [f32; N] {
            let mut sacc = [0f32; N];
            let mut saccm = [0f32; N];
            let mut acc = [_mm256_setzero_ps(); N];
            let mut accm = [_mm256_setzero_ps(); N];
            let nb = a.iter().fold(w.len() / ts, |n, y| n.min(y.len() / 292));
            for b in 0..nb {
                let x = &w[b * ts..(b + 1) * ts];
                if N < RK {
                    prefetch_ahead(x);
                }
                let (sc, mn) = k_scales_mins(&x[4..16]);
                let mut sumi = [_mm256_setzero_si256(); N];
                for j in 0..4 {
                    let (q0, q1) = (q(x, j, false), q(x, j, true));
                    let (s0, s1) = (
                        words_at(sc, 2 * j, 2 * j),
                        words_at(sc, 2 * j + 1, 2 * j + 1),
                    );
                    for (sumi, y) in sumi.iter_mut().zip(a) {
                        let y = &y[292 * b..292 * b + 292];
                        let p0 = _mm256_maddubs_epi16(q0, load_i256(&y[4 + 64 * j..36 + 64 * j]));
                        let p1 = _mm256_maddubs_epi16(q1, load_i256(&y[36 + 64 * j..68 + 64 * j]));
                        *sumi = if N < 4 {
                            // Few rows: one chain per row would serialise eight
                            // multiply-adds (5 cycles each as `vpdpwssd`); a
                            // partial per sub-block pair keeps the chain to adds.
                            let t = madd_acc(_mm256_setzero_si256(), p0, s0);
                            _mm256_add_epi32(*sumi, madd_acc(t, p1, s1))
                        } else {
                            madd_acc(madd_acc(*sumi, p0, s0), p1, s1)
                        };
                    }
                }
                let (dx, dmx) = (f16x8(x, 0), f16x8(x, 2));
                for r in 0..N {
                    let y = &a[r][292 * b..292 * b + 292];
                    let summs = k_mins_dot(mn, y);
                    if scalar_f {
                        let da = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                        let (dw, dmin) = (_mm256_cvtss_f32(dx), _mm256_cvtss_f32(dmx));
                        sacc[r] = (hsum_i32(sumi[r]) as f32).mul_add(dw * da, sacc[r]);
                        saccm[r] = (summs as f32).mul_add(dmin * da, saccm[r]);
                        continue;
                    }
                    let da = f32x8(y, 0);
                    acc[r] =
                        _mm256_fmadd_ps(_mm256_mul_ps(dx, da), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
                    accm[r] = _mm256_fmadd_ps(
                        _mm256_mul_ps(dmx, da),
                        _mm256_set1_ps(summs as f32),
                        accm[r],
                    );
                }
            }
            let mut out = [0f32; N];
            for r in 0..N {
                out[r] = if scalar_f {
                    sacc[r] - saccm[r]
                } else {
                    hsum(acc[r]) - _mm256_cvtss_f32(accm[r])
                };
            }
            out
        }

        /// Q4_K through the shared 256-bit body (an ISA module may use a wider one).
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(dead_code)] // AVX-512 has its own `q4_k_rows`
        fn q4_k_rows_ymm<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
            k45_rows(w, 144, a, true, |x, j, hi| {
                let q4 = load_i256(&x[16 + 32 * j..48 + 32 * j]);
                let q4 = if hi { _mm256_srli_epi16::<4>(q4) } else { q4 };
                _mm256_and_si256(q4, _mm256_set1_epi8(0x0f))
            })
        }

        #[target_feature(enable = $feat)]
        #[inline]
        fn q5_k_rows<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
            k45_rows(w, 176, a, false, |x, j, hi| {
                let q4 = load_i256(&x[48 + 32 * j..80 + 32 * j]);
                let q4 = if hi { _mm256_srli_epi16::<4>(q4) } else { q4 };
                let bit = (2 * j + usize::from(hi)) as u32;
                let h = _mm256_and_si256(srl16(load_i256(&x[16..48]), bit), _mm256_set1_epi8(1));
                _mm256_or_si256(
                    _mm256_and_si256(q4, _mm256_set1_epi8(0x0f)),
                    _mm256_slli_epi16::<4>(h),
                )
            })
        }

        /// Q6_K (u = 0..=63 stands for u − 32; i8 scales) · Q8_K on 256-bit registers
        /// (AVX2's tile kernel; AVX-512 has its own). With several rows the float
        /// accumulators stay in memory: they change once per super-block, and the
        /// registers go to the integer sums (against all-register accumulators, one
        /// thread, Zen 4: 4 rows 36 → 40 GMAC/s, 6 rows 48 (where the registers
        /// spilled)).
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(dead_code)] // AVX-512 has its own Q6_K kernels
        fn q6_k_rows_ymm<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
            let mut acc = [_mm256_setzero_ps(); N];
            // Opaque to the optimiser, so the accumulators stay in memory; one row
            // (decode) keeps its accumulator in a register (no store-to-load chain
            // between super-blocks: 4% of a Qwen3.5-shaped decode step).
            let accp = if N > 1 {
                core::hint::black_box(acc.as_mut_ptr())
            } else {
                acc.as_mut_ptr()
            };
            let nb = a.iter().fold(w.len() / 210, |n, y| n.min(y.len() / 292));
            for b in 0..nb {
                let x = &w[b * 210..(b + 1) * 210];
                if N < 4 {
                    prefetch_ahead(x);
                }
                let mut sumi = [_mm256_setzero_si256(); N];
                let sc16 = q6_k_chunks(x, |c, q, s| {
                    let off = 292 * b + 4 + 32 * c;
                    for (sumi, y) in sumi.iter_mut().zip(a) {
                        let yv = load_i256(&y[off..off + 32]);
                        *sumi = madd_acc(*sumi, _mm256_maddubs_epi16(q, yv), s);
                    }
                });
                let dx = f16x8(x, 208);
                for (r, sumi) in sumi.iter().enumerate() {
                    // The −32 offset per lane, as the single-row kernel: lane l
                    // subtracts 32·(scale·bsum) of groups 2l and 2l+1.
                    let y = &a[r][292 * b..292 * b + 292];
                    let sub = _mm256_slli_epi32::<5>(_mm256_madd_epi16(load_i256(&y[260..292]), sc16));
                    // SAFETY: `accp` is `acc`, N vectors, and r < N.
                    unsafe {
                        let p = accp.add(r);
                        *p = _mm256_fmadd_ps(
                            _mm256_mul_ps(dx, f32x8(y, 0)),
                            _mm256_cvtepi32_ps(_mm256_sub_epi32(*sumi, sub)),
                            *p,
                        );
                    }
                }
            }
            // SAFETY: `accp` is `acc`, N vectors.
            core::array::from_fn(|r| hsum(unsafe { *accp.add(r) }))
        }

        /// Drive a tile kernel over `ws.len()` weight rows × every activation row:
        /// `out[t * ws.len() + i]` = dot of `ws[i]` with activation row `t`
        /// (`acts[t * stride..(t + 1) * stride]`); `TW × TN` tiles, the last weight rows
        /// as `1 × TN` tiles, and the last `n < TN` activation rows in one tile of `n`
        /// rows (`w_part` / `one_part`: `n` rows, outputs `n × TW` / `n × 1` row-major),
        /// so every weight block is decoded once per `TN` activation rows and once more
        /// for the rest (a verify batch of 5 rows is one tile, not 5 passes).
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(clippy::too_many_arguments)] // the four tile shapes, monomorphised
        fn drive_tiles<const TW: usize, const TN: usize>(
            ws: &[&[u8]],
            acts: &[u8],
            stride: usize,
            out: &mut [f32],
            full: impl Fn(&[&[u8]; TW], &[&[u8]; TN]) -> [[f32; TW];TN],
            w_part: impl Fn(&[&[u8]; TW], &[&[u8]], &mut [f32]),
            a_row: impl Fn(&[&[u8]; 1], &[&[u8]; TN]) -> [[f32; 1];TN],
            one_part: impl Fn(&[&[u8]; 1], &[&[u8]], &mut [f32]),
        ) {
            let nw = ws.len();
            let nt = if nw == 0 { 0 } else { out.len() / nw };
            let act = |t: usize| acts.get(t * stride..(t + 1) * stride).unwrap_or(&[]);
            let mut store = |t0: usize, w0: usize, vals: &[f32], width: usize| {
                for (t, v) in vals.chunks_exact(width).enumerate() {
                    let o = (t0 + t) * nw + w0;
                    out[o..o + width].copy_from_slice(v);
                }
            };
            let full_rows = nt - nt % TN;
            let rest: [&[u8]; TN] = core::array::from_fn(|t| act(full_rows + t));
            let rest = &rest[..nt - full_rows];
            let mut part = [[0f32; TW]; 8];
            let part = part.as_flattened_mut();
            let mut w0 = 0;
            while w0 + TW <= nw {
                let wa: [&[u8]; TW] = core::array::from_fn(|i| ws[w0 + i]);
                for t0 in (0..full_rows).step_by(TN) {
                    let aa: [&[u8]; TN] = core::array::from_fn(|t| act(t0 + t));
                    store(t0, w0, full(&wa, &aa).as_flattened(), TW);
                }
                if !rest.is_empty() {
                    let vals = &mut part[..rest.len() * TW];
                    w_part(&wa, rest, vals);
                    store(full_rows, w0, vals, TW);
                }
                w0 += TW;
            }
            for (i, &x) in ws.iter().enumerate().skip(w0) {
                for t0 in (0..full_rows).step_by(TN) {
                    let aa: [&[u8]; TN] = core::array::from_fn(|t| act(t0 + t));
                    store(t0, i, a_row(&[x], &aa).as_flattened(), 1);
                }
                if !rest.is_empty() {
                    let vals = &mut part[..rest.len()];
                    one_part(&[x], rest, vals);
                    store(full_rows, i, vals, 1);
                }
            }
        }

        /// One weight row at a time against `R` activation rows (K-quant kernels).
        #[target_feature(enable = $feat)]
        #[inline]
        fn rows_tile<const W: usize, const N: usize>(
            w: &[&[u8]; W],
            a: &[&[u8]; N],
            rows: impl Fn(&[u8], &[&[u8]; N]) -> [f32; N],
        ) -> [[f32; W]; N] {
            let mut out = [[0f32; W]; N];
            for (i, x) in w.iter().enumerate() {
                for (o, v) in out.iter_mut().zip(rows(x, a)) {
                    o[i] = v;
                }
            }
            out
        }

        macro_rules! tile_entry {
            ($name:ident, $tile:ident) => {
                #[target_feature(enable = $feat)]
                fn $name(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
                    drive_tiles(
                        ws,
                        acts,
                        stride,
                        out,
                        |w, a| $tile::<WR, R>(w, a),
                        |w, a, out| crate::arch::x86_64::gemm_blocks::part_rows!(a, out, |aa| $tile(w, &aa)),
                        |w, a| $tile::<1, R>(w, a),
                        |w, a, out| crate::arch::x86_64::gemm_blocks::part_rows!(a, out, |aa| $tile(w, &aa)),
                    )
                }
            };
            ($name:ident, rows $kernel:ident) => {
                tile_entry!($name, rows $kernel, RK);
            };
            // One weight row × `$n` activation rows per tile.
            ($name:ident, rows $kernel:ident, $n:expr) => {
                #[target_feature(enable = $feat)]
                fn $name(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
                    drive_tiles(
                        ws,
                        acts,
                        stride,
                        out,
                        |w: &[&[u8]; 1], a: &[&[u8]; $n]| rows_tile(w, a, |x, a| $kernel::<{ $n }>(x, a)),
                        |w: &[&[u8]; 1], a, out| crate::arch::x86_64::gemm_blocks::part_rows!(
                            a, out, |aa| rows_tile(w, &aa, |x, a| $kernel(x, a))
                        ),
                        |w, a| rows_tile(w, a, |x, a| $kernel::<{ $n }>(x, a)),
                        |w, a, out| crate::arch::x86_64::gemm_blocks::part_rows!(
                            a, out, |aa| rows_tile(w, &aa, |x, a| $kernel(x, a))
                        ),
                    )
                }
            };
        }

        tile_entry!(q4_k_q8_k, rows q4_k_rows);
        tile_entry!(q5_k_q8_k, rows q5_k_rows);
        // `q6_k_q8_k` (the Q6_K tile entry) and the Q8_0-activation entries `q4_0_q8_0`,
        // `q5_0_q8_0`, `q8_0_q8_0` (e.g. `tile_entry!(q8_0_q8_0, q8_0_tile)`) come from
        // the invoking module.

        /// The kernels of this module as safe function pointers.
        mod entry {
            macro_rules! safe {
                ($n:ident) => {
                    pub(super) fn $n(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
                        // SAFETY: `kernel` hands these out only for its ISA, which
                        // `dispatch` makes selectable only after run-time detection of
                        // every feature in this module's `#[target_feature]` set.
                        unsafe { super::$n(ws, acts, stride, out) }
                    }
                };
            }
            safe!(q4_0_q8_0);
            safe!(q5_0_q8_0);
            safe!(q8_0_q8_0);
            safe!(q4_k_q8_k);
            safe!(q5_k_q8_k);
            safe!(q6_k_q8_k);
        }

        /// The multi-row kernel of this ISA for weights of type `ty`, if there is one.
        pub(crate) fn kernel(ty: fucina_gguf::GgmlType) -> Option<crate::gemm::TileFn> {
            use fucina_gguf::GgmlType::*;
            Some(match ty {
                Q4_0 => entry::q4_0_q8_0,
                Q5_0 => entry::q5_0_q8_0,
                Q8_0 => entry::q8_0_q8_0,
                Q4_K => entry::q4_k_q8_k,
                Q5_K => entry::q5_k_q8_k,
                Q6_K => entry::q6_k_q8_k,
                _ => return None,
            })
        }
    };
}

pub(crate) use gemm_kernels;

/// Run a tile call on the `n = a.len()` (1..=7) activation rows `a` as one tile of
/// exactly `n` rows (`|aa| call`, `aa: [&[u8]; n]`, the tile's `N` inferred from it)
/// and copy its `[[f32; W]; n]` result into `out` row-major.
macro_rules! part_rows {
    ($a:expr, $out:expr, |$aa:ident| $call:expr) => {{
        let a: &[&[u8]] = $a;
        let out: &mut [f32] = $out;
        macro_rules! arm {
            ($n:literal) => {{
                let $aa: [&[u8]; $n] = core::array::from_fn(|t| a[t]);
                let r = $call;
                let f = r.as_flattened();
                out[..f.len()].copy_from_slice(f);
            }};
        }
        match a.len() {
            1 => arm!(1),
            2 => arm!(2),
            3 => arm!(3),
            4 => arm!(4),
            5 => arm!(5),
            6 => arm!(6),
            7 => arm!(7),
            n => unreachable!("a partial tile of {n} activation rows"),
        }
    }};
}

pub(crate) use part_rows;

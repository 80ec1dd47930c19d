//! Q4_K tile kernels: 8 weight rows × any number of Q8_K activation rows, with the
//! f32 lanes holding the 8 weight rows (no horizontal sums per output).
//!
//! Each super-block of the 8 weight rows is transposed once into lane-per-row form
//! (lane `k` of vector `e` holds quant bytes `4e..4e+4` of row `k`, nibbles split into
//! low / high sub-blocks), its scales, mins, `d` and `dmin` decoded into lanes; then for
//! every activation row four quant bytes at a time are broadcast and multiplied into
//! all 8 rows at once (`vpdpbusd`, or `maddubs` + `madd` on AVX2). The integer sums are
//! exact, so only the float steps per output matter; two orders are provided:
//!
//! * `single`: one FMA per super-block into each of two accumulators
//!   (`acc = fma(isum, d_w·d_a, acc)`, `accm = fma(summs, dmin_w·d_a, accm)`, result
//!   `acc − accm`): bitwise the single-row `q4_k_q8_k` of every ISA and the scalar
//!   `dot_q4_k_q8_k` (ggml's repacked Q4_K GEMV order).
//! * `pairs`: one FMA per pair of 32-element sub-blocks, as ggml's repacked
//!   `gemm_q4_K_8x8_q8_K` (AVX2 and AVX-512 branches alike): bitwise the scalar
//!   `dot_q4_k_q8_k_pairs`.

/// How the packed decode GEMV prefetches its stream in software (a hint: results never
/// depend on it): into L1 16 KiB ahead by default; the repacking's calibration
/// (`repack::tune_q4_k_prefetch`) picks L2 or none where the GEMV streams faster so
/// (Zen 4 without: 258-267 against 312-327 us for a 4096 x 4096 matrix on 2 threads;
/// Zen 5 with, 35-37 against 31-33 GB/s on one thread; an Intel Xeon into L2, 0.82-0.85
/// of its read bandwidth against 0.68-0.76 into L1, 2 threads).
pub(crate) static GEMV_PREFETCH: crate::repack::PrefetchCell =
    crate::repack::PrefetchCell::new(crate::repack::Prefetch::L1);

/// Most activation rows the packed kernels stream in the single-row order
/// (`packed_rows`: each super-block's header decoded and each quant register split once
/// for several rows at a time, then their `vpdpbusd`; on AVX-512 two groups per 512-bit
/// register, up to nine rows a pass, on AVX2 one group, up to four); more are transposed
/// into lane form once per super-block (the tiles). Every verify batch (1 + 16 drafts at
/// most) streams. Measured with the 8-lane kernel of up to four rows on an Intel Xeon, 2
/// cores: one thread over an L2-resident 512 x 2560 matrix, streaming against the tiles
/// 27 / 42 / 83 / 123 us against 34 / 66 / 91-96 / 124 us at
/// 2 / 4 / 8 / 12 rows (AVX2 kernels, `FUCINA_ISA=avx2`: 33 / 55 / 108 / 162 against
/// 42 / 80 / 123 / 173 us); a pinned forward of Qwen3-4B's shape (`verify_cost`, 2
/// threads) of 1 + k rows against one row, k = 1 / 2 / 4 / 7 / 8 / 16: 1.19 / 1.33 / 1.63
/// / 1.96 / 2.27 / 3.68 streaming every batch against 1.25 / 1.45 / 1.82 / 2.20 / 2.39 /
/// 3.62 with the tiles from 5 rows on and each row streamed alone below.
pub(crate) const GEMV_ROWS_MAX: usize = 20;

macro_rules! q4_k_tiles {
    (@chunk $feat:literal, narrow) => {
        /// Weight rows per tile.
        const W_CHUNK: usize = 8;

        /// Up to `W_CHUNK` weight rows × `nt` activation rows.
        #[target_feature(enable = $feat)]
        #[inline]
        fn tile_chunk<const PAIRS: bool>(
            ws: &[&[u8]],
            nb: usize,
            acts: &[u8],
            stride: usize,
            nt: usize,
            out: &mut [f32],
            ostride: usize,
        ) {
            tile8::<PAIRS>(ws, nb, acts, stride, nt, out, ostride)
        }

        /// One interleaved 8-row group of `nb` super-blocks × `nt` activation rows.
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        fn packed_chunk<const PAIRS: bool>(
            groups: &[u8],
            _ng: usize,
            nb: usize,
            acts: &[u8],
            stride: usize,
            nt: usize,
            out: &mut [f32],
            ostride: usize,
        ) {
            let block = |b| pack_x8(&groups[X8 * b..]);
            tile8_from::<PAIRS>(8, nb, block, acts, stride, nt, out, ostride)
        }

        /// A few activation rows against every group, streaming ([`packed_gemv_rows`]).
        #[target_feature(enable = $feat)]
        #[inline]
        fn packed_rows(groups: &[u8], nb: usize, acts: &[u8], stride: usize, nt: usize, out: &mut [f32]) {
            packed_gemv_rows(groups, 0, nb, acts, stride, nt, out)
        }
    };
    (@chunk $feat:literal, wide) => {
        /// Weight rows per tile: two 8-row halves in 512-bit registers, so that every
        /// broadcast activation dword (a memory operand) feeds 16 weight rows.
        const W_CHUNK: usize = 16;
        /// Activation rows per accumulator block of the 16-row tile.
        const T_CHUNK16: usize = 128;

        /// [`Packed`] for 16 rows, lane `k` = row `k`.
        struct Packed16 {
            lo: [[__m512i; 8]; 4],
            hi: [[__m512i; 8]; 4],
            sc: [__m512i; 8],
            /// `sc` as f32 (exact: 6-bit scales), for the pairs order's float form of
            /// each pair's integer sum.
            scf: [__m512; 8],
            mn: [__m512i; 4],
            d: __m512,
            dmin: __m512,
        }

        #[target_feature(enable = $feat)]
        #[inline]
        fn join_i(a: __m256i, b: __m256i) -> __m512i {
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b)
        }

        #[target_feature(enable = $feat)]
        #[inline]
        fn join_f(a: __m256, b: __m256) -> __m512 {
            _mm512_insertf32x8::<1>(_mm512_castps256_ps512(a), b)
        }

        #[target_feature(enable = $feat)]
        #[inline]
        fn join16(a: Packed, b: Packed) -> Packed16 {
            // Plain loops, not `array::from_fn`: a closure does not inherit the
            // target features, and when it is not inlined every intrinsic in it
            // becomes a call.
            let z = _mm512_setzero_si512();
            let mut p = Packed16 {
                lo: [[z; 8]; 4],
                hi: [[z; 8]; 4],
                sc: [z; 8],
                scf: [_mm512_setzero_ps(); 8],
                mn: [z; 4],
                d: join_f(a.d, b.d),
                dmin: join_f(a.dmin, b.dmin),
            };
            for j in 0..4 {
                for e in 0..8 {
                    p.lo[j][e] = join_i(a.lo[j][e], b.lo[j][e]);
                    p.hi[j][e] = join_i(a.hi[j][e], b.hi[j][e]);
                }
                p.mn[j] = join_i(a.mn[j], b.mn[j]);
            }
            for g in 0..8 {
                p.sc[g] = join_i(a.sc[g], b.sc[g]);
                p.scf[g] = _mm512_cvtepi32_ps(p.sc[g]);
            }
            p
        }

        /// [`block_rows`] on 16 lanes (the same per-lane operations).
        #[target_feature(enable = $feat)]
        #[inline]
        fn block_rows16<const PAIRS: bool, const N: usize>(
            p: &Packed16,
            ys: &[&[u8]; N],
            acc: &mut [[__m512; 2]],
        ) {
            let mut a = [_mm512_setzero_ps(); N];
            let mut am = [_mm512_setzero_ps(); N];
            for t in 0..N {
                [a[t], am[t]] = acc[t];
            }
            let mut dd = [_mm512_setzero_ps(); N];
            let mut dm = [_mm512_setzero_ps(); N];
            let mut bs = [[0i32; 4]; N];
            for t in 0..N {
                let y = ys[t];
                let da = _mm512_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
                dd[t] = _mm512_mul_ps(p.d, da);
                dm[t] = _mm512_mul_ps(p.dmin, da);
                let h = _mm_hadd_epi16(load_i128(&y[260..276]), load_i128(&y[276..292]));
                // SAFETY: `bs[t]` is 16 writable bytes and `storeu` needs no alignment.
                unsafe { _mm_storeu_si128(bs[t].as_mut_ptr().cast(), h) };
            }
            let mut tot = [_mm512_setzero_si512(); N];
            let mut totm = [_mm512_setzero_si512(); N];
            for j in 0..4 {
                let mut lo = [_mm512_setzero_si512(); N];
                let mut hi = [_mm512_setzero_si512(); N];
                for e in 0..8 {
                    let (wl, wh) = (p.lo[j][e], p.hi[j][e]);
                    for t in 0..N {
                        lo[t] = _mm512_dpbusd_epi32(lo[t], wl, bcast4x16(ys[t], 4 + 64 * j + 4 * e));
                        hi[t] = _mm512_dpbusd_epi32(hi[t], wh, bcast4x16(ys[t], 36 + 64 * j + 4 * e));
                    }
                }
                for t in 0..N {
                    let imin = _mm512_madd_epi16(p.mn[j], _mm512_set1_epi32(bs[t][j]));
                    if PAIRS {
                        // The pair's integer sum `lo·sc + hi·sc'` formed in f32 instead of
                        // by two `vpmulld` (two µops each on Intel): |lo|, |hi| ≤ 32·15·128
                        // < 2^16 and the scales < 2^6, so both products (< 2^22) and their
                        // sum (< 2^23) are exact, the very value the integer form converts.
                        let isum = _mm512_fmadd_ps(
                            _mm512_cvtepi32_ps(lo[t]),
                            p.scf[2 * j],
                            _mm512_mul_ps(_mm512_cvtepi32_ps(hi[t]), p.scf[2 * j + 1]),
                        );
                        a[t] = _mm512_fmadd_ps(isum, dd[t], a[t]);
                        am[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin), dm[t], am[t]);
                    } else {
                        let isum = _mm512_add_epi32(
                            _mm512_mullo_epi32(lo[t], p.sc[2 * j]),
                            _mm512_mullo_epi32(hi[t], p.sc[2 * j + 1]),
                        );
                        tot[t] = _mm512_add_epi32(tot[t], isum);
                        totm[t] = _mm512_add_epi32(totm[t], imin);
                    }
                }
            }
            for t in 0..N {
                if !PAIRS {
                    a[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[t]), dd[t], a[t]);
                    am[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(totm[t]), dm[t], am[t]);
                }
                acc[t] = [a[t], am[t]];
            }
        }

        /// Four bytes of `b` at `off`, broadcast to every i32 lane of a 512-bit register.
        #[target_feature(enable = $feat)]
        #[inline]
        fn bcast4x16(b: &[u8], off: usize) -> __m512i {
            _mm512_set1_epi32(i32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]))
        }

        /// [`tile8`] for 9..=16 weight rows (padded to 16 with zero blocks).
        #[target_feature(enable = $feat)]
        #[inline]
        fn tile16<const PAIRS: bool>(
            ws: &[&[u8]],
            nb: usize,
            acts: &[u8],
            stride: usize,
            nt: usize,
            out: &mut [f32],
            ostride: usize,
        ) {
            let (a, b) = ws.split_at(8);
            let block = |k| join16(pack_rows(a, k), pack_rows(b, k));
            tile16_from::<PAIRS>(ws.len(), nb, block, acts, stride, nt, out, ostride)
        }

        /// [`tile16`] over `nw <= 16` weight rows whose super-block `b` is `block(b)`.
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        fn tile16_from<const PAIRS: bool>(
            nw: usize,
            nb: usize,
            block: impl Fn(usize) -> Packed16,
            acts: &[u8],
            stride: usize,
            nt: usize,
            out: &mut [f32],
            ostride: usize,
        ) {
            let mut acc = [[_mm512_setzero_ps(); 2]; T_CHUNK16];
            for c0 in (0..nt).step_by(T_CHUNK16) {
                let c1 = (c0 + T_CHUNK16).min(nt);
                let acc = &mut acc[..c1 - c0];
                acc.fill([_mm512_setzero_ps(); 2]);
                for b in 0..nb {
                    let p = block(b);
                    let y = |t: usize| &acts[t * stride + 292 * b..t * stride + 292 * (b + 1)];
                    let mut t = c0;
                    while t + 4 <= c1 {
                        let ys = [y(t), y(t + 1), y(t + 2), y(t + 3)];
                        block_rows16::<PAIRS, 4>(&p, &ys, &mut acc[t - c0..]);
                        t += 4;
                    }
                    while t < c1 {
                        block_rows16::<PAIRS, 1>(&p, &[y(t)], &mut acc[t - c0..]);
                        t += 1;
                    }
                }
                for (t, a) in (c0..c1).zip(acc.iter()) {
                    let mut v = [0f32; 16];
                    // SAFETY: `v` is 64 writable bytes and `storeu` needs no alignment.
                    unsafe { _mm512_storeu_ps(v.as_mut_ptr(), _mm512_sub_ps(a[0], a[1])) };
                    out[t * ostride..t * ostride + nw].copy_from_slice(&v[..nw]);
                }
            }
        }

        /// Up to `W_CHUNK` weight rows × `nt` activation rows.
        #[target_feature(enable = $feat)]
        #[inline]
        fn tile_chunk<const PAIRS: bool>(
            ws: &[&[u8]],
            nb: usize,
            acts: &[u8],
            stride: usize,
            nt: usize,
            out: &mut [f32],
            ostride: usize,
        ) {
            if ws.len() > 8 {
                tile16::<PAIRS>(ws, nb, acts, stride, nt, out, ostride)
            } else {
                tile8::<PAIRS>(ws, nb, acts, stride, nt, out, ostride)
            }
        }

        /// `ng` (1 or 2) interleaved 8-row groups of `nb` super-blocks each, back to
        /// back in `groups`, × `nt` activation rows: two groups share the 512-bit
        /// registers.
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        fn packed_chunk<const PAIRS: bool>(
            groups: &[u8],
            ng: usize,
            nb: usize,
            acts: &[u8],
            stride: usize,
            nt: usize,
            out: &mut [f32],
            ostride: usize,
        ) {
            let gb = nb * X8;
            if ng >= 2 {
                let block = |b| join16(pack_x8(&groups[X8 * b..]), pack_x8(&groups[gb + X8 * b..]));
                tile16_from::<PAIRS>(16, nb, block, acts, stride, nt, out, ostride)
            } else {
                let block = |b| pack_x8(&groups[X8 * b..]);
                tile8_from::<PAIRS>(8, nb, block, acts, stride, nt, out, ostride)
            }
        }

        /// A few activation rows against every group, streaming: two groups at a time
        /// in 512-bit registers ([`gemv_block_rows16`]: every broadcast activation
        /// dword feeds 16 weight rows, each `vpdpbusd` twice the work of the 256-bit
        /// one), an odd last group by [`packed_gemv_rows`]. Bitwise the single-row
        /// order. Both streams are prefetched as the one-row GEMV's is (without, the
        /// loads stalled this kernel). On a 2-core Zen 5 (full-width 512-bit VNNI:
        /// `vpdpbusd` on zmm as fast as on ymm), a pinned forward of Qwen3-4B's shape
        /// of 1 + k rows, k = 4 / 8 / 16, best of 3 runs alternated with the 8-lane
        /// kernel without prefetch: 94 / 140 / 212 ms against 118 / 201 / 319 ms
        /// (one row: 45 ms).
        #[target_feature(enable = $feat)]
        #[inline(never)]
        fn packed_rows(groups: &[u8], nb: usize, acts: &[u8], stride: usize, nt: usize, out: &mut [f32]) {
            let gb = nb * X8;
            let ng = groups.len() / gb;
            let nw = out.len() / nt;
            let zero = _mm512_setzero_ps();
            let mode = super::GEMV_PREFETCH.get();
            let mut acc = [zero; super::GEMV_ROWS_MAX];
            let mut accm = [zero; super::GEMV_ROWS_MAX];
            for p in 0..ng / 2 {
                let (ga, gz) = groups[2 * p * gb..(2 * p + 2) * gb].split_at(gb);
                acc[..nt].fill(zero);
                accm[..nt].fill(zero);
                for (b, (ba, bz)) in ga.chunks_exact(X8).zip(gz.chunks_exact(X8)).enumerate() {
                    // Both streams ahead, as the one-row GEMV does (`GEMV_PREFETCH`).
                    super::super::prefetch_stream(ba.as_ptr(), X8 / 64, mode, 16 << 10);
                    super::super::prefetch_stream(bz.as_ptr(), X8 / 64, mode, 16 << 10);
                    let y = |t: usize| &acts[t * stride + 292 * b..][..292];
                    let mut t = 0;
                    while t < nt {
                        let (a, am) = (&mut acc[t..], &mut accm[t..]);
                        // Passes of at most ROWS16 rows, as even as they go.
                        let left = nt - t;
                        let n = left.div_ceil(left.div_ceil(ROWS16));
                        let y = |i: usize| y(t + i);
                        match n {
                            1 => gemv_block_rows16::<1>(ba, bz, [y(0)], a, am),
                            2 => gemv_block_rows16::<2>(ba, bz, [y(0), y(1)], a, am),
                            3 => gemv_block_rows16::<3>(ba, bz, [y(0), y(1), y(2)], a, am),
                            4 => gemv_block_rows16::<4>(ba, bz, [y(0), y(1), y(2), y(3)], a, am),
                            5 => {
                                let ys = [y(0), y(1), y(2), y(3), y(4)];
                                gemv_block_rows16::<5>(ba, bz, ys, a, am)
                            }
                            6 => {
                                let ys = [y(0), y(1), y(2), y(3), y(4), y(5)];
                                gemv_block_rows16::<6>(ba, bz, ys, a, am)
                            }
                            7 => {
                                let ys = [y(0), y(1), y(2), y(3), y(4), y(5), y(6)];
                                gemv_block_rows16::<7>(ba, bz, ys, a, am)
                            }
                            8 => {
                                let ys = [y(0), y(1), y(2), y(3), y(4), y(5), y(6), y(7)];
                                gemv_block_rows16::<8>(ba, bz, ys, a, am)
                            }
                            _ => {
                                let ys = [y(0), y(1), y(2), y(3), y(4), y(5), y(6), y(7), y(8)];
                                gemv_block_rows16::<9>(ba, bz, ys, a, am)
                            }
                        }
                        t += n;
                    }
                }
                for t in 0..nt {
                    let mut v = [0f32; 16];
                    // SAFETY: `v` is 64 writable bytes and `storeu` needs no alignment.
                    unsafe { _mm512_storeu_ps(v.as_mut_ptr(), _mm512_sub_ps(acc[t], accm[t])) };
                    out[t * nw + 16 * p..][..16].copy_from_slice(&v);
                }
            }
            if ng % 2 == 1 {
                packed_gemv_rows(groups, ng - 1, nb, acts, stride, nt, out);
            }
        }

        /// Most activation rows per pass of [`gemv_block_rows16`]. Past six, the
        /// rows' accumulators and the block's scales no longer all fit the 32 vector
        /// registers (some spill to the stack), and a pass that shares each split
        /// quant register among more rows still wins: Qwen3-4B's shape, 2
        /// threads, alternated in one process, against six, 4096 x 2560 / 9728 x 2560
        /// / 2560 x 4096 matrices at 7 / 8 / 9 / 13 / 17 rows 2-11% / 4-12% / 5-15% /
        /// 2-8% / 4-11% faster; ten and twelve no better than nine.
        const ROWS16: usize = 9;

        /// [`gemv_block_rows`] on 16 lanes: super-block `ba` of one interleaved group
        /// (lanes 0-7) and `bz` of the next (lanes 8-15) against `N` activation blocks;
        /// the same per-lane integer sums and float steps, so bitwise.
        #[target_feature(enable = $feat)]
        #[inline]
        fn gemv_block_rows16<const N: usize>(
            ba: &[u8],
            bz: &[u8],
            ys: [&[u8]; N],
            acc: &mut [__m512],
            accm: &mut [__m512],
        ) {
            let ba: &[u8; X8] = ba[..X8].try_into().expect("whole block");
            let bz: &[u8; X8] = bz[..X8].try_into().expect("whole block");
            let ys: [&[u8; 292]; N] = ys.map(|y| y[..292].try_into().expect("whole block"));
            let (sa, ma, da, dma) = pack_header(&header_rows(ba));
            let (sz, mz, dz, dmz) = pack_header(&header_rows(bz));
            let zero = _mm512_setzero_si512();
            let mut sc = [zero; 8];
            for g in 0..8 {
                sc[g] = join_i(sa[g], sz[g]);
            }
            let mut mn = [zero; 4];
            for j in 0..4 {
                mn[j] = join_i(ma[j], mz[j]);
            }
            let (d, dmin) = (join_f(da, dz), join_f(dma, dmz));
            let mut bs = [[0i32; 4]; N];
            for t in 0..N {
                let h = _mm_hadd_epi16(load_i128(&ys[t][260..276]), load_i128(&ys[t][276..292]));
                // SAFETY: `bs[t]` is 16 writable bytes and `storeu` needs no alignment.
                unsafe { _mm_storeu_si128(bs[t].as_mut_ptr().cast(), h) };
            }
            let m4 = _mm512_set1_epi8(0x0f);
            let mut tot = [zero; N];
            let mut totm = [zero; N];
            for j in 0..4 {
                let mut lo = [zero; N];
                let mut hi = [zero; N];
                for e in 0..8 {
                    let o = 128 + 32 * (8 * j + e);
                    let v = join_i(load_i256(&ba[o..o + 32]), load_i256(&bz[o..o + 32]));
                    let wl = _mm512_and_si512(v, m4);
                    let wh = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
                    for t in 0..N {
                        lo[t] = _mm512_dpbusd_epi32(lo[t], wl, bcast4x16(ys[t], 4 + 64 * j + 4 * e));
                        hi[t] = _mm512_dpbusd_epi32(hi[t], wh, bcast4x16(ys[t], 36 + 64 * j + 4 * e));
                    }
                }
                for t in 0..N {
                    let isum = _mm512_add_epi32(
                        _mm512_mullo_epi32(lo[t], sc[2 * j]),
                        _mm512_mullo_epi32(hi[t], sc[2 * j + 1]),
                    );
                    tot[t] = _mm512_add_epi32(tot[t], isum);
                }
            }
            // The mins' sums after the quants' (exact integers: any order).
            for t in 0..N {
                for j in 0..4 {
                    let imin = _mm512_madd_epi16(mn[j], _mm512_set1_epi32(bs[t][j]));
                    totm[t] = _mm512_add_epi32(totm[t], imin);
                }
            }
            for t in 0..N {
                let y = ys[t];
                let da = _mm512_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[t]), _mm512_mul_ps(d, da), acc[t]);
                accm[t] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(totm[t]), _mm512_mul_ps(dmin, da), accm[t]);
            }
        }
    };
    (@dot $feat:literal, vnni) => {
        /// A partial dot accumulator: i32 lanes (`vpdpbusd` sums straight into them).
        #[target_feature(enable = $feat)]
        #[inline]
        fn dot_acc(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
            _mm256_dpbusd_epi32(acc, w, a)
        }

        /// The i32 lanes `Σ_b w[4k+b]·a[4k+b]` of two [`dot_acc`] accumulators, summed.
        #[target_feature(enable = $feat)]
        #[inline]
        fn dot_sum(x: __m256i, y: __m256i) -> __m256i {
            _mm256_add_epi32(x, y)
        }
    };
    (@dot $feat:literal, novnni) => {
        /// A partial dot accumulator without VNNI: the i16 pair sums of `maddubs`,
        /// widened once per sub-block by [`dot_sum`] instead of once per product
        /// (a third of the integer multiplies). Exact: `w` ≤ 15 unsigned and `a` in
        /// −128..=127, so a pair is within ±3,840 and the 8 pairs a sub-block adds
        /// per lane (both accumulators together) within ±30,720 < 2^15: no
        /// `maddubs` saturation, no i16 wrap, the same i32 lanes as `vpdpbusd`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn dot_acc(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
            _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, a))
        }

        /// The i32 lanes of two [`dot_acc`] accumulators, summed.
        #[target_feature(enable = $feat)]
        #[inline]
        fn dot_sum(x: __m256i, y: __m256i) -> __m256i {
            _mm256_madd_epi16(_mm256_add_epi16(x, y), _mm256_set1_epi16(1))
        }
    };
    ($feat:literal, $vnni:tt, $chunk:tt, $one_row:path) => {
        use core::arch::x86_64::*;

        /// A padding weight block (d = 0: contributes exact zeros).
        static ZERO_BLOCK: [u8; 144] = [0; 144];
        /// Bytes of one super-block of an interleaved 8-row group.
        const X8: usize = crate::repack::Q4_K_X8_BLOCK_BYTES;
        /// Activation rows per accumulator block kept across super-blocks.
        const T_CHUNK: usize = 256;

        /// One super-block of 8 weight rows, lane `k` = row `k`.
        struct Packed {
            /// `lo[j][e]`: low nibbles (sub-block `2j`) of quant bytes `4e..4e+4`.
            lo: [[__m256i; 8]; 4],
            /// `hi[j][e]`: high nibbles (sub-block `2j+1`).
            hi: [[__m256i; 8]; 4],
            /// Scale of sub-block `g` as i32.
            sc: [__m256i; 8],
            /// Mins of sub-blocks `2j`, `2j+1` as the two i16 halves of each lane.
            mn: [__m256i; 4],
            d: __m256,
            dmin: __m256,
        }

        #[target_feature(enable = $feat)]
        #[inline]
        fn load_i256(b: &[u8]) -> __m256i {
            let b = &b[..32];
            // SAFETY: `b` has 32 readable bytes and `loadu` needs no alignment.
            unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
        }

        #[target_feature(enable = $feat)]
        #[inline]
        fn load_i128(b: &[u8]) -> __m128i {
            let b = &b[..16];
            // SAFETY: `b` has 16 readable bytes and `loadu` needs no alignment.
            unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
        }

        /// Four bytes of `b` at `off`, broadcast to every i32 lane.
        #[target_feature(enable = $feat)]
        #[inline]
        fn bcast4(b: &[u8], off: usize) -> __m256i {
            _mm256_set1_epi32(i32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]))
        }

        q4_k_tiles!(@dot $feat, $vnni);
        q4_k_tiles!(@chunk $feat, $chunk);

        /// Transpose 8 rows of 8 i32 lanes: result `e`, lane `k` = `r[k]` lane `e`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn transpose8(r: [__m256i; 8]) -> [__m256i; 8] {
            let t0 = _mm256_unpacklo_epi32(r[0], r[1]);
            let t1 = _mm256_unpackhi_epi32(r[0], r[1]);
            let t2 = _mm256_unpacklo_epi32(r[2], r[3]);
            let t3 = _mm256_unpackhi_epi32(r[2], r[3]);
            let t4 = _mm256_unpacklo_epi32(r[4], r[5]);
            let t5 = _mm256_unpackhi_epi32(r[4], r[5]);
            let t6 = _mm256_unpacklo_epi32(r[6], r[7]);
            let t7 = _mm256_unpackhi_epi32(r[6], r[7]);
            let u0 = _mm256_unpacklo_epi64(t0, t2);
            let u1 = _mm256_unpackhi_epi64(t0, t2);
            let u2 = _mm256_unpacklo_epi64(t1, t3);
            let u3 = _mm256_unpackhi_epi64(t1, t3);
            let u4 = _mm256_unpacklo_epi64(t4, t6);
            let u5 = _mm256_unpackhi_epi64(t4, t6);
            let u6 = _mm256_unpacklo_epi64(t5, t7);
            let u7 = _mm256_unpackhi_epi64(t5, t7);
            [
                _mm256_permute2x128_si256::<0x20>(u0, u4),
                _mm256_permute2x128_si256::<0x20>(u1, u5),
                _mm256_permute2x128_si256::<0x20>(u2, u6),
                _mm256_permute2x128_si256::<0x20>(u3, u7),
                _mm256_permute2x128_si256::<0x31>(u0, u4),
                _mm256_permute2x128_si256::<0x31>(u1, u5),
                _mm256_permute2x128_si256::<0x31>(u2, u6),
                _mm256_permute2x128_si256::<0x31>(u3, u7),
            ]
        }

        /// Byte `n` of every i32 lane, zero-extended.
        #[target_feature(enable = $feat)]
        #[inline]
        fn byte_n(v: __m256i, n: i32) -> __m256i {
            _mm256_and_si256(
                _mm256_srlv_epi32(v, _mm256_set1_epi32(8 * n)),
                _mm256_set1_epi32(0xff),
            )
        }

        /// Super-block `x[k]` (144 bytes each) of 8 weight rows in lane form.
        #[target_feature(enable = $feat)]
        #[inline]
        fn pack(x: &[&[u8]; 8]) -> Packed {
            let m4 = _mm256_set1_epi8(0x0f);
            let mut lo = [[_mm256_setzero_si256(); 8]; 4];
            let mut hi = [[_mm256_setzero_si256(); 8]; 4];
            for j in 0..4 {
                let mut r = [_mm256_setzero_si256(); 8];
                for k in 0..8 {
                    r[k] = load_i256(&x[k][16 + 32 * j..48 + 32 * j]);
                }
                let v = transpose8(r);
                for e in 0..8 {
                    lo[j][e] = _mm256_and_si256(v[e], m4);
                    hi[j][e] = _mm256_and_si256(_mm256_srli_epi16::<4>(v[e]), m4);
                }
            }
            let (sc, mn, d, dmin) = pack_header(&[x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]]);
            Packed {
                lo,
                hi,
                sc,
                mn,
                d,
                dmin,
            }
        }

        /// One super-block (1152 bytes) of an 8-row group in the interleaved layout
        /// of [`crate::repack`] in lane form: the quant dwords are already transposed,
        /// only the nibbles and the headers need splitting.
        #[target_feature(enable = $feat)]
        #[inline]
        fn pack_x8(blk: &[u8]) -> Packed {
            let blk = &blk[..X8];
            let m4 = _mm256_set1_epi8(0x0f);
            let mut lo = [[_mm256_setzero_si256(); 8]; 4];
            let mut hi = [[_mm256_setzero_si256(); 8]; 4];
            for j in 0..4 {
                for e in 0..8 {
                    let o = 128 + 32 * (8 * j + e);
                    let v = load_i256(&blk[o..o + 32]);
                    lo[j][e] = _mm256_and_si256(v, m4);
                    hi[j][e] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                }
            }
            let (sc, mn, d, dmin) = pack_header(&header_rows(blk));
            Packed {
                lo,
                hi,
                sc,
                mn,
                d,
                dmin,
            }
        }

        /// The 8 row headers at the front of an interleaved super-block.
        #[inline]
        fn header_rows(blk: &[u8]) -> [&[u8]; 8] {
            [
                &blk[0..16],
                &blk[16..32],
                &blk[32..48],
                &blk[48..64],
                &blk[64..80],
                &blk[80..96],
                &blk[96..112],
                &blk[112..128],
            ]
        }

        /// The 16-byte headers (`d`, `dmin`, 12 scale bytes) of 8 rows in lane form:
        /// sub-block scales as i32, pair mins as i16 halves, `d` and `dmin` widened.
        #[target_feature(enable = $feat)]
        #[inline]
        fn pack_header(h: &[&[u8]; 8]) -> ([__m256i; 8], [__m256i; 4], __m256, __m256) {
            // Header dwords (d|dmin, scales a, b, c) of rows k and k + 4 per register.
            let mut y = [_mm256_setzero_si256(); 4];
            for k in 0..4 {
                y[k] = _mm256_set_m128i(load_i128(&h[k + 4][..16]), load_i128(&h[k][..16]));
            }
            let t0 = _mm256_unpacklo_epi32(y[0], y[1]);
            let t1 = _mm256_unpackhi_epi32(y[0], y[1]);
            let t2 = _mm256_unpacklo_epi32(y[2], y[3]);
            let t3 = _mm256_unpackhi_epi32(y[2], y[3]);
            let hd = _mm256_unpacklo_epi64(t0, t2);
            let a = _mm256_unpackhi_epi64(t0, t2);
            let b = _mm256_unpacklo_epi64(t1, t3);
            let c = _mm256_unpackhi_epi64(t1, t3);
            let (d, dmin) = d_dmin(hd);
            // The 6-bit scales and mins (as `k_scale_min`, four bytes per lane at once).
            let m6 = _mm256_set1_epi32(0x3f3f_3f3f);
            let m4d = _mm256_set1_epi32(0x0f0f_0f0f);
            let m30 = _mm256_set1_epi32(0x3030_3030);
            let sc_lo = _mm256_and_si256(a, m6);
            let mn_lo = _mm256_and_si256(b, m6);
            let sc_hi = _mm256_or_si256(
                _mm256_and_si256(c, m4d),
                _mm256_and_si256(_mm256_srli_epi32::<2>(a), m30),
            );
            let mn_hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32::<4>(c), m4d),
                _mm256_and_si256(_mm256_srli_epi32::<2>(b), m30),
            );
            let mut sc = [_mm256_setzero_si256(); 8];
            for g in 0..8 {
                sc[g] = byte_n(if g < 4 { sc_lo } else { sc_hi }, (g % 4) as i32);
            }
            let mut mn = [_mm256_setzero_si256(); 4];
            for j in 0..4 {
                let v = if j < 2 { mn_lo } else { mn_hi };
                let n = 2 * (j % 2) as i32;
                mn[j] = _mm256_or_si256(byte_n(v, n), _mm256_slli_epi32::<16>(byte_n(v, n + 1)));
            }
            (sc, mn, d, dmin)
        }

        /// One packed super-block against `N` activation blocks `ys` (292 bytes each),
        /// updating their accumulators `acc[t] = [acc, accm]`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn block_rows<const PAIRS: bool, const N: usize>(
            p: &Packed,
            ys: &[&[u8]; N],
            acc: &mut [[__m256; 2]],
        ) {
            let mut a = [_mm256_setzero_ps(); N];
            let mut am = [_mm256_setzero_ps(); N];
            for t in 0..N {
                [a[t], am[t]] = acc[t];
            }
            let mut dd = [_mm256_setzero_ps(); N];
            let mut dm = [_mm256_setzero_ps(); N];
            // Pair-summed block sums: i32 `j` = (Σ sub-block 2j, Σ sub-block 2j+1) as i16.
            let mut bs = [[0i32; 4]; N];
            for t in 0..N {
                let y = ys[t];
                let da = _mm256_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
                dd[t] = _mm256_mul_ps(p.d, da);
                dm[t] = _mm256_mul_ps(p.dmin, da);
                let h = _mm_hadd_epi16(load_i128(&y[260..276]), load_i128(&y[276..292]));
                // SAFETY: `bs[t]` is 16 writable bytes and `storeu` needs no alignment.
                unsafe { _mm_storeu_si128(bs[t].as_mut_ptr().cast(), h) };
            }
            let mut tot = [_mm256_setzero_si256(); N];
            let mut totm = [_mm256_setzero_si256(); N];
            for j in 0..4 {
                // Low and high sub-blocks interleaved: 2N independent `vpdpbusd` chains.
                let mut lo = [_mm256_setzero_si256(); N];
                let mut hi = [_mm256_setzero_si256(); N];
                for e in 0..8 {
                    let (wl, wh) = (p.lo[j][e], p.hi[j][e]);
                    for t in 0..N {
                        lo[t] = dot_acc(lo[t], wl, bcast4(ys[t], 4 + 64 * j + 4 * e));
                        hi[t] = dot_acc(hi[t], wh, bcast4(ys[t], 36 + 64 * j + 4 * e));
                    }
                }
                let zero = _mm256_setzero_si256();
                for t in 0..N {
                    let isum = _mm256_add_epi32(
                        _mm256_mullo_epi32(dot_sum(lo[t], zero), p.sc[2 * j]),
                        _mm256_mullo_epi32(dot_sum(hi[t], zero), p.sc[2 * j + 1]),
                    );
                    let imin = _mm256_madd_epi16(p.mn[j], _mm256_set1_epi32(bs[t][j]));
                    if PAIRS {
                        a[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd[t], a[t]);
                        am[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), dm[t], am[t]);
                    } else {
                        tot[t] = _mm256_add_epi32(tot[t], isum);
                        totm[t] = _mm256_add_epi32(totm[t], imin);
                    }
                }
            }
            for t in 0..N {
                if !PAIRS {
                    a[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[t]), dd[t], a[t]);
                    am[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(totm[t]), dm[t], am[t]);
                }
                acc[t] = [a[t], am[t]];
            }
        }

        /// `d` (low) and `dmin` (high 16 bits) of 8 rows' first dwords, widened.
        #[target_feature(enable = $feat)]
        #[inline]
        fn d_dmin(hd: __m256i) -> (__m256, __m256) {
            let p = _mm256_packus_epi32(
                _mm256_and_si256(hd, _mm256_set1_epi32(0xffff)),
                _mm256_srli_epi32::<16>(hd),
            );
            let p = _mm256_permute4x64_epi64::<0b11_01_10_00>(p);
            (
                _mm256_cvtph_ps(_mm256_castsi256_si128(p)),
                _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(p)),
            )
        }

        /// Super-block `b` of up to 8 weight rows `ws` (zero blocks past the end).
        #[target_feature(enable = $feat)]
        #[inline]
        fn pack_rows(ws: &[&[u8]], b: usize) -> Packed {
            let mut x: [&[u8]; 8] = [&ZERO_BLOCK[..]; 8];
            for (x, w) in x.iter_mut().zip(ws) {
                *x = &w[144 * b..144 * (b + 1)];
            }
            pack(&x)
        }

        /// Up to 8 weight rows `ws` (same whole-block count `nb`) × `nt` activation
        /// rows; `out[t * ostride + k]` for weight row `k`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn tile8<const PAIRS: bool>(
            ws: &[&[u8]],
            nb: usize,
            acts: &[u8],
            stride: usize,
            nt: usize,
            out: &mut [f32],
            ostride: usize,
        ) {
            tile8_from::<PAIRS>(ws.len(), nb, |b| pack_rows(ws, b), acts, stride, nt, out, ostride)
        }

        /// [`tile8`] over `nw <= 8` weight rows whose super-block `b` is `block(b)`.
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        fn tile8_from<const PAIRS: bool>(
            nw: usize,
            nb: usize,
            block: impl Fn(usize) -> Packed,
            acts: &[u8],
            stride: usize,
            nt: usize,
            out: &mut [f32],
            ostride: usize,
        ) {
            let mut acc = [[_mm256_setzero_ps(); 2]; T_CHUNK];
            for c0 in (0..nt).step_by(T_CHUNK) {
                let c1 = (c0 + T_CHUNK).min(nt);
                let acc = &mut acc[..c1 - c0];
                acc.fill([_mm256_setzero_ps(); 2]);
                for b in 0..nb {
                    let p = block(b);
                    let y = |t: usize| &acts[t * stride + 292 * b..t * stride + 292 * (b + 1)];
                    let mut t = c0;
                    while t + 4 <= c1 {
                        let ys = [y(t), y(t + 1), y(t + 2), y(t + 3)];
                        block_rows::<PAIRS, 4>(&p, &ys, &mut acc[t - c0..]);
                        t += 4;
                    }
                    while t < c1 {
                        block_rows::<PAIRS, 1>(&p, &[y(t)], &mut acc[t - c0..]);
                        t += 1;
                    }
                }
                for (t, a) in (c0..c1).zip(acc.iter()) {
                    let mut v = [0f32; 8];
                    // SAFETY: `v` is 32 writable bytes and `storeu` needs no alignment.
                    unsafe { _mm256_storeu_ps(v.as_mut_ptr(), _mm256_sub_ps(a[0], a[1])) };
                    out[t * ostride..t * ostride + nw].copy_from_slice(&v[..nw]);
                }
            }
        }

        /// The `TileFn` contract: `out[t * ws.len() + i]` = dot of `ws[i]` with
        /// activation row `t`, for `t < out.len() / ws.len()` (`acts` holds them).
        #[target_feature(enable = $feat)]
        fn tiles<const PAIRS: bool>(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
            let nw = ws.len();
            if nw == 0 || stride == 0 {
                out.fill(0.0);
                return;
            }
            let nt = (out.len() / nw).min(acts.len() / stride);
            if nt == 0 {
                return;
            }
            let nb_act = stride / 292;
            let nb_of = |w: &[u8]| (w.len() / 144).min(nb_act);
            for (c, ws) in ws.chunks(W_CHUNK).enumerate() {
                let out = &mut out[W_CHUNK * c..];
                let nb = nb_of(ws[0]);
                if ws.iter().all(|w| nb_of(w) == nb) {
                    tile_chunk::<PAIRS>(ws, nb, acts, stride, nt, out, nw);
                } else {
                    // Rows of different lengths: each with its own block count.
                    for (k, w) in ws.iter().enumerate() {
                        tile8::<PAIRS>(&[w], nb_of(w), acts, stride, nt, &mut out[k..], nw);
                    }
                }
            }
        }

        /// Single-row order (bitwise the single-row dots). One activation row (decode)
        /// goes to `$one_row`, the GEMM module's one-weight-row kernel: with nothing to
        /// amortise the transposition over, and 8 interleaved row streams measured
        /// slower on DRAM-resident weights than whole rows read one after the other.
        pub(crate) fn single(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
            if out.len() == ws.len() {
                if let Some(f) = $one_row(fucina_gguf::GgmlType::Q4_K) {
                    return f(ws, acts, stride, out);
                }
            }
            // SAFETY: `gemm::tile_kernel` hands this out only for its ISA, which
            // `dispatch` makes selectable only after run-time detection of every
            // feature in this module's `#[target_feature]` set.
            unsafe { tiles::<false>(ws, acts, stride, out) }
        }

        /// ggml's prompt-batch (GEMM) order.
        pub(crate) fn pairs(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
            // SAFETY: as `single`.
            unsafe { tiles::<true>(ws, acts, stride, out) }
        }

        /// The [`crate::repack::PackedFn`] contract: `groups` holds whole interleaved
        /// 8-row groups of `nb` super-blocks each, `acts` rows of `stride >= 292·nb`
        /// bytes; `out[t * 8·ng + 8·g + k]` = dot of row `k` of group `g` with
        /// activation row `t`.
        #[target_feature(enable = $feat)]
        fn packed_tiles<const PAIRS: bool>(
            groups: &[u8],
            nb: usize,
            acts: &[u8],
            stride: usize,
            out: &mut [f32],
        ) {
            let gb = nb * X8;
            if gb == 0 || stride == 0 {
                out.fill(0.0);
                return;
            }
            let ng = groups.len() / gb;
            let nw = 8 * ng;
            let nt = out.len().checked_div(nw).unwrap_or(0).min(acts.len() / stride);
            if nt == 0 {
                return;
            }
            if nt == 1 && !PAIRS {
                return packed_gemv(groups, nb, acts, out);
            }
            if nt <= super::GEMV_ROWS_MAX && !PAIRS {
                return packed_rows(groups, nb, acts, stride, nt, out);
            }
            let per = W_CHUNK / 8;
            for c in (0..ng).step_by(per) {
                let k = (ng - c).min(per);
                let g = &groups[c * gb..(c + k) * gb];
                packed_chunk::<PAIRS>(g, k, nb, acts, stride, nt, &mut out[8 * c..], nw);
            }
        }

        /// One activation row against every group (decode): the groups are read
        /// once, front to back, each super-block's quant dwords straight into lanes.
        #[target_feature(enable = $feat)]
        #[inline]
        fn packed_gemv(groups: &[u8], nb: usize, act: &[u8], out: &mut [f32]) {
            let gb = nb * X8;
            let mode = super::GEMV_PREFETCH.get();
            for (g, o) in groups.chunks_exact(gb).zip(out.chunks_exact_mut(8)) {
                let (mut acc, mut accm) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                for (blk, y) in g.chunks_exact(X8).zip(act.chunks_exact(292)) {
                    // The stream ahead as `GEMV_PREFETCH` says: the hardware prefetchers
                    // alone leave this GEMV short of memory speed on Zen 5 (one thread:
                    // 31-33 GB/s without, 35-37 with 16 KiB ahead into L1; 8 KiB: 35-36)
                    // and on Intel Xeons (into L2), and do better alone on Zen 4.
                    super::super::prefetch_stream(blk.as_ptr(), X8 / 64, mode, 16 << 10);
                    gemv_block(blk, y, &mut acc, &mut accm);
                }
                let mut v = [0f32; 8];
                // SAFETY: `v` is 32 writable bytes and `storeu` needs no alignment.
                unsafe { _mm256_storeu_ps(v.as_mut_ptr(), _mm256_sub_ps(acc, accm)) };
                o.copy_from_slice(&v);
            }
        }

        /// A few activation rows (a speculative verify batch, a server step of a few
        /// sequences) against the groups from `first` on: [`packed_gemv`]'s streaming
        /// block, for up to four rows at once ([`gemv_block_rows`]), rather than
        /// transposing every super-block into lane form for so few rows ([`pack_x8`]).
        /// Bitwise the single-row order.
        #[target_feature(enable = $feat)]
        #[inline(never)]
        fn packed_gemv_rows(
            groups: &[u8],
            first: usize,
            nb: usize,
            acts: &[u8],
            stride: usize,
            nt: usize,
            out: &mut [f32],
        ) {
            let gb = nb * X8;
            let nw = out.len() / nt;
            let mode = super::GEMV_PREFETCH.get();
            let mut acc = [_mm256_setzero_ps(); super::GEMV_ROWS_MAX];
            let mut accm = [_mm256_setzero_ps(); super::GEMV_ROWS_MAX];
            for (g, grp) in groups.chunks_exact(gb).enumerate().skip(first) {
                acc[..nt].fill(_mm256_setzero_ps());
                accm[..nt].fill(_mm256_setzero_ps());
                for (b, blk) in grp.chunks_exact(X8).enumerate() {
                    super::super::prefetch_stream(blk.as_ptr(), X8 / 64, mode, 16 << 10);
                    let y = |t: usize| &acts[t * stride + 292 * b..][..292];
                    // Up to four rows share a pass over the block (with AVX-512 their
                    // accumulators and the split quant register fit the 32 vector
                    // registers; the AVX2 build, with 16, measured faster too).
                    let mut t = 0;
                    while t < nt {
                        let (a, am) = (&mut acc[t..], &mut accm[t..]);
                        t += match nt - t {
                            1 => {
                                gemv_block(blk, y(t), &mut a[0], &mut am[0]);
                                1
                            }
                            2 => {
                                gemv_block_rows::<2>(blk, [y(t), y(t + 1)], a, am);
                                2
                            }
                            3 => {
                                gemv_block_rows::<3>(blk, [y(t), y(t + 1), y(t + 2)], a, am);
                                3
                            }
                            _ => {
                                gemv_block_rows::<4>(blk, [y(t), y(t + 1), y(t + 2), y(t + 3)], a, am);
                                4
                            }
                        };
                    }
                }
                for t in 0..nt {
                    let mut v = [0f32; 8];
                    // SAFETY: `v` is 32 writable bytes and `storeu` needs no alignment.
                    unsafe { _mm256_storeu_ps(v.as_mut_ptr(), _mm256_sub_ps(acc[t], accm[t])) };
                    out[t * nw + 8 * g..][..8].copy_from_slice(&v);
                }
            }
        }

        /// One interleaved super-block against one activation block, streaming:
        /// each quant register is split and multiplied as it is loaded (nothing of
        /// the block is kept in registers but its scales). The integer sums and the
        /// float steps are those of [`block_rows`] in the single-row order, so the
        /// result is bitwise the same; the sums are split over independent chains.
        #[target_feature(enable = $feat)]
        #[inline]
        fn gemv_block(blk: &[u8], y: &[u8], acc: &mut __m256, accm: &mut __m256) {
            let blk: &[u8; X8] = blk[..X8].try_into().expect("whole block");
            let y: &[u8; 292] = y[..292].try_into().expect("whole block");
            let (sc, mn, d, dmin) = pack_header(&header_rows(blk));
            let da = _mm256_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
            let h = _mm_hadd_epi16(load_i128(&y[260..276]), load_i128(&y[276..292]));
            let mut bs = [0i32; 4];
            // SAFETY: `bs` is 16 writable bytes and `storeu` needs no alignment.
            unsafe { _mm_storeu_si128(bs.as_mut_ptr().cast(), h) };
            let m4 = _mm256_set1_epi8(0x0f);
            let mut tot = _mm256_setzero_si256();
            let mut totm = _mm256_setzero_si256();
            for j in 0..4 {
                let mut lo = [_mm256_setzero_si256(); 2];
                let mut hi = [_mm256_setzero_si256(); 2];
                for e in 0..8 {
                    let o = 128 + 32 * (8 * j + e);
                    let v = load_i256(&blk[o..o + 32]);
                    let wl = _mm256_and_si256(v, m4);
                    let wh = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                    lo[e % 2] = dot_acc(lo[e % 2], wl, bcast4(y, 4 + 64 * j + 4 * e));
                    hi[e % 2] = dot_acc(hi[e % 2], wh, bcast4(y, 36 + 64 * j + 4 * e));
                }
                let isum = _mm256_add_epi32(
                    _mm256_mullo_epi32(dot_sum(lo[0], lo[1]), sc[2 * j]),
                    _mm256_mullo_epi32(dot_sum(hi[0], hi[1]), sc[2 * j + 1]),
                );
                let imin = _mm256_madd_epi16(mn[j], _mm256_set1_epi32(bs[j]));
                tot = _mm256_add_epi32(tot, isum);
                totm = _mm256_add_epi32(totm, imin);
            }
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), _mm256_mul_ps(d, da), *acc);
            *accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(totm), _mm256_mul_ps(dmin, da), *accm);
        }

        /// [`gemv_block`] for `N` activation rows at once: the block's header decoded
        /// and each quant register split once for all of them (the per-row work is the
        /// `vpdpbusd` and the scale steps). The same integer sums and float steps per
        /// row, so bitwise [`gemv_block`]'s results.
        #[target_feature(enable = $feat)]
        #[inline]
        fn gemv_block_rows<const N: usize>(
            blk: &[u8],
            ys: [&[u8]; N],
            acc: &mut [__m256],
            accm: &mut [__m256],
        ) {
            let blk: &[u8; X8] = blk[..X8].try_into().expect("whole block");
            let ys: [&[u8; 292]; N] = ys.map(|y| y[..292].try_into().expect("whole block"));
            let (sc, mn, d, dmin) = pack_header(&header_rows(blk));
            let mut bs = [[0i32; 4]; N];
            for t in 0..N {
                let h = _mm_hadd_epi16(load_i128(&ys[t][260..276]), load_i128(&ys[t][276..292]));
                // SAFETY: `bs[t]` is 16 writable bytes and `storeu` needs no alignment.
                unsafe { _mm_storeu_si128(bs[t].as_mut_ptr().cast(), h) };
            }
            let m4 = _mm256_set1_epi8(0x0f);
            let zero = _mm256_setzero_si256();
            let mut tot = [zero; N];
            let mut totm = [zero; N];
            for j in 0..4 {
                let mut lo = [zero; N];
                let mut hi = [zero; N];
                for e in 0..8 {
                    let o = 128 + 32 * (8 * j + e);
                    let v = load_i256(&blk[o..o + 32]);
                    let wl = _mm256_and_si256(v, m4);
                    let wh = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                    for t in 0..N {
                        lo[t] = dot_acc(lo[t], wl, bcast4(ys[t], 4 + 64 * j + 4 * e));
                        hi[t] = dot_acc(hi[t], wh, bcast4(ys[t], 36 + 64 * j + 4 * e));
                    }
                }
                for t in 0..N {
                    let isum = _mm256_add_epi32(
                        _mm256_mullo_epi32(dot_sum(lo[t], zero), sc[2 * j]),
                        _mm256_mullo_epi32(dot_sum(hi[t], zero), sc[2 * j + 1]),
                    );
                    let imin = _mm256_madd_epi16(mn[j], _mm256_set1_epi32(bs[t][j]));
                    tot[t] = _mm256_add_epi32(tot[t], isum);
                    totm[t] = _mm256_add_epi32(totm[t], imin);
                }
            }
            for t in 0..N {
                let y = ys[t];
                let da = _mm256_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[t]), _mm256_mul_ps(d, da), acc[t]);
                accm[t] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(totm[t]), _mm256_mul_ps(dmin, da), accm[t]);
            }
        }

        /// Interleaved groups in the single-row order (bitwise the single-row dots).
        pub(crate) fn packed_single(
            groups: &[u8],
            nb: usize,
            acts: &[u8],
            stride: usize,
            out: &mut [f32],
        ) {
            // SAFETY: `repack` hands this out only for its ISA, which `dispatch` makes
            // selectable only after run-time detection of every feature in this
            // module's `#[target_feature]` set.
            unsafe { packed_tiles::<false>(groups, nb, acts, stride, out) }
        }

        /// Interleaved groups in ggml's prompt-batch (GEMM) order.
        pub(crate) fn packed_pairs(
            groups: &[u8],
            nb: usize,
            acts: &[u8],
            stride: usize,
            out: &mut [f32],
        ) {
            // SAFETY: as `packed_single`.
            unsafe { packed_tiles::<true>(groups, nb, acts, stride, out) }
        }
    };
}

/// AVX2 + FMA + F16C.
pub(crate) mod avx2 {
    q4_k_tiles!(
        "avx2,fma,f16c",
        novnni,
        narrow,
        super::super::gemm_avx2::kernel
    );
}

/// AVX-512 (VL + VNNI on 256-bit registers).
pub(crate) mod avx512 {
    q4_k_tiles!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
        vnni,
        wide,
        super::super::gemm_avx512::kernel
    );
}

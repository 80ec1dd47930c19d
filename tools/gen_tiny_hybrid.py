#!/usr/bin/env python3
"""Tiny random-weight hybrid / newest-family models (qwen35, qwen35moe, qwen3next, gemma4, gemma4-moe) and goldens.

For each family: a transformers config with tiny dims but every feature the family
ships (Qwen3.5: Gated DeltaNet layers with more value heads than key heads, an
explicit layer pattern whose last layer is recurrent, gated attention with partial
interleaved MRoPE) -> seeded random weights -> GGUF files written with gguf-py under
llama.cpp's tensor names, applying the transforms of llama.cpp's
convert_hf_to_gguf.py (conversion/qwen.py: `Qwen3NextModel.modify_tensors` and
`_LinearAttentionVReorderBase`):

  - every `*norm.weight` but `linear_attn.norm.weight` stored as 1 + w;
  - `A_log` stored as `ssm_a = -exp(A_log)`, `dt_bias` as `ssm_dt.bias`, the conv1d
    kernel squeezed to [channels, kernel] and kept f32;
  - value heads reordered from grouped (by key head) to tiled order in
    in_proj_qkv's V rows, in_proj_z, in_proj_a/b, A_log, dt_bias, the conv1d's V
    channels and out_proj's columns;
  - `linear_attn.*` -> attn_qkv / attn_gate / ssm_alpha / ssm_beta / ssm_conv1d /
    ssm_dt / ssm_a / ssm_norm / ssm_out; `post_attention_layernorm` ->
    post_attention_norm (the pre-FFN norm).

Gemma 4 (conversion/gemma.py `Gemma4Model`): norms stored as is; per-layer
geometry keys (key_length / key_length_swa, rope.dimension_count[_swa],
rope.freq_base[_swa], head_count_kv per layer, sliding_window_pattern,
shared_kv_layers, embedding_length_per_layer_input, a per-layer
feed_forward_length for the double-wide MLP of the shared-KV layers);
`rope_freqs.weight` with 1e30 on the global layers' unrotated pairs ("proportional"
RoPE); `layer_scalar` -> layer_output_scale; the per-layer-embedding tables. The
tiny config has shared-KV layers, global layers whose values are their keys
(`attention_k_eq_v`) with their own head dim and kv heads, a sliding window of 8
and a final logit soft cap.

Variants f32, f16 (matrices f16, vectors and the conv kernel f32) and q8_0. Goldens:
transformers' float32 eager forward, logits at every position of two prompts of 64
and 100 tokens (the second spans two 64-row chunks of the chunked delta rule), and
12-token greedy continuations (full recompute per step).

Usage (heavy deps in a separate virtualenv, never needed by CI):
    .venv-ref/bin/python tools/gen_tiny_hybrid.py [--out tests/goldens/model/tiny] [--only qwen35]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers
from transformers import (
    Gemma4ForCausalLM,
    Gemma4TextConfig,
    Qwen3_5ForCausalLM,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

SEED = 20260301
VOCAB = 256
N_GREEDY = 12
PROMPT_LENS = [64, 100]


def prompts(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(1, VOCAB, n)] for n in PROMPT_LENS]


# The hybrids' shared shape: 4 layers (the last recurrent), gated attention with 4
# query / 2 kv heads of 32, DeltaNet with 2 key and 4 value heads of 16.
HYBRID = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    rms_norm_eps=1e-6,
    max_position_embeddings=512,
    tie_word_embeddings=False,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
)
MROPE = {
    "rope_type": "default",
    "rope_theta": 10_000_000.0,
    "partial_rotary_factor": 0.25,
    "mrope_section": [2, 1, 1],
    "mrope_interleaved": True,
}
# 8 experts, 2 routed per token, a gated shared expert.
EXPERTS = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64)


def families():
    return {
        "qwen35": (
            Qwen3_5ForCausalLM,
            Qwen3_5TextConfig(**HYBRID, intermediate_size=128, rope_parameters=MROPE),
        ),
        "gemma4": (
            Gemma4ForCausalLM,
            Gemma4TextConfig(
                vocab_size=VOCAB,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=6,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=32,
                global_head_dim=64,
                num_global_key_value_heads=1,
                attention_k_eq_v=True,
                hidden_activation="gelu_pytorch_tanh",
                max_position_embeddings=512,
                rms_norm_eps=1e-6,
                tie_word_embeddings=True,
                sliding_window=8,
                layer_types=[
                    "sliding_attention",
                    "sliding_attention",
                    "sliding_attention",
                    "full_attention",
                    "sliding_attention",
                    "full_attention",
                ],
                final_logit_softcapping=30.0,
                vocab_size_per_layer_input=VOCAB,
                hidden_size_per_layer_input=16,
                num_kv_shared_layers=2,
                use_double_wide_mlp=True,
                rope_parameters={
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                    "full_attention": {
                        "rope_type": "proportional",
                        "partial_rotary_factor": 0.25,
                        "rope_theta": 1_000_000.0,
                    },
                },
                pad_token_id=0,
                bos_token_id=2,
                eos_token_id=1,
            ),
        ),
        # Last, so the other families keep their seeds (SEED + index).
        "qwen35moe": (
            Qwen3_5MoeForCausalLM,
            Qwen3_5MoeTextConfig(**HYBRID, **EXPERTS, rope_parameters=MROPE),
        ),
        "qwen3next": (
            Qwen3NextForCausalLM,
            Qwen3NextConfig(
                **HYBRID,
                **EXPERTS,
                intermediate_size=128,
                norm_topk_prob=True,
                decoder_sparse_step=1,
                mlp_only_layers=[],
                rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25},
            ),
        ),
        # Gemma 4's MoE variant (26B-A4B's block: a dense MLP beside 8 routed experts
        # with fused gate/up stacks, router scale and per-expert scales), without
        # per-layer embeddings or shared KV, as that model has.
        "gemma4-moe": (
            Gemma4ForCausalLM,
            Gemma4TextConfig(
                vocab_size=VOCAB,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=4,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=32,
                global_head_dim=64,
                num_global_key_value_heads=1,
                attention_k_eq_v=True,
                hidden_activation="gelu_pytorch_tanh",
                max_position_embeddings=512,
                rms_norm_eps=1e-6,
                tie_word_embeddings=True,
                sliding_window=8,
                layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
                final_logit_softcapping=30.0,
                hidden_size_per_layer_input=0,
                num_kv_shared_layers=0,
                enable_moe_block=True,
                num_experts=8,
                top_k_experts=2,
                moe_intermediate_size=32,
                rope_parameters={
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                    "full_attention": {
                        "rope_type": "proportional",
                        "partial_rotary_factor": 0.25,
                        "rope_theta": 1_000_000.0,
                    },
                },
                pad_token_id=0,
                bos_token_id=2,
                eos_token_id=1,
            ),
        ),
    }


def arch_of(family: str) -> str:
    return family.split("-")[0]


def randomize(model: torch.nn.Module, family: str, gen: torch.Generator) -> None:
    """Weights with enough spread that logits are not near-uniform. Zero-centred
    RMSNorms (Qwen3.5 multiplies by 1 + w) around 0, plain ones (Gemma 4, the
    DeltaNet output norm) around 1; decays exp(-A·softplus(.)) kept moderate so the
    recurrent state carries information across many positions; Gemma 4's layer
    scalars (buffers) in [0.5, 1.5]."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight") or (family == "gemma4" and name.endswith("norm.weight")):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("norm.weight"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("A_log"):
                p.copy_(torch.log(0.05 + 0.95 * torch.rand(p.shape, generator=gen)))
            elif name.endswith("dt_bias") or name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                std = 0.5 if family == "gemma4" else 1.0
                p.copy_(std * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
            if name.endswith("router.scale"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("per_expert_scale"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))


def reorder_v(a: np.ndarray, axis: int, n_k: int, per: int, head: int) -> np.ndarray:
    """`_LinearAttentionVReorderBase._reorder_v_heads`: grouped -> tiled along `axis`."""
    a = np.moveaxis(a, axis, 0)
    shape = a.shape
    a = a.reshape(n_k, per, head, *shape[1:]).swapaxes(0, 1).reshape(shape)
    return np.moveaxis(a, 0, axis)


def split_qkvz(arr: np.ndarray, cfg) -> tuple[np.ndarray, np.ndarray]:
    """`Qwen3NextModel.modify_tensors`: in_proj_qkvz (per key head [q, k, v, z]) ->
    attn_qkv ([q heads | k heads | v heads]) and attn_gate (z)."""
    n_k, dk = cfg.linear_num_key_heads, cfg.linear_key_head_dim
    pv = cfg.linear_num_value_heads // n_k * cfg.linear_value_head_dim
    t = arr.T.reshape(arr.shape[1], n_k, 2 * dk + 2 * pv)
    q, k, v, z = np.split(t, [dk, 2 * dk, 2 * dk + pv], axis=-1)
    flat = lambda x: x.reshape(arr.shape[1], -1)  # noqa: E731
    return np.concatenate([flat(q), flat(k), flat(v)], -1).T, flat(z).T


def qwen35_tensors(model, cfg, family: str = "qwen35", legacy: bool = False) -> list[tuple[str, np.ndarray]]:
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    n_k, n_v = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    # Only Qwen3.5's converter reorders value heads to the tiled order.
    per = n_v // n_k if family != "qwen3next" else 1
    out = [
        ("token_embd.weight", sd["model.embed_tokens.weight"]),
        ("output_norm.weight", sd["model.norm.weight"] + 1.0),
    ]
    if not cfg.tie_word_embeddings:
        out.append(("output.weight", sd["lm_head.weight"]))
    names = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "post_attention_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
        "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
        "linear_attn.in_proj_z.weight": "attn_gate.weight",
        "linear_attn.in_proj_b.weight": "ssm_beta.weight",
        "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
        "linear_attn.conv1d.weight": "ssm_conv1d.weight",
        "linear_attn.dt_bias": "ssm_dt.bias",
        "linear_attn.A_log": "ssm_a",
        "linear_attn.norm.weight": "ssm_norm.weight",
        "linear_attn.out_proj.weight": "ssm_out.weight",
        "linear_attn.in_proj_ba.weight": "ssm_ba.weight",
        "linear_attn.in_proj_qkvz.weight": "ssm_in.weight",
        "mlp.gate.weight": "ffn_gate_inp.weight",
        "mlp.experts.down_proj": "ffn_down_exps.weight",
        "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
        "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
        "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
        "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    }
    for il in range(cfg.num_hidden_layers):
        pre = f"model.layers.{il}."
        for key, arr in sd.items():
            if not key.startswith(pre):
                continue
            rest = key[len(pre) :]
            if rest == "mlp.experts.gate_up_proj":
                # [E, 2·I, H]: gate rows first (Qwen2MoeModel.modify_tensors splits them).
                half = arr.shape[1] // 2
                out.append((f"blk.{il}.ffn_gate_exps.weight", arr[:, :half]))
                out.append((f"blk.{il}.ffn_up_exps.weight", arr[:, half:]))
                continue
            if rest == "mlp.shared_expert_gate.weight":
                arr = arr.reshape(-1)
            if rest == "linear_attn.in_proj_qkvz.weight" and not legacy:
                qkv, z = split_qkvz(arr, cfg)
                out.append((f"blk.{il}.attn_qkv.weight", qkv))
                out.append((f"blk.{il}.attn_gate.weight", z))
                continue
            name = names.get(rest)
            if name is None:
                raise SystemExit(f"unmapped tensor {key}")
            if rest.endswith("norm.weight") and rest != "linear_attn.norm.weight":
                arr = arr + 1.0
            if rest == "linear_attn.A_log":
                arr = -np.exp(arr)
            if rest == "linear_attn.conv1d.weight":
                arr = arr.reshape(arr.shape[0], arr.shape[-1])
            if per > 1 and rest.startswith("linear_attn."):
                kd = n_k * dk
                if rest.endswith("in_proj_qkv.weight") or rest.endswith("conv1d.weight"):
                    arr = np.concatenate([arr[: 2 * kd], reorder_v(arr[2 * kd :], 0, n_k, per, dv)], 0)
                elif rest.endswith("in_proj_z.weight"):
                    arr = reorder_v(arr, 0, n_k, per, dv)
                elif rest.endswith(("in_proj_a.weight", "in_proj_b.weight", "A_log", "dt_bias")):
                    arr = reorder_v(arr, 0, n_k, per, 1)
                elif rest.endswith("out_proj.weight"):
                    arr = reorder_v(arr, 1, n_k, per, dv)
            out.append((f"blk.{il}.{name}", arr))
    return out


def gemma4_tensors(model, cfg) -> list[tuple[str, np.ndarray]]:
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = [
        ("token_embd.weight", sd["model.embed_tokens.weight"]),
        ("output_norm.weight", sd["model.norm.weight"]),
    ]
    if cfg.hidden_size_per_layer_input:
        out += [
            ("per_layer_token_embd.weight", sd["model.embed_tokens_per_layer.weight"]),
            ("per_layer_model_proj.weight", sd["model.per_layer_model_projection.weight"]),
            ("per_layer_proj_norm.weight", sd["model.per_layer_projection_norm.weight"]),
        ]
    full = cfg.rope_parameters["full_attention"]
    hd_full = cfg.per_layer_config[cfg.layer_types.index("full_attention")].head_dim
    n_rot = int(hd_full * full["partial_rotary_factor"] / 2)
    out.append(("rope_freqs.weight", np.array([1.0] * n_rot + [1e30] * (hd_full // 2 - n_rot), np.float32)))
    names = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "post_attention_norm.weight",
        "pre_feedforward_layernorm.weight": "ffn_norm.weight",
        "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
        "per_layer_input_gate.weight": "inp_gate.weight",
        "per_layer_projection.weight": "proj.weight",
        "post_per_layer_input_norm.weight": "post_norm.weight",
        "layer_scalar": "layer_output_scale.weight",
        "router.proj.weight": "ffn_gate_inp.weight",
        "router.scale": "ffn_gate_inp.scale",
        "router.per_expert_scale": "ffn_down_exps.scale",
        "experts.gate_up_proj": "ffn_gate_up_exps.weight",
        "experts.down_proj": "ffn_down_exps.weight",
        "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight",
        "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
        "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
    }
    for il in range(cfg.num_hidden_layers):
        pre = f"model.layers.{il}."
        for key, arr in sd.items():
            if not key.startswith(pre):
                continue
            rest = key[len(pre) :]
            name = names.get(rest)
            if name is None:
                raise SystemExit(f"unmapped tensor {key}")
            out.append((f"blk.{il}.{name}", arr))
    return out


def write_gemma4_keys(w, arch: str, cfg) -> None:
    swa = [t == "sliding_attention" for t in cfg.layer_types]
    first_shared = cfg.num_hidden_layers - cfg.num_kv_shared_layers
    full = cfg.per_layer_config[cfg.layer_types.index("full_attention")]
    local = cfg.per_layer_config[cfg.layer_types.index("sliding_attention")]
    w.add_key_length(full.head_dim)
    w.add_value_length(full.head_dim)
    w.add_uint32(f"{arch}.attention.key_length_swa", local.head_dim)
    w.add_uint32(f"{arch}.attention.value_length_swa", local.head_dim)
    kv = [cfg.per_layer_config[il].num_key_value_heads for il in range(cfg.num_hidden_layers)]
    w.add_array(f"{arch}.attention.head_count_kv", kv)
    n_ff = [
        cfg.intermediate_size * (2 if cfg.use_double_wide_mlp and il >= first_shared else 1)
        for il in range(cfg.num_hidden_layers)
    ]
    w.add_array(f"{arch}.feed_forward_length", n_ff)
    w.add_rope_freq_base(cfg.rope_parameters["full_attention"]["rope_theta"])
    w.add_float32(f"{arch}.rope.freq_base_swa", cfg.rope_parameters["sliding_attention"]["rope_theta"])
    w.add_rope_dimension_count(full.head_dim)
    w.add_uint32(f"{arch}.rope.dimension_count_swa", local.head_dim)
    w.add_sliding_window(cfg.sliding_window)
    w.add_array(f"{arch}.attention.sliding_window_pattern", swa)
    w.add_uint32(f"{arch}.attention.shared_kv_layers", cfg.num_kv_shared_layers)
    w.add_uint32(f"{arch}.embedding_length_per_layer_input", cfg.hidden_size_per_layer_input)
    if cfg.enable_moe_block:
        w.add_expert_count(cfg.num_experts)
        w.add_expert_used_count(cfg.top_k_experts)
        w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    w.add_float32(f"{arch}.final_logit_softcapping", cfg.final_logit_softcapping)


def write_gguf(path: Path, arch: str, cfg, tensors, variant: str) -> None:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-random-{path.stem.rsplit('-', 1)[0]}")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if arch == "gemma4":
        write_gemma4_keys(w, arch, cfg)
    else:
        write_qwen35_keys(w, arch, cfg)
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        # llama.cpp keeps the conv kernel and the MoE router in f32 in every type.
        keep_f32 = arr.ndim == 1 or variant == "f32" or "ssm_conv1d" in name or name.endswith("ffn_gate_inp.weight")
        if keep_f32:
            w.add_tensor(name, arr)
        elif variant == "f16":
            w.add_tensor(name, arr.astype(np.float16))
        elif arr.shape[-1] % 32 != 0:
            # convert_hf_to_gguf falls back to F16 where rows are not whole Q8_0 blocks.
            w.add_tensor(name, arr.astype(np.float16))
        else:
            q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_qwen35_keys(w, arch: str, cfg) -> None:
    if getattr(cfg, "intermediate_size", None):
        w.add_feed_forward_length(cfg.intermediate_size)
    if getattr(cfg, "num_experts", None):
        w.add_expert_count(cfg.num_experts)
        w.add_expert_used_count(cfg.num_experts_per_tok)
        w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
        w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    rp = cfg.rope_parameters
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_rope_dimension_count(int(cfg.head_dim * rp["partial_rotary_factor"]))
    if "mrope_section" in rp:
        w.add_array(f"{arch}.rope.dimension_sections", list(rp["mrope_section"]) + [0])
    w.add_uint32(f"{arch}.ssm.conv_kernel", cfg.linear_conv_kernel_dim)
    w.add_uint32(f"{arch}.ssm.state_size", cfg.linear_key_head_dim)
    w.add_uint32(f"{arch}.ssm.group_count", cfg.linear_num_key_heads)
    w.add_uint32(f"{arch}.ssm.time_step_rank", cfg.linear_num_value_heads)
    w.add_uint32(f"{arch}.ssm.inner_size", cfg.linear_value_head_dim * cfg.linear_num_value_heads)
    w.add_array(f"{arch}.attention.recurrent_layers", [t == "linear_attention" for t in cfg.layer_types])
    w.add_uint32(f"{arch}.full_attention_interval", 4)


@torch.no_grad()
def goldens(model, toks_list) -> list[dict]:
    out = []
    for toks in toks_list:
        logits = model(torch.tensor([toks]), use_cache=False).logits[0].float().numpy()
        seq = list(toks)
        greedy = []
        for _ in range(N_GREEDY):
            nxt = int(model(torch.tensor([seq]), use_cache=False).logits[0, -1].argmax())
            greedy.append(nxt)
            seq.append(nxt)
        out.append(
            {
                "tokens": toks,
                "logits": [[float(f"{v:.8g}") for v in row] for row in logits.tolist()],
                "greedy": greedy,
            }
        )
    return out


TENSORS = {
    "qwen35": qwen35_tensors,
    "gemma4": gemma4_tensors,
    "qwen35moe": lambda m, c: qwen35_tensors(m, c, "qwen35moe"),
    "qwen3next": lambda m, c: qwen35_tensors(m, c, "qwen3next"),
    "gemma4-moe": gemma4_tensors,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/goldens/model/tiny")
    ap.add_argument("--only", help="regenerate only this family")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    for i, (family, (cls, cfg)) in enumerate(families().items()):
        if args.only and family != args.only:
            continue
        cfg._attn_implementation = "eager"
        gen = torch.Generator().manual_seed(SEED + i)
        torch.manual_seed(SEED + i)
        model = cls(cfg).float().eval()
        randomize(model, family, gen)
        tensors = TENSORS[family](model, cfg)
        for variant in ("f32", "f16", "q8_0"):
            write_gguf(out / f"{family}-{variant}.gguf", arch_of(family), cfg, tensors, variant)
        if family == "qwen3next":
            # Older converters' fused ssm_in (per key head [q, k, v, z]).
            legacy = qwen35_tensors(model, cfg, family, legacy=True)
            write_gguf(out / f"{family}-legacy-f32.gguf", family, cfg, legacy, "f32")
        doc = {
            "generator": "tools/gen_tiny_hybrid.py --only " + family,
            "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, float32 eager",
            "family": family,
            "seed": SEED + i,
            "config": {k: v for k, v in cfg.to_dict().items() if not isinstance(v, dict) or k == "rope_parameters"},
            "prompts": goldens(model, prompts(SEED + i)),
        }
        (out / f"{family}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        print(family, "ok")


if __name__ == "__main__":
    main()

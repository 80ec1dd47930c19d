#!/usr/bin/env python3
"""Tiny random-weight qwen3 / qwen2 / llama / gemma3 / qwen3moe / qwen2moe models and transformers goldens.

For each family: a transformers config (tiny dims, but every feature the family
ships: GQA, q/k norms, biases, sliding window + local/global RoPE, YaRN, llama3
frequency factors, tied/untied heads) -> seeded random weights -> GGUF files
written with gguf-py under llama.cpp's tensor names, applying the same transforms
as llama.cpp's convert_hf_to_gguf.py (Llama q/k row permutation, Gemma norm
weights stored as 1 + w, llama3 `rope_freqs.weight`, Qwen3-MoE's fused
`gate_up_proj` split into `ffn_gate_exps` / `ffn_up_exps` stacks, Qwen2-MoE's
shared expert as `ffn_*_shexp` with its gate `ffn_gate_inp_shexp` as a vector), in three
variants: f32, f16 (matrices and expert stacks f16, vectors f32) and q8_0 (Q8_0);
the MoE router `ffn_gate_inp` stays f32 in every variant, as llama.cpp's
converter and llama-quantize keep it. Goldens: transformers' float32 eager
forward, logits at every position of two prompts, and 12-token greedy
continuations (full recompute per step, no KV cache).

`--only FAMILY` regenerates one family (the others' files stay as committed).

Usage (heavy deps live in a separate virtualenv, never needed by CI):
    python3 -m venv .venv-ref && .venv-ref/bin/pip install torch transformers gguf numpy
    .venv-ref/bin/python tools/gen_tiny_models.py [--out tests/goldens/model/tiny]
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
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

SEED = 20240607
VOCAB = 256
PROMPTS = [
    [1, 17, 200, 42, 99, 3, 150, 7, 64, 250, 13, 88, 5, 121, 33, 190],
    [2, 9, 77, 180, 4, 222, 61, 19, 140],
]
N_GREEDY = 12
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, rms_norm_eps=1e-6)


def families():
    return {
        "qwen3": (
            Qwen3ForCausalLM,
            Qwen3Config(
                **COMMON,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=32,
                tie_word_embeddings=True,
                max_position_embeddings=512,
                rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
            ),
        ),
        "qwen2": (
            Qwen2ForCausalLM,
            Qwen2Config(
                **COMMON,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=1,
                tie_word_embeddings=False,
                max_position_embeddings=256,
                rope_parameters={
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 64,
                    "rope_theta": 10_000.0,
                },
            ),
        ),
        "llama": (
            LlamaForCausalLM,
            LlamaConfig(
                **COMMON,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=32,
                tie_word_embeddings=False,
                max_position_embeddings=512,
                rope_parameters={
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 64,
                    "rope_theta": 10_000.0,
                },
            ),
        ),
        "gemma3": (
            Gemma3ForCausalLM,
            Gemma3TextConfig(
                **COMMON,
                num_hidden_layers=3,
                num_attention_heads=2,
                num_key_value_heads=1,
                head_dim=32,
                query_pre_attn_scalar=32,
                max_position_embeddings=512,
                sliding_window=4,
                tie_word_embeddings=True,
                layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                rope_parameters={
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                    "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1_000_000.0},
                },
            ),
        ),
        # Last, so the other families keep their seeds (SEED + index). 20 experts:
        # ggml's router softmax runs one 16-lane chunk and a scalar tail;
        # norm_topk_prob as llama.cpp computes qwen3moe (always renormalised).
        "qwen3moe": (
            Qwen3MoeForCausalLM,
            Qwen3MoeConfig(
                **COMMON,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=32,
                tie_word_embeddings=False,
                max_position_embeddings=512,
                rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                num_experts=20,
                num_experts_per_tok=2,
                moe_intermediate_size=32,
                norm_topk_prob=True,
                decoder_sparse_step=1,
                mlp_only_layers=[],
            ),
        ),
        # Routed weights not renormalised, as llama.cpp computes qwen2moe; a gated
        # shared expert on every layer.
        "qwen2moe": (
            Qwen2MoeForCausalLM,
            Qwen2MoeConfig(
                **COMMON,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=1,
                tie_word_embeddings=False,
                max_position_embeddings=512,
                rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                num_experts=12,
                num_experts_per_tok=4,
                moe_intermediate_size=32,
                shared_expert_intermediate_size=64,
                norm_topk_prob=False,
                decoder_sparse_step=1,
                mlp_only_layers=[],
                qkv_bias=True,
            ),
        ),
    }


def randomize(model: torch.nn.Module, family: str, gen: torch.Generator) -> None:
    """Weights with enough spread that logits are not near-uniform (default init
    gives logits ~1e-2 apart, where argmax is decided by rounding)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                # Gemma RMSNorm multiplies by (1 + w); the others by w.
                base = 0.0 if family == "gemma3" else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                std = 0.3 if family == "gemma3" else 1.0
                p.copy_(std * torch.randn(p.shape, generator=gen))
            else:
                # Fan-in is the last axis (2-D [out, in]; 3-D expert stacks [E, out, in]).
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))


def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf LlamaModel.permute: HF's rotate-half layout -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_factors(cfg) -> np.ndarray:
    """convert_hf_to_gguf LlamaModel.generate_extra_tensors (rope_freqs.weight)."""
    rp = cfg.rope_parameters
    dim = cfg.head_dim
    freqs = 1.0 / (rp["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, lo, hi, old = (
        rp["factor"],
        rp["low_freq_factor"],
        rp["high_freq_factor"],
        rp["original_max_position_embeddings"],
    )
    lo_wl, hi_wl = old / lo, old / hi
    out = []
    for f in freqs.tolist():
        wl = 2 * math.pi / f
        if wl < hi_wl:
            out.append(1.0)
        elif wl > lo_wl:
            out.append(factor)
        else:
            smooth = (old / wl - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def gguf_tensors(family: str, model, cfg) -> list[tuple[str, np.ndarray]]:
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = [("token_embd.weight", sd["model.embed_tokens.weight"]), ("output_norm.weight", sd["model.norm.weight"])]
    if not cfg.tie_word_embeddings:
        out.append(("output.weight", sd["lm_head.weight"]))
    if family == "llama":
        out.append(("rope_freqs.weight", llama3_factors(cfg)))
    attn = {
        "q_proj": "attn_q",
        "k_proj": "attn_k",
        "v_proj": "attn_v",
        "o_proj": "attn_output",
        "q_norm": "attn_q_norm",
        "k_norm": "attn_k_norm",
    }
    mlp = {"gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down", "gate": "ffn_gate_inp"}
    norms = {"input_layernorm": "attn_norm"}
    if family == "gemma3":
        norms.update(
            post_attention_layernorm="post_attention_norm",
            pre_feedforward_layernorm="ffn_norm",
            post_feedforward_layernorm="post_ffw_norm",
        )
    else:
        norms.update(post_attention_layernorm="ffn_norm")
    for il in range(cfg.num_hidden_layers):
        pre = f"model.layers.{il}."
        for key, arr in sd.items():
            if not key.startswith(pre):
                continue
            rest = key[len(pre) :]
            if rest == "mlp.experts.gate_up_proj":
                # [E, 2·I, H]: gate rows first (Qwen3MoeExperts chunks the output in two).
                half = arr.shape[1] // 2
                out.append((f"blk.{il}.ffn_gate_exps.weight", arr[:, :half]))
                out.append((f"blk.{il}.ffn_up_exps.weight", arr[:, half:]))
                continue
            if rest == "mlp.experts.down_proj":
                out.append((f"blk.{il}.ffn_down_exps.weight", arr))
                continue
            if rest == "mlp.shared_expert_gate.weight":
                # [1, H] -> llama.cpp's {n_embd} vector.
                out.append((f"blk.{il}.ffn_gate_inp_shexp.weight", arr.reshape(-1)))
                continue
            if rest.startswith("mlp.shared_expert."):
                part = rest.split(".")[2]
                out.append((f"blk.{il}.{mlp[part]}_shexp.weight", arr))
                continue
            mod, _, leaf = rest.rpartition(".")
            part = mod.split(".")[-1]
            name = attn.get(part) or mlp.get(part) or norms.get(part)
            if name is None:
                raise SystemExit(f"unmapped tensor {key}")
            if family == "llama" and part in ("q_proj", "k_proj"):
                n = cfg.num_attention_heads if part == "q_proj" else cfg.num_key_value_heads
                arr = llama_permute(arr, n)
            out.append((f"blk.{il}.{name}.{leaf}", arr))
    if family == "gemma3":
        # Gemma3Model.norm_shift: every *norm.weight is stored as 1 + w.
        out = [(n, a + 1.0 if n.endswith("norm.weight") else a) for n, a in out]
    return out


def write_gguf(path: Path, family: str, cfg, tensors, variant: str) -> None:
    w = gguf.GGUFWriter(str(path), family)
    w.add_name(f"tiny-random-{family}")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    if family in ("qwen3moe", "qwen2moe"):
        w.add_expert_count(cfg.num_experts)
        w.add_expert_used_count(cfg.num_experts_per_tok)
        w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    if family == "qwen2moe":
        w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    rp = cfg.rope_parameters
    if family == "gemma3":
        full, local = rp["full_attention"], rp["sliding_attention"]
        w.add_rope_freq_base(full["rope_theta"])
        w.add_float32(f"{family}.rope.freq_base_swa", local["rope_theta"])
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(full["factor"])
        w.add_sliding_window(cfg.sliding_window)
        # layer_types above: every third layer is global.
        w.add_uint32(f"{family}.attention.sliding_window_pattern", 3)
    else:
        w.add_rope_freq_base(rp["rope_theta"])
        if rp["rope_type"] == "yarn":
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(rp["factor"])
            w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if arr.ndim == 1 or variant == "f32" or name.endswith("ffn_gate_inp.weight"):
            w.add_tensor(name, arr)
        elif variant == "f16":
            w.add_tensor(name, arr.astype(np.float16))
        else:
            q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@torch.no_grad()
def goldens(model) -> dict:
    prompts = []
    for toks in PROMPTS:
        logits = model(torch.tensor([toks])).logits[0].float().numpy()
        seq = list(toks)
        greedy = []
        for _ in range(N_GREEDY):
            nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
            greedy.append(nxt)
            seq.append(nxt)
        prompts.append(
            {
                "tokens": toks,
                "logits": [[float(f"{v:.8g}") for v in row] for row in logits.tolist()],
                "greedy": greedy,
            }
        )
    return prompts


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
        tensors = gguf_tensors(family, model, cfg)
        for variant in ("f32", "f16", "q8_0"):
            write_gguf(out / f"{family}-{variant}.gguf", family, cfg, tensors, variant)
        doc = {
            "generator": "tools/gen_tiny_models.py",
            "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, float32 eager",
            "family": family,
            "seed": SEED + i,
            "config": {k: v for k, v in cfg.to_dict().items() if not isinstance(v, dict) or k == "rope_parameters"},
            "prompts": goldens(model),
        }
        (out / f"{family}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        print(family, "ok")


if __name__ == "__main__":
    main()

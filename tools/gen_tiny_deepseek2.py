#!/usr/bin/env python3
"""Tiny random-weight DeepSeek-V2 / V3-style models (GGUF arch `deepseek2`) and their goldens.

    /tmp/venv-ref/bin/python tools/gen_tiny_deepseek2.py transformers     # GGUFs + transformers goldens
    benches/.peers/bin/python tools/gen_tiny_deepseek2.py llamacpp        # llama.cpp goldens (q8_0)

Two models, written to tests/goldens/model/tiny/:

* `deepseek2`: transformers' DeepseekV2ForCausalLM, DeepSeek-V2-Lite's layout
  (plain `q_proj`, no q LoRA), one leading dense layer then routed experts with
  softmax greedy top-k (weights not renormalised, scaled by
  `routed_scaling_factor`) plus shared experts, YaRN RoPE with mscale =
  mscale_all_dim (the case llama.cpp implements).
* `deepseek2v3`: transformers' DeepseekV3ForCausalLM: the low-rank query
  (`q_a_proj` → norm → `q_b_proj`), sigmoid routing with the
  `e_score_correction_bias` selection bias, group-limited top-k (`noaux_tc`:
  groups scored by their two best), renormalised and scaled weights.

Tensors are written under llama.cpp's names with its converter's rules
(conversion/deepseek.py `DeepseekV2Model`): `kv_b_proj` split per head into
`attn_k_b` (transposed: `[n_head, kv_lora_rank, qk_nope]`) and `attn_v_b`
(`[n_head, v_head, kv_lora_rank]`), `attention.key_length = kv_lora_rank +
qk_rope`, `value_length = kv_lora_rank`, `key_length_mla` / `value_length_mla`
the per-head dims, one KV head, `rope.scaling.yarn_log_multiplier = 0.1 ·
mscale_all_dim`, experts stacked per layer, `q_lora_rank = 0` for the plain
query (llama.cpp requires the key for files that are not "lite"-sized). Variants
f32 and q8_0 (matrices Q8_0; norms, the router and the selection bias f32).

Goldens: transformers' float32 eager logits at every position of a 64-token and
a 9-token prompt and 12-token greedy continuations (`<model>.json`); llama.cpp
(llama-cpp-python, 2 threads, f16 cache, one batch per prompt, 9 significant
digits so bitwise equality can be judged) on the q8_0 file: logits of every
position and the greedy continuation, one token per decode
(`<model>-llamacpp.json`). The files carry no tokenizer; the llama.cpp run copies
each to a temporary GGUF with llama.cpp's "none" vocabulary.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import gguf
import numpy as np

DIR = Path(__file__).resolve().parent.parent / "tests" / "goldens" / "model" / "tiny"
SEED = 20260716
VOCAB = 128
PROMPTS = [
    [(i * 37 + 11) % VOCAB for i in range(64)],
    [2, 9, 77, 100, 4, 122, 61, 19, 40],
]
N_GREEDY = 12
MLA = dict(kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=32)
YARN = {
    "rope_type": "yarn",
    "rope_theta": 10_000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 32,
    "mscale": 0.707,
    "mscale_all_dim": 0.707,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
}


def configs():
    from transformers import DeepseekV2Config, DeepseekV3Config

    common = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        first_k_dense_replace=1,
        rope_parameters=dict(YARN),
        **MLA,
    )
    return {
        "deepseek2": DeepseekV2Config(
            **common,
            q_lora_rank=None,
            n_routed_experts=8,
            num_experts_per_tok=3,
            n_shared_experts=2,
            topk_method="greedy",
            norm_topk_prob=False,
            routed_scaling_factor=1.5,
        ),
        "deepseek2v3": DeepseekV3Config(
            **common,
            q_lora_rank=32,
            n_routed_experts=16,
            num_experts_per_tok=3,
            n_shared_experts=1,
            n_group=4,
            topk_group=2,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
        ),
    }


def randomize(model, gen) -> None:
    """Weights with enough spread that logits are not near-uniform."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("e_score_correction_bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn(b.shape, generator=gen))


ATTN = {
    "q_proj": "attn_q",
    "q_a_proj": "attn_q_a",
    "q_a_layernorm": "attn_q_a_norm",
    "q_b_proj": "attn_q_b",
    "kv_a_proj_with_mqa": "attn_kv_a_mqa",
    "kv_a_layernorm": "attn_kv_a_norm",
    "o_proj": "attn_output",
}
MLP = {"gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def gguf_tensors(model, cfg) -> list[tuple[str, np.ndarray]]:
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = [
        ("token_embd.weight", sd["model.embed_tokens.weight"]),
        ("output_norm.weight", sd["model.norm.weight"]),
        ("output.weight", sd["lm_head.weight"]),
    ]
    h, nope, vd = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.v_head_dim
    for il in range(cfg.num_hidden_layers):
        pre = f"model.layers.{il}."
        for key, arr in sd.items():
            if not key.startswith(pre):
                continue
            rest = key[len(pre) :]
            blk = f"blk.{il}."
            if rest == "input_layernorm.weight":
                out.append((blk + "attn_norm.weight", arr))
            elif rest == "post_attention_layernorm.weight":
                out.append((blk + "ffn_norm.weight", arr))
            elif rest == "self_attn.kv_b_proj.weight":
                kv_b = arr.reshape(h, nope + vd, arr.shape[-1])
                out.append((blk + "attn_k_b.weight", np.ascontiguousarray(kv_b[:, :nope].transpose(0, 2, 1))))
                out.append((blk + "attn_v_b.weight", np.ascontiguousarray(kv_b[:, nope:])))
            elif rest.startswith("self_attn."):
                part, leaf = rest.split(".")[1:]
                out.append((f"{blk}{ATTN[part]}.{leaf}", arr))
            elif rest == "mlp.gate.weight":
                out.append((blk + "ffn_gate_inp.weight", arr))
            elif rest == "mlp.gate.e_score_correction_bias":
                out.append((blk + "exp_probs_b.bias", arr))
            elif rest == "mlp.experts.gate_up_proj":
                half = arr.shape[1] // 2
                out.append((blk + "ffn_gate_exps.weight", arr[:, :half]))
                out.append((blk + "ffn_up_exps.weight", arr[:, half:]))
            elif rest == "mlp.experts.down_proj":
                out.append((blk + "ffn_down_exps.weight", arr))
            elif rest.startswith("mlp.shared_experts."):
                out.append((f"{blk}{MLP[rest.split('.')[2]]}_shexp.weight", arr))
            elif rest.startswith("mlp.") and rest.split(".")[1] in MLP:
                out.append((f"{blk}{MLP[rest.split('.')[1]]}.weight", arr))
            else:
                raise SystemExit(f"unmapped tensor {key}")
    return out


F32_ALWAYS = ("ffn_gate_inp.weight", "exp_probs_b.bias")


def write_gguf(path: Path, name: str, cfg, tensors, variant: str) -> None:
    arch = "deepseek2"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-random-{name}")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_leading_dense_block_count(cfg.first_k_dense_replace)
    w.add_q_lora_rank(cfg.q_lora_rank or 0)
    w.add_kv_lora_rank(cfg.kv_lora_rank)
    w.add_key_length(cfg.kv_lora_rank + cfg.qk_rope_head_dim)
    w.add_value_length(cfg.kv_lora_rank)
    w.add_key_length_mla(cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)
    w.add_value_length_mla(cfg.v_head_dim)
    w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    w.add_expert_count(cfg.n_routed_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_expert_shared_count(cfg.n_shared_experts)
    w.add_expert_weights_scale(cfg.routed_scaling_factor)
    if cfg.norm_topk_prob:
        w.add_expert_weights_norm(True)
    if cfg.model_type == "deepseek_v3":
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_expert_group_count(cfg.n_group)
        w.add_expert_group_used_count(cfg.topk_group)
    w.add_rope_dimension_count(cfg.qk_rope_head_dim)
    rp = cfg.rope_parameters
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rp["factor"])
    w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_log_mul(0.1 * rp["mscale_all_dim"])
    for tname, arr in tensors:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if arr.ndim == 1 or variant == "f32" or tname.endswith(F32_ALWAYS):
            w.add_tensor(tname, arr)
        else:
            q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def rows(logits: np.ndarray, digits: int) -> list[list[float]]:
    return [[float(f"{v:.{digits}g}") for v in row] for row in logits.tolist()]


def gen_transformers() -> None:
    import torch
    import transformers
    from transformers import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM

    torch.set_num_threads(2)
    classes = {"deepseek2": DeepseekV2ForCausalLM, "deepseek2v3": DeepseekV3ForCausalLM}
    for i, (name, cfg) in enumerate(configs().items()):
        cfg._attn_implementation = "eager"
        torch.manual_seed(SEED + i)
        gen = torch.Generator().manual_seed(SEED + i)
        model = classes[name](cfg).float().eval()
        randomize(model, gen)
        tensors = gguf_tensors(model, cfg)
        for variant in ("f32", "q8_0"):
            write_gguf(DIR / f"{name}-{variant}.gguf", name, cfg, tensors, variant)
        prompts = []
        with torch.no_grad():
            for toks in PROMPTS:
                logits = model(torch.tensor([toks])).logits[0].float().numpy()
                seq, greedy = list(toks), []
                for _ in range(N_GREEDY):
                    nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
                    greedy.append(nxt)
                    seq.append(nxt)
                prompts.append({"tokens": toks, "logits": rows(logits, 8), "greedy": greedy})
        doc = {
            "generator": "tools/gen_tiny_deepseek2.py transformers",
            "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, float32 eager",
            "family": name,
            "seed": SEED + i,
            "config": {k: v for k, v in cfg.to_dict().items() if not isinstance(v, dict) or k == "rope_parameters"},
            "prompts": prompts,
        }
        (DIR / f"{name}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        print(name, "ok")


def with_dummy_vocab(src: Path, dst: Path) -> None:
    """Copy `src` to `dst` adding llama.cpp's no-vocabulary keys."""
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    n_vocab = next(int(t.shape[1]) for t in r.tensors if t.name == "token_embd.weight")
    w = gguf.GGUFWriter(str(dst), arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub_type=sub)
    w.add_string("tokenizer.ggml.model", "none")
    w.add_uint32(f"{arch}.vocab_size", n_vocab)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gen_llamacpp() -> None:
    from llama_cpp import Llama
    from llamacpp_host import golden_suffix, host_isa

    for name in configs_names():
        prompts = [p["tokens"] for p in json.loads((DIR / f"{name}.json").read_text())["prompts"]]
        with tempfile.TemporaryDirectory() as tmp:
            dst = Path(tmp) / "model.gguf"
            with_dummy_vocab(DIR / f"{name}-q8_0.gguf", dst)
            n_ctx = max(len(p) for p in prompts) + N_GREEDY + 4
            llm = Llama(model_path=str(dst), n_ctx=n_ctx, n_batch=n_ctx, n_threads=2, logits_all=True, verbose=False)
            out = []
            for toks in prompts:
                llm.reset()
                llm.eval(toks)
                logits = np.array(llm.scores[: llm.n_tokens], dtype=np.float32)
                greedy, last = [], logits[-1]
                for _ in range(N_GREEDY):
                    greedy.append(int(np.argmax(last)))
                    llm.eval([greedy[-1]])
                    last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
                out.append({"tokens": toks, "logits": rows(logits, 9), "greedy": greedy})
            del llm
        doc = {
            "generator": "tools/gen_tiny_deepseek2.py llamacpp",
            "reference": f"llama-cpp-python {version('llama_cpp_python')}, 2 threads, f16 cache, one batch per prompt",
            "family": name,
            "variant": "q8_0",
            "isa": host_isa(),
            "prompts": out,
        }
        (DIR / f"{name}-llamacpp{golden_suffix()}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        print(name, "llama.cpp ok")


def configs_names() -> list[str]:
    return ["deepseek2", "deepseek2v3"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["transformers", "llamacpp"])
    args = ap.parse_args()
    DIR.mkdir(parents=True, exist_ok=True)
    if args.what == "transformers":
        gen_transformers()
    else:
        gen_llamacpp()
    sys.stdout.flush()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Tiny random-weight GLM-4.5-style model (GGUF arch `glm4moe`) with its MTP layer, and goldens.

    /tmp/venv-ref/bin/python tools/gen_tiny_glm4moe.py transformers   # GGUFs + transformers / numpy goldens
    benches/.peers/bin/python tools/gen_tiny_glm4moe.py llamacpp      # llama.cpp goldens (q8_0)

The trunk is transformers' Glm4MoeForCausalLM (3 layers: one leading dense layer, then
routed experts with sigmoid gating, the `e_score_correction_bias` selection bias,
group-limited top-k over 2 groups, renormalised weights scaled by
`routed_scaling_factor`, one shared expert), biased q/k/v, per-head q/k RMSNorm,
`head_dim` 32 beside a 64-wide residual (so q is wider than the residual) and NeoX
RoPE over half of each head (`partial_rotary_factor` 0.5). transformers does not
build the multi-token-prediction block, so the file's fourth block (`blk.3`,
`nextn_predict_layers = 1`) is a transformers decoder layer plus the nextn tensors
(`blk.3.nextn.{eh_proj,enorm,hnorm,shared_head_head,shared_head_norm}`; no
`nextn.embed_tokens`, so the head embeds with `token_embd`), written under llama.cpp's
names. Random MTP weights would draft nothing useful, so the head is then trained
(Adam, a few hundred steps, the trunk frozen) to predict the trunk's own greedy
continuations of random prompts two tokens ahead, exactly as llama.cpp's `graph_mtp`
computes it: what a real checkpoint's head does, so the speculative tests and
`mtp_speed` see drafts that get accepted.

Tensors follow llama.cpp's converter (conversion/glm.py `Glm4MoeModel`): experts
stacked per layer, the pre-FFN norm named `post_attention_norm`, rope dims
`head_dim · partial_rotary_factor`, sigmoid gating, `expert_weights_norm`,
`expert_weights_scale`, plus `expert_group_count` / `expert_group_used_count`,
which llama.cpp reads for every MoE architecture. Variants f32 and q8_0 (matrices
Q8_0; norms, biases, the router and the selection bias f32).

Goldens (`glm4moe.json`): transformers' float32 eager logits at every position of a
64-token and a 9-token prompt and 12-token greedy continuations; the MTP head's
logits from a float64 numpy implementation of llama.cpp's `graph_mtp` reading the
f32 GGUF's weights: at every position p of each prompt the row (token p, main
model's output-normed hidden state at p - 1; zeros at p = 0) over the head's own
causal KV; and a 4-token greedy draft chain after each prompt (the row of the
carried token, then each drafted token with the head's own output-normed hidden
state). The numpy trunk is checked against transformers before anything is written.
llama.cpp goldens (`glm4moe-llamacpp.json`, llama-cpp-python, 2 threads, f16 cache, 9
significant digits) on the q8_0 file: logits of every position and the greedy
continuation.
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
NAME = "glm4moe"
SEED = 20260801
VOCAB = 128
PROMPTS = [
    [(i * 37 + 11) % VOCAB for i in range(64)],
    [2, 9, 77, 100, 4, 122, 61, 19, 40],
]
N_GREEDY = 12
N_CHAIN = 4
# The MTP head's training: greedy continuations of random prompts.
TRAIN_SEQS, TRAIN_PROMPT, TRAIN_GEN, TRAIN_STEPS = 384, 6, 42, 400


def config():
    from transformers import Glm4MoeConfig

    return Glm4MoeConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        first_k_dense_replace=1,
        n_routed_experts=8,
        num_experts_per_tok=3,
        n_shared_experts=1,
        n_group=2,
        topk_group=1,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        attention_bias=True,
        use_qk_norm=True,
        num_nextn_predict_layers=1,
        rope_parameters={"rope_type": "default", "rope_theta": 10_000.0, "partial_rotary_factor": 0.5},
    )


def randn(gen, shape):
    import torch

    return torch.randn(shape, generator=gen)


def randomize(model, gen) -> None:
    """Weights with enough spread that logits are not near-uniform."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.copy_(1.0 + 0.1 * randn(gen, p.shape))
            elif "embed_tokens" in name:
                p.copy_(randn(gen, p.shape))
            else:
                p.copy_(randn(gen, p.shape) / math.sqrt(p.shape[-1]))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * randn(gen, b.shape))


ATTN = {
    "q_proj": "attn_q",
    "k_proj": "attn_k",
    "v_proj": "attn_v",
    "o_proj": "attn_output",
    "q_norm": "attn_q_norm",
    "k_norm": "attn_k_norm",
}
MLP = {"gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def layer_tensors(sd: dict, pre: str, blk: str) -> list[tuple[str, np.ndarray]]:
    out = []
    for key, arr in sd.items():
        if not key.startswith(pre):
            continue
        rest = key[len(pre) :]
        if rest == "input_layernorm.weight":
            out.append((blk + "attn_norm.weight", arr))
        elif rest == "post_attention_layernorm.weight":
            out.append((blk + "post_attention_norm.weight", arr))
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


class Mtp:
    """llama.cpp's graph_mtp in torch, trainable: [enorm(embed(x_p)), hnorm(h_{p-1})] →
    eh_proj → a decoder layer → shared_head_norm → shared_head_head."""

    def __init__(self, model, cfg, gen):
        import torch
        from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeDecoderLayer, Glm4MoeRMSNorm

        e = cfg.hidden_size
        self.layer = Glm4MoeDecoderLayer(cfg, cfg.num_hidden_layers).float()
        randomize(self.layer, gen)
        self.norms = {k: Glm4MoeRMSNorm(e, eps=cfg.rms_norm_eps) for k in ("enorm", "hnorm", "shared_head_norm")}
        with torch.no_grad():
            for n in self.norms.values():
                n.weight.copy_(1.0 + 0.1 * randn(gen, (e,)))
        self.eh_proj = torch.nn.Parameter(randn(gen, (e, 2 * e)) / math.sqrt(2 * e))
        self.head = torch.nn.Parameter(randn(gen, (VOCAB, e)) / math.sqrt(e))
        self.embed = model.model.embed_tokens
        self.rotary = model.model.rotary_emb

    def parameters(self):
        yield from self.layer.parameters()
        for n in self.norms.values():
            yield from n.parameters()
        yield self.eh_proj
        yield self.head

    def __call__(self, toks, h_prev):
        import torch

        emb = self.norms["enorm"](self.embed(toks))
        x = torch.cat([emb, self.norms["hnorm"](h_prev)], dim=-1) @ self.eh_proj.T
        t = toks.shape[1]
        pos = torch.arange(t)[None].expand(toks.shape[0], -1)
        mask = torch.full((t, t), float("-inf")).triu(1)[None, None]
        x = self.layer(x, attention_mask=mask, position_ids=pos, position_embeddings=self.rotary(x, pos))
        if isinstance(x, tuple):
            x = x[0]
        return self.norms["shared_head_norm"](x) @ self.head.T

    def state(self) -> dict[str, np.ndarray]:
        sd = {k: v.detach().float().numpy() for k, v in self.layer.state_dict().items()}
        for k, n in self.norms.items():
            sd[f"nextn.{k}"] = n.weight.detach().float().numpy()
        sd["nextn.eh_proj"] = self.eh_proj.detach().float().numpy()
        sd["nextn.shared_head_head"] = self.head.detach().float().numpy()
        return sd


def train_mtp(model, mtp: Mtp, gen) -> float:
    """Fit the head to the frozen trunk's greedy continuations; returns the held-out
    top-1 accuracy of the head's prediction two tokens ahead."""
    import torch

    seqs = torch.randint(3, VOCAB, (TRAIN_SEQS, TRAIN_PROMPT), generator=gen)
    with torch.no_grad():
        for _ in range(TRAIN_GEN):
            nxt = model(seqs).logits[:, -1].argmax(-1, keepdim=True)
            seqs = torch.cat([seqs, nxt], dim=1)
        h = model.model(seqs).last_hidden_state
    h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
    # Row p (token p, hidden p-1) predicts token p+1; the targets are greedy tokens.
    inp, hp, tgt = seqs[:, :-1], h_prev[:, :-1], seqs[:, 1:]
    weight = torch.zeros_like(tgt, dtype=torch.float32)
    weight[:, TRAIN_PROMPT - 1 :] = 1.0
    n_train = TRAIN_SEQS * 7 // 8
    opt = torch.optim.Adam(list(mtp.parameters()), lr=3e-3)
    for _step in range(TRAIN_STEPS):
        idx = torch.randint(0, n_train, (32,), generator=gen)
        logits = mtp(inp[idx], hp[idx])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt[idx].reshape(-1), reduction="none")
        loss = (loss * weight[idx].reshape(-1)).sum() / weight[idx].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits = mtp(inp[n_train:], hp[n_train:])
        hit = (logits.argmax(-1) == tgt[n_train:]).float() * weight[n_train:]
    return float(hit.sum() / weight[n_train:].sum())


def gguf_tensors(model, mtp_sd, cfg) -> list[tuple[str, np.ndarray]]:
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = [
        ("token_embd.weight", sd["model.embed_tokens.weight"]),
        ("output_norm.weight", sd["model.norm.weight"]),
        ("output.weight", sd["lm_head.weight"]),
    ]
    for il in range(cfg.num_hidden_layers):
        out += layer_tensors(sd, f"model.layers.{il}.", f"blk.{il}.")
    # The MTP block: a decoder layer of the MoE kind plus the nextn tensors.
    il = cfg.num_hidden_layers
    layer = {k: v for k, v in mtp_sd.items() if not k.startswith("nextn.")}
    out += layer_tensors(layer, "", f"blk.{il}.")
    out += [(f"blk.{il}.{k}.weight", v) for k, v in mtp_sd.items() if k.startswith("nextn.")]
    return out


F32_ALWAYS = ("ffn_gate_inp.weight", "exp_probs_b.bias")


def write_gguf(path: Path, cfg, tensors, variant: str) -> None:
    w = gguf.GGUFWriter(str(path), NAME)
    w.add_name(f"tiny-random-{NAME}")
    w.add_block_count(cfg.num_hidden_layers + cfg.num_nextn_predict_layers)
    w.add_nextn_predict_layers(cfg.num_nextn_predict_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    rp = cfg.rope_parameters
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_rope_dimension_count(int(cfg.head_dim * rp["partial_rotary_factor"]))
    w.add_expert_count(cfg.n_routed_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    w.add_expert_shared_count(cfg.n_shared_experts)
    w.add_leading_dense_block_count(cfg.first_k_dense_replace)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_weights_scale(cfg.routed_scaling_factor)
    w.add_expert_weights_norm(cfg.norm_topk_prob)
    w.add_expert_group_count(cfg.n_group)
    w.add_expert_group_used_count(cfg.topk_group)
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


# ---- float64 numpy reference of llama.cpp's glm4moe graphs, from the GGUF's weights ----


class Ref:
    """The f32 GGUF's weights and hyperparameters, and the blocks of the forward."""

    def __init__(self, path: Path):
        r = gguf.GGUFReader(str(path))
        f = lambda k: r.fields[f"{NAME}.{k}"].contents()  # noqa: E731
        self.w = {t.name: np.array(t.data, dtype=np.float64) for t in r.tensors}
        self.n_layer = f("block_count") - f("nextn_predict_layers")
        self.n_head, self.n_kv, self.hd = (
            f("attention.head_count"),
            f("attention.head_count_kv"),
            f("attention.key_length"),
        )
        self.n_rot, self.base = f("rope.dimension_count"), f("rope.freq_base")
        self.eps = f("attention.layer_norm_rms_epsilon")
        self.n_lead = f("leading_dense_block_count")
        self.k, self.scale = f("expert_used_count"), f("expert_weights_scale")
        self.groups, self.groups_used = f("expert_group_count"), f("expert_group_used_count")

    def norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        """NeoX rotation of the first n_rot dims of each head (x: [T, H, hd])."""
        half = self.n_rot // 2
        inv = self.base ** (-np.arange(0, self.n_rot, 2, dtype=np.float64) / self.n_rot)
        ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x = x.copy()
        a, b = x[..., :half].copy(), x[..., half : self.n_rot].copy()
        x[..., :half] = a * c - b * s
        x[..., half : self.n_rot] = b * c + a * s
        return x

    def attention(self, blk, xn, pos):
        w, t = self.w, xn.shape[0]
        q = xn @ w[blk + "attn_q.weight"].T + w[blk + "attn_q.bias"]
        k = xn @ w[blk + "attn_k.weight"].T + w[blk + "attn_k.bias"]
        v = xn @ w[blk + "attn_v.weight"].T + w[blk + "attn_v.bias"]
        q = self.norm(q.reshape(t, self.n_head, self.hd), w[blk + "attn_q_norm.weight"])
        k = self.norm(k.reshape(t, self.n_kv, self.hd), w[blk + "attn_k_norm.weight"])
        v = v.reshape(t, self.n_kv, self.hd)
        q, k = self.rope(q, pos), self.rope(k, pos)
        g = self.n_head // self.n_kv
        out = np.zeros((t, self.n_head, self.hd))
        mask = np.tril(np.ones((t, t), dtype=bool))
        for h in range(self.n_head):
            s = q[:, h] @ k[:, h // g].T / math.sqrt(self.hd)
            s = np.where(mask, s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            out[:, h] = p @ v[:, h // g]
        return out.reshape(t, -1) @ w[blk + "attn_output.weight"].T

    @staticmethod
    def swiglu(x, gate, up, down):
        g, u = x @ gate.T, x @ up.T
        return (g / (1.0 + np.exp(-g)) * u) @ down.T

    def moe(self, blk, x):
        w = self.w
        probs = 1.0 / (1.0 + np.exp(-(x @ w[blk + "ffn_gate_inp.weight"].T)))
        sel = probs + w[blk + "exp_probs_b.bias"]
        n = sel.shape[1]
        per = n // self.groups
        out = np.zeros_like(x)
        for r in range(x.shape[0]):
            s = sel[r].copy()
            gs = [np.sort(s[i * per : (i + 1) * per])[::-1][:2].sum() for i in range(self.groups)]
            keep = np.argsort(-np.array(gs), kind="stable")[: self.groups_used]
            for gi in range(self.groups):
                if gi not in keep:
                    s[gi * per : (gi + 1) * per] = -np.inf
            ids = np.argsort(-s, kind="stable")[: self.k]
            wt = probs[r, ids] / probs[r, ids].sum() * self.scale
            for e, c in zip(ids, wt, strict=True):
                out[r] += (
                    c
                    * self.swiglu(
                        x[r : r + 1],
                        w[blk + "ffn_gate_exps.weight"][e],
                        w[blk + "ffn_up_exps.weight"][e],
                        w[blk + "ffn_down_exps.weight"][e],
                    )[0]
                )
        shared = self.swiglu(
            x, w[blk + "ffn_gate_shexp.weight"], w[blk + "ffn_up_shexp.weight"], w[blk + "ffn_down_shexp.weight"]
        )
        return out + shared

    def block(self, il, x, pos):
        blk, w = f"blk.{il}.", self.w
        x = x + self.attention(blk, self.norm(x, w[blk + "attn_norm.weight"]), pos)
        xn = self.norm(x, w[blk + "post_attention_norm.weight"])
        if il < self.n_lead:
            return x + self.swiglu(xn, w[blk + "ffn_gate.weight"], w[blk + "ffn_up.weight"], w[blk + "ffn_down.weight"])
        return x + self.moe(blk, xn)

    def trunk(self, toks):
        """(logits, output-normed hidden) of every position."""
        x = self.w["token_embd.weight"][toks]
        pos = np.arange(len(toks))
        for il in range(self.n_layer):
            x = self.block(il, x, pos)
        h = self.norm(x, self.w["output_norm.weight"])
        return h @ self.w["output.weight"].T, h

    def mtp(self, toks, h_prev):
        """The MTP head over rows (token, previous hidden) at positions 0..: (logits, its
        output-normed hidden), llama.cpp's graph_mtp."""
        il, w = self.n_layer, self.w
        nx = f"blk.{il}.nextn."
        emb = w.get(nx + "embed_tokens.weight", w["token_embd.weight"])[toks]
        cat = np.concatenate(
            [self.norm(emb, w[nx + "enorm.weight"]), self.norm(h_prev, w[nx + "hnorm.weight"])], axis=1
        )
        x = self.block(il, cat @ w[nx + "eh_proj.weight"].T, np.arange(len(toks)))
        hn = self.norm(x, w[nx + "shared_head_norm.weight"])
        return hn @ w.get(nx + "shared_head_head.weight", w["output.weight"]).T, hn


def mtp_goldens(ref: Ref, toks: list[int]) -> dict:
    logits, h = ref.trunk(np.array(toks))
    h_prev = np.vstack([np.zeros((1, h.shape[1])), h[:-1]])
    mtp_logits, _ = ref.mtp(np.array(toks), h_prev)
    # The draft chain after the prompt: the carried token's row, then each draft with
    # the head's own hidden state.
    carried = int(np.argmax(logits[-1]))
    seq, hs, chain = list(toks) + [carried], np.vstack([h_prev, h[-1:]]), []
    for _ in range(N_CHAIN):
        lg, hn = ref.mtp(np.array(seq), hs)
        nxt = int(np.argmax(lg[-1]))
        chain.append(nxt)
        seq.append(nxt)
        hs = np.vstack([hs, hn[-1:]])
    return {"mtp_logits": rows(mtp_logits, 8), "carried": carried, "mtp_chain": chain}


def rows(logits: np.ndarray, digits: int) -> list[list[float]]:
    return [[float(f"{v:.{digits}g}") for v in row] for row in np.asarray(logits).tolist()]


def gen_transformers() -> None:
    import torch
    import transformers
    from transformers import Glm4MoeForCausalLM

    torch.set_num_threads(2)
    cfg = config()
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = Glm4MoeForCausalLM(cfg).float().eval()
    randomize(model, gen)
    mtp = Mtp(model, cfg, gen)
    accuracy = train_mtp(model, mtp, gen)
    print(f"MTP head: held-out accuracy two tokens ahead {accuracy:.3f}")
    tensors = gguf_tensors(model, mtp.state(), cfg)
    for variant in ("f32", "q8_0"):
        write_gguf(DIR / f"{NAME}-{variant}.gguf", cfg, tensors, variant)
    ref = Ref(DIR / f"{NAME}-f32.gguf")
    prompts = []
    with torch.no_grad():
        for toks in PROMPTS:
            logits = model(torch.tensor([toks])).logits[0].float().numpy()
            ours, _ = ref.trunk(np.array(toks))
            err = np.abs(ours - logits).max() / np.abs(logits).max()
            assert err < 1e-5, f"numpy trunk vs transformers: {err:.2e}"
            seq, greedy = list(toks), []
            for _ in range(N_GREEDY):
                nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
                greedy.append(nxt)
                seq.append(nxt)
            prompts.append({"tokens": toks, "logits": rows(logits, 8), "greedy": greedy, **mtp_goldens(ref, toks)})
            print(f"prompt of {len(toks)}: numpy trunk vs transformers {err:.1e}")
    doc = {
        "generator": "tools/gen_tiny_glm4moe.py transformers",
        "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, float32 eager; "
        f"MTP: float64 numpy of llama.cpp's graph_mtp over the f32 GGUF (gguf-py {version('gguf')})",
        "family": NAME,
        "seed": SEED,
        "mtp_training": {
            "seqs": TRAIN_SEQS,
            "prompt": TRAIN_PROMPT,
            "generated": TRAIN_GEN,
            "steps": TRAIN_STEPS,
            "held_out_accuracy": round(accuracy, 4),
        },
        "config": {k: v for k, v in cfg.to_dict().items() if not isinstance(v, dict) or k == "rope_parameters"},
        "prompts": prompts,
    }
    (DIR / f"{NAME}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(NAME, "ok")


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

    prompts = [p["tokens"] for p in json.loads((DIR / f"{NAME}.json").read_text())["prompts"]]
    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "model.gguf"
        with_dummy_vocab(DIR / f"{NAME}-q8_0.gguf", dst)
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
        "generator": "tools/gen_tiny_glm4moe.py llamacpp",
        "reference": f"llama-cpp-python {version('llama_cpp_python')}, 2 threads, f16 cache, one batch per prompt",
        "family": NAME,
        "variant": "q8_0",
        "isa": host_isa(),
        "prompts": out,
    }
    (DIR / f"{NAME}-llamacpp{golden_suffix()}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(NAME, "llama.cpp ok")


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

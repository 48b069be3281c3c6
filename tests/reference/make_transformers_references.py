"""Rotary-embedding references computed by Hugging Face transformers, for tests/test_rotary_transformers.cpp.

Run by the build in the LibTorch 2.x lane, whose Python has transformers (scripts/torch-pip.requirements):
  .venv-torch/bin/python tests/reference/make_transformers_references.py --out build-torch-pip/tests/transformers

One case per rope type and pairing, each a dict saved with torch.save (the C++ test reads it with
torch::pickle_load), listed in manifest.txt. A case holds the configuration as attn names it, and:
  inv_freq, attention_factor   transformers' rope init function for the type (float32, as transformers computes)
  positions                    [B, T] integer positions, one offset per row (as a KV cache or left padding gives)
  q, k, q_embed, k_embed       float32 q [B, H, T, D] and k [B, H_kv, T, D], rotated by transformers' rotary module
                               and its model's apply_rotary_pos_emb, end to end in float32
  cos64, sin64, q64, q64_embed the rotation alone in float64: transformers' apply_rotary_pos_emb on float64 q with
                               cos/sin given ([B, T, rotary_dim / 2], the halves it duplicates), so the comparison
                               sees only the pairing and the partial-rotary split, not float32 angles
"""
import argparse
import math
import os

import torch
import transformers
from transformers import GPTNeoXConfig, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox import modeling_gpt_neox as neox
from transformers.models.gptj import modeling_gptj as gptj
from transformers.models.llama import modeling_llama as llama

from transformers_cases import write_cases


def positions_for(batch, tq, offsets):
    return torch.stack([torch.arange(o, o + tq) for o in offsets[:batch]])


def llama_case(head_dim, rope, max_position, offsets, seed, attn_config):
    """A Llama-layout case: LlamaRotaryEmbedding (the rope type's init function) and llama's apply_rotary_pos_emb."""
    torch.manual_seed(seed)
    heads, kv_heads, batch, tq = 4, 2, len(offsets), 5
    config = LlamaConfig(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         head_dim=head_dim, max_position_embeddings=max_position, rope_parameters=rope)
    rope_type = rope["rope_type"]
    positions = positions_for(batch, tq, offsets)
    seq_len = int(positions.max()) + 1
    if rope_type == "default":
        inv_freq, attention_factor = llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        # What LlamaRotaryEmbedding holds after its dynamic update for these positions (the init function at
        # seq_len; only "dynamic" depends on it).
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](config, seq_len=seq_len)
    module = llama.LlamaRotaryEmbedding(config)
    q = torch.randn(batch, heads, tq, head_dim)
    k = torch.randn(batch, kv_heads, tq, head_dim)
    cos, sin = module(q, positions)
    q_embed, k_embed = llama.apply_rotary_pos_emb(q, k, cos, sin)
    # The rotation alone, in float64.
    angles = positions[..., None].double() * inv_freq.double()
    cos64, sin64 = torch.cos(angles) * attention_factor, torch.sin(angles) * attention_factor
    q64 = torch.randn(batch, heads, tq, head_dim, dtype=torch.float64)
    q64_embed, _ = llama.apply_rotary_pos_emb(q64, q64, torch.cat([cos64, cos64], -1), torch.cat([sin64, sin64], -1))
    return dict(attn_config, rotary_dim=head_dim, pairing="HalfSplit", seq_len=seq_len,
                inv_freq=inv_freq, attention_factor=float(attention_factor), positions=positions,
                q=q, k=k, q_embed=q_embed, k_embed=k_embed, cos64=cos64, sin64=sin64, q64=q64, q64_embed=q64_embed)


def neox_partial_case(seed):
    """GPT-NeoX's partial rotary (partial_rotary_factor 0.25): the first quarter of each head rotates."""
    torch.manual_seed(seed)
    heads, head_dim, batch, tq = 4, 64, 2, 5
    config = GPTNeoXConfig(hidden_size=heads * head_dim, num_attention_heads=heads,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})
    module = neox.GPTNeoXRotaryEmbedding(config)
    inv_freq = module.inv_freq.clone()
    rotary_dim = 2 * inv_freq.numel()
    positions = positions_for(batch, tq, [0, 9])
    q = torch.randn(batch, heads, tq, head_dim)
    k = torch.randn(batch, heads, tq, head_dim)
    cos, sin = module(q, positions)
    q_embed, k_embed = neox.apply_rotary_pos_emb(q, k, cos, sin)
    angles = positions[..., None].double() * inv_freq.double()
    cos64, sin64 = torch.cos(angles), torch.sin(angles)
    q64 = torch.randn(batch, heads, tq, head_dim, dtype=torch.float64)
    q64_embed, _ = neox.apply_rotary_pos_emb(q64, q64, torch.cat([cos64, cos64], -1), torch.cat([sin64, sin64], -1))
    return dict(scaling="None", base=10000.0, rotary_dim=rotary_dim, pairing="HalfSplit", seq_len=int(positions.max()) + 1,
                inv_freq=inv_freq, attention_factor=float(module.attention_scaling), positions=positions,
                q=q, k=k, q_embed=q_embed, k_embed=k_embed, cos64=cos64, sin64=sin64, q64=q64, q64_embed=q64_embed)


def gptj_case(seed):
    """GPT-J: rotary_dim 16 of a 32-channel head, channels 2i and 2i+1 paired (rotate_every_two), as GPTJAttention
    applies it: on [B, T, H, D] with the sin/cos table of create_sinusoidal_positions."""
    torch.manual_seed(seed)
    heads, head_dim, rotary_dim, batch, tq = 4, 32, 16, 2, 5
    positions = positions_for(batch, tq, [0, 11])
    table = gptj.create_sinusoidal_positions(64, rotary_dim)  # [positions, rotary_dim]: sin halves, then cos halves
    sin, cos = torch.split(table[positions], rotary_dim // 2, dim=-1)

    def rotate(x):  # x [B, H, T, D] -> GPT-J's layout and back
        x = x.transpose(1, 2)
        rot = gptj.apply_rotary_pos_emb(x[..., :rotary_dim], sin, cos)
        return torch.cat([rot, x[..., rotary_dim:]], dim=-1).transpose(1, 2)

    q = torch.randn(batch, heads, tq, head_dim)
    k = torch.randn(batch, heads, tq, head_dim)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64) / rotary_dim))
    angles = positions[..., None].double() * inv_freq.double()
    cos64, sin64 = torch.cos(angles), torch.sin(angles)
    q64 = torch.randn(batch, heads, tq, head_dim, dtype=torch.float64)
    x64 = q64.transpose(1, 2)
    q64_embed = torch.cat([gptj.apply_rotary_pos_emb(x64[..., :rotary_dim], sin64, cos64), x64[..., rotary_dim:]],
                          dim=-1).transpose(1, 2)
    return dict(scaling="None", base=10000.0, rotary_dim=rotary_dim, pairing="Interleaved",
                seq_len=int(positions.max()) + 1, inv_freq=inv_freq.float(), attention_factor=1.0,
                positions=positions, q=q, k=k, q_embed=rotate(q), k_embed=rotate(k),
                cos64=cos64, sin64=sin64, q64=q64, q64_embed=q64_embed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory to write CASE.pt files and manifest.txt into")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    none = dict(scaling="None", factor=1.0, original_max_position=0)
    cases = {
        "rope_default": llama_case(64, {"rope_type": "default", "rope_theta": 10000.0}, 2048,
                                   [0, 37, 300], 1, dict(none, base=10000.0)),
        "rope_linear": llama_case(64, {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
                                  2048, [0, 123], 2, dict(scaling="Linear", base=10000.0, factor=4.0,
                                                          original_max_position=0)),
        # Positions past max_position_embeddings (64): the base grows with the longest one.
        "rope_dynamic": llama_case(32, {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
                                   64, [0, 150], 3, dict(scaling="DynamicNTK", base=10000.0, factor=2.0,
                                                         original_max_position=64)),
        "rope_yarn": llama_case(64, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                  "original_max_position_embeddings": 256}, 1024, [0, 700], 4,
                                dict(scaling="YaRN", base=10000.0, factor=4.0, original_max_position=256,
                                     beta_fast=32.0, beta_slow=1.0)),
        "rope_yarn_betas": llama_case(128,
                                      {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 8.0,
                                       "original_max_position_embeddings": 4096, "beta_fast": 16.0, "beta_slow": 2.0,
                                       "attention_factor": 1.25}, 32768, [5, 900], 5,
                                      dict(scaling="YaRN", base=500000.0, factor=8.0, original_max_position=4096,
                                           beta_fast=16.0, beta_slow=2.0, yarn_attention_factor=1.25)),
        "rope_llama3": llama_case(128,
                                  {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192}, 131072, [0, 300], 6,
                                  dict(scaling="Llama3", base=500000.0, factor=8.0, original_max_position=8192,
                                       low_freq_factor=1.0, high_freq_factor=4.0)),
        "rope_neox_partial": neox_partial_case(7),
        "rope_gptj_interleaved": gptj_case(8),
    }
    write_cases(args.out, cases, "rotary")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""GGUFs for the peer at the larger full shapes (Llama-3.2-3B, Llama-3.1-8B, Qwen3-4B), written by
the peer's own writer (.peer/mkgguf.py, carried to the GPU machine) with these shapes added to its
table: usage peer_sizes.py MKGGUF_PY MODEL TOKENIZER_JSON OUT.gguf."""
import importlib.util
import sys

spec = importlib.util.spec_from_file_location("mkgguf", sys.argv[1])
mk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mk)
llama = dict(arch="llama", n_head_kv=8, head_dim=128, n_vocab=128256, rope_theta=500000.0,
             rms_eps=1e-5, ctx=131072, n_rot=128, pre="llama-bpe", bos=128000, eos=128009,
             rope_freqs=True)
mk.CONFIGS["llama32_3b"] = dict(llama, name="Llama-3.2-3B (random Q4_0)", n_embd=3072, n_layer=28,
                                n_head=24, n_ff=8192)
mk.CONFIGS["llama31_8b"] = dict(llama, name="Llama-3.1-8B (random Q4_0)", n_embd=4096, n_layer=32,
                                n_head=32, n_ff=14336)
mk.CONFIGS["qwen3_4b"] = dict(mk.CONFIGS["qwen3_0_6b"], name="Qwen3-4B (random Q4_0)", n_embd=2560,
                              n_layer=36, n_head=32, n_head_kv=8, head_dim=128, n_ff=9728)
sys.argv = [sys.argv[0]] + sys.argv[2:]
mk.main()

#!/usr/bin/env python3
"""Checks tools/device/peer_gguf.py, the writer of the peer's GGUF files (docs/perf.md).

The tiny files of one preset per architecture are written from small synthetic tokenizer.json
files and read back with this file's own GGUF reader: header, metadata, tensor table, alignment,
sizes, the block bytes, the tensor names llama.cpp's loader asks for (its names, listed here) and
the metadata keys it reads. The full shapes are not written (gigabytes): their tensor tables must
add up to the public parameter counts of the Hub checkpoints and carry the Hub configs' dims.
"""
import importlib.util
import json
import os
import struct
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WRITER = os.path.join(ROOT, "tools", "device", "peer_gguf.py")

# The Hub configs (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
# head_dim, intermediate_size, vocab_size, tie_word_embeddings, rope_theta, rms_norm_eps) and the
# public parameter counts (safetensors, a tied embedding counted once; None: not checked).
HUB = {
    "gemma-3-1b": ("gemma3", 1152, 26, 4, 1, 256, 6912, 262144, True, 1e6, 1e-6, 999885952),
    "qwen2.5-0.5b": ("qwen2", 896, 24, 14, 2, 64, 4864, 151936, True, 1e6, 1e-6, 494032768),
    "qwen2.5-1.5b": ("qwen2", 1536, 28, 12, 2, 128, 8960, 151936, True, 1e6, 1e-6, 1543714304),
    "smollm3-3b": ("smollm3", 2048, 36, 16, 4, 128, 11008, 128256, True, 5e6, 1e-6, 3075098624),
    "llama-3.2-1b": ("llama", 2048, 16, 32, 8, 64, 8192, 128256, True, 5e5, 1e-5, 1235814400),
    "llama-3.2-3b": ("llama", 3072, 28, 24, 8, 128, 8192, 128256, True, 5e5, 1e-5, 3212749824),
    "llama-3.1-8b": ("llama", 4096, 32, 32, 8, 128, 14336, 128256, False, 5e5, 1e-5, 8030261248),
    "qwen3-0.6b": ("qwen3", 1024, 28, 16, 8, 128, 3072, 151936, True, 1e6, 1e-6, 596049920),
    "qwen3-1.7b": ("qwen3", 2048, 28, 16, 8, 128, 6144, 151936, True, 1e6, 1e-6, None),
    "qwen3-4b": ("qwen3", 2560, 36, 32, 8, 128, 9728, 151936, True, 1e6, 1e-6, 4022468096),
}

# The per-layer tensors llama.cpp's loader creates for each architecture (all required there but
# the q/k/v biases of qwen2, which its loader requires too).
LAYER = ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
         "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
         "ffn_down.weight"]
EXTRA = {
    "gemma3": ["attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight",
               "post_ffw_norm.weight"],
    "qwen2": ["attn_q.bias", "attn_k.bias", "attn_v.bias"],
    "qwen3": ["attn_q_norm.weight", "attn_k_norm.weight"],
    "llama": [],
    "smollm3": [],
}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


class Reader:
    """A GGUF v3 reader: metadata as {key: (type, value)}, tensors as {name: (dims, type, offset)}."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.b = f.read()
        self.p = 0
        magic = self.b[:4]
        self.p = 4
        if magic != b"GGUF":
            raise ValueError("bad magic %r" % magic)
        self.version, n_tensors, n_kv = self.take("<IQQ")
        self.kv = {}
        for _ in range(n_kv):
            key = self.string()
            typ = self.take("<I")[0]
            if key in self.kv:
                raise ValueError("duplicate key " + key)
            self.kv[key] = (typ, self.value(typ))
        self.tensors = {}
        self.order = []
        for _ in range(n_tensors):
            name = self.string()
            nd = self.take("<I")[0]
            dims = self.take("<%dQ" % nd)
            typ, off = self.take("<IQ")
            self.tensors[name] = (dims, typ, off)
            self.order.append(name)
        align = self.kv.get("general.alignment", (4, 32))[1]
        self.data = self.p + (-self.p % align)
        self.align = align

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.p)
        self.p += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")[0]
        s = self.b[self.p:self.p + n].decode("utf-8")
        self.p += n
        return s

    def value(self, typ):
        fmts = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
                11: "<q", 12: "<d"}
        if typ == 8:
            return self.string()
        if typ == 9:
            elem, n = self.take("<IQ")
            return (elem, [self.value(elem) for _ in range(n)])
        return self.take(fmts[typ])[0]


def nbytes(dims, typ):
    n = 1
    for d in dims:
        n *= d
    if typ == 0:
        return 4 * n
    if typ == 2:
        assert dims[0] % 32 == 0
        return n // 32 * 18
    raise ValueError("unexpected tensor type %d" % typ)


def spm_tokenizer(path):
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    for i in range(256):
        vocab["<0x%02X>" % i] = 4 + i
    for w in ["▁the", "▁a", "in", "▁in"]:
        vocab[w] = len(vocab)
    added = [{"id": i, "content": t, "special": True} for t, i in list(vocab.items())[:4]]
    added.append({"id": len(vocab), "content": "<start_of_turn>", "special": True})
    added.append({"id": len(vocab) + 1, "content": "<mask>", "special": False})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"model": {"type": "BPE", "vocab": vocab, "merges": [["▁", "a"]],
                             "unk_token": "<unk>", "byte_fallback": True},
                   "added_tokens": added}, f)
    return vocab


def bpe_tokenizer(path):
    vocab = {chr(0x100 + i) if i < 33 else chr(i): i for i in range(128)}
    vocab["Ġt"] = 128
    vocab["Ġth"] = 129
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"model": {"type": "BPE", "vocab": vocab, "merges": ["Ġ t", ["Ġt", "h"]]},
                   "added_tokens": [{"id": 130, "content": "<|end|>", "special": True}]}, f)
    return vocab


def check_file(model, path, hub, tiny):
    arch, E, L, H, HKV, D, F, V = hub[:8]
    tied = hub[8]
    r = Reader(path)
    kv, t = r.kv, r.tensors
    tag = "%s (tiny)" % model
    check(r.version == 3, tag + ": version 3")
    check(kv["general.architecture"] == (8, arch), tag + ": architecture " + arch)
    check(kv["general.file_type"] == (4, 2), tag + ": file type Q4_0")
    for key in ["context_length", "embedding_length", "block_count", "feed_forward_length",
                "attention.head_count", "attention.head_count_kv", "attention.key_length",
                "attention.value_length"]:
        check(kv.get(arch + "." + key, (None,))[0] == 4, tag + ": u32 " + key)
    check(kv.get(arch + ".attention.layer_norm_rms_epsilon", (None,))[0] == 6, tag + ": f32 eps")
    check(kv.get(arch + ".rope.freq_base", (None,))[0] == 6, tag + ": f32 rope base")
    if arch == "gemma3":
        check(kv.get("gemma3.attention.sliding_window", (4, 0))[1] > 0, tag + ": sliding window")
    e, l, h, hkv, d, ff = (kv[arch + "." + k][1] for k in [
        "embedding_length", "block_count", "attention.head_count", "attention.head_count_kv",
        "attention.key_length", "feed_forward_length"])
    check((e, l, h, hkv, d, ff) == tiny, tag + ": tiny dims %s" % ((e, l, h, hkv, d, ff),))
    # The tensor names: exactly the loader's, no more.
    names = {"token_embd.weight", "output_norm.weight"}
    if not tied:
        names.add("output.weight")
    if arch == "llama":
        names.add("rope_freqs.weight")
    for i in range(l):
        names.update("blk.%d.%s" % (i, n) for n in LAYER + EXTRA[arch])
    check(set(t) == names, tag + ": tensor names, extra %s missing %s"
          % (sorted(set(t) - names)[:4], sorted(names - set(t))[:4]))
    if set(t) != names:
        return
    shape = {
        "token_embd.weight": (e, V), "output.weight": (e, V), "output_norm.weight": (e,),
        "rope_freqs.weight": (d // 2,), "attn_norm.weight": (e,), "attn_q.weight": (e, h * d),
        "attn_k.weight": (e, hkv * d), "attn_v.weight": (e, hkv * d),
        "attn_output.weight": (h * d, e), "ffn_norm.weight": (e,), "ffn_gate.weight": (e, ff),
        "ffn_up.weight": (e, ff), "ffn_down.weight": (ff, e), "attn_q_norm.weight": (d,),
        "attn_k_norm.weight": (d,), "post_attention_norm.weight": (e,),
        "post_ffw_norm.weight": (e,), "attn_q.bias": (h * d,), "attn_k.bias": (hkv * d,),
        "attn_v.bias": (hkv * d,)}
    end = 0
    for name in r.order:
        dims, typ, off = t[name]
        base = name.split(".", 2)[2] if name.startswith("blk.") else name
        check(tuple(dims) == shape[base], "%s: %s dims %s" % (tag, name, dims))
        check(typ == (2 if len(dims) == 2 else 0), "%s: %s type %d" % (tag, name, typ))
        check(off % r.align == 0 and off >= end, "%s: %s offset %d" % (tag, name, off))
        size = nbytes(dims, typ)
        end = off + size
        at = r.data + off
        if typ == 2:  # every block's fp16 scale is 0.01
            scales = set(r.b[at + i * 18:at + i * 18 + 2] for i in range(0, size // 18, 97))
            check(scales == {struct.pack("<e", 0.01)}, "%s: %s scales" % (tag, name))
        else:
            want = 0.0 if name.endswith(".bias") else 1.0
            vals = set(struct.unpack_from("<%df" % (size // 4), r.b, at))
            check(vals == {want}, "%s: %s values %s" % (tag, name, sorted(vals)[:3]))
    check(len(r.b) == r.data + end + (-end % r.align), tag + ": file ends after the last tensor")
    # The vocabulary: one row per embedding row.
    tokens = kv["tokenizer.ggml.tokens"][1][1]
    types = kv["tokenizer.ggml.token_type"][1][1]
    check(len(tokens) == V and len(types) == V and len(set(tokens)) == V, tag + ": vocabulary rows")
    return r, tokens, types


def main():
    t0 = time.time()
    spec = importlib.util.spec_from_file_location("peer_gguf", WRITER)
    pg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pg)
    check(set(pg.MODELS) == set(HUB), "models: %s" % sorted(pg.MODELS))
    # Full shapes: the Hub dims and parameter counts.
    for model, hub in HUB.items():
        c = pg.MODELS.get(model)
        if c is None:
            continue
        arch, E, L, H, HKV, D, F, V, tied, rope, eps, count = hub
        check(c["arch"] == arch and c["dims"] == (E, L, H, HKV, D, F) and c["vocab"] == V
              and c["tied"] == tied and c["rope"] == rope and c["eps"] == eps, model + ": config")
        if count is not None:
            params = 0
            for name, dims, _ in pg.tensor_list(c, c["dims"]):
                if name != "rope_freqs.weight":  # not a parameter: llama.cpp's rope factors
                    params += nbytes(dims, 0) // 4
            check(params == count, "%s: %d parameters, the Hub says %d" % (model, params, count))
    # Tiny files, one preset per architecture, read back.
    with tempfile.TemporaryDirectory() as tmp:
        spm, bpe = os.path.join(tmp, "spm.json"), os.path.join(tmp, "bpe.json")
        spm_vocab, bpe_vocab = spm_tokenizer(spm), bpe_tokenizer(bpe)
        for model in ["gemma-3-1b", "qwen2.5-1.5b", "smollm3-3b", "llama-3.1-8b", "qwen3-0.6b"]:
            out = os.path.join(tmp, model + ".gguf")
            tok = spm if model.startswith("gemma") else bpe
            pg.write(model, tok, out, tiny=True)
            res = check_file(model, out, HUB[model], pg.MODELS[model]["tiny"])
            if not res:
                continue
            r, tokens, types = res
            if tok == spm:
                check(r.kv["tokenizer.ggml.model"] == (8, "llama"), model + ": SentencePiece model")
                check(types[spm_vocab["<0x41>"]] == 6 and tokens[spm_vocab["<0x41>"]] == "<0x41>",
                      model + ": byte token")
                check(types[3] == 2 and types[2] == 3 and types[spm_vocab["▁the"]] == 1,
                      model + ": unknown, control and normal tokens")
                check(types[len(spm_vocab)] == 3 and types[len(spm_vocab) + 1] == 4,
                      model + ": added tokens")
                check(types[-1] == 5, model + ": padding rows unused")
                scores = r.kv["tokenizer.ggml.scores"][1][1]
                check(len(scores) == len(tokens) and scores[spm_vocab["▁a"]] < scores[spm_vocab["▁the"]],
                      model + ": scores")
            else:
                check(r.kv["tokenizer.ggml.model"] == (8, "gpt2"), model + ": byte-level BPE")
                check(r.kv["tokenizer.ggml.merges"][1][1] == ["Ġ t", "Ġt h"], model + ": merges")
                check(tokens[bpe_vocab["Ġth"]] == "Ġth" and types[130] == 3 and types[-1] == 5,
                      model + ": tokens and types")
        # Bad input: one clear line, no file.
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            json.dump({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}, f)
        out = os.path.join(tmp, "bad.gguf")
        try:
            pg.write("qwen2.5-1.5b", bad, out, tiny=True)
            check(False, "a Unigram tokenizer.json is refused")
        except SystemExit as e:
            check("not a BPE tokenizer.json" in str(e), "refusal message: %s" % e)
        check(not os.path.exists(out) and not os.path.exists(out + ".part"), "no file after a refusal")
    for f in failures:
        print("FAIL " + f)
    print("peer_gguf: %d failures, %.1f s" % (len(failures), time.time() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

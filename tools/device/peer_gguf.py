#!/usr/bin/env python3
"""The peer's model files: random-weight Q4_0 GGUF v3 files with the exact shapes and
hyperparameters of the full-shape synth presets, as llama.cpp's `gemma3`, `qwen2`, `smollm3`,
`llama` and `qwen3` architectures read them (docs/perf.md, "The peer").

usage: peer_gguf.py MODEL TOKENIZER_JSON OUT.gguf [--tiny]
       peer_gguf.py --list

MODEL is a synth preset name (gemma-3-1b, qwen2.5-0.5b, qwen2.5-1.5b, smollm3-3b, llama-3.2-1b,
llama-3.2-3b, llama-3.1-8b, qwen3-0.6b, qwen3-1.7b, qwen3-4b: `--list`); TOKENIZER_JSON is the Hugging Face tokenizer.json of the
vocabulary the preset's synth checkpoint uses (the project's fixtures: gemma3 for Gemma 3, qwen3
for Qwen2.5 and Qwen3, llama3.2 for SmolLM3 and Llama). --tiny keeps the vocabulary and the
architecture but takes the dims of the preset's tiny twin (seconds to write, for loading checks).

Weights: every 2-D weight is Q4_0 (blocks of 32: an fp16 scale of 0.01 and 16 bytes of random
nibbles); norms and biases are F32 (norms 1, biases 0). The embedding is tied (no output.weight)
wherever the preset ties it, so llama.cpp reads the same Q4_0 rows as its head. Only the standard
library is used: the GPU machine's Python may have no numpy.

Vocabulary: byte-level BPE vocabularies (Qwen, Llama, SmolLM3) go in as llama.cpp's "gpt2" model
(tokens, types, merges, the pre-tokenizer name); the Gemma 3 vocabulary (SentencePiece-style BPE
with byte fallback) as its "llama" model: tokens, types (<0xNN> rows are BYTE, added special
tokens CONTROL, other added tokens USER_DEFINED) and scores of -id for normal pieces (the piece
order of a SentencePiece BPE model is its merge order; the timing harness feeds random ids, so the
scores only need to load).
"""
import json
import os
import re
import struct
import sys
import time

# GGUF value types and the ggml tensor types used here.
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
GGML_F32, GGML_Q4_0 = 0, 2
Q4_0_BLOCK, Q4_0_BYTES = 32, 18
ALIGN = 32

# llama.cpp's token types.
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED, TOK_BYTE = 1, 2, 3, 4, 5, 6

# The presets' shapes (src/hf/synth.cpp's full-shape presets and the Hub configs they mirror):
# hidden, layers, heads, kv heads, head dim, feed-forward, vocabulary rows, context, rope base,
# RMSNorm epsilon, tied embedding; `tiny` is the tiny twin's (hidden, layers, heads, kv heads,
# head dim, feed-forward).
QWEN2 = dict(arch="qwen2", vocab=151936, ctx=32768, rope=1000000.0, eps=1e-6, tied=True,
             tok="gpt2", pre="qwen2", bos=151643, eos=151645, add_bos=False,
             tiny=(128, 2, 2, 1, 64, 256))
QWEN3 = dict(arch="qwen3", vocab=151936, ctx=40960, rope=1000000.0, eps=1e-6, tied=True,
             tok="gpt2", pre="qwen2", bos=151643, eos=151645, add_bos=False,
             tiny=(128, 4, 16, 8, 128, 256))
LLAMA = dict(arch="llama", vocab=128256, ctx=131072, rope=500000.0, eps=1e-5, tied=True,
             tok="gpt2", pre="llama-bpe", bos=128000, eos=128009, add_bos=True,
             tiny=(128, 4, 32, 8, 64, 256))
MODELS = {
    "gemma-3-1b": dict(arch="gemma3", dims=(1152, 26, 4, 1, 256, 6912), vocab=262144, ctx=32768,
                       rope=1000000.0, eps=1e-6, tied=True, swa=512, tok="llama", bos=2, eos=106,
                       unk=3, pad=0, add_bos=True, tiny=(64, 4, 2, 1, 256, 128), tiny_swa=8),
    "qwen2.5-0.5b": dict(QWEN2, dims=(896, 24, 14, 2, 64, 4864)),
    "qwen2.5-1.5b": dict(QWEN2, dims=(1536, 28, 12, 2, 128, 8960)),
    "smollm3-3b": dict(LLAMA, arch="smollm3", dims=(2048, 36, 16, 4, 128, 11008), ctx=65536,
                       rope=5000000.0, eps=1e-6, eos=128012, add_bos=False,
                       tiny=(128, 4, 1, 1, 128, 256)),
    "llama-3.2-1b": dict(LLAMA, dims=(2048, 16, 32, 8, 64, 8192), rope_freqs=True),
    "llama-3.2-3b": dict(LLAMA, dims=(3072, 28, 24, 8, 128, 8192), rope_freqs=True),
    "llama-3.1-8b": dict(LLAMA, dims=(4096, 32, 32, 8, 128, 14336), rope_freqs=True, tied=False),
    "qwen3-0.6b": dict(QWEN3, dims=(1024, 28, 16, 8, 128, 3072)),
    "qwen3-1.7b": dict(QWEN3, dims=(2048, 28, 16, 8, 128, 6144)),
    "qwen3-4b": dict(QWEN3, dims=(2560, 36, 32, 8, 128, 9728)),
}


def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class Metadata:
    """The key-value section, in order of addition."""

    SCALAR = {U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q"}
    ARRAY = {I32: "i", F32: "f"}

    def __init__(self):
        self.items = []

    def add(self, key, typ, value):
        out = [gguf_str(key), struct.pack("<I", typ)]
        if typ == STR:
            out.append(gguf_str(value))
        elif typ == ARR:
            elem, values = value
            out.append(struct.pack("<IQ", elem, len(values)))
            if elem == STR:
                out.append(b"".join(gguf_str(v) for v in values))
            else:
                out.append(struct.pack("<%d%s" % (len(values), self.ARRAY[elem]), *values))
        else:
            out.append(struct.pack(self.SCALAR[typ], value))
        self.items.append(b"".join(out))


def load_vocabulary(path, rows, spm):
    """Tokens, types and (SentencePiece) scores or (byte-level BPE) merges of a tokenizer.json,
    padded to `rows` with unused rows."""
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    model = j.get("model", {})
    vocab = model.get("vocab")
    if model.get("type") != "BPE" or not isinstance(vocab, dict):
        sys.exit("peer_gguf: %s: not a BPE tokenizer.json" % path)
    tokens, types = [None] * rows, [TOK_UNUSED] * rows
    byte_piece = re.compile(r"<0x[0-9A-Fa-f]{2}>\Z")
    for piece, i in vocab.items():
        if isinstance(i, int) and 0 <= i < rows:
            tokens[i] = piece
            types[i] = TOK_BYTE if spm and byte_piece.match(piece) else TOK_NORMAL
    for a in j.get("added_tokens", []):
        i = a.get("id")
        if isinstance(i, int) and 0 <= i < rows and isinstance(a.get("content"), str):
            tokens[i] = a["content"]
            types[i] = TOK_CONTROL if a.get("special") else TOK_USER_DEFINED
    if spm and isinstance(model.get("unk_token"), str) and model["unk_token"] in vocab:
        types[vocab[model["unk_token"]]] = TOK_UNKNOWN
    taken = set(t for t in tokens if t is not None)
    for i in range(rows):
        if tokens[i] is None:
            name = "<|peer_unused_%d|>" % i
            if name in taken:
                sys.exit("peer_gguf: %s: vocabulary already has %s" % (path, name))
            tokens[i], types[i] = name, TOK_UNUSED
    if len(set(tokens)) != rows:
        sys.exit("peer_gguf: %s: duplicate token strings" % path)
    if spm:
        scores = [float(-i) if types[i] == TOK_NORMAL else 0.0 for i in range(rows)]
        return tokens, types, scores
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types, merges


def tensor_list(c, dims):
    """(name, shape as ggml's ne0, ne1..., type) of every tensor llama.cpp's loader asks for."""
    E, L, H, HKV, D, F = dims
    V, arch = c["vocab"], c["arch"]
    t = [("token_embd.weight", (E, V), GGML_Q4_0), ("output_norm.weight", (E,), GGML_F32)]
    if not c["tied"]:
        t.append(("output.weight", (E, V), GGML_Q4_0))
    if c.get("rope_freqs"):
        t.append(("rope_freqs.weight", (D // 2,), GGML_F32))
    for i in range(L):
        p = "blk.%d." % i
        t += [(p + "attn_norm.weight", (E,), GGML_F32),
              (p + "attn_q.weight", (E, H * D), GGML_Q4_0),
              (p + "attn_k.weight", (E, HKV * D), GGML_Q4_0),
              (p + "attn_v.weight", (E, HKV * D), GGML_Q4_0)]
        if arch == "qwen2":
            t += [(p + "attn_q.bias", (H * D,), GGML_F32), (p + "attn_k.bias", (HKV * D,), GGML_F32),
                  (p + "attn_v.bias", (HKV * D,), GGML_F32)]
        if arch in ("gemma3", "qwen3"):
            t += [(p + "attn_q_norm.weight", (D,), GGML_F32), (p + "attn_k_norm.weight", (D,), GGML_F32)]
        t.append((p + "attn_output.weight", (H * D, E), GGML_Q4_0))
        if arch == "gemma3":
            t.append((p + "post_attention_norm.weight", (E,), GGML_F32))
        t += [(p + "ffn_norm.weight", (E,), GGML_F32),
              (p + "ffn_gate.weight", (E, F), GGML_Q4_0),
              (p + "ffn_up.weight", (E, F), GGML_Q4_0),
              (p + "ffn_down.weight", (F, E), GGML_Q4_0)]
        if arch == "gemma3":
            t.append((p + "post_ffw_norm.weight", (E,), GGML_F32))
    return t


def tensor_bytes(shape, typ):
    n = 1
    for d in shape:
        n *= d
    return n * 4 if typ == GGML_F32 else n // Q4_0_BLOCK * Q4_0_BYTES


def tensor_data(name, shape, typ):
    if typ == GGML_F32:
        n = tensor_bytes(shape, typ) // 4
        value = 0.0 if name.endswith(".bias") else 1.0
        return struct.pack("<f", value) * n
    blocks = tensor_bytes(shape, typ) // Q4_0_BYTES
    buf = bytearray(os.urandom(blocks * Q4_0_BYTES))
    scale = struct.pack("<e", 0.01)
    buf[0::Q4_0_BYTES] = scale[0:1] * blocks
    buf[1::Q4_0_BYTES] = scale[1:2] * blocks
    return buf


def metadata(model, c, dims, swa, vocab):
    E, L, H, HKV, D, F = dims
    A = c["arch"]
    m = Metadata()
    m.add("general.architecture", STR, A)
    m.add("general.name", STR, "%s (random Q4_0%s)" % (model, ", tiny" if dims != c["dims"] else ""))
    m.add("general.file_type", U32, 2)  # LLAMA_FTYPE_MOSTLY_Q4_0
    m.add("general.quantization_version", U32, 2)
    m.add("general.alignment", U32, ALIGN)
    m.add(A + ".context_length", U32, c["ctx"])
    m.add(A + ".embedding_length", U32, E)
    m.add(A + ".block_count", U32, L)
    m.add(A + ".feed_forward_length", U32, F)
    m.add(A + ".attention.head_count", U32, H)
    m.add(A + ".attention.head_count_kv", U32, HKV)
    m.add(A + ".attention.key_length", U32, D)
    m.add(A + ".attention.value_length", U32, D)
    m.add(A + ".attention.layer_norm_rms_epsilon", F32, c["eps"])
    m.add(A + ".rope.freq_base", F32, c["rope"])
    m.add(A + ".rope.dimension_count", U32, D)
    m.add(A + ".vocab_size", U32, c["vocab"])
    if A == "gemma3":
        # llama.cpp's gemma3: every 6th layer global, the others windowed with rope base 10000,
        # as the Hub config's sliding_window_pattern 6 and rope_local_base_freq say.
        m.add(A + ".attention.sliding_window", U32, swa)
    tokens, types, extra = vocab
    m.add("tokenizer.ggml.model", STR, c["tok"])
    if c["tok"] == "gpt2":
        m.add("tokenizer.ggml.pre", STR, c["pre"])
    m.add("tokenizer.ggml.tokens", ARR, (STR, tokens))
    m.add("tokenizer.ggml.token_type", ARR, (I32, types))
    if c["tok"] == "llama":
        m.add("tokenizer.ggml.scores", ARR, (F32, extra))
        m.add("tokenizer.ggml.unknown_token_id", U32, c["unk"])
        m.add("tokenizer.ggml.padding_token_id", U32, c["pad"])
        m.add("tokenizer.ggml.add_space_prefix", BOOL, False)
    else:
        m.add("tokenizer.ggml.merges", ARR, (STR, extra))
    m.add("tokenizer.ggml.bos_token_id", U32, c["bos"])
    m.add("tokenizer.ggml.eos_token_id", U32, c["eos"])
    m.add("tokenizer.ggml.add_bos_token", BOOL, c["add_bos"])
    m.add("tokenizer.ggml.add_eos_token", BOOL, False)
    return m


def write(model, tokenizer_json, out, tiny=False):
    c = MODELS[model]
    dims = c["tiny"] if tiny else c["dims"]
    swa = c.get("tiny_swa", 0) if tiny else c.get("swa", 0)
    vocab = load_vocabulary(tokenizer_json, c["vocab"], c["tok"] == "llama")
    m = metadata(model, c, dims, swa, vocab)
    tensors = tensor_list(c, dims)
    infos, offset = [], 0
    for name, shape, typ in tensors:
        if shape[0] % Q4_0_BLOCK and typ == GGML_Q4_0:
            sys.exit("peer_gguf: %s: row of %d not a multiple of 32" % (name, shape[0]))
        infos.append(gguf_str(name) + struct.pack("<I%dQ" % len(shape), len(shape), *shape)
                     + struct.pack("<IQ", typ, offset))
        offset += -(-tensor_bytes(shape, typ) // ALIGN) * ALIGN
    tmp = out + ".part"
    with open(tmp, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(m.items)))
        for item in m.items:
            f.write(item)
        for info in infos:
            f.write(info)
        f.write(b"\0" * (-f.tell() % ALIGN))
        for name, shape, typ in tensors:
            f.write(tensor_data(name, shape, typ))
            f.write(b"\0" * (-f.tell() % ALIGN))
        size = f.tell()
    os.replace(tmp, out)
    return len(tensors), len(m.items), size


def main(argv):
    if argv[1:] == ["--list"]:
        print(" ".join(MODELS))
        return 0
    args = [a for a in argv[1:] if a != "--tiny"]
    if len(args) != 3 or args[0] not in MODELS:
        sys.stderr.write("usage: peer_gguf.py MODEL TOKENIZER_JSON OUT.gguf [--tiny]  (MODEL: %s)\n"
                         % " ".join(MODELS))
        return 2
    t0 = time.time()
    n, kv, size = write(args[0], args[1], args[2], "--tiny" in argv)
    print("%s: %d tensors, %d keys, %.1f MiB, %.1f s" % (args[2], n, kv, size / 2**20, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

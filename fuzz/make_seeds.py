#!/usr/bin/env python3
"""Regenerates the committed seed corpora of the fuzz targets (fuzz/corpus/<target>/).

Every seed comes from the tiny twins of `vkllm synth` or from the real tokenizer fixtures
(.fixtures/, tools/fixtures/make_fixtures.sh), shrunk so that each file stays small:

  safetensors        mini checkpoints with the twins' tensor names, dtypes and layout, tiny dims
  st_index           the twins' model.safetensors.index.json (synth with a small shard size)
  config             the twins' config.json + NUL + generation_config.json, and the mini configs
  tokenizer_load     the fixtures' tokenizer.json reduced to the 256 byte tokens and the first
                     merges (normalizer, pre-tokenizers, added tokens, post-processor, decoder kept),
                     + NUL + a reduced tokenizer_config.json + NUL + a text from the corpus
  tokenizer_encode   one selector byte (0 qwen3, 1 llama3.2, 2 phi4mini) + a text from
                     tests/tokenizer/corpus.jsonl, and some invalid UTF-8
  artifact           `vkllm export` of the mini checkpoints, one per e2e cell recipe and arch
  artifact_meta      the same artifacts as metadata JSON + NUL + data section
  hub                HEAD response headers as the Hugging Face hub sends them + NUL + model info

Usage: fuzz/make_seeds.py --vkllm build/dev/src/cli/vkllm [--fixtures .fixtures] [--out fuzz/corpus]
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = {"tiny-qwen3": "qwen3", "tiny-llama3.2": "llama3.2", "tiny-phi4mini": "phi4mini"}
# The mini checkpoints: the twins' configs with these dimensions.
MINI = dict(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, intermediate_size=64)
MINI_HEAD_DIM = 16


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def seed_name(data):
    return hashlib.sha1(data if isinstance(data, bytes) else data.encode()).hexdigest()[:16]


def put(out, target, data, name=None):
    write(os.path.join(out, target, name or seed_name(data)), data)


# ---- tokenizers -------------------------------------------------------------------------------

def byte_alphabet():
    """GPT-2's byte -> printable character table (the ByteLevel alphabet)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def shrink_tokenizer(tok, cfg, n_merges=120, n_added=8):
    model = tok["model"]
    vocab = model["vocab"]
    keep = set(byte_alphabet())
    merges = []
    for m in model["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in keep and b in keep and a + b in vocab:
            keep.add(a + b)
            merges.append(m)
            if len(merges) == n_merges:
                break
    old_ids = sorted(vocab[t] for t in keep)
    remap = {old: new for new, old in enumerate(old_ids)}
    new_vocab = {t: remap[vocab[t]] for t in sorted(keep, key=lambda t: vocab[t])}
    # Added tokens: the first few plus every one the post-processor or the config names.
    named = set()
    for k in ("bos_token", "eos_token", "pad_token", "unk_token"):
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            named.add(v)
    pp = json.dumps(tok.get("post_processor"))
    added = [a for i, a in enumerate(tok.get("added_tokens", []))
             if i < n_added or a["content"] in named or json.dumps(a["content"]) in pp]
    next_id = len(new_vocab)
    new_added = []
    for a in added:
        remap[a["id"]] = next_id
        new_added.append(dict(a, id=next_id))
        next_id += 1
    out = dict(tok)
    out["model"] = dict(model, vocab=new_vocab, merges=merges)
    out["added_tokens"] = new_added

    def fix_post(p):
        if not isinstance(p, dict):
            return p
        if p.get("type") == "Sequence":
            return dict(p, processors=[fix_post(s) for s in p["processors"]])
        if p.get("type") == "TemplateProcessing":
            st = {}
            for name, v in p["special_tokens"].items():
                if all(i in remap for i in v["ids"]):
                    st[name] = dict(v, ids=[remap[i] for i in v["ids"]])
            return dict(p, special_tokens=st)
        return p

    out["post_processor"] = fix_post(tok.get("post_processor"))
    contents = {a["content"] for a in new_added} | set(new_vocab)
    new_cfg = {}
    for k in ("bos_token", "eos_token", "pad_token", "add_bos_token", "add_eos_token",
              "clean_up_tokenization_spaces", "model_max_length", "tokenizer_class"):
        if k in cfg:
            v = cfg[k]
            name = v.get("content") if isinstance(v, dict) else v
            if k.endswith("_token") and isinstance(name, str) and name not in contents:
                continue
            new_cfg[k] = v
    return out, new_cfg


def corpus_texts(n):
    """n texts (bytes) spread over tests/tokenizer/corpus.jsonl, invalid UTF-8 entries included."""
    texts = []
    with open(os.path.join(ROOT, "tests/tokenizer/corpus.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(l) for l in f if l.strip()]
    lines = [r["text"].encode() if "text" in r else bytes.fromhex(r["hex"]) for r in rows]
    step = max(1, len(lines) // n)
    for t in lines[::step]:
        if 0 < len(t) <= 400:
            texts.append(t)
    return texts[:n]


# ---- safetensors / checkpoints ---------------------------------------------------------------

def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def write_safetensors(path, tensors, dtype="BF16", metadata=None):
    """tensors: list of (name, shape); deterministic small values."""
    size = {"BF16": 2, "F16": 2, "F32": 4}[dtype]
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for i, (name, shape) in enumerate(sorted(tensors)):
        n = 1
        for d in shape:
            n *= d
        if dtype == "F32":
            data = b"".join(struct.pack("<f", ((i * 7 + k * 13) % 17 - 8) / 64.0) for k in range(n))
        elif dtype == "F16":
            data = b"".join(struct.pack("<e", ((i * 7 + k * 13) % 17 - 8) / 64.0) for k in range(n))
        else:  # bf16: the top half of the fp32 pattern
            data = b"".join(struct.pack("<f", ((i * 7 + k * 13) % 17 - 8) / 64.0)[2:] for k in range(n))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    write(path, struct.pack("<Q", len(h)) + h + b"".join(blobs))


def mini_shapes(arch, c):
    D, F, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    H, KV, hd = c["num_attention_heads"], c["num_key_value_heads"], MINI_HEAD_DIM
    t = [("model.embed_tokens.weight", [V, D]), ("model.norm.weight", [D])]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t += [(p + "input_layernorm.weight", [D]), (p + "post_attention_layernorm.weight", [D]),
              (p + "self_attn.o_proj.weight", [D, H * hd]), (p + "mlp.down_proj.weight", [D, F])]
        if arch == "phi3":
            t += [(p + "self_attn.qkv_proj.weight", [(H + 2 * KV) * hd, D]),
                  (p + "mlp.gate_up_proj.weight", [2 * F, D])]
        else:
            t += [(p + "self_attn.q_proj.weight", [H * hd, D]),
                  (p + "self_attn.k_proj.weight", [KV * hd, D]),
                  (p + "self_attn.v_proj.weight", [KV * hd, D]),
                  (p + "mlp.gate_proj.weight", [F, D]), (p + "mlp.up_proj.weight", [F, D])]
        if arch == "qwen3":
            t += [(p + "self_attn.q_norm.weight", [hd]), (p + "self_attn.k_norm.weight", [hd])]
    if not c.get("tie_word_embeddings", False):
        t.append(("lm_head.weight", [V, D]))
    return t


def mini_config(twin_cfg):
    c = dict(twin_cfg, **MINI)
    arch = {"Qwen3ForCausalLM": "qwen3", "LlamaForCausalLM": "llama",
            "Phi3ForCausalLM": "phi3"}[c["architectures"][0]]
    if arch == "phi3":
        c["hidden_size"] = c["num_attention_heads"] * MINI_HEAD_DIM
        rot = int(MINI_HEAD_DIM * c.get("partial_rotary_factor", 1.0)) // 2
        rs = dict(c["rope_scaling"])
        rs["short_factor"] = rs["short_factor"][:rot]
        rs["long_factor"] = rs["long_factor"][:rot]
        c["rope_scaling"] = rs
    else:
        c["head_dim"] = MINI_HEAD_DIM
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if isinstance(c.get(k), int):
            c[k] = c[k] % c["vocab_size"]
        elif isinstance(c.get(k), list):
            c[k] = [v % c["vocab_size"] for v in c[k]]
    return arch, c


# ---- hub --------------------------------------------------------------------------------------

def hub_seeds():
    sha = "c1899de289a04d12100db370d81485cdf75e47ca"
    lfs = hashlib.sha256(b"weights").hexdigest()
    git = hashlib.sha1(b"blob 2\0{}").hexdigest()
    info = json.dumps({"_id": "x", "id": "Qwen/Qwen3-0.6B", "sha": sha, "private": False,
                       "siblings": [{"rfilename": n} for n in
                                    (".gitattributes", "LICENSE", "README.md", "config.json",
                                     "generation_config.json", "merges.txt", "model.safetensors",
                                     "tokenizer.json", "tokenizer_config.json", "vocab.json")]})
    heads = [
        # LFS file: 302 to the CDN with the linked etag and size.
        f"HTTP/1.1 302 Found\r\nContent-Type: text/plain; charset=utf-8\r\nX-Repo-Commit: {sha}\r\n"
        f"X-Linked-Etag: \"{lfs}\"\r\nX-Linked-Size: 1503300328\r\n"
        f"Location: https://cdn-lfs.hf.co/repos/ab/cd/{lfs}?response-content-disposition=x\r\n"
        f"ETag: W/\"2a-abc\"\r\nContent-Length: 1333\r\n\r\n",
        # A small git file: 200 with the blob sha1 as ETag.
        f"HTTP/1.1 200 OK\r\nContent-Length: 726\r\nETag: \"{git}\"\r\nX-Repo-Commit: {sha}\r\n"
        f"Accept-Ranges: bytes\r\n\r\n",
        # A renamed repo: relative redirect.
        "HTTP/1.1 307 Temporary Redirect\r\nLocation: /new-org/name/resolve/main/config.json\r\n"
        "Content-Length: 0\r\n\r\n",
        # Errors.
        "HTTP/1.1 401 Unauthorized\r\nX-Error-Code: GatedRepo\r\nX-Error-Message: Access to model "
        "x is restricted.\r\n\r\n",
        "HTTP/1.1 404 Not Found\r\nX-Error-Code: EntryNotFound\r\nX-Error-Message: Entry not "
        "found\r\n\r\n",
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/2 200\r\netag: \"" + lfs + "\"\r\ncontent-length: 5\r\n\r\n",
    ]
    bodies = [info, json.dumps({"sha": sha, "siblings": []}), "{\"error\":\"Repository not found\"}"]
    for i, h in enumerate(heads):
        # First byte: the status the harness pretends (index into its table).
        sel = {"302": 2, "200": 0, "307": 3, "401": 4, "404": 6, "100": 0}[h.split()[1]]
        yield bytes([sel]) + h.encode() + b"\0" + bodies[i % len(bodies)].encode()


# ---- main -------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vkllm", required=True)
    ap.add_argument("--fixtures", default=os.path.join(ROOT, ".fixtures"))
    ap.add_argument("--out", default=os.path.join(ROOT, "fuzz/corpus"))
    a = ap.parse_args()
    vk = os.path.abspath(a.vkllm)
    tmp = tempfile.mkdtemp(prefix="vkllm-seeds-")
    out = a.out
    for t in ("safetensors", "st_index", "config", "tokenizer_load", "tokenizer_encode", "artifact",
              "artifact_meta", "hub"):
        shutil.rmtree(os.path.join(out, t), ignore_errors=True)
        os.makedirs(os.path.join(out, t))
    texts = corpus_texts(24)

    # Tokenizers.
    tiny_tok = {}
    for fam in ("qwen3", "llama3.2", "phi4mini"):
        with open(os.path.join(a.fixtures, fam, "tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        with open(os.path.join(a.fixtures, fam, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        small, small_cfg = shrink_tokenizer(tok, cfg)
        tj = json.dumps(small, ensure_ascii=False)
        cj = json.dumps(small_cfg, ensure_ascii=False)
        tiny_tok[fam] = (tj, cj)
        for i, text in enumerate(texts[:6]):
            put(out, "tokenizer_load", (tj + "\0" + cj + "\0").encode() + text, f"{fam}-{i}")
    for sel, fam in enumerate(("qwen3", "llama3.2", "phi4mini")):
        for i, text in enumerate(texts):
            put(out, "tokenizer_encode", bytes([sel]) + text, f"{fam}-{i}")
        specials = {"qwen3": "<|im_start|>user\nHi<|im_end|>\n", "llama3.2":
                    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
                    "phi4mini": "<|user|>Hi<|end|><|assistant|>"}[fam]
        put(out, "tokenizer_encode", bytes([sel]) + specials.encode(), f"{fam}-chat")
        put(out, "tokenizer_encode", bytes([sel]) + b"caf\xc3\xa9 \xff\xfe \xe2\x82 \xf0\x9f\x98",
            f"{fam}-invalid-utf8")

    # Twins: configs and sharded indexes (synth writes the real key sets and tensor names).
    twin_cfgs = {}
    for preset, fam in FAMILIES.items():
        d = os.path.join(tmp, preset)
        subprocess.run([vk, "synth", "--preset", preset, "-o", d, "--max-shard-size", "8MB",
                        "--tokenizer-dir", os.path.join(a.fixtures, fam), "-q", "--threads", "2"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
            cfg_text = f.read()
        with open(os.path.join(d, "generation_config.json"), encoding="utf-8") as f:
            gen_text = f.read()
        twin_cfgs[preset] = json.loads(cfg_text)
        put(out, "config", cfg_text + "\0" + gen_text, f"{preset}")
        put(out, "config", cfg_text, f"{preset}-nogen")
        with open(os.path.join(d, "model.safetensors.index.json"), encoding="utf-8") as f:
            put(out, "st_index", f.read(), f"{preset}")
        twin_names = set()
        for fn in os.listdir(d):
            if fn.endswith(".safetensors"):
                twin_names |= set(read_header(os.path.join(d, fn))) - {"__metadata__"}
        shutil.rmtree(d)

        # The mini checkpoint: the twin's config and tensor names with tiny dims.
        arch, mc = mini_config(twin_cfgs[preset])
        shapes = mini_shapes(arch, mc)
        # The twin has more layers; its non-layer tensors and layer 0 are the mini's.
        twin_names = {n for n in twin_names if ".layers." not in n or ".layers.0." in n}
        assert {n for n, _ in shapes} == twin_names, f"{preset}: tensor names differ from the twin"
        md = os.path.join(tmp, "mini-" + preset)
        os.makedirs(md)
        write(os.path.join(md, "config.json"), json.dumps(mc, indent=2, sort_keys=True) + "\n")
        write(os.path.join(md, "generation_config.json"), gen_text)
        tj, cj = tiny_tok[fam]
        write(os.path.join(md, "tokenizer.json"), tj)
        write(os.path.join(md, "tokenizer_config.json"), cj)
        write_safetensors(os.path.join(md, "model.safetensors"), shapes, "BF16", {"format": "pt"})
        put(out, "config", json.dumps(mc, indent=2) + "\0" + gen_text, f"mini-{preset}")
        with open(os.path.join(md, "model.safetensors"), "rb") as f:
            put(out, "safetensors", f.read(), f"mini-{preset}-bf16")
        for dt in ("F32", "F16"):
            p = os.path.join(tmp, f"st-{dt}")
            write_safetensors(p, shapes[:4], dt)
            with open(p, "rb") as f:
                put(out, "safetensors", f.read(), f"mini-{preset}-{dt.lower()}")

        # Artifacts: the e2e cells' recipes for this family, plus the float ones.
        recipes = {"qwen3": ["quantized-8da4w-fp16-embedding", "non-quantized"],
                   "llama": ["quantized-8da4w", "quantized-8da4w-fp16", "quantized-8da4w-embedding",
                             "quantized-int4-weight-only", "fp16"],
                   "phi3": ["quantized-8da4w-embedding"]}[arch]
        for r in recipes:
            ap_ = os.path.join(tmp, f"{preset}-{r}.vkllm")
            subprocess.run([vk, "export", md, "--recipe", r, "-o", ap_, "--group-size", "16",
                            "--embedding-group", "16", "--max-context", "8", "-q"], check=True)
            with open(ap_, "rb") as f:
                art = f.read()
            put(out, "artifact", art, f"{preset}-{r}")
            meta_size, data_off, data_size = struct.unpack_from("<QQQ", art, 24)
            meta = art[64:64 + meta_size]
            put(out, "artifact_meta", meta + b"\0" + art[data_off:data_off + data_size],
                f"{preset}-{r}")
        shutil.rmtree(md)

    for i, s in enumerate(hub_seeds()):
        put(out, "hub", s, f"hub-{i}")
    shutil.rmtree(tmp)
    for t in sorted(os.listdir(out)):
        files = os.listdir(os.path.join(out, t))
        size = sum(os.path.getsize(os.path.join(out, t, f)) for f in files)
        print(f"{t:18s} {len(files):3d} seeds {size / 1024:8.1f} KiB")


if __name__ == "__main__":
    main()

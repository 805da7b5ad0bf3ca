#!/usr/bin/env python3
"""Independent goldens for the tiny twins, computed by Hugging Face transformers (fp32, CPU).

Run on the GPU machine (torch + transformers, no network needed):

    python3 tools/goldens/make_goldens.py --out tests/goldens twins/tiny-qwen3 \
        twins/tiny-llama3.2 twins/tiny-phi4mini [twins/tiny-qwen2.5 twins/tiny-gemma3]

where twins/<name> were written by `vkllm synth --preset <name> -o twins/<name>`.
For each twin directory it writes into --out:
  <name>.json        prompt text and ids, 32 greedy continuation ids, the logits positions,
                     top-1/top-2 margins, sha256 of the weights and configs, versions, command
  <name>.logits.f32  raw little-endian float32 logits, [len(logits_positions), vocab] row-major

Greedy decoding is a manual loop of full forwards (no generate(), no KV cache, no eos stop).
The logits rows come from one final forward over prompt + the first 31 continuation ids, at
the last prompt position (predicting continuation[0]) and two later positions.
See docs/synth.md.
"""

import argparse
import hashlib
import json
import os
import platform
import struct
import sys
import time

N_NEW = 32
QUESTION = "What is the capital of France?"
PROMPTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e", "prompts")


def read_prompt(name):
    """The text of an e2e prompt file (e2e/prompts/<name>), byte for byte."""
    with open(os.path.join(PROMPTS_DIR, name), encoding="utf-8", newline="") as f:
        return f.read()


# docs/design.md section 1 chat prompts. Llama's <|begin_of_text|> is added by the tokenizer's
# post-processor (add_special_tokens=True), so it is not in the text.
FAMILIES = {
    "qwen3": {
        "text": "<|im_start|>user\n" + QUESTION + "<|im_end|>\n<|im_start|>assistant\n",
        "add_special_tokens": False,
        "first_id": 151644,  # <|im_start|>
    },
    # Qwen2.5-Instruct: its e2e cell's prompt (e2e/cells-families.tsv), what the checkpoint's chat
    # template renders for one user turn: ChatML with the template's default system turn.
    "qwen2": {
        "text": read_prompt("qwen2.5.txt"),
        "add_special_tokens": False,
        "first_id": 151644,  # <|im_start|>
    },
    "llama": {
        "text": "<|start_header_id|>user<|end_header_id|>\n\n" + QUESTION
        + "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "add_special_tokens": True,
        "first_id": 128000,  # <|begin_of_text|>
    },
    "phi3": {
        "text": "<|user|>" + QUESTION + "<|end|><|assistant|>",
        "add_special_tokens": False,
        "first_id": 200021,  # <|user|>
    },
    # Mistral v0.2 (the Llama 2 SentencePiece tokenizer): [INST] turns; <s> added by the
    # tokenizer's post-processor.
    "mistral": {
        "text": "[INST] " + QUESTION + " [/INST]",
        "add_special_tokens": True,
        "first_id": 1,  # <s>
    },
    # Gemma 3 (Gemma3ForCausalLM, model_type gemma3_text): the chat template's turns, <bos> written
    # in the text (whether the tokenizer's post-processor adds one does not matter then).
    "gemma3_text": {
        "text": "<bos><start_of_turn>user\n" + QUESTION + "<end_of_turn>\n<start_of_turn>model\n",
        "add_special_tokens": False,
        "first_id": 2,  # <bos>
    },
}
# SmolLM3: its e2e cell's prompt, what the checkpoint's chat template renders for one user turn with
# enable_thinking false (ChatML, the metadata system turn, an empty think block). The twin carries
# the Llama 3.2 tokenizer, which has no ChatML tokens: the markers are plain text there.
FAMILIES["smollm3"] = {
    "text": read_prompt("smollm3.txt"),
    "add_special_tokens": False,
    "first_id": 27,  # "<", the start of the plain-text "<|im_start|>"
}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_tokenizer(d):
    """The Hugging Face tokenizers library reading the twin's tokenizer.json as it is.

    transformers' PreTrainedTokenizerFast is also run; where it disagrees (transformers 5.x
    re-registers special tokens it finds no config for) the difference is printed, not used."""
    path = os.path.join(d, "tokenizer.json")
    if not os.path.isfile(path):
        sys.exit(f"{d}: no tokenizer.json (write the twin without --no-tokenizer)")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)

    def encode(text, special):
        ids = list(tok.encode(text, add_special_tokens=special).ids)
        try:
            from transformers import PreTrainedTokenizerFast

            other = list(PreTrainedTokenizerFast(tokenizer_file=path).encode(text, add_special_tokens=special))
            if other != ids:
                print(f"note: {d}: PreTrainedTokenizerFast gives {other[:8]}..., tokenizers gives {ids[:8]}...",
                      file=sys.stderr)
        except Exception as e:
            print(f"note: PreTrainedTokenizerFast failed: {e}", file=sys.stderr)
        return ids

    return encode, "tokenizers.Tokenizer"


def from_pretrained(cls, d, torch):
    kwargs = dict(trust_remote_code=False, attn_implementation="eager", output_loading_info=True)
    try:
        return cls.from_pretrained(d, dtype=torch.float32, **kwargs)
    except TypeError:  # older transformers: torch_dtype
        return cls.from_pretrained(d, torch_dtype=torch.float32, **kwargs)


def load_model(d, arch, torch):
    import transformers

    try:
        res = from_pretrained(transformers.AutoModelForCausalLM, d, torch)
    except Exception as e:  # e.g. Phi-4-mini's auto_map: use the built-in class by name
        print(f"note: AutoModelForCausalLM failed ({e}); using transformers.{arch}", file=sys.stderr)
        res = from_pretrained(getattr(transformers, arch), d, torch)
    model, info = res if isinstance(res, tuple) else (res, {})
    model = model.to(torch.float32).eval()
    bad = {k: list(v) for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    # A tied lm_head is reported missing by some versions; it is checked below.
    if "missing_keys" in bad:
        bad["missing_keys"] = [k for k in bad["missing_keys"] if k != "lm_head.weight"]
        if not bad["missing_keys"]:
            del bad["missing_keys"]
    if bad:
        sys.exit(f"{d}: transformers did not load every weight: {bad}")
    for n, p in model.named_parameters():
        if p.dtype != torch.float32:
            sys.exit(f"{d}: parameter {n} is {p.dtype}, expected float32")
    emb, out = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    with open(os.path.join(d, "config.json")) as f:
        tied = json.load(f).get("tie_word_embeddings", True)
    if tied and not torch.equal(emb, out):
        sys.exit(f"{d}: lm_head is not tied to embed_tokens (tie_word_embeddings ignored?)")
    if not tied and torch.equal(emb, out):
        sys.exit(f"{d}: lm_head equals embed_tokens though tie_word_embeddings is false")
    # Every tensor of the checkpoint reached the model unchanged (bf16 -> fp32 is exact).
    from safetensors.torch import load_file

    files = [f for f in sorted(os.listdir(d)) if f.endswith(".safetensors")]
    state = model.state_dict()
    for f in files:
        for name, t in load_file(os.path.join(d, f)).items():
            if name not in state:
                sys.exit(f"{d}: {f}: tensor {name} is not a model parameter")
            if not torch.equal(state[name], t.to(torch.float32)):
                sys.exit(f"{d}: {f}: tensor {name} differs after loading")
    return model


def check_gemma3(d, model, config, prompt_len, torch):
    """What the golden must exercise for Gemma 3: both layer kinds, a prompt past the window, the
    embedding scale sqrt(hidden) (exact in fp32 and bf16 for the twin's hidden size)."""
    tc = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    kinds = list(getattr(tc, "layer_types", None) or [])
    if "sliding_attention" not in kinds or "full_attention" not in kinds:
        sys.exit(f"{d}: layer_types {kinds}: expected sliding and full attention layers")
    window = tc.sliding_window
    if not window or prompt_len <= window:
        sys.exit(f"{d}: the prompt ({prompt_len} ids) does not cross the sliding window {window}")
    emb = model.get_input_embeddings()
    scale = getattr(emb, "embed_scale", None)
    want = config["hidden_size"] ** 0.5
    if scale is None or abs(float(scale) - want) > 1e-6 * want:
        sys.exit(f"{d}: embedding scale {scale}, expected sqrt(hidden_size) = {want}")
    print(f"note: {d}: {type(model).__name__}, layer types {kinds}, window {window}, "
          f"embed_scale {float(scale)}, query_pre_attn_scalar {tc.query_pre_attn_scalar}",
          file=sys.stderr)


def family_of(config):
    mt = config.get("model_type")
    if mt in FAMILIES:
        return mt
    sys.exit(f"unsupported model_type {mt!r} (expected qwen3, qwen2, llama, phi3, mistral, smollm3 or gemma3_text)")


def run_twin(d, out_dir, torch, transformers):
    d = os.path.normpath(d)
    name = os.path.basename(d)
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    fam = family_of(config)
    spec = FAMILIES[fam]
    t0 = time.time()

    encode, tok_kind = load_tokenizer(d)
    prompt_ids = encode(spec["text"], spec["add_special_tokens"])
    if not prompt_ids or prompt_ids[0] != spec["first_id"]:
        sys.exit(f"{d}: prompt starts with id {prompt_ids[:1]}, expected {spec['first_id']}")
    if fam == "llama" and prompt_ids[1] == 128000:
        sys.exit(f"{d}: two BOS tokens in the prompt")
    if fam == "gemma3_text" and prompt_ids[1] == 2:
        sys.exit(f"{d}: two BOS tokens in the prompt")

    model = load_model(d, config["architectures"][0], torch)
    if fam == "gemma3_text":
        check_gemma3(d, model, config, len(prompt_ids), torch)
    vocab = model.get_output_embeddings().weight.shape[0]
    if vocab != config["vocab_size"]:
        sys.exit(f"{d}: lm_head has {vocab} rows, config says {config['vocab_size']}")

    ids = list(prompt_ids)
    margins = []
    with torch.no_grad():
        for _ in range(N_NEW):
            logits = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False).logits
            last = logits[0, -1].to(torch.float32)
            top = torch.topk(last, 2)
            margins.append(float(top.values[0] - top.values[1]))
            ids.append(int(torch.argmax(last)))
        cont = ids[len(prompt_ids):]
        P = len(prompt_ids)
        positions = [P - 1, P + 15, P + 30]
        seq = ids[: P + 31]
        final = model(input_ids=torch.tensor([seq], dtype=torch.long), use_cache=False).logits[0]
        rows = [final[p].to(torch.float32) for p in positions]
    for p, row in zip(positions, rows):
        if int(torch.argmax(row)) != cont[p - (P - 1)]:
            print(f"warning: {name}: position {p}: argmax of the full forward differs from the "
                  f"greedy step (near tie?)", file=sys.stderr)

    logits_name = name + ".logits.f32"
    with open(os.path.join(out_dir, logits_name), "wb") as f:
        for row in rows:
            vals = row.tolist()
            f.write(struct.pack("<%df" % len(vals), *vals))

    hashed = [f for f in sorted(os.listdir(d)) if f.endswith((".safetensors", ".json"))]
    record = {
        "twin": name,
        "family": fam,
        "architectures": config.get("architectures"),
        "prompt_text": spec["text"],
        "add_special_tokens": spec["add_special_tokens"],
        "prompt_ids": prompt_ids,
        "continuation_ids": cont,
        "greedy_top2_margins": [round(m, 6) for m in margins],
        "logits_file": logits_name,
        "logits_positions": positions,
        "logits_shape": [len(positions), vocab],
        "logits_dtype": "float32 little-endian, row-major",
        "vocab_size": vocab,
        "files_sha256": {f: sha256_file(os.path.join(d, f)) for f in hashed},
        "reference": {
            "model_class": type(model).__name__,
            "dtype": "float32",
            "device": "cpu",
            "attn_implementation": "eager",
            "use_cache": False,
            "torch_threads": torch.get_num_threads(),
            "tokenizer": tok_kind,
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "command": "python3 " + " ".join(sys.argv),
    }
    try:
        import tokenizers

        record["versions"]["tokenizers"] = tokenizers.__version__
    except Exception:
        pass
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    return {
        "twin": name,
        "prompt": len(prompt_ids),
        "cont": cont,
        "min_margin": min(margins),
        "median_margin": sorted(margins)[len(margins) // 2],
        "distinct": len(set(cont)),
        "seconds": time.time() - t0,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("twins", nargs="+", help="twin directories written by vkllm synth")
    ap.add_argument("--out", required=True, help="output directory (e.g. tests/goldens)")
    args = ap.parse_args()

    import torch
    import transformers

    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    rows = [run_twin(d, args.out, torch, transformers) for d in args.twins]

    print(f"\ntorch {torch.__version__}, transformers {transformers.__version__}, fp32 CPU, eager attention")
    print(f"{'twin':<16} {'prompt':>6} {'distinct':>8} {'min gap':>8} {'med gap':>8} {'s':>6}  first continuation ids")
    for r in rows:
        print(f"{r['twin']:<16} {r['prompt']:>6} {r['distinct']:>8} {r['min_margin']:>8.4f} "
              f"{r['median_margin']:>8.4f} {r['seconds']:>6.1f}  {r['cont'][:8]}")


if __name__ == "__main__":
    main()

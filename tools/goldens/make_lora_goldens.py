#!/usr/bin/env python3
"""LoRA goldens for the tiny twins, computed by Hugging Face peft + transformers (fp32, CPU).

Run on the GPU machine (torch, transformers, peft; no network needed), after writing the twins:

    for t in tiny-qwen3 tiny-llama3.2 tiny-phi4mini; do vkllm synth --preset $t -o twins/$t; done
    python3 tools/goldens/make_lora_goldens.py --out tests/goldens/lora \
        twins/tiny-qwen3 twins/tiny-llama3.2 twins/tiny-phi4mini

For each twin it builds one small adapter with peft (get_peft_model, then lora_A and lora_B set to
seeded random non-zero values), writes it with save_pretrained, loads it again on a fresh base
with PeftModel.from_pretrained(...).merge_and_unload(), and records what the merged model does.
Into --out it writes:
  manifest.json            the cases (twin, adapter folder, golden file)
  <case>/                  the adapter as peft saved it (adapter_config.json,
                           adapter_model.safetensors)
  <case>.json              prompt ids, 32 greedy continuation ids, logits positions, sha256 of the
                           twin's files and of the adapter's, the LoRA settings, versions, command
  <case>.logits.f32        raw little-endian float32 logits, [len(logits_positions), vocab]

The adapters cover: rank_pattern + alpha_pattern (tiny-qwen3, every Linear), use_rslora +
layers_to_transform (tiny-llama3.2), the fused qkv_proj / gate_up_proj of Phi-3 (tiny-phi4mini).
Greedy decoding and the logits rows are computed exactly as tools/goldens/make_goldens.py does
(whose loaders are reused). See docs/lora.md.
"""

import argparse
import json
import math
import os
import platform
import struct
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_goldens as mg  # noqa: E402  (same folder: tokenizer and model loaders, FAMILIES)

N_NEW = 32
DELTA_STRENGTH = 0.5  # RMS of each module's delta, relative to 1/sqrt(fan_in)

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# One adapter per twin (by model_type).
CASES = {
    "qwen3": dict(
        r=8, lora_alpha=16, target_modules=ALL,
        rank_pattern={"down_proj": 4, "layers.1.self_attn.q_proj": 12},
        alpha_pattern={"down_proj": 6},
    ),
    "llama": dict(
        r=16, lora_alpha=8, use_rslora=True, target_modules=["q_proj", "v_proj", "o_proj", "down_proj"],
        layers_to_transform=[0, 2],
    ),
    "phi3": dict(
        r=4, lora_alpha=8, target_modules=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
    ),
}


def say(msg):
    print(msg, flush=True)


def lora_layers(model):
    """(name, module) of every peft LoRA layer (a module with lora_A / lora_B ModuleDicts)."""
    out = []
    for name, m in model.named_modules():
        if hasattr(m, "lora_A") and hasattr(m, "lora_B") and "default" in getattr(m, "lora_A", {}):
            out.append((name, m))
    return out


def randomize_adapter(model, torch, seed):
    """Seeded non-zero A and B (peft initializes B to zero); returns a report per module."""
    g = torch.Generator().manual_seed(seed)
    report = {}
    with torch.no_grad():
        for name, m in lora_layers(model):
            a = m.lora_A["default"].weight
            b = m.lora_B["default"].weight
            s = float(m.scaling["default"])
            r, fan_in = a.shape[0], a.shape[1]
            a_std = 1.0 / math.sqrt(fan_in)
            b_std = DELTA_STRENGTH / (s * math.sqrt(r))
            a.copy_(torch.randn(a.shape, generator=g, dtype=torch.float32) * a_std)
            b.copy_(torch.randn(b.shape, generator=g, dtype=torch.float32) * b_std)
            report[name] = {"r": int(r), "scaling": s, "lora_A": list(a.shape), "lora_B": list(b.shape)}
    return report


def greedy(model, prompt_ids, torch):
    """make_goldens.py's procedure: full forwards, no cache; logits rows at three positions."""
    ids = list(prompt_ids)
    margins = []
    with torch.no_grad():
        for _ in range(N_NEW):
            logits = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False).logits
            last = logits[0, -1].to(torch.float32)
            top = torch.topk(last, 2)
            margins.append(float(top.values[0] - top.values[1]))
            ids.append(int(torch.argmax(last)))
        P = len(prompt_ids)
        positions = [P - 1, P + 15, P + 30]
        final = model(input_ids=torch.tensor([ids[: P + 31]], dtype=torch.long), use_cache=False).logits[0]
        rows = [final[p].to(torch.float32) for p in positions]
    return ids[P:], margins, positions, rows


def nmse(a, b):
    return float(((a - b) ** 2).sum() / (a ** 2).sum())


def run_twin(d, out_dir, torch, transformers, peft):
    from peft import LoraConfig, PeftModel, get_peft_model

    d = os.path.normpath(d)
    twin = os.path.basename(d)
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    fam = mg.family_of(config)
    spec = mg.FAMILIES[fam]
    case_cfg = CASES[fam]
    case = twin + "-lora"
    adapter_dir = os.path.join(out_dir, case)
    t0 = time.time()
    say(f"== {twin}: adapter {case_cfg}")

    encode, _ = mg.load_tokenizer(d)
    prompt_ids = encode(spec["text"], spec["add_special_tokens"])
    arch = config["architectures"][0]

    # 1. The adapter, made and saved by peft.
    torch.manual_seed(0)
    base = mg.load_model(d, arch, torch)
    lcfg = LoraConfig(task_type="CAUSAL_LM", lora_dropout=0.0, bias="none", **case_cfg)
    pm = get_peft_model(base, lcfg)
    report = randomize_adapter(pm, torch, seed=1234)
    if not report:
        sys.exit(f"{twin}: peft made no LoRA layers (target_modules {case_cfg['target_modules']})")
    say(f"   {len(report)} LoRA modules, ranks {sorted(set(v['r'] for v in report.values()))}")
    os.makedirs(adapter_dir, exist_ok=True)
    pm.save_pretrained(adapter_dir)
    for f in ("adapter_config.json", "adapter_model.safetensors"):
        if not os.path.isfile(os.path.join(adapter_dir, f)):
            sys.exit(f"{adapter_dir}: save_pretrained wrote no {f} (files: {os.listdir(adapter_dir)})")
    for f in os.listdir(adapter_dir):  # only what vkllm reads is kept (README.md is peft's card)
        if f not in ("adapter_config.json", "adapter_model.safetensors"):
            os.remove(os.path.join(adapter_dir, f))
    del pm, base

    # 2. The reference: a fresh base, the saved adapter loaded and merged by peft.
    fresh = mg.load_model(d, arch, torch)
    plain_cont, _, positions0, plain_rows = greedy(fresh, prompt_ids, torch)
    merged = PeftModel.from_pretrained(fresh, adapter_dir).merge_and_unload()
    merged = merged.to(torch.float32).eval()
    leftover = [n for n, _ in merged.named_modules() if "lora_" in n]
    if leftover:
        sys.exit(f"{twin}: merge_and_unload left LoRA modules: {leftover[:4]}")
    cont, margins, positions, rows = greedy(merged, prompt_ids, torch)
    effect = [nmse(p, r) for p, r in zip(plain_rows, rows)]
    say(f"   logits NMSE merged vs base at {positions}: {[f'{e:.3g}' for e in effect]}")
    if max(effect) < 1e-4:
        sys.exit(f"{twin}: the merged adapter hardly changes the logits: nothing would be tested")

    logits_name = case + ".logits.f32"
    with open(os.path.join(out_dir, logits_name), "wb") as f:
        for row in rows:
            vals = row.tolist()
            f.write(struct.pack("<%df" % len(vals), *vals))
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        saved_cfg = json.load(f)
    hashed = [f for f in sorted(os.listdir(d)) if f.endswith((".safetensors", ".json"))]
    record = {
        "case": case,
        "twin": twin,
        "family": fam,
        "adapter_dir": case,
        "lora_scale": 1.0,
        "lora_settings": {k: v for k, v in case_cfg.items()},
        "lora_modules": report,
        "adapter_config": saved_cfg,
        "prompt_text": spec["text"],
        "add_special_tokens": spec["add_special_tokens"],
        "prompt_ids": prompt_ids,
        "continuation_ids": cont,
        "base_continuation_ids": plain_cont,
        "greedy_top2_margins": [round(m, 6) for m in margins],
        "logits_file": logits_name,
        "logits_positions": positions,
        "logits_shape": [len(positions), int(rows[0].shape[0])],
        "logits_dtype": "float32 little-endian, row-major",
        "vocab_size": int(rows[0].shape[0]),
        "logits_nmse_merged_vs_base": effect,
        "files_sha256": {f: mg.sha256_file(os.path.join(d, f)) for f in hashed},
        "adapter_sha256": {f: mg.sha256_file(os.path.join(adapter_dir, f))
                           for f in ("adapter_config.json", "adapter_model.safetensors")},
        "reference": {
            "merge": "peft PeftModel.from_pretrained(base, adapter).merge_and_unload()",
            "dtype": "float32", "device": "cpu", "attn_implementation": "eager", "use_cache": False,
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
            "python": platform.python_version(),
        },
        "command": "python3 " + " ".join(sys.argv),
    }
    with open(os.path.join(out_dir, case + ".json"), "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    say(f"   wrote {case}.json, {logits_name}, {case}/ in {time.time() - t0:.1f} s")
    return {"case": case, "twin": twin, "adapter_dir": case, "golden": case + ".json",
            "min_margin": min(margins), "distinct": len(set(cont)), "effect": max(effect),
            "changed_ids": sum(1 for a, b in zip(cont, plain_cont) if a != b)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("twins", nargs="+", help="twin directories written by vkllm synth")
    ap.add_argument("--out", required=True, help="output directory (e.g. tests/goldens/lora)")
    args = ap.parse_args()

    import peft
    import torch
    import transformers

    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    os.makedirs(args.out, exist_ok=True)
    say(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
    rows = [run_twin(d, args.out, torch, transformers, peft) for d in args.twins]
    manifest = {"cases": [{k: r[k] for k in ("case", "twin", "adapter_dir", "golden")} for r in rows]}
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")

    say(f"\n{'case':<22} {'distinct':>8} {'min gap':>8} {'max NMSE vs base':>17} {'ids changed':>11}")
    for r in rows:
        say(f"{r['case']:<22} {r['distinct']:>8} {r['min_margin']:>8.4f} {r['effect']:>17.3g} "
            f"{r['changed_ids']:>11}/{N_NEW}")
    say(f"\nwrote {args.out}/manifest.json; commit {args.out} (tests/export/test_lora_goldens.cpp reads it)")


if __name__ == "__main__":
    main()

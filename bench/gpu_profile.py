"""Where a GPU decode's time goes: the rollout decode loop under the torch profiler.

    python bench/gpu_profile.py [--model smollm2-135m] [--rows 8] [--prompt-tokens 1000] [--new-tokens 48]

The model gets a fresh LoRA on q/v (r16), as an RL policy has; ``rows`` prompts share their first
half (the system prompt of a group) and are decoded together through ``LocalPolicy`` (prefix cache,
our decode loop), sampled at temperature 1.0 with EOS disabled so every row runs ``new-tokens``.  It
prints the seconds of one generate (after a warm-up) with the ``sdpa`` and ``eager`` attention, the
torch profiler's tables for the sdpa run (by CUDA time, by CPU time), and one plain ``model(...)``
decode step in ms for reference.  The first run on an H200 is in docs/benchmarks.md (on a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.raw import add_raw_flags, write_raw  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--new-tokens", type=int, default=48)
    add_raw_flags(ap)
    args = ap.parse_args()
    import torch
    from peft import LoraConfig, get_peft_model

    from research_agent.inference.kv_cache import cache_kwargs, returned_cache
    from research_agent.inference.models import load_model
    from research_agent.inference.policy import LocalPolicy

    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    g = torch.Generator().manual_seed(0)
    half = args.prompt_tokens // 2
    shared = torch.randint(100, 40000, (half,), generator=g).tolist()
    prompts = [shared + torch.randint(100, 40000, (args.prompt_tokens - half,), generator=g).tolist()
               for _ in range(args.rows)]
    res = {}
    for attn in ["sdpa", "eager"]:
        base, tok = load_model(args.model, device=args.device, dtype="auto", progress=False)
        if attn != "sdpa":
            base.set_attn_implementation(attn)
        model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"],
                                                task_type="CAUSAL_LM")).eval()
        pol = LocalPolicy(model, tok)
        pol.eos_ids = {-1}  # every row runs the whole budget
        for _ in range(2):  # the first is a warm-up
            pol.cache.clear()
            sync()
            t0 = time.perf_counter()
            out = pol.generate(prompts, max_new_tokens=args.new_tokens, temperature=1.0)
            sync()
            seconds = time.perf_counter() - t0
        tokens = sum(len(o.token_ids) for o in out)
        res[attn] = {"generate_s": round(seconds, 3), "tokens": tokens, "tokens_per_s": round(tokens / seconds, 1)}
        if attn == "sdpa" and cuda:
            from torch.profiler import ProfilerActivity, profile

            pol.cache.clear()
            sync()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                pol.generate(prompts, max_new_tokens=args.new_tokens, temperature=1.0)
                sync()
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15), flush=True)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12), flush=True)
        with torch.no_grad():  # one plain decode step after a prefill of the whole batch
            ids = torch.tensor(prompts, device=model.device)
            cache = returned_cache(model(input_ids=ids, use_cache=True))
            step = ids[:, -1:]
            sync()
            t0 = time.perf_counter()
            for _ in range(20):
                cache = returned_cache(model(input_ids=step, **cache_kwargs(cache), use_cache=True))
            sync()
            res[attn]["model_step_ms"] = round((time.perf_counter() - t0) / 20 * 1000, 2)
        print(attn, res[attn], flush=True)
        del model, base, pol
    print("RESULT " + json.dumps(res), flush=True)
    device = torch.cuda.get_device_name() if cuda else "cpu"
    write_raw("gpu_profile", args, {"device": device, "results": res}, variant=args.model)


if __name__ == "__main__":
    main()

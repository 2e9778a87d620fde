"""``python -m research_agent.train export``: an adapter chain as one plain peft LoRA, or a merged model.

An RL adapter is a delta on a base that already holds its SFT adapter (``research_agent.inference.adapters``),
so plain peft or vLLM loading its directory apply it to the raw base and silently serve another
model.  A sum of LoRAs is itself a LoRA: ``W + Σ s_i B_i A_i = W + [s_1 B_1 | s_2 B_2 | …] [A_1; A_2; …]``.
The export therefore concatenates the chain into one adapter of rank Σ r_i, each adapter's scaling
(α/r, or rsLoRA's α/√r) folded into its B, and writes it with ``lora_alpha == r`` (scaling 1).
Every targeted module gets the same rank — zero blocks where an adapter did not touch it — because
vLLM reads neither ``rank_pattern`` nor ``alpha_pattern``.  What is not a sum of B·A (DoRA, trained
biases, ``modules_to_save``, inits that rewrite the base …) is refused, never approximated.

The named models are de-quantized Q4 GGUF files (``research_agent.inference.models``), and their upstream hub
ids are recorded nowhere else, hence ``UPSTREAM``: the card and ``base_model_name_or_path`` name the
upstream model so hub users get the right base, and the card says the adapter was trained on the
de-quantized weights (on the upstream weights it is close, not identical; ``--merged`` is exact).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from corpus.packages import FetchError
from research_agent.inference.adapters import AdapterError, adapter_chain, adapter_config, merge_adapters
from research_agent.inference.models import MODELS, ModelError, resolve_model_dir

UPSTREAM = {  # the hub models the GGUF files of research_agent.inference.models were quantized from
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "qwen2.5-coder-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    "qwen2.5-coder-1.5b": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
}
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the values vLLM accepts for --max-lora-rank

# config fields that leave a LoRA a plain sum of B·A: read below (scaling), only saying which
# modules carry tensors (the tensors say it too), or inert at inference; every other field must be unset
_FREE_FIELDS = {
    "r", "lora_alpha", "use_rslora", "rank_pattern", "alpha_pattern", "target_modules", "exclude_modules",
    "layers_to_transform", "layers_pattern", "lora_dropout", "init_lora_weights", "base_model_name_or_path",
    "revision", "task_type", "inference_mode", "peft_type", "peft_version", "auto_mapping", "megatron_core",
    "qalora_group_size", "runtime_config", "loftq_config", "eva_config", "corda_config", "lora_ga_config",
    "ensure_weight_tying",
}
_WHY = {
    "use_dora": "DoRA rescales each weight column by a learned magnitude",
    "bias": "it trains biases",
    "lora_bias": "it trains a bias on lora_B",
    "modules_to_save": "it trains whole modules (modules_to_save)",
    "trainable_token_indices": "it trains token embeddings",
    "fan_in_fan_out": "Conv1D (fan_in_fan_out) layers are not supported here",
    "layer_replication": "it replicates layers of the base",
    "target_parameters": "it targets raw parameters, not modules",
}
_PLAIN_INITS = (True, False, "gaussian", "orthogonal")  # the others (pissa, olora, loftq, ...) rewrite the base
_KEY = re.compile(r"base_model\.model\.(.+)\.lora_([AB])\.weight")


@dataclass
class Lora:
    """One adapter of a chain as what it adds to each module: (A, s·B), A of shape (r, in)."""

    path: Path
    config: dict
    blocks: dict  # module name -> (A, scaled B), float32

    @property
    def width(self) -> int:
        """Rows this adapter takes in the concatenated A (its largest rank, with rank_pattern)."""
        return max(a.shape[0] for a, _ in self.blocks.values())


@dataclass(frozen=True)
class Exported:
    out: Path
    base: str  # the base as this machine loads it (a named model, local directory or hub id)
    upstream: str  # the hub id written into the card and adapter_config.json
    rank: int | None  # None for a merged model
    chain: tuple[Path, ...]


def check_plain(path: Path, config: dict) -> None:
    """Raise AdapterError unless ``config`` describes a LoRA whose effect is exactly Σ s·B·A."""
    if config.get("peft_type") != "LORA":
        raise AdapterError(f"{path}: peft_type {config.get('peft_type')!r} is not LORA; only LoRA adapters export")
    init = config.get("init_lora_weights", True)
    if (init.lower() if isinstance(init, str) else init) not in _PLAIN_INITS:
        raise AdapterError(f"{path}: init_lora_weights={init!r} changes the base weights themselves; "
                           "such an adapter cannot be exported as a LoRA on the plain base")
    for key, value in config.items():
        if key in _FREE_FIELDS or value in (None, False, "none") or value == {} or value == []:
            continue
        why = _WHY.get(key, "the exporter does not know this peft option")
        raise AdapterError(f"{path}: {key}={value!r}: {why}, so it is not a plain sum of LoRA deltas and "
                           "cannot be exported exactly (--merged merges it with peft instead)")


def _pattern_value(pattern: dict, module: str, default):
    from peft.utils.other import get_pattern_key  # peft's own matching, so the scaling is peft's

    return pattern.get(get_pattern_key(list(pattern), module), default) if pattern else default


def read_lora(path: Path) -> Lora:
    """The blocks of the plain LoRA at ``path`` with its scaling folded into B (AdapterError if not plain)."""
    from safetensors.torch import load_file

    config = adapter_config(path)
    check_plain(path, config)
    weights = path / "adapter_model.safetensors"
    if not weights.exists():
        raise AdapterError(f"{path} has no adapter_model.safetensors (re-save it with safe_serialization)")
    pairs: dict[str, dict] = {}
    for key, tensor in load_file(str(weights)).items():
        m = _KEY.fullmatch(key)
        if not m or tensor.dim() != 2:
            raise AdapterError(f"{path}: tensor {key} is not a LoRA A or B matrix of a linear layer; "
                               "cannot export it exactly")
        pairs.setdefault(m.group(1), {})[m.group(2)] = tensor
    blocks = {}
    for module, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise AdapterError(f"{path}: module {module} has lora_A or lora_B but not both")
        a, b = ab["A"].float(), ab["B"].float()
        r = _pattern_value(config.get("rank_pattern") or {}, module, config.get("r"))
        alpha = _pattern_value(config.get("alpha_pattern") or {}, module, config.get("lora_alpha"))
        if a.shape[0] != r or b.shape[1] != r:
            raise AdapterError(f"{path}: {module} has rank {a.shape[0]} but its config says r={r}")
        scale = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
        blocks[module] = (a, b * scale)
    if not blocks:
        raise AdapterError(f"{path}: adapter_model.safetensors holds no LoRA matrices")
    return Lora(path, config, blocks)


def base_identity(recorded: str | None) -> str | None:
    """The named model a recorded base is (its converted directory, on this machine or another), else itself."""
    if not recorded:
        return None
    p = Path(recorded)
    if recorded in MODELS:
        return recorded
    if p.name == "hf" and p.parent.name in MODELS:  # cache_dir()/models/NAME/hf, see inference/models.py
        return p.parent.name
    return recorded


def chain_base(paths: list[Path], configs: list[dict], model: str | None) -> str:
    """The one base every adapter of the chain was trained on (``model`` when given); AdapterError if they differ."""
    named = {base_identity(c.get("base_model_name_or_path")): p for p, c in zip(paths, configs, strict=True)}
    named.pop(None, None)
    if len(named) > 1:
        listed = "; ".join(f"{p}: {n}" for n, p in named.items())
        raise AdapterError(f"the chain's adapters were trained on different base models ({listed}); "
                           "a LoRA sum is exact only on one base")
    recorded = next(iter(named), None)
    if model is None:
        if recorded is None:
            raise AdapterError("the chain records no base model; pass --model NAME")
        return recorded
    if recorded in MODELS and model in MODELS and recorded != model:
        raise AdapterError(f"the chain was trained on {recorded}, not on --model {model}")
    return model


def upstream_of(base: str) -> str:
    """The hub id to name as the base: a named model's upstream, else the base as given."""
    return UPSTREAM.get(base, base)


def _linear_modules(base_dir: str) -> tuple[dict[str, tuple[int, int] | None], str | None]:
    """Every module of the base — (in, out) features for linear layers, None for the rest — and the
    name of the output layer when it shares its weight with the input embeddings (no weights read)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        net = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(base_dir))
    modules = {n: (m.in_features, m.out_features) if isinstance(m, torch.nn.Linear) else None
               for n, m in net.named_modules()}
    head = net.get_output_embeddings() if getattr(net.config, "tie_word_embeddings", False) else None
    return modules, next((n for n, m in net.named_modules() if head is not None and m is head), None)


def fold(loras: list[Lora], modules: dict[str, tuple[int, int] | None],
         tied_head: str | None = None) -> tuple[dict, int, list[str]]:
    """One LoRA (tensors, rank, target module names) whose scaling-1 delta is the chain's summed delta."""
    import torch

    for lora in loras[:-1]:
        if tied_head in lora.blocks:  # merging it wrote the delta into the shared input embeddings too
            raise AdapterError(f"{lora.path} adapts {tied_head}, whose weight the base shares with its input "
                               "embeddings, and was merged: that is no LoRA on the plain base (use --merged)")
    covered = set().union(*(lora.blocks for lora in loras))
    for lora in loras:
        for name, (a, b) in lora.blocks.items():
            if modules.get(name) != (a.shape[1], b.shape[0]):
                raise AdapterError(f"{lora.path}: {name} ({a.shape[1]} -> {b.shape[0]}) is not a linear layer "
                                   "of that shape in the base model; was it trained on another base?")
    suffixes = sorted({name.rsplit(".", 1)[-1] for name in covered})
    # peft and vLLM apply a suffix to every module ending in it; those no adapter touched get zeros
    targets = [n for n in modules if n.rsplit(".", 1)[-1] in suffixes]
    if odd := [n for n in targets if modules[n] is None]:
        raise AdapterError(f"modules {odd[:3]} share a name with adapted linear layers but are not linear")
    rank = sum(lora.width for lora in loras)
    tensors = {}
    for name in targets:
        fan_in, fan_out = modules[name]
        a_all, b_all = torch.zeros(rank, fan_in), torch.zeros(fan_out, rank)
        start = 0
        for lora in loras:
            if name in lora.blocks:
                a, b = lora.blocks[name]
                a_all[start:start + a.shape[0]] = a
                b_all[:, start:start + a.shape[0]] = b
            start += lora.width
        tensors[f"base_model.model.{name}.lora_A.weight"] = a_all
        tensors[f"base_model.model.{name}.lora_B.weight"] = b_all
    return tensors, rank, suffixes


def _write_folded(tmp: Path, loras: list[Lora], modules: tuple, upstream: str) -> int:
    from peft import LoraConfig
    from safetensors.torch import save_file

    tensors, rank, suffixes = fold(loras, *modules)
    LoraConfig(r=rank, lora_alpha=rank, target_modules=suffixes, lora_dropout=0.0, bias="none", use_rslora=False,
               use_dora=False, fan_in_fan_out=False, init_lora_weights=True, inference_mode=True,
               task_type=loras[-1].config.get("task_type") or "CAUSAL_LM",
               base_model_name_or_path=upstream).save_pretrained(str(tmp))
    save_file(tensors, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
    return rank


def _write_merged(tmp: Path, base_dir: str, chain: list[Path]) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    try:
        model = merge_adapters(model, chain)
    except (RuntimeError, ValueError) as e:  # e.g. shapes of another base
        raise AdapterError(f"peft could not merge the chain into {base_dir}: {e}") from None
    model.save_pretrained(str(tmp))
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(str(tmp))


def adapter_card(result: Exported, base_dir: str, configs: list[dict]) -> str:
    """README.md for the export: what it was built from, on which base, and how to load it."""
    out, upstream = result.out, result.upstream
    spec = MODELS.get(result.base)
    if spec:
        origin = (f"Locally the base is `{result.base}`: the GGUF file `{spec.gguf_name}` (4-bit) of "
                  f"[{upstream}](https://huggingface.co/{upstream}), de-quantized by transformers and saved as "
                  f"safetensors at `{base_dir}`. The adapters were trained on those de-quantized weights, so on "
                  f"the upstream full-precision weights this model is close to, not identical with, the one "
                  f"trained; serve the local directory (or a `--merged` export) for the exact model.")
    else:
        origin = f"The base model is `{upstream}` (loaded here from `{base_dir}`)."
    lines = ["---", f"base_model: {upstream}", f"library_name: {'transformers' if result.rank is None else 'peft'}",
             "tags: [lora, research-agent]", "---", "", f"# {out.name}", ""]
    if result.rank is None:
        lines.append(f"A full model: `{upstream}` with the {len(result.chain)} LoRA adapters below merged into its "
                     "weights, oldest first (float32 safetensors, with the base's tokenizer).")
    else:
        lines.append(f"One standard peft LoRA adapter (rank {result.rank}, `lora_alpha` = r, so scaling 1) equal "
                     f"to the {len(result.chain)} adapters below applied together: each adapter's delta "
                     "scale·B·A is a block of this one (zero where it did not touch a module).")
    lines += ["", "## Base model", "", origin, "", "## Built from", ""]
    for i, (path, config) in enumerate(zip(result.chain, configs, strict=True)):
        role = "the exported adapter" if i == len(result.chain) - 1 else "merged into the base before the next"
        scaling = "rsLoRA, α/√r" if config.get("use_rslora") else "α/r"
        targets = config.get("target_modules")
        targets = ", ".join(sorted(targets)) if isinstance(targets, list) else targets
        patterns = "".join(f", {k} {config[k]}" for k in ("rank_pattern", "alpha_pattern") if config.get(k))
        lines.append(f"{i}. `{path}` ({role}): r={config.get('r')}, lora_alpha={config.get('lora_alpha')} "
                     f"({scaling}){patterns}, target modules {targets}")
    lines += ["", "## Loading it", ""]
    if result.rank is None:
        lines += ["```python", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
                  f'model = AutoModelForCausalLM.from_pretrained("{out}")',
                  f'tokenizer = AutoTokenizer.from_pretrained("{out}")', "```", "", "```bash",
                  f"vllm serve {out}", "```"]
        return "\n".join(lines) + "\n"
    vllm_rank = next((r for r in VLLM_RANKS if r >= result.rank), None)
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", out.name) or "adapter"
    lines += ["peft (on the base of your choice; the local de-quantized one reproduces the trained model):", "",
              "```python", "from peft import PeftModel", "from transformers import AutoModelForCausalLM", "",
              f'base = AutoModelForCausalLM.from_pretrained("{upstream}")  # locally: "{base_dir}"',
              f'model = PeftModel.from_pretrained(base, "{out}")', "```", "",
              "transformers with peft installed fetches the base named in adapter_config.json itself:", "",
              "```python", "from transformers import AutoModelForCausalLM", "",
              f'model = AutoModelForCausalLM.from_pretrained("{out}")', "```", ""]
    if vllm_rank is None:
        lines.append(f"vLLM serves LoRA ranks up to {VLLM_RANKS[-1]}; this one has rank {result.rank}: "
                     "export with `--merged` and serve the merged model instead.")
    else:
        flags = f"--enable-lora --lora-modules {name}={out} --max-lora-rank {vllm_rank}"
        lines += ["vLLM (`--max-lora-rank` is the smallest value vLLM accepts that holds this rank):", "",
                  "```bash", f"vllm serve {upstream} {flags}", f"vllm serve {base_dir} {flags}  # the exact local base",
                  "```"]
    return "\n".join(lines) + "\n"


def export_adapter(adapter: str | Path, out: str | Path, *, merged: bool = False,
                   model: str | None = None, progress: bool = True) -> Exported:
    """Write the chain ending in ``adapter`` to ``out`` as one plain peft LoRA (or, ``merged``, a full model).

    ``out`` appears whole or not at all: everything is written into a temporary directory beside it,
    then renamed.  An existing non-empty ``out`` is refused rather than replaced.
    """
    adapter, out = Path(adapter), Path(out)
    configs = [adapter_config(adapter)]  # the adapter itself first: the clearest error for a wrong path
    chain = adapter_chain(adapter)
    configs = [adapter_config(p) for p in chain[:-1]] + configs
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise AdapterError(f"{out} already exists and is not an empty directory; remove it or pick another --out")
    if out.resolve().is_relative_to(adapter.resolve()):
        raise AdapterError(f"--out {out} is inside the adapter directory {adapter}; pick a directory outside it")
    loras = None if merged else [read_lora(p) for p in chain]  # refuse what cannot be exported before loading
    base = chain_base(chain, configs, model)
    try:
        base_dir = resolve_model_dir(base, progress=progress)
        modules = None if merged else _linear_modules(base_dir)
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read the base model {base!r} ({e}); pass --model with a named model "
                         f"({', '.join(MODELS)}), a local model directory or a hub id") from None
    result = Exported(out, base, upstream_of(base), None, tuple(p.resolve() for p in chain))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.export-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        if merged:
            if progress:
                print(f"merging {len(chain)} adapter(s) into {base} ...", file=sys.stderr, flush=True)
            _write_merged(tmp, base_dir, chain)
        else:
            result = replace(result, rank=_write_folded(tmp, loras, modules, result.upstream))
        (tmp / "README.md").write_text(adapter_card(result, base_dir, configs))
        if out.exists():
            out.rmdir()  # empty, checked above
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research_agent.train export",
        description="Write an adapter and the chain it was trained on as one standard peft LoRA adapter on the "
                    "plain base model (loads in peft and vLLM --enable-lora), or with --merged as a full model.")
    parser.add_argument("--adapter", required=True, help="adapter directory (e.g. runs/rl/adapter)")
    parser.add_argument("--out", required=True, help="directory to create (must not exist or be empty)")
    parser.add_argument("--merged", action="store_true",
                        help="write the base with every adapter merged in (safetensors + tokenizer) instead")
    parser.add_argument("--model", default=None,
                        help="base model (named model, local path or hub id); default: the one the chain records")
    args = parser.parse_args(argv)
    try:
        result = export_adapter(args.adapter, args.out, merged=args.merged, model=args.model)
    except (AdapterError, ModelError, FetchError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    what = "merged model" if result.rank is None else f"LoRA adapter of rank {result.rank}"
    print(f"exported {len(result.chain)} adapter(s) as a {what} on {result.upstream}: {result.out}")
    return 0

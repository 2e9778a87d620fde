"""``python -m recipe.ship``: make a trained adapter a named agent that ``ask --agent`` runs.

The recipe's last stage.  It copies the adapter (with the chain it sits on, so it loads on its own)
into the artifact directory and writes ``agent.json`` beside it: the base model, the agent settings
the adapter was trained and evaluated under (an agent run with other budgets is another agent), and
the held-out numbers of every eval directory given, so ``agent.json`` says what the agent scored.
``research_agent.shipped`` reads it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from corpus.files import atomic_write_text
from research_agent.shipped import AGENT_FILE

KEPT = ("em", "f1", "answer_rate", "citation_precision", "searches", "n")


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    from corpus.local import add_retriever_flag

    p = argparse.ArgumentParser(prog="python -m recipe.ship", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--adapter", required=True, help="the trained adapter directory")
    p.add_argument("--model", required=True, help="its base model")
    p.add_argument("--name", required=True, help="the agent's name (ask --agent NAME)")
    p.add_argument("--out", required=True, help="the agent's directory (artifacts/NAME)")
    add_retriever_flag(p, help="how the shipped agent searches (recorded in its agent.json)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="an AgentConfig setting")
    p.add_argument("evals", nargs="*", help="eval run directories whose metrics the card records")
    args = p.parse_args(argv)
    adapter, out = Path(args.adapter), Path(args.out)
    if not (adapter / "adapter_model.safetensors").exists():
        print(f"error: {adapter} holds no trained adapter", file=sys.stderr)
        return 2
    settings = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            print(f"error: --set {item!r} is not NAME=VALUE", file=sys.stderr)
            return 2
        settings[name] = _value(value)
    numbers = {}
    for d in map(Path, args.evals):
        results = d / "results.json"
        if results.exists():
            data = json.loads(results.read_text())
            metrics = data.get("metrics", {})
            numbers[d.name] = {"bench": data.get("bench") or data.get("run", {}).get("bench"),
                               **{k: metrics[k] for k in KEPT if k in metrics}}
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".adapter.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(adapter, tmp)
    shutil.rmtree(out / "adapter", ignore_errors=True)
    tmp.rename(out / "adapter")
    meta = {"name": args.name, "model": args.model, "adapter": "adapter", "retriever": args.retriever,
            "settings": settings, "numbers": numbers}
    atomic_write_text(out / AGENT_FILE, json.dumps(meta, indent=1) + "\n")
    print(f"shipped {args.name}: {out / AGENT_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

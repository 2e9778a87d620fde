"""``research-agent COMMAND ...`` (or ``python -m research_agent COMMAND ...``): every command in one place.

Each subcommand is the module of the same job, called with the rest of the arguments, so
``research-agent ask "..."`` and ``python -m research_agent.ask "..."`` are the same program. The
modules are named, not imported, here: this dispatcher sits above the whole house without tying
the agent to the trainer (``import-linter`` checks that nothing outside ``train`` imports it).
"""

from __future__ import annotations

import importlib
import os
import sys

COMMANDS = {
    "ask": ("research_agent.ask", "ask a question: search, read, answer with checked citations"),
    "serve": ("research_agent.inference.serve", "a local model behind an OpenAI-compatible API on loopback"),
    "train": ("research_agent.train.__main__", "LoRA SFT or RL (REINFORCE / GRPO / RLOO / GiGPO)"),
    "recipe": ("recipe.__main__", "demonstrations -> SFT -> RL -> held-out eval, resumable"),
    "eval": ("eval.cli", "evaluate on QA benchmarks (qa), code tasks (code), compare runs"),
    "synth": ("synth.__main__", "synthesize questions, trajectories and SFT exports"),
    "corpus": ("corpus.cli", "build, extend, search, open and serve corpora"),
    "memory": ("research_agent.memory", "case memory: add, search and inspect past cases"),
}


def usage() -> str:
    lines = ["usage: research-agent COMMAND [ARGS ...]", "", "commands:"]
    lines += [f"  {name:<8} {what}" for name, (_, what) in COMMANDS.items()]
    lines += ["", "research-agent COMMAND --help shows a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"research-agent: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    module = importlib.import_module(COMMANDS[name][0])
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())

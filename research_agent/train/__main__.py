"""``python -m research_agent.train``: LoRA RL (REINFORCE / GRPO / RLOO) or SFT."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv: list[str] | None = None) -> int:
    from .checkpoint import ResumeError
    from .config import load_config
    from .rl import TrainingStopped, train_rl
    from .sft import train_sft

    cfg, args = load_config(argv)
    try:
        summary = train_sft(cfg, resume=args.resume) if cfg.stage == "sft" else train_rl(cfg, resume=args.resume)
    except ResumeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingStopped:
        return 3
    print(f"done: {summary.get('adapter')}  (metrics and plot in {cfg.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

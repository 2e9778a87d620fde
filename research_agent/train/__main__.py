"""``python -m research_agent.train``: LoRA RL (REINFORCE / GRPO / RLOO) or SFT.

``python -m research_agent.train export --adapter A --out D`` writes an adapter with its chain as one
plain peft adapter (or ``--merged`` model) for peft and vLLM (``research_agent.train.export``)."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["export"]:
        from .export import main as export_main

        return export_main(argv[1:])
    from .checkpoint import ResumeError
    from .config import load_config
    from .rl import TrainingStopped, train_rl
    from .sft import train_sft

    cfg, args = load_config(argv)
    from research_agent.inference.devices import DeviceError, use_device

    from .tracking import TrackerError, check_tracker

    try:
        use_device(cfg.compute.device, cfg.compute.dtype)  # before the corpus, the tasks or the model are touched
        check_tracker(cfg.report_to)
    except (DeviceError, TrackerError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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

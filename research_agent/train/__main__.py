"""``python -m research_agent.train``: LoRA RL (REINFORCE / GRPO / RLOO) or SFT.

``python -m research_agent.train export --adapter A --out D`` writes an adapter with its chain as one
plain peft adapter (or ``--merged`` model) for peft and vLLM (``research_agent.train.export``)."""

from __future__ import annotations

import os
import signal
import sys
import threading

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _sigterm_as_interrupt():
    """``kill`` (SIGTERM, what schedulers and launchers send) stops training as Ctrl-C does, so the
    trainer checkpoints the last step it finished; a host with its own handler (the recipe) keeps it.
    Returns the handler to put back, or None where none was installed."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        return None
    signal.signal(signal.SIGTERM, _interrupt)
    return previous


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
    previous = _sigterm_as_interrupt()
    try:
        summary = train_sft(cfg, resume=args.resume) if cfg.stage == "sft" else train_rl(cfg, resume=args.resume)
    except ResumeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingStopped:
        return 3
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    print(f"done: {summary.get('adapter')}  (metrics and plot in {cfg.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

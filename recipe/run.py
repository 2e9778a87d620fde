"""Running a plan: each stage's ``main(argv)`` in this process, skipped when done, restored from its
artifact when the card matches, published while and after it runs.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from corpus.files import atomic_write_text
from corpus.packages import FetchError
from eval.benchmarks import load_benchmark

from .artifacts import (
    ArtifactStore,
    StageCard,
    code_commit,
    same_command,
    stage_command,
    stage_inputs,
    stage_key,
    write_index,
)
from .plan import Recipe, stages

EXIT_STOPPED = 3  # --stop-after ran out: what ran is published, run the same command again to go on


# an input key of an eval stage: the held-out questions it asks, so a changed benchmark is a changed input
QUESTIONS = "questions:"


class StageFailed(RuntimeError):
    pass


class StoppedForTime(RuntimeError):
    pass


def question_inputs(module: str, argv: list[str]) -> dict[str, str]:
    """The ids and gold of the questions an ``eval qa`` stage asks today, hashed.

    A benchmark named by its name (``--bench factbook-two-hop``) is no file the argv names, so
    without this a fixed benchmark would leave the stage's key as it was and restore the old numbers."""
    if module != "eval.cli" or argv[:1] != ["qa"] or "--bench" not in argv:
        return {}

    def flag(name: str, default: str | None) -> str | None:
        return argv[argv.index(name) + 1] if name in argv else default

    bench, limit = argv[argv.index("--bench") + 1], flag("--limit", None)
    items, _ = load_benchmark(bench, int(limit) if limit else None, int(flag("--seed", "0")))
    blob = json.dumps([[str(it["id"]), it.get("answers")] for it in items], ensure_ascii=False)
    return {f"{QUESTIONS}{bench}": hashlib.sha256(blob.encode()).hexdigest()}


def _without_questions(inputs: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in inputs.items() if not k.startswith(QUESTIONS)}


def _marker(out: Path, name: str) -> Path:
    return out / f".done-{name}"


def _mark_done(out: Path, name: str, module: str, argv: list[str], note: str) -> None:
    atomic_write_text(_marker(out, name), f"{note}\n{stage_command(module, argv, out)}\n")


def _done_before(out: Path, name: str, module: str, argv: list[str]) -> bool:
    """The stage finished here with the command the plan gives it now.  A marker written before
    markers recorded their command is trusted as it always was."""
    marker = _marker(out, name)
    if not marker.exists():
        return False
    recorded = [line for line in marker.read_text().splitlines() if line.startswith("python -m ")]
    if not recorded or same_command(recorded[0], stage_command(module, argv, out)):
        return True
    print(f"== {name}: its command changed since it ran here; running it again", file=sys.stderr)
    marker.unlink()
    return False


def _outputs(out: Path, argv: list[str]) -> list[Path]:
    """What a stage writes under OUT: the value of its ``--out``."""
    return [Path(argv[i + 1]) for i, a in enumerate(argv[:-1])
            if a == "--out" and Path(argv[i + 1]).resolve().is_relative_to(out.resolve())]


def stage_numbers(outputs: list[Path]) -> dict:
    """The figures a card shows: an eval's metrics, a training run's last step."""
    numbers: dict = {}
    for path in outputs:
        results, metrics = path / "results.json", path / "metrics.jsonl"
        if results.is_file():
            try:
                data = json.loads(results.read_text())
                numbers.update({k: v for k, v in data.get("metrics", {}).items() if isinstance(v, (int, float))})
                numbers["questions"] = data.get("metrics", {}).get("n", data.get("n"))
            except ValueError:
                pass
        elif metrics.is_file():
            rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip().startswith("{")]
            if rows:
                numbers.update({k: v for k, v in rows[-1].items() if isinstance(v, (int, float))})
        elif path.suffix == ".jsonl" and path.is_file():
            numbers["examples"] = sum(1 for line in path.read_text().splitlines() if line.strip())
    return numbers


class Publisher:
    """Publishes one stage into the artifact directory: at its end, and every ``minutes`` while it runs."""

    def __init__(self, r: Recipe, name: str, module: str, argv: list[str], minutes: float):
        self.r, self.name = r, name
        self.store = ArtifactStore(r.artifacts) if r.artifacts is not None else None
        inputs = {**stage_inputs(argv, r.out), **question_inputs(module, argv)}
        self.card = StageCard(stage=name, key=stage_key(module, argv, r.out, inputs),
                              command=stage_command(module, argv, r.out),
                              commit=code_commit(), inputs=inputs)
        self.outputs = _outputs(r.out, argv)
        self.minutes, self.started = minutes, time.time()
        self.earlier = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def matching(self):
        """The stored card of this stage if it was made from the same settings and inputs."""
        if self.store is None:
            return None
        card = self.store.card(self.name)
        if card is None:
            return None
        if card.key != self.card.key:
            if self.answers_reusable() is not None:
                return None  # said by the caller, which restores the answers
            print(f"== {self.name}: the artifact's card was made with other settings or inputs "
                  f"(key {card.key}, now {self.card.key}); running the stage again", file=sys.stderr)
            return None
        return card

    def answers_reusable(self) -> StageCard | None:
        """The stored card of an eval that asked other questions with the same command and model: its
        answers to the questions still asked stand (the eval resumes by question id and records
        which code made each answer), and only the new questions are answered."""
        card = self.store.card(self.name) if self.store is not None else None
        if card is None or not same_command(card.command, self.card.command) or not any(k.startswith(QUESTIONS) for k in self.card.inputs):
            return None
        return card if _without_questions(card.inputs) == _without_questions(self.card.inputs) else None

    def publish(self, status: str) -> None:
        if self.store is None:
            return
        self.card.status = status
        self.card.seconds = round(self.earlier + time.time() - self.started, 1)
        self.card.numbers = stage_numbers(self.outputs)
        self.store.publish(self.name, self.r.out, self.outputs, self.card)
        write_index(self.store)

    def __enter__(self):
        if self.store is not None and self.minutes > 0:
            self._thread = threading.Thread(target=self._loop, name=f"publish-{self.name}", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.minutes * 60):
            try:
                self.publish("partial")
            except Exception as e:  # a checkpoint rotated away mid-copy: the next round gets the new one
                print(f"warning: publishing {self.name} part-way failed ({e}); retrying later", file=sys.stderr)

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def run_stage(out: Path, name: str, module: str, argv: list[str]) -> None:
    planned = argv
    if (name in ("sft", "rl") or name.startswith(("rl-", "sft-"))) and (out / name / "checkpoints").exists():
        argv = [*argv, "--resume"]  # an interrupted training run continues from its last checkpoint
    shown = module.removesuffix(".__main__").replace("eval.cli", "eval")
    print(f"\n== {name}: python -m {shown} {' '.join(argv)}", file=sys.stderr, flush=True)
    t0 = time.time()
    rc = importlib.import_module(module).main(argv)
    if rc not in (0, None):
        raise StageFailed(f"stage {name} failed (exit {rc}); fix the cause and run the recipe again: "
                          "finished stages are skipped, interrupted ones resume")
    _mark_done(out, name, module, planned, f"{time.time() - t0:.1f} s")


def _stage_with_artifacts(r: Recipe, name: str, module: str, argv: list[str], publish_minutes: float) -> None:
    """Restore the stage if its card matches, else run it (from a partial artifact if there is one)."""
    pub = Publisher(r, name, module, argv, publish_minutes)
    card = pub.matching()
    if card is not None:
        pub.store.restore(name, r.out)
        pub.card.sessions, pub.earlier = card.sessions + (card.status == "partial"), card.seconds
        if card.status == "done":
            _mark_done(r.out, name, module, argv, f"{card.seconds:.1f} s (restored from {pub.store.root})")
            print(f"== {name}: restored from {pub.store.stage_dir(name)} ({card.seconds / 60:.0f} min when it ran)",
                  file=sys.stderr)
            return
        print(f"== {name}: resuming from the part published in {pub.store.stage_dir(name)}", file=sys.stderr)
    elif (stored := pub.answers_reusable()) is not None:
        pub.store.restore(name, r.out)
        pub.card.sessions, pub.earlier = stored.sessions + 1, stored.seconds
        print(f"== {name}: the benchmark's questions changed since {pub.store.stage_dir(name)} was made; its "
              "answers to the questions still asked are kept and the new ones answered", file=sys.stderr)
    with pub:
        try:
            run_stage(r.out, name, module, argv)
        except (KeyboardInterrupt, StoppedForTime):
            pub.publish("partial")
            raise
    pub.publish("done")


def benchmark_unavailable(argv: list[str], seen: dict[str, str]) -> str:
    """Why an ``eval qa`` stage's benchmark cannot be had on this machine ("" if it can): its data
    package is gone from the index, say.  ``seen`` caches the answer per benchmark."""
    if argv[:1] != ["qa"] or "--bench" not in argv:
        return ""
    bench = argv[argv.index("--bench") + 1]
    if bench not in seen:
        try:
            load_benchmark(bench, 1)
            seen[bench] = ""
        except FetchError as e:
            seen[bench] = str(e)
    return seen[bench]


def run_recipe(r: Recipe, only: list[str] | None = None, publish_minutes: float = 20.0,
               stop_after: float | None = None) -> Path:
    r.out.mkdir(parents=True, exist_ok=True)
    timer = _stop_timer(stop_after) if stop_after else None
    benches: dict[str, str] = {}
    skipped: dict[str, str] = {}  # an eval's --out -> why it could not run
    try:
        for name, module, argv in stages(r):
            if only and name not in only:
                continue
            # a benchmark whose data cannot be fetched here skips its evals and their comparison; the
            # rest of the recipe goes on (the stages run when the data is there, e.g. on another machine)
            why = benchmark_unavailable(argv, benches)
            # (ship records the numbers of the evals that ran and passes over the others, so its
            # command, and its artifact key, is the same wherever it runs)
            if why:
                skipped[argv[argv.index("--out") + 1]] = why
            elif module != "recipe.ship" and any(a in skipped for a in argv):
                why = "an eval it compares could not run"
            if why:
                print(f"== {name}: skipped, its benchmark cannot be had here: {why}", file=sys.stderr)
                continue
            if _done_before(r.out, name, module, argv):
                print(f"== {name}: done before, skipped", file=sys.stderr)
                continue
            if r.artifacts is None:
                run_stage(r.out, name, module, argv)
            else:
                _stage_with_artifacts(r, name, module, argv, publish_minutes)
    finally:
        if timer is not None:
            timer.cancel()
    return r.out / ("compare" if not r.evals[0].label else f"compare-{r.evals[0].label}")


def _stop_timer(minutes: float) -> threading.Timer:
    """SIGINT to this process after ``minutes``: the running stage stops as on Ctrl-C and publishes."""
    timer = threading.Timer(minutes * 60, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.daemon = True
    timer.start()
    return timer

"""Two ``python -m synth trajectories`` runs on the same ``--out``: one writes, the other fails at once
with a message naming the first; no record is written twice (issue 30)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from synth.trajectories import LOCK_FILE, OutputLocked, output_lock, synthesize_trajectories

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
HOLD = (
    "import sys, time\n"
    "from synth.trajectories import output_lock\n"
    "with output_lock(sys.argv[1]):\n"
    "    print('locked', flush=True)\n"
    "    time.sleep(120)\n"
)


def _holder(out: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_lock_attempt_fails_naming_the_holder(tmp_path):
    out = tmp_path / "shards"
    with output_lock(out):
        with pytest.raises(OutputLocked, match=f"pid {os.getpid()} on .*another --out"):
            with output_lock(out):
                pass
    with output_lock(out):  # released on exit; the lock file left behind is not a stale lock
        assert (out / LOCK_FILE).exists()


def test_a_run_held_by_another_process_writes_nothing(tmp_path):
    out = tmp_path / "shards"
    proc = _holder(out)
    try:
        with pytest.raises(OutputLocked, match=f"pid {proc.pid} "):
            synthesize_trajectories([{"id": "q", "question": "q?", "answers": ["a"]}], None, None, out)
        assert not list(out.glob("shard-*"))
        qa = tmp_path / "qa.jsonl"
        qa.write_text(json.dumps({"id": "q", "question": "q?", "answers": ["a"], "split": "train"}) + "\n")
        t0 = time.perf_counter()
        cli = subprocess.run(
            [sys.executable, "-m", "synth", "trajectories", "--qa", str(qa), "--out", str(out)],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 2 and "Traceback" not in cli.stderr
        assert cli.stderr.startswith(f"error: another run is writing trajectories to {out} (pid {proc.pid} ")
        assert time.perf_counter() - t0 < 60  # before any model or corpus is loaded
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with output_lock(out):  # a killed holder's lock is gone with it
        pass


@pytest.mark.slow  # two real runs side by side: about 4 minutes on 2 busy cores
def test_two_real_runs_on_one_out_write_each_record_once(tmp_path, small_corpus_dir, smol):
    qa = tmp_path / "qa.jsonl"
    countries = ["France", "Spain", "Italy"]
    qa.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"c{i}",
                    "question": f"What is the capital of {c}?",
                    "answers": ["x"],
                    "split": "train",
                }
            )
            + "\n"
            for i, c in enumerate(countries)
        )
    )
    out = tmp_path / "shards"
    cmd = [
        sys.executable,
        "-m",
        "synth",
        "trajectories",
        "--qa",
        str(qa),
        "--out",
        str(out),
        "--model",
        "smollm2-135m",
        "--corpus",
        str(small_corpus_dir),
        "--samples",
        "2",
        "--max-turns",
        "2",
        "--max-new-tokens",
        "8",
        "--concurrency",
        "2",
    ]
    runs = [
        subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(p.wait(timeout=400), p.stderr.read()) for p in runs]
    # one run holds --out and the other fails on its lock, before or after loading its model (or, on
    # a machine slow to start the second, finds everything written already and runs nothing)
    assert sorted(rc for rc, _ in results) in ([0, 2], [0, 0]), results
    assert all("another run is writing trajectories" in err for rc, err in results if rc == 2)
    keys = [
        json.loads(x)["meta"]["key"]
        for p in sorted(out.glob("shard-*.jsonl"))
        for x in p.read_text().splitlines()
    ]
    assert len(keys) == len(set(keys)) == 6  # 3 questions x 2 samples, each exactly once

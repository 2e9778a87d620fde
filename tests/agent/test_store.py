"""The one trajectory store: shards, torn and corrupt lines, first-wins keys, one writer at a time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from eval.runner import evaluate
from research_agent.store import LOCK_FILE, StoreError, StoreLocked, TrajectoryStore
from research_agent.tasks import ResearchTasks
from research_agent.trajectory import Trajectory


def traj(i: int, key: str | None = None) -> Trajectory:
    t = Trajectory(question=f"question {i}?", id=f"q{i}")
    if key:
        t.meta["key"] = key
    return t


def test_a_sharded_store_rotates_and_resumes_its_last_shard(tmp_path):
    store = TrajectoryStore(tmp_path, shard_size=2)
    with store.writer() as w:
        for i in range(3):
            w.write(traj(i))
    assert [p.name for p in store.files()] == ["shard-00000.jsonl", "shard-00001.jsonl"]
    with store.writer() as w:  # a resumed writer fills the half-full last shard first
        w.write(traj(3))
        w.write(traj(4))
    assert [len(p.read_text().splitlines()) for p in store.files()] == [2, 2, 1]
    assert [t.id for t in store.load()] == [f"q{i}" for i in range(5)]


def test_torn_last_line_is_cut_and_a_corrupt_middle_line_stops_the_scan(tmp_path):
    store = TrajectoryStore(tmp_path)
    with store.writer() as w:
        w.write(traj(0))
        w.write(traj(1))
    path = store.files()[0]
    with path.open("a") as f:
        f.write('{"question": "torn')
    done, dropped = store.scan(repair=False)
    assert list(done) == ["q0", "q1"] and dropped == 1 and path.read_text().endswith("torn")
    done, dropped = store.scan()
    assert dropped == 1 and path.read_text().endswith("}\n"), "repair cuts the partial line off"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{broken", lines[1]]) + "\n")
    with pytest.raises(StoreError, match="line 2 is corrupt"):
        store.scan()


def test_a_key_seen_twice_keeps_its_first_record(tmp_path):
    store = TrajectoryStore(tmp_path, shard_size=10, key=lambda t: t.meta["key"])
    first, again = traj(0, key="q0::1"), traj(0, key="q0::1")
    first.answer, again.answer = "first", "second"
    with store.writer() as w:
        w.write(first)
        w.write(again)
        w.write(traj(0, key="q0::2"))
    done, _ = store.scan()
    assert list(done) == ["q0::1", "q0::2"] and done["q0::1"].answer == "first"


def test_an_eval_run_refuses_an_out_directory_another_run_is_writing(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom research_agent.store import TrajectoryStore\n"
         "with TrajectoryStore(sys.argv[1]).lock():\n    print('locked', flush=True)\n    time.sleep(60)\n",
         str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLocked, match=f"pid {holder.pid}"):
            evaluate(ResearchTasks(), [{"id": "q0", "question": "?", "answers": ["x"]}], object(), tmp_path,
                     config={}, run_info={"bench": "toy"}, progress=False)
        assert not (tmp_path / "trajectories.jsonl").exists() and not (tmp_path / "run.json").exists()
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / LOCK_FILE).exists()

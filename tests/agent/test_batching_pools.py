"""BatchingPolicy keeps one OpenMP pool alive: its worker's, and only while it has work (corpus.openmp)."""

import os
import sys
import threading
import time

import pytest
import torch

from corpus import openmp
from research_agent.inference.policy import BatchingPolicy, LocalPolicy

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or openmp.runtime() is None,
                                reason="needs torch's GNU OpenMP on Linux")


def tids() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def pools_around_a_batched_call(local, prompt) -> dict:
    """In a fresh thread (whose pool is this call's alone): generate, make a BatchingPolicy, generate
    through it, and see which OpenMP threads are left."""
    box = {}

    def maker():
        start = tids()
        box["ref"] = local.generate([prompt], max_new_tokens=12)[0].token_ids
        pool = tids() - start
        with BatchingPolicy(local, max_batch=2, wait_s=0.01) as batched:
            box["maker_pool"], box["maker_kept"] = pool, bool(pool & tids())
            seen = tids()  # the worker thread is up
            box["out"] = batched.generate([prompt], max_new_tokens=12)[0].token_ids
            time.sleep(0.5)  # the worker finds its queue empty
            box["lingering"] = tids() - seen
            box["again"] = batched.generate([prompt], max_new_tokens=12)[0].token_ids

    t = threading.Thread(target=maker)
    t.start()
    t.join()
    return box


def test_maker_and_idle_worker_give_their_pools_back_and_outputs_do_not_change(smol, monkeypatch):
    if torch.get_num_threads() < 2:
        pytest.skip("one torch thread: no pool to see")
    model, tok = smol
    local = LocalPolicy(model, tok, "smollm2-135m")
    prompt = tok.encode("The capital of France is")

    released = pools_around_a_batched_call(local, prompt)
    assert released["maker_pool"], "generating made no pool: nothing was tested"
    assert not released["maker_kept"], "the thread that made the BatchingPolicy kept its pool"
    assert not released["lingering"], "the idle worker kept its pool"
    assert released["ref"] == released["out"] == released["again"]

    monkeypatch.setenv("RESEARCH_AGENT_OMP_POOLS", "keep")  # OpenMP's own behaviour: both pools stay
    kept = pools_around_a_batched_call(local, prompt)
    assert kept["maker_kept"] and kept["lingering"]
    assert kept["out"] == released["out"]

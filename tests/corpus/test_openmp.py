"""corpus.openmp: a thread's OpenMP pool really ends on release, and one_thread makes none."""

import os
import sys
import threading

import pytest
import torch

from corpus import openmp

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or openmp.runtime() is None,
                                reason="needs torch's GNU OpenMP on Linux")


def tids() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def parallel_work() -> None:
    torch.ones(1 << 22).sum()  # far above torch's grain size: a parallel region


def in_thread(fn):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("out", fn()))
    t.start()
    t.join()
    return box["out"]


def fewest_new_threads(run, tries: int = 3):
    """Run `run` in fresh threads until one makes no thread; return the last result.

    `made` counts every thread the process started meanwhile, so a stray thread left by an earlier test
    (a server, an executor) can land in the window. A pool made by the code under test would appear on
    every try, since each try is a new calling thread with no pool of its own yet.
    """
    for _ in range(tries):
        out = in_thread(run)
        if not out[1]:
            break
    return out


def needs_two_threads():
    if torch.get_num_threads() < 2:
        pytest.skip("one torch thread: no pool to see")


def test_release_ends_the_calling_threads_pool():
    needs_two_threads()

    def run():
        before = tids()
        parallel_work()
        pool = tids() - before
        released = openmp.release()
        return pool, released, tids()

    pool, released, after = in_thread(run)
    assert pool, "the parallel region made no worker threads"
    assert released
    assert not pool & after, "the pool's threads outlived release()"


def test_released_pool_is_made_again_and_results_do_not_change():
    needs_two_threads()
    x = torch.randn(512, 512, generator=torch.Generator().manual_seed(0))

    def run():
        first = (x @ x).sum().item()
        openmp.release()
        before = tids()
        second = (x @ x).sum().item()
        parallel_work()
        return first, second, tids() - before

    first, second, again = in_thread(run)
    assert first == second
    assert again, "no pool after release: the runtime did not come back"


def test_one_thread_makes_no_pool_and_restores_the_setting():
    needs_two_threads()

    def run():
        torch.get_num_threads()
        before = tids()
        with openmp.one_thread():
            inside = torch.get_num_threads()
            parallel_work()
            made = tids() - before
        return inside, made, torch.get_num_threads()

    inside, made, after = fewest_new_threads(run)
    assert inside == 1
    assert not made
    assert after == torch.get_num_threads() >= 2


def test_keep_leaves_every_pool_alone(monkeypatch):
    needs_two_threads()
    monkeypatch.setenv("RESEARCH_AGENT_OMP_POOLS", "keep")

    def run():
        before = tids()
        parallel_work()
        pool = tids() - before
        released = openmp.release()
        with openmp.one_thread():
            inside = torch.get_num_threads()
        kept = pool <= tids()
        monkeypatch.delenv("RESEARCH_AGENT_OMP_POOLS")
        openmp.release()
        return released, inside, kept

    released, inside, kept = in_thread(run)
    assert not released and kept
    assert inside >= 2


def test_few_texts_are_encoded_without_a_pool():
    needs_two_threads()
    from corpus.embed import FEW_TEXTS, Embedder

    emb = Embedder()
    ref = emb.encode(["the capital of France"])

    def run():
        before = tids()
        vec = emb.encode(["the capital of France"])
        made = tids() - before
        return vec, made

    vec, made = fewest_new_threads(run)
    assert not made
    assert FEW_TEXTS >= 1
    assert float((vec * ref).sum()) > 0.9999

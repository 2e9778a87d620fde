"""Evaluation: QA benchmarks, metrics with the evidence funnel, runs, comparisons and the reward-hacking check.

``eval`` shadows nothing: the builtin ``eval`` is a function, not a module.
"""

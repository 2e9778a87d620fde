"""The inference engine: token ids in, token ids (with log-probabilities) out, as fast as the machine allows.

It owns the named offline models (``models``: fetch, assemble, cache), where they run (``devices``),
the policy backends (``policy``: local transformers, an OpenAI-compatible endpoint, ``BatchingPolicy``),
LoRA adapters (``adapters``: chain, merge, export), and what makes decoding fast: the prefix KV cache
across turns (``prefix_cache``, ``kv_cache``), the hand-written decode step and its kernels
(``decode_step``, ``decode_kernels``, ``fast_linear``), CUDA-graph decode (``static_decode``), and
the OpenAI-compatible server (``serve``).

It is a layer of its own, the bottom one of ``research_agent``: it knows nothing of agents, their
environments, trajectories, the trainer, synthesis or evaluation (``import-linter`` checks this), so
the agent, the trainer and the server all drive the same engine, and a faster engine never touches
them.
"""

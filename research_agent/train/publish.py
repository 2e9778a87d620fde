"""Rollouts on a generation server: the trainer publishes its adapter there after every optimizer step.

With ``--rollout-endpoint URL`` the trainer does not generate in-process. Rollouts go to an
OpenAI-compatible server in token space (``EndpointPolicy(token_ids=True)``: prompts as token ids,
the sampled ids and their log-probs back), and after each optimizer step the current LoRA is
written under ``OUT/published/step-N`` and loaded there with vLLM's runtime LoRA API
(``POST /v1/load_lora_adapter``, then ``/v1/unload_lora_adapter`` for the one before); requests
name the adapter as their ``model``, so the next rollouts sample from the policy just trained.

``python -m research_agent.inference.serve`` implements the same endpoints, so trainer and server run as two
processes on one machine; on GPUs the server is vLLM (docs/scaling.md gives its command line). An
adapter that sits on a merged SFT adapter is published as one plain LoRA on the base
(``train.export``), which is what vLLM loads. A server that is down, or refuses an adapter, is
retried with backoff by the client and then stops training with one error; checkpoints are written
apart from publishing, so the last one stays intact.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from research_agent.inference.adapters import save_adapter
from research_agent.inference.policy import EndpointPolicy, PolicyError

PUBLISHED = "published"
KEEP = 2  # adapter directories kept on disk: the one being served and the one before


class PublishError(RuntimeError):
    """The generation server could not be given the current adapter."""


class AdapterPublisher:
    """Keeps a generation server holding the trainer's current adapter, and the policy that uses it."""

    def __init__(self, url: str, model: str, tokenizer, out: str | Path, *, name: str = "train",
                 timeout_s: float = 300.0, retries: int = 4):
        self.out = Path(out) / PUBLISHED
        self.name = name
        self.base = model
        self.policy = EndpointPolicy(url, model, tokenizer, token_ids=True, timeout_s=timeout_s, retries=retries)
        self.current: str | None = None
        self.seconds = 0.0  # time spent publishing, for the step's metrics

    def publish(self, model, step: int) -> str:
        """Write ``model``'s adapter for ``step``, load it on the server, point the policy at it."""
        t0 = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"step-{step}"
        if path.exists():  # a resumed run publishes its resumed step again
            shutil.rmtree(path)
        if getattr(model, "merged_chain", None):
            from .export import export_adapter

            chained = self.out / f".step-{step}.chain"
            shutil.rmtree(chained, ignore_errors=True)
            save_adapter(model, chained)
            export_adapter(chained, path, progress=False)
            shutil.rmtree(chained, ignore_errors=True)
        else:
            save_adapter(model, path)
        name = f"{self.name}-step-{step}"
        try:
            self.policy.post("/load_lora_adapter", {"lora_name": name, "lora_path": str(path.resolve())})
            if self.current and self.current != name:
                self.policy.post("/unload_lora_adapter", {"lora_name": self.current})
        except PolicyError as e:
            raise PublishError(f"the generation server at {self.policy.base_url} did not take the adapter of "
                               f"step {step} ({e})") from None
        self.current = name
        self.policy.model_name = name
        self._prune()
        self.seconds = time.perf_counter() - t0
        return name

    def _prune(self) -> None:
        steps = sorted((p for p in self.out.glob("step-*") if p.name[5:].isdigit()), key=lambda p: int(p.name[5:]))
        for old in steps[:-KEEP]:
            shutil.rmtree(old, ignore_errors=True)

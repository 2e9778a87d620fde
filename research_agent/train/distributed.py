"""Data-parallel training over several processes: the few collectives the trainer needs.

A launcher (``accelerate launch``, ``torchrun``) starts one process per rank and sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; ``init_distributed`` joins
them with ``torch.distributed`` (gloo on the CPU, nccl on CUDA).  Without a launcher it returns
the single-process ``Ranks()`` and no collective ever runs, so one process trains exactly as before.

The model is not wrapped in ``DistributedDataParallel``: the RL update runs several forward and
backward passes per optimizer step (a group's shared prompt runs once, its K/V cache is a leaf the
suffixes differentiate into, then one manual ``torch.autograd.backward`` through the prefix —
``research_agent.train.batching``), and DDP's hooks fire once per backward and expect every rank
to run the same passes.  Instead each rank accumulates its own gradients over its share of the
step, with the loss divided by the step's *global* model-token count, and ``all_reduce_grads``
sums them before clipping and the optimizer step.  The result is the one-process update over the
union of the ranks' data, up to float summation order, and every rank applies the same update.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Ranks", "all_gather_object", "all_reduce_grads", "all_reduce_sum", "barrier", "broadcast_params",
           "init_distributed"]


@dataclass(frozen=True)
class Ranks:
    """This process's place among the training processes (``Ranks()``: a single process)."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        """Rank 0 writes the run directory and shows progress."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        """More than one process: the collectives below run."""
        return self.world > 1

    def owns(self, group: int) -> bool:
        """Groups are dealt round-robin: rank r rolls out and trains groups g with g % world == r."""
        return group % self.world == self.rank


def init_distributed(device: str = "auto") -> Ranks:
    """Join the process group a launcher set up (idempotent); ``Ranks()`` without one.

    On CUDA each rank takes GPU ``LOCAL_RANK`` (so ``--device auto`` or ``cuda`` means "my GPU").
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return Ranks(dist.get_rank(), dist.get_world_size())
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Ranks()
    from research_agent.inference.devices import resolve_device

    cuda = resolve_device(device).type == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    return Ranks(dist.get_rank(), dist.get_world_size())


def _device() -> torch.device:
    import torch.distributed as dist

    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def broadcast_params(params: list[torch.Tensor], ranks: Ranks) -> None:
    """Overwrite every rank's ``params`` with rank 0's (the same initial adapter everywhere)."""
    if not ranks.active:
        return
    import torch.distributed as dist

    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1).to(_device(), torch.float32) for p in params])
        dist.broadcast(flat, src=0)
        offset = 0
        for p in params:
            p.copy_(flat[offset: offset + p.numel()].view_as(p))
            offset += p.numel()


def all_reduce_grads(params: list[torch.Tensor], ranks: Ranks) -> None:
    """Sum the gradients over ranks, in place.  A parameter no rank has a gradient for stays
    ``None`` (as in one process: the optimizer skips it); one that only some ranks reached gets
    zeros on the others before the sum."""
    if not ranks.active:
        return
    import torch.distributed as dist

    dev = _device()
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=dev)
    dist.all_reduce(has)
    live = [p for p, h in zip(params, has.tolist(), strict=True) if h > 0]
    if not live:
        return
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(dev, torch.float32)
                      for p in live])
    dist.all_reduce(flat)
    offset = 0
    for p in live:
        g = flat[offset: offset + p.numel()].view_as(p).to(p.device, p.dtype)
        offset += p.numel()
        if p.grad is None:
            p.grad = g.clone()
        else:
            p.grad.copy_(g)


def all_reduce_sum(values: list[float], ranks: Ranks) -> list[float]:
    """Element-wise sum of per-rank numbers (float64, so token counts stay exact)."""
    if not ranks.active:
        return list(values)
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=_device())
    dist.all_reduce(t)
    return t.tolist()


def all_gather_object(obj: Any, ranks: Ranks) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank."""
    if not ranks.active:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * ranks.world
    dist.all_gather_object(out, obj)
    return out


def barrier(ranks: Ranks) -> None:
    """Wait until every rank got here (e.g. while rank 0 writes a checkpoint)."""
    if ranks.active:
        import torch.distributed as dist

        dist.barrier()

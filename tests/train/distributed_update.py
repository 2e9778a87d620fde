"""One rank's part of a fixed update, run by tests/train/test_distributed.py under a launcher.

``python distributed_update.py rl SPEC OUT``: SPEC is a pickle of the config fields, the initial
LoRA weights, the trajectories, their advantages and their groups; every rank starts from its own
random adapter (rank 0's, loaded from SPEC, must reach every rank), trains the groups it owns,
and rank 0 writes the LoRA weights after the step and the step's stats to OUT.

``python distributed_update.py sft CONFIG.json``: ``train_sft`` with plain SGD in place of AdamW
(whose first steps are ±lr wherever a gradient is near 0, which turns float summation order into
visible differences), so the comparison with one process can be tight.
"""

from __future__ import annotations

import os
import pickle
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(spec_path: str, out_path: str) -> None:
    import torch

    from research_agent.train.config import TrainConfig
    from research_agent.train.distributed import broadcast_params, init_distributed
    from research_agent.train.rl import policy_update, setup_lora

    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    ranks = init_distributed("cpu")
    cfg = TrainConfig(**spec["cfg"])
    torch.manual_seed(1000 + ranks.rank)  # a different adapter on each rank until the broadcast
    model, tok = setup_lora(cfg, progress=False)
    params = [p for p in model.parameters() if p.requires_grad]
    if ranks.main:
        with torch.no_grad():
            for p, p0 in zip(params, spec["init"], strict=True):
                p.copy_(p0)
    broadcast_params(params, ranks)
    size = spec["group_size"]
    mine = [i for i in spec["chosen"] if ranks.owns(i // size)]
    opt = torch.optim.SGD(params, lr=cfg.lr)
    model.train()
    stats = policy_update(model, opt, params, spec["trajs"], spec["adv"], mine, cfg, tok.pad_token_id, ranks=ranks)
    if ranks.main:
        torch.save({"params": [p.detach().clone() for p in params], "stats": stats, "mine": mine,
                    "world": ranks.world}, out_path)


def sft(config_path: str) -> None:
    import json

    import torch

    from research_agent.train.config import TrainConfig
    from research_agent.train.sft import train_sft

    torch.optim.AdamW = torch.optim.SGD
    with open(config_path) as f:
        train_sft(TrainConfig(**json.load(f)), progress=False)


if __name__ == "__main__":
    {"rl": main, "sft": sft}[sys.argv[1]](*sys.argv[2:])

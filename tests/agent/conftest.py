"""Fixtures shared by the decode tests."""

import pytest
import torch


def seeded_lora(seed: int):
    """smollm2-135m with a LoRA adapter (the trainer's setup) whose B matrices are drawn, not zero:
    a fresh adapter is a no-op, and the decode paths must be seen computing it.  ``seed`` fixes
    lora_A's init and B's draw (figures in the int8 tests depend on it)."""
    from research_agent.train.config import TrainConfig
    from research_agent.train.rl import setup_lora

    torch.manual_seed(seed)
    model, tok = setup_lora(TrainConfig(model="smollm2-135m"), progress=False)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=gen)
    model.eval()
    return model, tok


@pytest.fixture(scope="module")
def lora_model(request):
    """``seeded_lora`` with the test module's ``LORA_SEED`` (3 where it sets none)."""
    return seeded_lora(getattr(request.module, "LORA_SEED", 3))

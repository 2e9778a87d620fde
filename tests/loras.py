"""Real LoRA adapters with random weights, for tests that need an adapter that changes the model."""

from __future__ import annotations


def random_lora(model, out, *, seed: int, std: float = 0.5):
    """A real LoRA (r 8 on q/v) on a copy of ``model`` with random B matrices, so it changes what the
    model says, saved to ``out``; returns ``out``."""
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    net = get_peft_model(copy.deepcopy(model), LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "lora_B" in name:
                p.normal_(0, std)
    net.save_pretrained(out)
    return out

"""Training: LoRA policy-gradient RL over agent rollouts, and SFT cold start."""

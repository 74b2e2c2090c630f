"""GPT variants trained with DeepSpeed on physlm corpora (arrives with the trainer issue)."""

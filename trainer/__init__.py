"""GPT variants (model/), their DeepSpeed training loop (engine), checkpoints, data loading
from corpus shards, and the evaluation tasks (eval/)."""

"""physlm corpus generation: seeded, reproducible synthetic corpora written as WebDataset shards."""

__version__ = "0.1.0"

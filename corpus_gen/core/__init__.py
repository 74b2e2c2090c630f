"""What every corpus family shares: config, seeding, records, shards, manifest, tokenizer."""

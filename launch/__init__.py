"""The `physlm` command line: generate, verify (and, as they land, train, eval, run, submit)."""

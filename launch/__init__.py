"""The `physlm` command line: gen, verify, train, eval and run."""

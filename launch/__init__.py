"""The `physlm` command line: gen, verify, train, eval, run (experiments and suites) and
report."""

#!/bin/bash
# physlm {{kind}}: corpus {{corpus}}
#
# {{purpose}}
# Generation is a pure function of the corpus config: whichever job writes a file writes the
# same bytes as a plain `physlm gen` would, and a file already written and recorded (under
# the corpus's .progress/) is kept.
{{preamble}}

{{python}} -m launch.cli gen {{config_file}} \
    --out {{out}} {{part}}--workers {{workers}} --no-progress

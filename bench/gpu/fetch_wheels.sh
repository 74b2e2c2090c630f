#!/usr/bin/env bash
# Download, here where PyPI is reachable, the wheels physlm needs that the GPU machine's image
# lacks (it has torch, numpy, sentencepiece, tqdm, packaging, pyyaml, transformers, pytest, ...;
# see ../shared/GPU.md), for Python 3.12 on manylinux x86_64, into bench/gpu/wheels/ (git
# ignores it). bench/gpu/run.sh installs them there with pip --no-index --no-deps.
#
# Pinned to the versions physlm is tested with here. Left out on purpose: wandb (physlm imports
# it only when train.wandb.mode is not disabled, and the proof disables it) and datasets (only
# the export/datasets tests read it; none is a CUDA test).
set -euo pipefail
cd "$(dirname "$0")"

# published as wheels (pure Python, or built for cp312 manylinux)
wheels=(
    webdataset==1.0.2 braceexpand==0.1.7 omegaconf==2.4.0 orjson==3.13.0
    # DeepSpeed's own requirements the image lacks or may lack
    pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2
    typing-extensions==4.16.0 hjson==3.1.0 py-cpuinfo==9.0.0 msgpack==1.2.4 einops==0.8.2
    ninja==1.13.2 psutil==7.2.2
)
# published only as source archives: pure Python, so built into a wheel here (DeepSpeed's ops
# stay unbuilt: physlm uses none of them)
sources=(deepspeed==0.19.8)

rm -rf wheels.partial && mkdir wheels.partial
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
    -d wheels.partial "${wheels[@]}"
python3 -m pip wheel --quiet --no-deps --no-build-isolation -w wheels.partial "${sources[@]}"
rm -rf wheels && mv wheels.partial wheels
du -sh wheels
ls wheels

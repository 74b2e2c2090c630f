"""physlm in HF transformers (`physlm export`): a checkpoint as the HF class that computes the
same function (layouts.py), its weights renamed and split to that class's (weights.py), and the
corpus's tokenizer as a HF fast tokenizer (tokenizer.py), written by export.py. Needs the `hf`
extra (transformers, tokenizers, safetensors), imported only when an export runs.
"""

"""Writes llama.cpp's answers for drover-worker's golden tests.

Run by `cargo xtask reference` inside a venv holding llama-cpp-python
(which builds llama.cpp from source). For each model it records, per
prompt: llama.cpp's tokenization, its logits at a few positions of the
prompt (F32 KV cache, logits for every position), and its greedy
continuation (token ids, stopping at end of text) with the gap between its
two best logits at each step.

usage: golden.py OUT_DIR NAME=MODEL.gguf [NAME=MODEL.gguf ...]
"""

import hashlib
import json
import os
import sys

import numpy as np
from llama_cpp import Llama

PROMPTS = [
    "Once upon a time",
    "The little dog ran to the park and saw a big red ball. He",
    "Lily said: \"I want to play!\"",
]
GREEDY_TOKENS = 128


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def record(name, path):
    llm = Llama(
        model_path=path,
        n_ctx=512,
        n_batch=512,
        seed=0,
        logits_all=True,
        type_k=0,
        type_v=0,
        n_threads=2,
        verbose=False,
    )
    eos = llm.token_eos()
    prompts = []
    for text in PROMPTS:
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        llm.reset()
        llm.eval(tokens)
        scores = np.array(llm.scores[: len(tokens)], dtype=np.float32)
        positions = sorted({0, len(tokens) // 2, len(tokens) - 1})
        logits = {str(p): [float(x) for x in scores[p]] for p in positions}
        greedy = []
        margins = []
        row = scores[-1]
        while len(greedy) < GREEDY_TOKENS:
            nxt = int(np.argmax(row))
            top2 = np.sort(row)[-2:]
            greedy.append(nxt)
            margins.append(float(top2[1] - top2[0]))
            if nxt == eos:
                break
            llm.eval([nxt])
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        prompts.append(
            {"text": text, "tokens": tokens, "logits": logits, "greedy": greedy, "margins": margins}
        )
        print(f"  {name}: {text!r}: {len(tokens)} prompt tokens, {len(greedy)} greedy", flush=True)
    return {"model": name, "sha256": sha256(path), "prompts": prompts}


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    import llama_cpp

    for arg in sys.argv[2:]:
        name, path = arg.split("=", 1)
        golden = record(name, path)
        golden["reference"] = f"llama-cpp-python {llama_cpp.__version__}"
        # llama.cpp's CPU kernels sum in an order of their instruction set
        # (8 lanes on AVX2, 16 on AVX-512), so its own logits differ from
        # one processor to another: record the one these came from.
        golden["system_info"] = llama_cpp.llama_print_system_info().decode().strip()
        with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
            json.dump(golden, f, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {name}.json", flush=True)


if __name__ == "__main__":
    main()

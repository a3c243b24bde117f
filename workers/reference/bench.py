"""Times llama.cpp (through llama-cpp-python) the way `drover-worker bench`
times itself: the same prompt token ids, a prefill as one batch, then
greedy decode one token at a time, F32 KV cache, the best of N runs.
Prints one JSON object.

usage: bench.py MODEL.gguf PREFILL DECODE THREADS REPEAT
"""

import json
import resource
import sys
import time

import numpy as np
from llama_cpp import Llama


def main():
    path, prefill, decode, threads, repeat = sys.argv[1], *map(int, sys.argv[2:6])
    llm = Llama(
        model_path=path,
        n_ctx=prefill + decode + 1,
        # llama-cpp-python keeps one logits row per batch slot: a batch as
        # long as the context keeps the index of the last token in range.
        n_batch=prefill + decode + 1,
        n_ubatch=max(prefill, 1),
        seed=0,
        type_k=0,
        type_v=0,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )
    vocab = llm.n_vocab()
    # The prompt drover-worker's bench uses: ids 3.. in a stride.
    prompt = [3 + (i * 7919) % (vocab - 3) for i in range(prefill)]
    best_prefill = best_decode = float("inf")
    for _ in range(max(repeat, 1)):
        llm.reset()
        t = time.perf_counter()
        llm.eval(prompt)
        best_prefill = min(best_prefill, time.perf_counter() - t)
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t = time.perf_counter()
        for _ in range(decode):
            llm.eval([nxt])
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        best_decode = min(best_decode, time.perf_counter() - t)
    print(
        json.dumps(
            {
                "prefill_tokens_per_s": prefill / best_prefill,
                "decode_tokens_per_s": decode / best_decode,
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            }
        )
    )


if __name__ == "__main__":
    main()

"""An offline provider: deterministic hashed bag-of-words embeddings, no key, no network.

Words and their character trigrams are hashed into a fixed number of signed buckets
(the "hashing trick"), then L2-normalised: texts sharing words or word stems land close
in cosine distance. It is no semantic model, but it keeps pgvector search meaningful
when no remote provider is reachable. It offers no completion: there is no principled
offline answer to a prompt.
"""
from __future__ import annotations

import hashlib
import math
import re

from synedre.ai.providers.base import Messages, Provider
from synedre.config import Settings

MODEL_PREFIX = "hash-"  # the model name carries the dimension: hash-1024
TRIGRAM_WEIGHT = 0.5  # stems matter, but less than whole words
_WORD = re.compile(r"\w+", re.UNICODE)


def _bucket(token: str, dim: int) -> tuple[int, float]:
    # blake2b, not hash(): the vector must be identical in every process and every run.
    h = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "big")
    return h % dim, (1.0 if h >> 63 else -1.0)


def hashed_vector(text: str, dim: int) -> list[float]:
    vec = [0.0] * dim
    words = _WORD.findall(text.lower()) or ["<empty>"]  # a unit vector even for empty text
    for word in words:
        i, sign = _bucket("w:" + word, dim)
        vec[i] += sign
        padded = f"<{word}>"
        for k in range(len(padded) - 2):
            i, sign = _bucket("t:" + padded[k:k + 3], dim)
            vec[i] += sign * TRIGRAM_WEIGHT
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


def dimension(model: str) -> int:
    if model.startswith(MODEL_PREFIX) and model[len(MODEL_PREFIX):].isdigit():
        return int(model[len(MODEL_PREFIX):])
    raise ValueError(f"unknown local model {model!r} (expected {MODEL_PREFIX}<dimension>)")


class LocalProvider(Provider):
    name = "local"

    def available(self, settings: Settings) -> str | None:
        return None

    def complete(self, model: str, messages: Messages, timeout: float, json_output: bool,
                 temperature: float, max_tokens: int | None, *,
                 settings: Settings) -> tuple[str, int, int]:
        raise NotImplementedError("the local provider has no completion model")

    def embed(self, model: str, texts: list[str], timeout: float, *,
              settings: Settings) -> tuple[list[list[float]], int]:
        dim = dimension(model)
        return ([hashed_vector(t, dim) for t in texts],
                sum(len(_WORD.findall(t)) for t in texts))

"""RULER's needle-in-a-haystack task, generated offline.

Follows RULER's recipe: a "noise" haystack ("The grass is green. The sky is blue. ..."
repeated), needles "One of the special magic numbers for {key} is: {value}." placed at
evenly spread depths, and the question at the end.  ``single`` hides one needle;
``multikey`` adds needles for other keys as distractors.  The haystack is grown until
the prompt reaches the target length in tokens of the given tokenizer.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Literal

from kvtrace.collectors.datasets import DatasetRequest

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "One of the special magic numbers for {key} is: {value}."
TEMPLATE = (
    "Some special magic numbers are hidden within the following text. Make sure to "
    "memorize it. I will quiz you about the numbers afterwards.\n{context}\n"
    "What are all the special magic numbers for {key} mentioned in the provided text? "
    "The special magic numbers for {key} mentioned in the provided text are"
)
_WORDS = ("amber", "basil", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo",
          "juniper", "kestrel", "lumen", "marlin", "nectar", "onyx", "pylon", "quartz",
          "raven", "saffron", "tundra", "umber", "violet", "willow", "xenon", "yarrow", "zephyr")


def _key(rng: random.Random) -> str:
    return f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}"


def niah_requests(count: int, target_tokens: int, count_tokens: Callable[[str], int], *,
                  variant: Literal["single", "multikey"] = "single", distractors: int = 3,
                  seed: int = 0) -> Iterator[DatasetRequest]:
    """``count`` NIAH prompts of about ``target_tokens`` tokens each."""
    rng = random.Random(seed)
    for request_id in range(count):
        key = _key(rng)
        value = str(rng.randint(1_000_000, 9_999_999))
        needles = [NEEDLE.format(key=key, value=value)]
        if variant == "multikey":
            others = {_key(rng) for _ in range(distractors)} - {key}
            needles += [NEEDLE.format(key=k, value=rng.randint(1_000_000, 9_999_999))
                        for k in sorted(others)]
            rng.shuffle(needles)
        sentences = _fill(needles, target_tokens, count_tokens, key)
        yield DatasetRequest(
            request_id, TEMPLATE.format(context=" ".join(sentences), key=key), answer=value,
            meta={"task": f"niah_{variant}", "key": key, "needles": len(needles)})


def _fill(needles: list[str], target: int, count_tokens: Callable[[str], int],
          key: str) -> list[str]:
    """Noise sentences with the needles at evenly spread depths, grown to ``target``."""
    def build(repeats: int) -> list[str]:
        haystack = [NOISE] * repeats
        for i, needle in enumerate(needles):
            depth = round((i + 1) / (len(needles) + 1) * len(haystack))
            haystack.insert(depth + i, needle)
        return haystack

    low, high = 1, 1
    while count_tokens(TEMPLATE.format(context=" ".join(build(high)), key=key)) < target:
        low, high = high, high * 2
    while low < high:  # the most repeats that stay within the target
        middle = (low + high + 1) // 2
        size = count_tokens(TEMPLATE.format(context=" ".join(build(middle)), key=key))
        low, high = (middle, high) if size <= target else (low, middle - 1)
    return build(low)

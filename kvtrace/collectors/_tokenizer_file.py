"""A real tokenizer for the collectors: a ``tokenizer.json`` read by the ``tokenizers``
library (what ``--tokenizer`` loads)."""

from __future__ import annotations

from pathlib import Path

from kvtrace.errors import InputError

# Names an end-of-sequence token goes by in common tokenizers, most specific first.
EOS_NAMES = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "<eos>")


class TokenizerFile:
    """Encode text with the tokenizer stored in a ``tokenizer.json`` file.

    ``eos_id`` is the first of `EOS_NAMES` the vocabulary has (None if none), and
    ``vocab_size`` counts the added tokens too, so a model sized by it can embed every id.
    """

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise InputError(
                "--tokenizer needs the tokenizers package (pip install 'kvtrace[collect]')"
            ) from None
        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # the library raises a bare Exception for bad files
            raise InputError(f"cannot read {path} as a tokenizer.json: {exc}") from None
        self.path = Path(path)
        self.vocab_size = self._tokenizer.get_vocab_size(with_added_tokens=True)
        ids = (self._tokenizer.token_to_id(name) for name in EOS_NAMES)
        self.eos_id = next((i for i in ids if i is not None), None)

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text).ids

    def decode(self, tokens: list[int]) -> str:
        return self._tokenizer.decode(tokens)

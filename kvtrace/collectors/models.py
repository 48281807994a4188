"""The models ``kvtrace collect dsa`` can trace, by name, with the tokenizer of each."""

from __future__ import annotations

from pathlib import Path

from kvtrace.collectors.collect_options import DsaCollectOptions
from kvtrace.collectors.dsa_collect import Tokenizer, TracedModel
from kvtrace.errors import InputError


def load_model(options: DsaCollectOptions) -> tuple[TracedModel, Tokenizer]:
    """The model ``options.model`` names and the tokenizer its prompts are encoded with.

    ``dsa-ref`` is the reference model (random weights from ``seed``, or ``weights``);
    any other value is the folder of a local Hugging Face causal LM.
    """
    from kvtrace.collectors.tokenizer_file import TokenizerFile

    _require_torch()
    given = TokenizerFile(options.tokenizer_file) if options.tokenizer_file else None
    if options.model == "dsa-ref":
        from kvtrace.collectors.dsa_ref import ByteTokenizer, DsaRef, DsaRefConfig

        tokenizer: Tokenizer = given or ByteTokenizer()
        config = DsaRefConfig(
            n_layers=options.layers,
            index_topk=options.topk,
            vocab_size=max(getattr(tokenizer, "vocab_size", 2), 2),
        )
        net = (
            DsaRef.from_safetensors(options.weights, config)
            if options.weights
            else DsaRef(config, seed=options.seed)
        )
        return net, tokenizer
    folder = Path(options.model)
    if not folder.is_dir():
        raise InputError(f"expected dsa-ref or a model folder for --model, got {options.model!r}")
    from kvtrace.collectors.hf_adapter import HfCausalLM

    if given is None:
        if not (folder / "tokenizer.json").is_file():
            raise InputError(f"{folder} has no tokenizer.json; name one with --tokenizer")
        given = TokenizerFile(folder / "tokenizer.json")
    return HfCausalLM(folder, index_topk=options.topk, seed=options.seed), given


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError:
        raise InputError(
            "collecting DSA traces needs torch; install it with pip install 'kvtrace[collect]'"
        ) from None

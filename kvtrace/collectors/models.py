"""The models ``kvtrace collect dsa`` can trace, by name, with the tokenizer of each."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kvtrace.collectors._dsa_collect import Tokenizer, TracedModel
from kvtrace.collectors.collect_options import DsaCollectOptions
from kvtrace.errors import InputError

if TYPE_CHECKING:
    import torch


def load_model(options: DsaCollectOptions) -> tuple[TracedModel, Tokenizer]:
    """The model ``options.model`` names and the tokenizer its prompts are encoded with.

    ``dsa-ref`` is the reference model (random weights from ``seed``, or ``weights``);
    any other value is the folder of a local Hugging Face causal LM.
    """
    from kvtrace.collectors._tokenizer_file import TokenizerFile

    _require_torch()
    device = torch_device(options.device)
    given = TokenizerFile(options.tokenizer_file) if options.tokenizer_file else None
    if options.model == "dsa-ref":
        if options.selection != "all-heads":
            raise InputError(
                "--selection per-group needs a Hugging Face model folder: dsa-ref's indexer "
                "selects once for all heads"
            )
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
        return net.to(device), tokenizer
    folder = Path(options.model)
    if not folder.is_dir():
        raise InputError(f"expected dsa-ref or a model folder for --model, got {options.model!r}")
    from kvtrace.collectors._hf_adapter import HfCausalLM

    if given is None:
        if not (folder / "tokenizer.json").is_file():
            raise InputError(f"{folder} has no tokenizer.json; name one with --tokenizer")
        given = TokenizerFile(folder / "tokenizer.json")
    model = HfCausalLM(
        folder,
        index_topk=options.topk,
        seed=options.seed,
        device=device,
        selection=options.selection,
    )
    return model, given


def torch_device(name: str) -> torch.device:
    """The torch device ``name`` names, if this machine has it; one sentence otherwise."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise InputError(
            f"--device {name!r} is not a torch device (cpu, cuda, cuda:1, mps)"
        ) from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise InputError(f"--device {name}: torch sees no CUDA GPU on this machine")
        if device.index is not None and device.index >= count:
            raise InputError(f"--device {name}: this machine has {count} CUDA GPU(s)")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"--device {name}: torch sees no Apple GPU (MPS) on this machine")
    return device


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError:
        raise InputError(
            "collecting DSA traces needs torch; install it with pip install 'kvtrace[collect]'"
        ) from None

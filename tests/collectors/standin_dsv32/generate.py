"""A stand-in of DeepSeek-V3.2-Exp's inference/generate.py: prefill, then decode.

``generate`` runs every prompt of a batch together: the first forward prefills the
shortest prompt's length, then one position per forward, the longer prompts' own tokens
taking the place of a sample until each prompt ends.  ``main`` builds the model and
generates for the prompts of a JSON file (lists of token ids).
"""

import json
import os
import sys

import torch
from model import ModelArgs, Transformer


@torch.inference_mode()
def generate(
    model: Transformer, prompt_tokens: list[list[int]], max_new_tokens: int, eos_id: int
) -> list[list[int]]:
    """Greedy completions of ``prompt_tokens``."""
    prompt_lens = [len(t) for t in prompt_tokens]
    total_len = min(model.max_seq_len, max_new_tokens + max(prompt_lens))
    tokens = torch.full((len(prompt_tokens), total_len), -1, dtype=torch.long)
    for row, prompt in enumerate(prompt_tokens):
        tokens[row, : len(prompt)] = torch.tensor(prompt)
    prev_pos = 0
    prompt_mask = tokens != -1
    for cur_pos in range(min(prompt_lens), total_len):
        logits = model.forward(tokens[:, prev_pos:cur_pos], prev_pos)
        next_token = logits.argmax(dim=-1)
        tokens[:, cur_pos] = torch.where(prompt_mask[:, cur_pos], tokens[:, cur_pos], next_token)
        prev_pos = cur_pos
    completion_tokens = []
    for row, generated in enumerate(tokens.tolist()):
        generated = generated[prompt_lens[row] : prompt_lens[row] + max_new_tokens]
        completion_tokens.append(
            generated[: generated.index(eos_id)] if eos_id in generated else generated
        )
    return completion_tokens


def main(input_file: str, max_new_tokens: int) -> None:
    """Generate for the prompts in ``input_file`` and print the completions as JSON."""
    torch.manual_seed(int(os.environ.get("SEED", "0")))
    args = ModelArgs()
    model = Transformer(args)
    print("I'm DeepSeek 👋")
    with open(input_file) as f:
        prompt_tokens = json.load(f)
    completion_tokens = generate(model, prompt_tokens, max_new_tokens, eos_id=-2)
    print(json.dumps(completion_tokens))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

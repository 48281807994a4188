"""ShareGPT-format conversations (``[{id, conversations: [{from, value}]}]``) as prompts.

``full`` makes one request per conversation: every turn up to its last human turn.
``per_user_turn`` makes one request per human turn, with the conversation so far in
front of it, so the turns of one conversation share a prefix (as a chat server sees
them).  Requests are numbered in file order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from kvtrace.collectors.datasets import DatasetRequest, read_json_file
from kvtrace.errors import InputError

ROLES = {
    "human": "User",
    "user": "User",
    "gpt": "Assistant",
    "assistant": "Assistant",
    "chatgpt": "Assistant",
    "bing": "Assistant",
    "bard": "Assistant",
    "system": "System",
}


def load_conversations(path: Path) -> tuple[list[dict], str]:
    """The conversations of a local ShareGPT JSON file and the file's sha256."""
    conversations, sha = read_json_file(path)
    return check_conversations(conversations, str(path)), sha


def check_conversations(conversations: object, source: str) -> list[dict]:
    """``conversations`` if they are in ShareGPT format, else one clear error."""
    if not isinstance(conversations, list) or not all(
        isinstance(c, dict) and isinstance(c.get("conversations"), list) for c in conversations
    ):
        raise InputError(
            f"{source} is not in ShareGPT format: expected a list of "
            "{id, conversations: [{from, value}]}"
        )
    return conversations


def _turn(message: dict) -> str:
    role = ROLES.get(str(message.get("from", "")).lower(), str(message.get("from")))
    return f"{role}: {message.get('value', '')}\n"


def sharegpt_requests(
    conversations: list[dict], mode: Literal["full", "per_user_turn"] = "full"
) -> Iterator[DatasetRequest]:
    """Requests from ShareGPT conversations (see the module docstring for the modes)."""
    request_id = 0
    for conversation in conversations:
        messages = conversation["conversations"]
        human_turns = [
            i for i, m in enumerate(messages) if ROLES.get(str(m.get("from", "")).lower()) == "User"
        ]
        cuts = human_turns if mode == "per_user_turn" else human_turns[-1:]
        for turn_no, cut in enumerate(cuts):
            prompt = "".join(_turn(m) for m in messages[: cut + 1]) + "Assistant:"
            answer = messages[cut + 1].get("value") if cut + 1 < len(messages) else None
            yield DatasetRequest(
                request_id,
                prompt,
                answer=answer,
                meta={"conversation": conversation.get("id"), "turn": turn_no},
            )
            request_id += 1

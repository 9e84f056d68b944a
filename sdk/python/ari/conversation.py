"""Conversations: end a turn asking the caller for input, and read the earlier turns when a
reply continues it. No capability is needed::

    from ari import conversation

    earlier = conversation.history()
    if not earlier:
        conversation.ask_for_input()
        return b"What is your name?"   # from execute: the question
"""

from dataclasses import dataclass
from typing import List

from wit_world.imports import conversation as _wit


@dataclass
class Turn:
    """One earlier turn: what this Agent was asked and what it answered. ``number`` is 1 for
    the conversation's first task; only the 32 most recent turns (256 KiB) are given."""

    number: int
    input: bytes
    output: bytes


def history() -> List[Turn]:
    """The earlier turns of this task's conversation, oldest first (empty for a first turn)."""
    return [Turn(t.number, bytes(t.input), bytes(t.output)) for t in _wit.history()]


def ask_for_input() -> None:
    """Ends this turn asking for input: when ``execute`` returns, the task ends
    ``InputRequired`` with its output as the question, and the caller's reply is the next
    turn."""
    _wit.ask_for_input()

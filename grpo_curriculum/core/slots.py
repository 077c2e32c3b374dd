"""Where a prompt's statistics live: a map-style dataset's row index, or a hash bucket of any other prompt key."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

HASHED_SLOTS = 2**20
"""Buckets for prompts known by a key, not an index (iterable datasets): collisions merge two prompts' statistics."""


@dataclass(frozen=True)
class PromptSlots:
    """
    Maps prompt keys (see `grpo_curriculum.training.stream.prompt_keys`) to slots of per-prompt arrays.

    Args:
        num_slots (`int`): Number of slots (the dataset's size when `indexed`).
        indexed (`bool`): Keys are dataset row indices (`"17"`); else any string, hashed into a bucket.
    """

    num_slots: int = HASHED_SLOTS
    indexed: bool = False

    def slot_of(self, key) -> int:
        """The slot of a prompt key."""
        if self.indexed:
            return int(key)
        digest = hashlib.blake2b(str(key).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") % self.num_slots

    def key_of(self, slot: int) -> str:
        """What a report calls the prompt in `slot`: its row index, or its bucket."""
        return str(slot) if self.indexed else f"bucket-{slot}"

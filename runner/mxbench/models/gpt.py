"""``gpt``: a GPT-like causal decoder trained on next-token prediction.

Token ids of ``seq_len`` below ``vocab_size``, 4 pre-norm blocks of width 256 (4 heads of
64) with a causal mask, a final LayerNorm and a vocabulary-wide softmax per position kept
in float32; labels are token ids per position (sparse categorical cross-entropy).
"""

from __future__ import annotations

from typing import Any

from mxbench.models._transformer import classifier

INPUTS = "tokens"


def build(seq_len: int, vocab_size: int) -> dict[str, Any]:
    return classifier(seq_len, vocab_size, "gpt", causal=True, pool=False, units=vocab_size)

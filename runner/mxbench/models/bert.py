"""``bert``: a BERT-like encoder (bidirectional attention) classifying token sequences.

Token ids of ``seq_len`` below ``vocab_size``, 4 pre-norm blocks of width 256 (4 heads of
64), mean-pooled into a 2-class softmax head kept in float32.
"""

from __future__ import annotations

from typing import Any

from mxbench.models._transformer import classifier

INPUTS = "tokens"
CLASSES = 2


def build(seq_len: int, vocab_size: int) -> dict[str, Any]:
    return classifier(seq_len, vocab_size, "bert", causal=False, pool=True, units=CLASSES)

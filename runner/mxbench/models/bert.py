"""``bert``: a BERT-like encoder (bidirectional attention) classifying token sequences.

Token ids of ``seq_len`` below ``vocab_size``, 4 pre-norm blocks of width 256 (4 heads of
64), mean-pooled into a 2-class softmax head kept in float32.
"""

from __future__ import annotations

from typing import Any

from mxbench.models import ModelSpec
from mxbench.models._transformer import classifier


def build(p: Any) -> dict[str, Any]:
    return classifier(p, "bert", causal=False, pool=True, units=2)


SPEC = ModelSpec(
    name="bert",
    summary="a BERT-like transformer encoder (token inputs, sequence classification)",
    build=build,
    inputs="tokens",
    classes=2,
)

"""``gpt``: a GPT-like causal decoder trained on next-token prediction.

Token ids of ``seq_len`` below ``vocab_size``, 4 pre-norm blocks of width 256 (4 heads of
64) with a causal mask, a final LayerNorm and a vocabulary-wide softmax per position kept
in float32; labels are token ids per position (sparse categorical cross-entropy).
"""

from __future__ import annotations

from typing import Any

from mxbench.models import ModelSpec
from mxbench.models._transformer import classifier


def build(p: Any) -> dict[str, Any]:
    return classifier(p, "gpt", causal=True, pool=False, units=p.vocab_size)


SPEC = ModelSpec(
    name="gpt",
    summary="a GPT-like causal transformer decoder (token inputs, next-token prediction)",
    build=build,
    inputs="tokens",
)

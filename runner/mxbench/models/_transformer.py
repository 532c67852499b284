"""Transformer blocks in plain Keras layers (no keras_hub: it drags TensorFlow Text in).

Sizes are small enough for a CPU and shaped like the real thing: width 256, 4 heads of 64,
4 blocks, feed-forward 4x wide, GELU, learned positions. Sequence length and vocabulary are
the cell's ``seq_len`` / ``vocab_size``.
"""

from __future__ import annotations

from typing import Any

WIDTH, HEADS, BLOCKS = 256, 4, 4


def positions_layer() -> Any:
    """A learned position embedding added to its input (one weight of seq_len x width)."""
    import keras

    class PositionEmbedding(keras.layers.Layer):  # type: ignore[misc]  # keras is untyped
        def build(self, input_shape: Any) -> None:
            self.table = self.add_weight(
                shape=tuple(input_shape[1:]), initializer="glorot_uniform", name="table"
            )

        def call(self, x: Any) -> Any:
            return x + keras.ops.cast(self.table, x.dtype)

    return PositionEmbedding(name="positions")


def embed(seq_len: int, vocab_size: int) -> tuple[Any, Any]:
    """The token input and its embedded sequence (token + position)."""
    import keras
    from keras import layers

    tokens = keras.Input(shape=(seq_len,), dtype="int32", name="tokens")
    x = layers.Embedding(vocab_size, WIDTH, name="token_embedding")(tokens)
    return tokens, positions_layer()(x)


def block(x: Any, index: int, causal: bool) -> Any:
    """One pre-norm block: self-attention and a feed-forward layer, each with a residual."""
    from keras import layers

    h = layers.LayerNormalization(epsilon=1e-5, name=f"block{index}_ln1")(x)
    h = layers.MultiHeadAttention(HEADS, WIDTH // HEADS, name=f"block{index}_attention")(
        h, h, use_causal_mask=causal
    )
    x = layers.Add(name=f"block{index}_add1")([x, h])
    h = layers.LayerNormalization(epsilon=1e-5, name=f"block{index}_ln2")(x)
    h = layers.Dense(4 * WIDTH, activation="gelu", name=f"block{index}_ffn1")(h)
    h = layers.Dense(WIDTH, name=f"block{index}_ffn2")(h)
    return layers.Add(name=f"block{index}_add2")([x, h])


def encoder(seq_len: int, vocab_size: int, causal: bool) -> tuple[Any, Any]:
    """Token input and the final normalized sequence of :data:`BLOCKS` blocks."""
    from keras import layers

    tokens, x = embed(seq_len, vocab_size)
    for i in range(BLOCKS):
        x = block(x, i, causal)
    return tokens, layers.LayerNormalization(epsilon=1e-5, name="final_ln")(x)


def classifier(
    seq_len: int, vocab_size: int, name: str, causal: bool, pool: bool, units: int
) -> dict[str, Any]:
    """What ``build`` returns: the encoder, mean-pooled or per position, under a Dense head
    of ``units`` whose softmax stays float32, and the token ids' range."""
    import keras
    from keras import layers

    tokens, x = encoder(seq_len, vocab_size, causal)
    if pool:
        x = layers.GlobalAveragePooling1D(name="pool")(x)
    x = layers.Dense(units, name="head")(x)
    out = layers.Activation("softmax", dtype="float32", name="probabilities")(x)
    model = keras.Model(tokens, out, name=name)
    return {"model": model, "inputs": {"tokens": {"range": [0, vocab_size]}}}

"""The published model, built with the real Keras/TensorFlow, and the policies applied to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

keras = pytest.importorskip("keras")

from mxbench.bench import model as blog  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_policy() -> Iterator[None]:
    yield
    keras.config.set_dtype_policy("float32")


def _built(policy: str, size: int = 32) -> keras.Model:
    blog.set_policy(policy)
    m = blog.build_model(size)
    blog.compile_model(m, "off")
    return m


def test_layers_are_the_published_ones() -> None:
    m = _built("float32", 256)
    kinds = [type(layer).__name__ for layer in m.layers]
    assert kinds == [
        "Conv2D", "BatchNormalization", "Conv2D", "BatchNormalization", "Conv2D",
        "BatchNormalization", "GlobalAveragePooling2D", "Dense", "Activation",
    ]  # fmt: skip
    convs = [layer for layer in m.layers if isinstance(layer, keras.layers.Conv2D)]
    assert [c.filters for c in convs] == [32, 64, 128]
    assert [c.kernel_size for c in convs] == [(5, 5), (7, 7), (11, 11)]
    assert all(c.strides == (2, 2) and c.padding == "same" for c in convs)
    assert all(c.activation is keras.activations.relu for c in convs)
    assert m.layers[-2].units == 10
    assert m.input_shape == (None, 256, 256, 3)
    assert m.output_shape == (None, 10)
    # weights + biases of 3 convs (5*5*3*32+32, 7*7*32*64+64, 11*11*64*128+128),
    # 4 numbers per BatchNorm channel (32+64+128), Dense 128*10+10
    assert m.count_params() == 2432 + 100416 + 991360 + 4 * (32 + 64 + 128) + 1290 == 1096394
    assert m.loss == "sparse_categorical_crossentropy"
    assert isinstance(m.optimizer, keras.optimizers.Adam)


def test_mixed_float16_computes_in_float16_keeps_float32_variables_and_scales_loss() -> None:
    m = _built("mixed_float16")
    conv = m.layers[0]
    assert conv.compute_dtype == "float16"
    assert conv.kernel.dtype == "float32"
    assert m.layers[-1].compute_dtype == "float32"  # softmax kept in float32
    out = m(keras.ops.zeros((2, 32, 32, 3)))
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    assert isinstance(m.optimizer, keras.optimizers.LossScaleOptimizer)


def test_mixed_bfloat16_has_no_loss_scaling() -> None:
    m = _built("mixed_bfloat16")
    assert (m.layers[0].compute_dtype, m.layers[0].kernel.dtype) == ("bfloat16", "float32")
    assert not isinstance(m.optimizer, keras.optimizers.LossScaleOptimizer)


def test_pure_float16_has_float16_variables_and_no_loss_scaling() -> None:
    m = _built("float16")
    assert (m.layers[0].compute_dtype, m.layers[0].kernel.dtype) == ("float16", "float16")
    assert not isinstance(m.optimizer, keras.optimizers.LossScaleOptimizer)

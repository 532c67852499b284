"""Models as plugins, built with the real Keras/TensorFlow: the zoo, the harness that builds
any model (same initial weights across policies, synthetic inputs and labels derived from the
model), the facts the bench records, and the user's own models going right and wrong."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from mxbench.bench.model.harness import set_policy  # noqa: E402
from mxbench.matrix.params import Params  # noqa: E402

import user_models  # noqa: E402
from mxbench import models  # noqa: E402
from mxbench.bench import facts, harness  # noqa: E402
from mxbench.bench.params import validate  # noqa: E402

TINY = {"image_size": 32, "seq_len": 16, "vocab_size": 256, "batch_size": 2}


@pytest.fixture(autouse=True)
def _restore_policy() -> Iterator[None]:
    yield
    keras.config.set_dtype_policy("float32")


def _prepared(model: str = "blog-cnn", policy: str = "float32", **kw: object) -> harness.Prepared:
    p = validate(Params(model=model, policy=policy, **kw))  # type: ignore[arg-type]
    prepared = harness.prepare(p, set_policy)
    harness.compile_model(prepared, "off")
    return prepared


# ---------------------------------------------------------------- the zoo


def test_every_zoo_entry_is_one_module_called_and_read_like_a_users() -> None:
    for name, module in models.ZOO.items():
        found = importlib.import_module(module)
        assert callable(found.build) and found.__doc__, name
        declared = models.facts(name)  # read from the source, as a user's file is
        assert declared.inputs == found.INPUTS in ("image", "tokens")
        assert declared.min_image_size == getattr(found, "MIN_IMAGE_SIZE", None)
        assert models.check(f"{found.__file__}:build") is None


def test_blog_cnn_layers_are_the_published_ones() -> None:
    m = _prepared(image_size=256).model
    kinds = [type(layer).__name__ for layer in m.layers]
    assert kinds == [
        "Conv2D", "BatchNormalization", "Conv2D", "BatchNormalization", "Conv2D",
        "BatchNormalization", "GlobalAveragePooling2D", "Dense", "Activation",
    ]  # fmt: skip
    convs = [layer for layer in m.layers if isinstance(layer, keras.layers.Conv2D)]
    assert [c.filters for c in convs] == [32, 64, 128]
    assert [c.kernel_size for c in convs] == [(5, 5), (7, 7), (11, 11)]
    assert m.input_shape == (None, 256, 256, 3) and m.output_shape == (None, 10)
    assert m.count_params() == 1096394
    assert isinstance(m.loss, keras.losses.SparseCategoricalCrossentropy)
    assert isinstance(m.optimizer, keras.optimizers.Adam)


def test_so_cnn_is_the_question_as_posted_at_224_by_336() -> None:
    prepared = _prepared("so-cnn", image_size=224, image_width=336)
    m = prepared.model
    convs = [layer for layer in m.layers if isinstance(layer, keras.layers.Conv2D)]
    assert [c.filters for c in convs] == [32, 32, 64, 64]
    assert all(c.kernel_size == (3, 3) and c.padding == "same" for c in convs)
    assert type(convs[0].kernel_initializer).__name__ == "LecunNormal"
    kinds = [type(layer).__name__ for layer in m.layers]
    assert kinds.count("MaxPooling2D") == 4 and kinds[-4:] == [
        "AveragePooling2D", "Flatten", "Dense", "Activation"]  # fmt: skip
    assert m.input_shape == (None, 224, 336, 3) and m.output_shape == (None, 1)
    assert m.loss == "binary_crossentropy"
    opt = m.optimizer
    assert isinstance(opt, keras.optimizers.RMSprop)
    assert np.isclose(float(opt.learning_rate), 1e-4) and opt.rho == 0.9 and opt.epsilon == 1e-4
    x, y = harness.synthetic_batch(prepared, Params(image_size=224, image_width=336, batch_size=3))
    assert x.shape == (3, 224, 336, 3) and y.shape == (3, 1) and set(np.unique(y)) <= {0.0, 1.0}


@pytest.mark.parametrize("name", list(models.ZOO))
def test_zoo_builds_offline_with_a_float32_output_under_mixed_precision(name: str) -> None:
    prepared = _prepared(name, "mixed_bfloat16", **TINY)
    m = prepared.model
    assert str(m.outputs[0].dtype) == "float32", name
    assert prepared.init == "float32-copy"
    x, y = harness.synthetic_batch(prepared, Params(model=name, **TINY))  # type: ignore[arg-type]
    loss = m.train_on_batch(x, y)
    assert np.isfinite(loss if np.isscalar(loss) else loss[0])
    found = facts.facts(m, "mixed_bfloat16")
    assert found["parameters"] == m.count_params() > 0
    assert found["analytic_forward_flops"] and not found["flops_unknown_layers"], found
    assert found["output_dtype"] == "float32"
    assert {"layer": m.layers[-1].name, "policy": "float32"} in found["policy_overrides"]


def test_token_models_get_token_ids_below_the_vocabulary() -> None:
    prepared = _prepared("gpt", **TINY)
    x, y = harness.synthetic_batch(prepared, Params(model="gpt", **TINY))  # type: ignore[arg-type]
    assert x.shape == (2, 16) and x.dtype == np.int32 and x.min() >= 0 and x.max() < 256
    assert y.shape == (2, 16) and y.max() < 256  # a next-token label per position
    bert = _prepared("bert", **TINY)
    _, y = harness.synthetic_batch(bert, Params(model="bert", **TINY))  # type: ignore[arg-type]
    assert y.shape == (2,) and set(np.unique(y)) <= {0, 1}


def test_every_policy_starts_from_float32s_weights() -> None:
    ref = _prepared("so-cnn", "float32", image_size=32).model.get_weights()
    for policy in ("mixed_float16", "mixed_bfloat16", "float16"):
        prepared = _prepared("so-cnn", policy, image_size=32)
        assert prepared.init == "float32-copy"
        got = prepared.model.get_weights()
        tol = 1e-3 if policy == "float16" else 0  # pure float16 variables round them
        assert all(
            np.allclose(a, b.astype(np.float32), atol=tol) for a, b in zip(ref, got, strict=True)
        )


# ---------------------------------------------------------------- facts


@pytest.mark.parametrize(
    ("model", "size", "width"), [("blog-cnn", 64, None), ("so-cnn", 224, 336), ("so-cnn", 40, 72)]
)
def test_the_layer_walk_agrees_with_the_models_own_formula(
    model: str, size: int, width: int | None
) -> None:
    prepared = _prepared(model, image_size=size, image_width=width)
    m, formula = prepared.model, prepared.forward_flops
    assert formula == models.call(  # called like build, with the arguments it names
        importlib.import_module(models.ZOO[model]).forward_flops,
        {"image_size": size, "image_width": width or size, "seq_len": 1},
    )
    walked = facts.facts(m, "float32")["analytic_forward_flops"]
    assert abs(walked - formula) / formula < 0.001, (walked, formula)


def test_blog_cnn_at_256_has_the_facts_the_report_tests_assume() -> None:
    prepared = _prepared(image_size=256)
    assert 3 * prepared.forward_flops == 8792317440  # type: ignore[operator]
    found = facts.facts(prepared.model, "float32")
    assert [(d["attribute"], d["value"]) for d in found["off_multiple_of_8"]] == [
        ("input channels", 3), ("units", 10)]  # fmt: skip


def test_efficientnet_squeeze_excite_convolutions_are_named_off_8() -> None:
    found = facts.facts(_prepared("efficientnet_b0", image_size=32).model, "float32")
    se = {d["value"] for d in found["off_multiple_of_8"] if "_se_reduce" in d["layer"]}
    assert {4, 6, 10} <= se
    assert found["memory_bound_share"] > 0.75  # depthwise, BN, swish, SE multiplies


# ---------------------------------------------------------------- users' models


def test_a_user_file_model_builds_with_the_arguments_it_names(tmp_path: Path) -> None:
    path = user_models.write(tmp_path, "mine", user_models.GOOD)
    prepared = _prepared(f"{path}:build", "mixed_float16", image_size=24)
    assert prepared.source == "file" and prepared.source_sha256 == models.source_hash(
        models.EntryPoint("file", str(path), "build")
    )
    assert prepared.model.input_shape == (None, 24, 24, 3)
    assert isinstance(prepared.loss, keras.losses.SparseCategoricalCrossentropy)
    assert not prepared.loss.from_logits  # the output is a softmax
    x, y = harness.synthetic_batch(prepared, Params(image_size=24, batch_size=3))
    assert x.shape == (3, 24, 24, 3) and y.shape == (3,) and y.max() < 5


def test_a_user_module_model_is_found_on_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_models.write(tmp_path / "mypkg", "__init__", "")
    user_models.write(tmp_path / "mypkg", "nets", user_models.GOOD)
    monkeypatch.chdir(tmp_path)  # as `python -m` would, the current directory is searched
    monkeypatch.syspath_prepend(str(tmp_path))
    assert models.check("mypkg.nets:build") is None
    assert models.source_dir("mypkg.nets:build") == (str(tmp_path), True)
    before = models.source_hash(models.EntryPoint("module", "mypkg.nets", "build"))
    prepared = _prepared("mypkg.nets:build", image_size=16)
    assert prepared.source == "module" and prepared.source_sha256 == before
    (tmp_path / "mypkg" / "nets.py").write_text(user_models.GOOD + "\n# edited\n")
    assert models.source_hash(models.EntryPoint("module", "mypkg.nets", "build")) != before


@pytest.mark.parametrize("case", list(user_models.BAD))
def test_a_broken_user_model_is_a_model_error_saying_what(tmp_path: Path, case: str) -> None:
    source, says = user_models.BAD[case]
    path = user_models.write(tmp_path, case, source)
    with pytest.raises(harness.ModelError, match=None) as err:
        prepared = _prepared(f"{path}:build", image_size=16)
        harness.synthetic_batch(prepared, Params(image_size=16))
    assert says in str(err.value)


def test_what_mixed_precision_cares_about_is_said(tmp_path: Path) -> None:
    out16 = user_models.write(tmp_path, "out16", user_models.FLOAT16_OUTPUT)
    prepared = _prepared(f"{out16}:build", "mixed_float16")
    assert any("the output is float16" in w for w in prepared.warnings)
    lso = user_models.write(tmp_path, "lso", user_models.OWN_LOSS_SCALE)
    prepared = _prepared(f"{lso}:build", "mixed_float16")
    assert any("LossScaleOptimizer" in w for w in prepared.warnings)
    assert isinstance(prepared.loss, keras.losses.BinaryCrossentropy)  # one sigmoid unit


def test_entry_points_are_checked_without_running_them(tmp_path: Path) -> None:
    path = user_models.write(tmp_path, "m", user_models.GOOD)
    assert models.check(f"{path}:build") is None
    assert "defines no 'make'" in models.check(f"{path}:make")  # type: ignore[operator]
    assert "no such file" in models.check(f"{tmp_path}/nope.py:build")  # type: ignore[operator]
    broken = user_models.write(tmp_path, "broken", "def build(:\n")
    assert "does not parse" in models.check(f"{broken}:build")  # type: ignore[operator]
    assert "no module named 'no_such_pkg_q'" in models.check("no_such_pkg_q.x:build")  # type: ignore[operator]
    for bad in ("resnet", "file.py", "a b:build", "x.py:1build"):
        with pytest.raises(ValueError, match="a built-in model"):
            models.parse(bad)

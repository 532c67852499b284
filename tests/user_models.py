"""Users' model files for the tests: a good one and one of each way a model goes wrong."""

from __future__ import annotations

from pathlib import Path

GOOD = """
import keras
from keras import layers


def build(image_size):
    inputs = keras.Input(shape=(image_size, image_size, 3))
    x = layers.Conv2D(12, 3, padding="same", activation="relu")(inputs)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(5)(x)
    return keras.Model(inputs, layers.Activation("softmax", dtype="float32")(x))
"""

# Each: source, and what the record's error (or warning) must say.
BAD = {
    "import_error": ("import no_such_package_xyz\ndef build():\n    pass\n",
                     "import failed: ModuleNotFoundError"),
    "raises": ("def build():\n    raise RuntimeError('my layer is broken')\n",
               "build() raised RuntimeError: my layer is broken"),
    "returns_int": ("def build():\n    return 42\n",
                    "build() returned int, expected an uncompiled keras.Model"),
    "exits": ("import sys\ndef build():\n    sys.exit(3)\n", "build() raised SystemExit: 3"),
    "unknown_key": (GOOD.replace("def build(", "def _inner(") + "\ndef build(image_size):\n"
                    "    return {'model': _inner(image_size), 'lr': 1}\n", "unknown keys ['lr']"),
    "int_input_without_range": (
        "import keras\n"
        "def build():\n"
        "    t = keras.Input(shape=(8,), dtype='int32')\n"
        "    x = keras.layers.Embedding(50, 8)(t)\n"
        "    x = keras.layers.GlobalAveragePooling1D()(x)\n"
        "    return keras.Model(t, keras.layers.Dense(2, activation='softmax', "
        "dtype='float32')(x))\n",
        "integer input",
    ),
}  # fmt: skip

FLOAT16_OUTPUT = """
import keras

def build():
    inputs = keras.Input(shape=(16, 16, 3))
    x = keras.layers.Conv2D(8, 3)(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    print("hello from build() on stdout")
    return keras.Model(inputs, keras.layers.Dense(4, activation="softmax")(x))
"""

OWN_LOSS_SCALE = """
import keras

def build():
    inputs = keras.Input(shape=(16, 16, 3))
    x = keras.layers.Conv2D(8, 3)(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    out = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(x)
    opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01))
    return {"model": keras.Model(inputs, out), "optimizer": opt}
"""

# A fixed 40x48 input whatever image_size the cell names, its smallest input and its FLOPs
# declared beside build() (docs/models.md).
FIXED = """
import keras
from keras import layers

MIN_IMAGE_SIZE = 40


def build():
    inputs = keras.Input(shape=(40, 48, 3))
    x = layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(3, activation="softmax", dtype="float32")(x))


def forward_flops():
    return 2 * 40 * 48 * 3 * 3 * 3 * 8 + 2 * 8 * 3
"""
FIXED_FORWARD_FLOPS = 829488

HANGS = "import time\ndef build():\n    time.sleep(3600)\n"


def write(folder: Path, name: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(source)
    return path

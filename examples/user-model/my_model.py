"""A user's own model, as mxbench runs it: ``model: my_model.py:build`` (docs/models.md).

A small residual CNN for 10 classes. ``build`` names ``image_size``, so mxbench passes the
cell's; it returns an uncompiled model whose output is float32 (the softmax), as mixed
precision requires. Everything else (seeds, identical initial weights for every policy,
synthetic data, loss, optimizer, compile, loss scaling, timing) is mxbench's.
"""

import keras
from keras import layers


def block(x, filters):
    shortcut = layers.Conv2D(filters, 1, strides=2, padding="same")(x)
    x = layers.Conv2D(filters, 3, strides=2, padding="same", activation="relu")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Conv2D(filters, 3, padding="same")(x)
    return layers.Activation("relu")(layers.Add()([x, shortcut]))


def build(image_size):
    inputs = keras.Input(shape=(image_size, image_size, 3))
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    for filters in (64, 128, 256):
        x = block(x, filters)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(10)(x)
    return keras.Model(inputs, layers.Activation("softmax", dtype="float32")(x), name="mine")

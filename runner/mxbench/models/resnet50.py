"""``resnet50``: ResNet-50 (keras.applications)."""

from mxbench.models._applications import application

SPEC = application(
    "resnet50",
    "ResNet50",
    "ResNet-50 (keras.applications)",
)

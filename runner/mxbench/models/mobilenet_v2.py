"""``mobilenet_v2``: MobileNetV2: depthwise-separable, memory-bound layers."""

from mxbench.models._applications import application

SPEC = application(
    "mobilenet_v2",
    "MobileNetV2",
    "MobileNetV2: depthwise-separable, memory-bound layers",
)

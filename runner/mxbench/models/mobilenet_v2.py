"""``mobilenet_v2``: MobileNetV2: depthwise-separable, memory-bound layers."""

from mxbench.models._applications import application

INPUTS = "image"
MIN_IMAGE_SIZE = 32
CLASSES = 1000

build = application("mobilenet_v2", "MobileNetV2", CLASSES)

"""``convnext_tiny``: ConvNeXt-Tiny: large depthwise kernels and LayerNorm."""

from mxbench.models._applications import application

INPUTS = "image"
MIN_IMAGE_SIZE = 32
CLASSES = 1000

build = application("convnext_tiny", "ConvNeXtTiny", CLASSES)

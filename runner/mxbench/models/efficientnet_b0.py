"""``efficientnet_b0``: EfficientNet-B0: depthwise and squeeze-excite, small channel counts."""

from mxbench.models._applications import application

INPUTS = "image"
MIN_IMAGE_SIZE = 32
CLASSES = 1000

build = application("efficientnet_b0", "EfficientNetB0", CLASSES)

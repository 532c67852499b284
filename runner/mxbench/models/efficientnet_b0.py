"""``efficientnet_b0``: EfficientNet-B0: depthwise and squeeze-excite, small channel counts."""

from mxbench.models._applications import application

SPEC = application(
    "efficientnet_b0",
    "EfficientNetB0",
    "EfficientNet-B0: depthwise and squeeze-excite, small channel counts",
)

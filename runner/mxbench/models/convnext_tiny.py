"""``convnext_tiny``: ConvNeXt-Tiny: large depthwise kernels and LayerNorm."""

from mxbench.models._applications import application

SPEC = application(
    "convnext_tiny",
    "ConvNeXtTiny",
    "ConvNeXt-Tiny: large depthwise kernels and LayerNorm",
)

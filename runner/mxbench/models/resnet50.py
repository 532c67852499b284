"""``resnet50``: ResNet-50 (keras.applications)."""

from mxbench.models._applications import application

INPUTS = "image"
MIN_IMAGE_SIZE = 32
CLASSES = 1000

build = application("resnet50", "ResNet50", CLASSES)

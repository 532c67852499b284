"""A cell over several devices or processes: data parallel through each backend's own
mechanism (``distribute``), TensorFlow's workers (``workers``), PyTorch's processes
(``torch_launch``, ``torch_workers``), independent replicas (``independent``) and how the
devices are linked (``interconnect``)."""

"""What runs inside an image: one cell of the experiment, measured in one fresh process.

``params`` (validated arguments) and ``backends`` (TensorFlow, JAX, PyTorch behind one
protocol); ``process`` (the measured process: a cell, or the arms of a paired comparison,
its timing, training runs and serving cells), ``model`` (the harness around a model, its
input, its facts, its convergence check), ``evidence`` (probes, profiles, energy,
interference, GPU health) and ``parallel`` (several devices or processes).

Nothing here imports docker, pandas or pydantic; Keras and TensorFlow are imported lazily.
"""

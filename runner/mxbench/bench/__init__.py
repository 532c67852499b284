"""What runs inside an image: one cell of the experiment, measured in one fresh process.

``params`` (validated arguments), ``model`` (the published CNN), ``data`` (synthetic or an
Imagenette-layout folder), ``timing`` (per-step times and their summary), ``probe`` (the
environment, backend-agnostic), ``probe_tf`` (what only TensorFlow can tell), ``stdio``
(keeping stdout for the one JSON record), ``cell`` (all of it, end to end, into a record).

Nothing here imports docker, pandas or pydantic; Keras and TensorFlow are imported lazily.
"""

"""The measured process: one cell (``cell``: one policy) or the arms of one comparison
(``paired``, in interleaved ``windows``), what both keep between their phases (``state``),
the step timing (``timing``), the training run (``train``) and the serving cell (``infer``)
kinds of cell, and stdout kept for the one JSON record (``stdio``)."""

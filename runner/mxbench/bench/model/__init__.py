"""The model a cell measures: the harness around a model plugin (``harness``), its input
(``data``), its optimizer's loss scaling (``loss_scale``), its forward pass compiled by the
backend (``compiled``), the facts the record keeps about it (``facts``), whether it still
trains like float32 (``convergence``), and the weights a serving cell serves (``served``)."""

"""From the matrix to the processes that run: the cells and their stable keys
(:mod:`.cell`), how many processes a cell needs under ``repeats: auto`` (:mod:`.repeats`,
the rule; :mod:`.rounds`, the run's rounds), and which training run a serving cell's
trained weights come from (:mod:`.trained`).

Empty on purpose: importing one module of the package imports nothing else.
"""

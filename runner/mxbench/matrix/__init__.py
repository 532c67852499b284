"""The matrix: what a user asks for, checked before anything runs. The cell parameters,
declared once (:mod:`.params`); the matrix file, its schema and loading (:mod:`.file`, read
as YAML by :mod:`.reader`, shared schema pieces in :mod:`.schema`); the hosts' models
(:mod:`.hosts`); what a serving cell may be asked (:mod:`.serving`); the batch arithmetic of
several devices (:mod:`.scale`); the batch-size search (:mod:`.search`).

Empty on purpose: importing one module of the package imports nothing else.
"""

"""One module per CLI command (asv-style); each exposes one typer command function."""

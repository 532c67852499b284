"""What a cell reads beside its step times: the environment (``probe``, ``probe_tf``), where
the time went (``profile``, ``profile_ops``, ``onednn``), energy (``energy``), what else the
machine did (``interference``) and the GPU's utilisation and health (``gpu_health``)."""

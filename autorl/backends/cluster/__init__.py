"""The Ray path: `ClusterBackend` (backend.py) with its config (config.py), request routing (routing.py), Ray
actors (actors.py) and the local address of the embedded model's replicas (proxy.py). Import the module you
need: this package imports nothing, so `ClusterConfig` loads without Ray."""

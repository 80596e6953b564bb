"""ART's `art.tinker` path. autorl has no Tinker backend: each name here is one clear error saying what to use."""

from .errors import refusing

TINKER = (
    "autorl has no Tinker backend (a hosted training service); train on this machine with `LocalBackend`, on a Ray "
    "cluster with `ClusterBackend`, or on a GPU machine with `autorl serve` and `RemoteBackend`"
)
"""What every Tinker name of ART's answers."""

__getattr__ = refusing("autorl.tinker", {"TinkerBackend": TINKER, "TinkerNativeBackend": TINKER})

"""ART's `art.skypilot` path. autorl has no SkyPilot backend: each name here is one clear error saying what to use."""

from .errors import refusing

__getattr__ = refusing(
    "autorl.skypilot",
    {
        "SkyPilotBackend": "autorl has no SkyPilot backend; start `autorl serve` on the GPU machine (SkyPilot or "
        "any launcher can run it there) and train through `autorl.RemoteBackend(url, api_key=...)`",
    },
)

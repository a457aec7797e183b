"""Test-wide settings: litellm must never try to download its price list (no network in CI)."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.pop("TEA_MODEL", None)  # tests choose their models explicitly

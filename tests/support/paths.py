"""Where the tests find the repository and the real Criteo rows (``../shared/data``, never committed here)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
CRITEO_SAMPLE = SHARED_DATA / "criteo_kaggle_train_head10k.tsv.gz"

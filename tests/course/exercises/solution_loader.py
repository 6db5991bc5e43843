"""The model solutions in exercises/solutions/ (plain files a learner opens, not a package), loaded by path."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def load(name: str, fn: str):
    """exercises/solutions/<name>.py's function `fn`."""
    spec = importlib.util.spec_from_file_location(f"solution_{name}", ROOT / "exercises" / "solutions" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, fn)

"""Where coach finds the data it ships: prompts, migrations and alembic.ini.

In a source checkout (editable install) they sit at the top of the repository; an
installed wheel carries copies under ``coach/_data``.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DATA = Path(__file__).resolve().parent / "_data"
_REPO_ROOT = Path(__file__).resolve().parents[2]


def resource_path(name: str) -> Path:
    """Return the path of a shipped resource (``prompts``, ``migrations``, ``alembic.ini``)."""
    packaged = _PACKAGE_DATA / name
    if packaged.exists():
        return packaged
    return _REPO_ROOT / name

from tests.agents.conftest import open_runtime, runtime, settings

__all__ = ["open_runtime", "runtime", "settings"]

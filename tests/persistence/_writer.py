"""A second OS process writing to the same session (used by test_concurrency).

Usage: python _writer.py URL SESSION_ID ACTOR COUNT
Prints "ready", waits for a line on stdin (the go signal), writes, prints "done".
"""

from __future__ import annotations

import asyncio
import os
import sys

from coach.persistence import open_repository
from coach.persistence.crypto import MasterKeys
from coach.state import DeltaSpec

SECRET = b"coach-test-secret-0123456789abcdef"


async def main(url: str, session_id: str, actor: str, count: int) -> None:
    repo = await open_repository(
        url,
        secret=SECRET,
        master_keys=MasterKeys.of(os.environ["COACH_MASTER_KEY"]),
        keys_url=os.environ.get("COACH_KEYS_URL"),
    )
    try:
        await repo.get_state(session_id)  # connect before the race starts
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        for i in range(count):
            spec = DeltaSpec(
                trigger="system", source="system", actor_id=actor, delta_type="update", path="data"
            )
            await repo.update_data(session_id, {"writer": actor, "i": i}, spec)
            await repo.add_session_message(session_id, "assistant", f"{actor} {i}")
        print("done", flush=True)
    finally:
        await repo.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))

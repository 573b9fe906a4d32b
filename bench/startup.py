"""What each ``python -m coach`` command costs before it does its work: process CPU,
and the memory it takes.

Each trial is a fresh ``python -m coach ...`` process; the figure is its CPU (user +
system, all threads): to exit for a command that runs no agent, and to the greeting's
line for ``chat`` (read from ``/proc`` the moment ``coach>`` is printed, against the
local fake OpenAI server). Beside it, the process's peak resident memory to the same
point. Every trial also says whether ``livekit.agents`` was loaded.
In the same rounds, a fresh process imports what of SPEC §1's stack the command cannot
do without (:data:`STACKS`): how much of a figure is the stack's on this machine, and how
much coach adds over it (paired, round by round). An absolute target can be out of
reach on a slow machine by the stack alone; the verdict then says so.

With ``--before REV`` the same commands also run from the source of commit ``REV``
(``git archive``), trials of the two trees alternating in pairs (ABBA...), after one
warm-up trial, so drift on a shared machine falls on both; the report is the medians of
each and of the paired differences, and the verdict of this tree's median against the
target of issue 25 (:data:`TARGET`: 0.5 s for a command that runs no agent, 2.5 s for
``chat`` to its greeting), with the load average before and after. Run from the
repository root (Linux)::

    python -m bench.startup --pairs 7 --before 4772e08
    python -m bench.startup --pairs 3 --cases help,chat   # some commands, this tree only
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from coach.testing import Reply

ROOT = Path(__file__).resolve().parents[1]
SECRET = "bench-startup-secret-0123456789abcdef"
GREETING = "Hi! I'm your design coach. What's your name?"
TICK = os.sysconf("SC_CLK_TCK")
PROBE = (
    "import atexit, os, sys; stack = os.environ.pop('BENCH_STACK', '').split(); "
    "atexit.register(lambda: print('livekit.agents loaded:', 'livekit.agents' in sys.modules, "
    "'\\nstack not loaded:', *[m for m in stack if m not in sys.modules], file=sys.stderr)); "
    "atexit.register(lambda: print('peak kB:', *[line.split()[1] for line in "
    "open('/proc/self/status') if line.startswith('VmHWM:')], file=sys.stderr)); "
    "import runpy; sys.argv = ['coach', *sys.argv[1:]]; "
    "runpy.run_module('coach', run_name='__main__')"
)
"""``python -c PROBE ARGS`` runs ``python -m coach ARGS`` and says, at exit, whether
``livekit.agents`` was imported, which of the modules named in ``BENCH_STACK`` were
not, and its peak resident memory (``VmHWM``: this program's own, where ``wait4``'s
``ru_maxrss`` would count the forked parent's memory from before the ``exec``)."""


@dataclass(frozen=True)
class Case:
    """One command: its arguments, the environment it adds, and what ends the trial."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    greeting: bool = False
    """Measure to the greeting's line (``chat``), not to exit."""
    exit: int = 0
    """The exit code the command must give (2: it stops at a bad or missing setting):
    a trial that exits otherwise measured some other path, and fails."""
    stack: str = ""
    """The name of the :data:`STACKS` entry this command cannot do without ("" if none)."""

    @property
    def target(self) -> float:
        """Issue 25's target for this command, in seconds of CPU."""
        return TARGET["chat" if self.greeting else "no agent"]


TARGET = {"no agent": 0.5, "chat": 2.5}
"""Seconds of CPU: a command that runs no agent, or any check made at start, to its exit;
``chat`` to its greeting."""


_SETTINGS = ("argparse", "pydantic_settings")
_STORE = (
    *_SETTINGS,
    *("asyncio", "sqlite3", "sqlalchemy", "sqlalchemy.dialects.sqlite"),
    "cryptography.hazmat.primitives.ciphers.aead",
)
STACKS: dict[str, tuple[str, ...]] = {
    "settings": _SETTINGS,
    "store": _STORE,
    "token": (*_SETTINGS, "livekit.api"),
    "agent": (*_STORE, "yaml", "livekit.agents", "livekit.plugins.openai"),
}
"""For scale: the modules of SPEC §1's stack a command cannot do without, and nothing of
coach's — its settings (pydantic-settings); a database's (SQLAlchemy Core, the SQLite
dialect, sqlite3, asyncio, cryptography's AES-GCM for the sealed fields); a token's
(``livekit.api``); a text chat's (the database's, PyYAML for the prompts,
``livekit.agents`` and its OpenAI plugin). Each is imported in a fresh process in the
same rounds as its commands: the part of a command's CPU no change to coach can remove,
on the machine at hand. A trial of this tree fails if its command did not load them all."""


LIVEKIT = {"LIVEKIT_API_KEY": "devkey", "LIVEKIT_API_SECRET": "secret-" + "x" * 32}
CASES: dict[str, Case] = {
    "help": Case(("--help",)),
    "bad-setting": Case(
        ("sessions", "list"), {"COACH_DATABASE_URL": "bogus://x"}, exit=2, stack="settings"
    ),
    "sessions-list": Case(("sessions", "list"), stack="store"),
    "sessions-show": Case(("sessions", "show", "{session}"), stack="store"),
    "users-show": Case(("users", "show", "ada"), stack="store"),
    "db-upgrade": Case(("db", "upgrade"), stack="store"),
    "keys-new": Case(("keys", "new"), stack="settings"),
    "token": Case(("token", "--identity", "ada"), LIVEKIT, stack="token"),
    "token-no-keys": Case(("token", "--identity", "ada"), exit=2, stack="settings"),
    "web-no-livekit": Case(("web",), exit=2, stack="settings"),
    "chat-no-llm": Case(("chat",), {"COACH_LLM_BASE_URL": ""}, exit=2, stack="settings"),
    "dev-no-livekit": Case(("dev",), exit=2, stack="settings"),
    "chat": Case(("chat", "--user", "ada"), greeting=True, stack="agent"),
}
"""What is measured. ``sessions-list``, ``sessions-show`` and ``users-show`` read the
session the set-up visit stored (:data:`VISIT`)."""


def _cpu_of(pid: int) -> float:
    """Seconds of CPU (user + system, every thread) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _peak_of(pid: int) -> float:
    """Process ``pid``'s peak resident memory so far (MB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


class Trial(NamedTuple):
    """One run of a command."""

    cpu: float
    """CPU seconds (user + system, every thread): to exit, or to ``chat``'s greeting."""
    loaded: bool
    """Whether ``livekit.agents`` was imported."""
    peak: float
    """Peak resident memory (MB) to the same point as :attr:`cpu`."""


@dataclass
class Tree:
    """A source tree to run coach from, with its own home and SQLite file."""

    name: str
    root: Path
    home: Path
    session: str = ""

    def env(self, case: Case, url: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("COACH_", "OPENAI_"))}
        env = {k: v for k, v in env.items() if not k.startswith("LIVEKIT_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user runs it: from cached bytecode
        env.update(
            PYTHONPATH=str(self.root / "src"),
            HOME=str(self.home),
            XDG_DATA_HOME=str(self.home / "data"),
            COACH_DATABASE_URL=f"sqlite+aiosqlite:///{self.home / 'coach.db'}",
            COACH_SECRET_KEY=SECRET,
            COACH_LLM_BASE_URL=url,
            COACH_LLM_MODEL="fake",
            PYTHONUNBUFFERED="1",
        )
        env.update(case.env, BENCH_STACK=" ".join(STACKS.get(case.stack, ())))
        return env


def trial(tree: Tree, case: Case, url: str) -> Trial:
    """One run of ``case`` from ``tree``."""
    argv = [a.replace("{session}", tree.session) for a in case.argv]
    proc = subprocess.Popen(
        [sys.executable, "-c", PROBE, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=tree.env(case, url),
        cwd=tree.home,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    err: list[str] = []
    stderr = proc.stderr
    reader = threading.Thread(target=lambda: err.extend(stderr), daemon=True)
    reader.start()
    cpu: float | None = None
    peak = 0.0
    if case.greeting:
        for line in proc.stdout:
            if line.startswith("coach> "):
                cpu, peak = _cpu_of(proc.pid), _peak_of(proc.pid)
                break
        proc.stdin.close()
        proc.stdout.read()
    else:
        proc.stdin.close()
        proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join(timeout=30)
    if proc.returncode != case.exit:
        raise RuntimeError(
            f"{tree.name}: {' '.join(argv)} exited {proc.returncode}, not {case.exit}: "
            f"{''.join(err)[-2000:]}"
        )
    if cpu is None:
        if case.greeting:
            raise RuntimeError(f"{tree.name}: no greeting from chat: {''.join(err)[-2000:]}")
        cpu = usage.ru_utime + usage.ru_stime
        said = [w[2] for line in err if (w := line.split())[:2] == ["peak", "kB:"] and len(w) == 3]
        if not said:
            raise RuntimeError(f"{tree.name}: {' '.join(argv)}: no peak memory from the probe")
        peak = int(said[0]) / 1024
    loaded = any(line.strip() == "livekit.agents loaded: True" for line in err)
    missing = [line for line in err if line.startswith("stack not loaded:")]
    if tree.root == ROOT and missing != ["stack not loaded:\n"]:  # an older tree may differ
        raise RuntimeError(f"{tree.name}: {' '.join(argv)}: {''.join(missing) or 'no probe'}")
    return Trial(cpu, loaded, peak)


def stack_trial(case: Case) -> float:
    """One fresh process importing ``case``'s :data:`STACKS` as a command's start-up does
    (:func:`coach.__main__.main`: the cyclic collector paused, then what was built frozen
    out of it): its CPU seconds — to its exit, or, for a case measured to its greeting, to
    the imports' end (a process's exit frees its modules, which ``chat``'s figure does not
    include)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COACH_", "PYTHONPATH"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    code = f"import gc; gc.disable(); import {', '.join(STACKS[case.stack])}; gc.freeze()"
    if case.greeting:
        code += "; import os; os._exit(0)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"{case.stack!r} stack ({code}) failed: {err[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def _archive(rev: str, into: Path) -> Path:
    """The source of commit ``rev`` (code, prompts, migrations) unpacked into ``into``."""
    into.mkdir(parents=True)
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src", "prompts", "migrations", "alembic.ini"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return into


VISIT: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("I'm Ada", "identify_user", {"name": "Ada"}),
    ("My budgeting app's onboarding", "capture_design_challenge", {"challenge": "Onboarding"}),
)
"""The stored visit each tree's commands list and show: what ``ada`` types, and the tool
the scripted model calls for it (then one line of text)."""


def _visit_replies() -> list[Reply]:
    """What the fake model answers in one tree's set-up visit, greeting first."""
    from coach.testing import call, say

    replies = [say(GREETING)]
    for _, tool, arguments in VISIT:
        replies += [call(tool, **arguments), say("Noted.")]
    return replies


def _setup(tree: Tree, url: str) -> None:
    """A stored visit of ``ada`` (she gives her name and a design challenge: a session
    with its first phase) to list and show; remembers its id."""
    tree.home.mkdir(parents=True)
    env, coach = tree.env(CASES["chat"], url), (sys.executable, "-m", "coach")
    run = functools.partial(
        subprocess.run, capture_output=True, text=True, check=True, env=env, cwd=tree.home
    )
    run([*coach, "chat", "--user", "ada"], input="".join(f"{line}\n" for line, _, _ in VISIT))
    out = run([*coach, "sessions", "list"]).stdout
    tree.session = out.split()[0]
    if len(tree.session) != 32:
        raise RuntimeError(f"{tree.name}: no session stored by the set-up visit: {out!r}")


async def _run(names: Sequence[str], pairs: int, before: str | None) -> None:
    from coach.testing import FakeOpenAIServer, say

    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="coach-startup-") as tmp:
        work = Path(tmp)
        trees = [Tree("now", ROOT, work / "home-now")]
        if before:
            trees.insert(0, Tree(f"at {before}", _archive(before, work / "before"), work / "hb"))
        greetings = (2 * pairs + 2) * len(trees) + 4
        script = _visit_replies() * len(trees) + [say(GREETING)] * greetings
        async with FakeOpenAIServer(script) as server:
            url = server.base_url
            for tree in trees:
                await asyncio.to_thread(_setup, tree, url)
            for name in names:
                case = CASES[name]
                runs: dict[str, list[Trial]] = {t.name: [] for t in trees}
                stack: list[float] = []
                await asyncio.to_thread(trial, trees[-1], case, url)  # warm-up
                if case.stack:
                    await asyncio.to_thread(stack_trial, case)
                for n in range(pairs):
                    for tree in trees if n % 2 == 0 else trees[::-1]:
                        runs[tree.name].append(await asyncio.to_thread(trial, tree, case, url))
                    if case.stack:
                        stack.append(await asyncio.to_thread(stack_trial, case))
                _row(name, case, runs, [t.name for t in trees], stack)
    print(f"command: python -m bench.startup --pairs {pairs} --cases {','.join(names)}", end="")
    print(f" --before {before}" if before else "")
    print(f"load average (1, 5, 15 min): {load_before} before, {_load()} after")


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


_header = False


STACK_COLUMN = "its stack's imports alone: CPU s, median"
PEAK_COLUMN = "peak RSS MB, median"
OVER_COLUMN = "coach over them: paired difference, median"


def stack_verdict(
    cpu: float, stack: float | None, target: float, *, missed: str = "not met"
) -> str:
    """``met`` or ``missed`` — with why, when the stack's imports alone are over."""
    if cpu <= target:
        return "met"
    if stack is not None and stack > target:
        return f"{missed}: its stack alone is over the target here"
    return missed


def _row(
    name: str,
    case: Case,
    runs: dict[str, list[Trial]],
    trees: list[str],
    stack: list[float],
) -> None:
    global _header
    if not _header:
        cols = " | ".join(f"{t}: CPU s, median" for t in trees)
        diff = " | paired difference, median" if len(trees) == 2 else ""
        peaks = " | ".join(f"{t}: {PEAK_COLUMN}" for t in trees)
        verdict = f"verdict ({trees[-1]})"
        print(
            f"| command | {cols}{diff} | livekit.agents loaded | {peaks} | {STACK_COLUMN} | "
            f"{OVER_COLUMN} | target | {verdict} |"
        )
        print("|---" * (2 * len(trees) + (7 if len(trees) == 2 else 6)) + "|")
        _header = True
    meds = [statistics.median(run.cpu for run in runs[t]) for t in trees]
    cells = " | ".join(f"{m:.2f}" for m in meds)
    if len(trees) == 2:
        diffs = [a.cpu - b.cpu for a, b in zip(runs[trees[0]], runs[trees[1]], strict=True)]
        cells += f" | {statistics.median(diffs):.2f}"
    loaded = " / ".join(_yes_no([run.loaded for run in runs[t]]) for t in trees)
    peaks = " | ".join(f"{statistics.median(run.peak for run in runs[t]):.0f}" for t in trees)
    alone = over = "–"
    if stack:
        own = [run.cpu - s for run, s in zip(runs[trees[-1]], stack, strict=True)]
        alone, over = f"{statistics.median(stack):.2f}", f"{statistics.median(own):+.2f}"
    median = statistics.median(stack) if stack else None
    verdict = stack_verdict(meds[-1], median, case.target)
    print(
        f"| {name} | {cells} | {loaded} | {peaks} | {alone} | {over} | ≤ {case.target:g} s | "
        f"{verdict} |",
        flush=True,
    )


def _yes_no(said: Sequence[bool]) -> str:
    """``yes`` if every trial said so, ``no`` if none did, ``?`` if they differ."""
    return "yes" if all(said) else "no" if not any(said) else "?"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.startup")
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated names")
    parser.add_argument("--before", metavar="REV", help="also run commit REV's source, paired")
    args = parser.parse_args(argv)
    names = [n for n in args.cases.split(",") if n]
    unknown = set(names) - set(CASES)
    if unknown:
        parser.error(f"unknown cases: {', '.join(sorted(unknown))} (known: {', '.join(CASES)})")
    asyncio.run(_run(names, args.pairs, args.before))


if __name__ == "__main__":
    main()

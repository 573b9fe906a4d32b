"""Deterministic, English-like conversation text for the benchmarks.

A turn is a user message of about 180 characters and an assistant reply of about 420.
The words are drawn from a few hundred common English and design-coaching words with a
Zipf-like frequency, in sentences of varying length with punctuation, so the text
compresses about as well as real prose does (about 2.5-3x with zlib), not like repeated
characters would. :func:`corpus_stats` reports that ratio so a reader can check.
"""

from __future__ import annotations

import itertools
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

USER_CHARS = 180
ASSISTANT_CHARS = 420

_VOCABULARY = """
the of and to a in that it is was i for on you he be with as by at have are this not but
from or they his she her we an there been if more when will would who so no one all what
can out up about into than them some could time very only then its do now first like over
also new just any way your because most people these know other well should many much where
make think need want really feel good try help work still find thing things maybe even make
user users design idea ideas problem goal goals step steps screen flow team product app
budget onboarding account setup question questions answer month week day habit progress
reward simple clear value trust worry friction reminder prompt choice choices option path
customer customers research interview insight insights pattern patterns journey moment test
prototype sketch feedback metric signal risk cost price plan plans feature features story
first second next last small large early late quick slow easy hard useful better best
because although while since unless until whether though however perhaps probably often
usually rarely sometimes always never already again together instead almost enough quite
let us look see show tell ask explain describe compare choose decide change keep start stop
open close build ship measure learn notice understand remember imagine suggest agree
could might must shall would should may can will does did has had made said went came took
their our my its whose which whom those such each every both few several another same
people who sign up for the first time often feel lost when the setup asks for too much
we could group the questions into three short screens and show progress after each one
what if the app explained why it needs the bank link before asking for it at all
that sounds promising so let us write down the riskiest assumption and plan a small test
time money family home travel food health school job city weekend evening morning phone
card bill payment saving savings spending category categories limit alert summary chart
""".split()

_CONNECTORS = ["and", "but", "so", "because", "while", "although", "which", "then"]
_ENDINGS = [".", ".", ".", ".", "?", "!"]


def _weights(size: int) -> list[float]:
    """Zipf-like weights: the n-th word is drawn about 1/(n+2) as often as the first."""
    return [1.0 / (rank + 2) for rank in range(size)]


def _ordered_vocabulary(rng: random.Random) -> list[str]:
    """The vocabulary without duplicates, shuffled once so rank is not alphabetical."""
    words = list(dict.fromkeys(_VOCABULARY))
    head, tail = words[:60], words[60:]  # keep function words frequent, like real text
    rng.shuffle(tail)
    return head + tail


class TextGenerator:
    """Seeded source of English-like sentences of a requested length."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._words = _ordered_vocabulary(random.Random(seed ^ 0x5EED))
        self._cumulative = list(itertools.accumulate(_weights(len(self._words))))

    def _sentence(self) -> str:
        rng = self._rng
        count = rng.randint(5, 19)
        words = rng.choices(self._words, cum_weights=self._cumulative, k=count)
        if count > 9 and rng.random() < 0.5:  # a clause: "..., because ..."
            cut = rng.randint(3, count - 4)
            words[cut - 1] += ","
            words.insert(cut, rng.choice(_CONNECTORS))
        text = " ".join(words)
        return text[0].upper() + text[1:] + rng.choice(_ENDINGS)

    def text(self, target: int) -> str:
        """Whole sentences totalling ``target`` characters within about ±10 %."""
        low, high = int(target * 0.95), int(target * 1.1)
        parts: list[str] = []
        size = -1
        while size < low:
            sentence = self._sentence()
            if size + 1 + len(sentence) > high:
                if size >= low * 0.8 and parts:
                    break
                sentence = sentence[: max(8, high - size - 2)].rstrip(" ,") + "."
            parts.append(sentence)
            size += 1 + len(sentence)
        return " ".join(parts)


@dataclass(frozen=True)
class Turn:
    """One exchange: what the user said and what the assistant answered."""

    user: str
    assistant: str

    @property
    def text_bytes(self) -> int:
        """UTF-8 bytes of both messages' text: the denominator of the storage ratio."""
        return len(self.user.encode()) + len(self.assistant.encode())


def turns(seed: int, count: int) -> list[Turn]:
    """``count`` turns from the generator seeded with ``seed`` (same seed, same text)."""
    gen = TextGenerator(seed)
    return [Turn(gen.text(USER_CHARS), gen.text(ASSISTANT_CHARS)) for _ in range(count)]


def iter_turns(seed: int) -> Iterator[Turn]:
    """An endless stream of turns (for load generators that run for a time)."""
    gen = TextGenerator(seed)
    while True:
        yield Turn(gen.text(USER_CHARS), gen.text(ASSISTANT_CHARS))


@dataclass(frozen=True)
class CorpusStats:
    """Sizes of a set of turns, to show the text is not trivially compressible."""

    turns: int
    mean_user_chars: float
    mean_assistant_chars: float
    zlib_ratio_per_message: float
    """Raw / zlib-compressed size, each message compressed alone (as a row would be)."""
    zlib_ratio_whole: float
    """Raw / zlib-compressed size of all the text at once (an upper bound)."""


def corpus_stats(sample: list[Turn]) -> CorpusStats:
    """Lengths and zlib compressibility of ``sample``."""
    messages = [m.encode() for t in sample for m in (t.user, t.assistant)]
    raw = sum(len(m) for m in messages)
    alone = sum(len(zlib.compress(m, 6)) for m in messages)
    whole = len(zlib.compress(b"\n".join(messages), 9))
    return CorpusStats(
        turns=len(sample),
        mean_user_chars=sum(len(t.user) for t in sample) / len(sample),
        mean_assistant_chars=sum(len(t.assistant) for t in sample) / len(sample),
        zlib_ratio_per_message=raw / alone,
        zlib_ratio_whole=raw / whole,
    )

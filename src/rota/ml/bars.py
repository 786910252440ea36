"""Progress bars in a job's output: tqdm, Rich, Keras and mmengine, with the rate and the
time left they show, and a rate or time left standing alone in a line.

Each reader takes one cleaned line and a ``_Draft`` (:mod:`rota.ml.reading`) and fills
in the step, its total, the epoch, the rate and eta_s it finds. A bar that counts
something other than training steps (a side task's, a nested one, bytes) gives no
progress. The formats, with examples, are in :mod:`rota.ml.parse`'s docstring, whose
``LineParser`` calls these in its order.
"""

from __future__ import annotations

import re

from rota.ml.reading import _BAR, _ITER, _Draft

# re.ASCII everywhere: \d and \w would otherwise take other scripts' digits and letters.
_A = re.ASCII
_AI = re.ASCII | re.IGNORECASE

_TIME = r"(?:[0-9]{1,6}\s*days?,\s*)?[0-9]{1,9}:[0-9]{2}(?::[0-9]{2})?"

_TQDM = re.compile(
    r"(?P<pct>[0-9]{1,3})%\|[^|]{0,400}\|\s*"
    r"(?P<n>[0-9.]{1,20}[kMGTPEZY]?)/(?P<total>[0-9.]{1,20}[kMGTPEZY]?)\s*"
    r"\[(?P<elapsed>" + _TIME + r")<(?P<remaining>" + _TIME + r"|\?)"
    r"(?:,\s*(?P<rate>[^,\]]{1,40}))?[^\]]*\]", _A)
_TQDM_NO_TOTAL = re.compile(
    r"(?<![\w.])(?P<n>[0-9]{1,15})(?P<unit>[A-Za-z]{1,12})\s\[(?P<elapsed>" + _TIME + r")"
    r"(?:,\s*(?P<rate>[^,\]]{1,40}))?[^\]]*\]", _A)
_TQDM_RATE = re.compile(
    r"\s*(?P<v>[0-9]{1,15}(?:\.[0-9]+)?|\?)\s?"
    r"(?:(?P<si>[kMGTPEZY])?(?P<unit>[A-Za-z]{1,12})/s|s/(?P<inv>[A-Za-z]{1,12}))\s*", _A)
_SI = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Z": 1e21, "Y": 1e24}
_ITER_UNITS = frozenset({"it", "its", "iter", "iters", "iteration", "iterations",
                         "step", "steps", "batch", "batches"})
# Words that start a side task's bar description. At a word start only: "DataLoader"
# and "latest" are no side tasks.
_SIDE_TASK = re.compile(
    r"\b(?:valid|eval|test|predict|sanity|load|download|upload|fetch|map|filter|token|shard"
    r"|extract|convert|saving|writ|generat|infer|preprocess|resolv)", _AI)

_KERAS = re.compile(
    r"^\s*(?P<n>[0-9]{1,15})/(?:(?P<total>[0-9]{1,15})\s+(?:\[[=>.]*\]|(?P<rich>━+)"
    r"(?:\s+(?P<eta>[0-9]{1,9}s|[0-9]{1,9}:[0-9]{2}(?::[0-9]{2})?)(?=\s|$))?|-\s)"
    r"|Unknown\b)", _A)
_RICH = re.compile(
    r"(?<![━╸╺])[━╸╺]{3,}\s+(?P<n>[0-9]{1,15})/(?P<total>[0-9]{1,15})(?![\w.])"
    r"(?:\s+" + _TIME + r"\s*•\s*(?P<remaining>" + _TIME + r"))?", _A)
_MMENGINE = re.compile(
    r"(?<!\w)(?P<kind>Epoch|Iter)\((?P<mode>[A-Za-z]{1,10})\)\s*"
    r"\[\s*(?P<a>[0-9]{1,15})(?:\s*/\s*(?P<at>[0-9]{1,15}))?\s*\]"
    r"(?:\s*\[\s*(?P<b>[0-9]{1,15})\s*/\s*(?P<bt>[0-9]{1,15})\s*\])?", _A)

_RATE = re.compile(
    r"(?<![\w.])(?P<v>[0-9]{1,15}(?:\.[0-9]+)?)\s?(?P<unit>it/s|s/it|ms/step|us/step|µs/step"
    r"|s/step)(?![\w/])", _A)
_ETA = re.compile(
    r"(?<![\w.])eta\s*[:=]?\s*(?:(?P<t>" + _TIME + r")|(?P<s>[0-9]{1,9}(?:\.[0-9]+)?)\s?"
    r"(?:s|sec|secs|seconds))(?![\w:])", _AI)


def _seconds(text: str) -> float | None:
    """``mm:ss``, ``h:mm:ss`` or ``N days, h:mm:ss`` -> seconds."""
    days = 0
    if "day" in text:
        head, _, text = text.partition(",")
        days = int(head.split()[0].replace("days", "").replace("day", ""))
    parts = [int(p) for p in text.strip().split(":")]
    if len(parts) == 2:
        secs = parts[0] * 60 + parts[1]
    elif len(parts) == 3:
        secs = parts[0] * 3600 + parts[1] * 60 + parts[2]
    else:
        return None
    return float(days * 86400 + secs)


def _count(text: str) -> int | None:
    # tqdm's unit-scaled counts ("1.2k") are rounded: not exact enough for a step.
    return int(text) if text.isdigit() and len(text) <= 15 else None


def _bar_rate(text: str | None) -> tuple[bool, float | None]:
    """(unit is an iteration, iterations per second) from a tqdm rate like ``14.8it/s``."""
    if text is None:
        return True, None  # a custom bar_format without the rate: assume iterations
    m = _TQDM_RATE.fullmatch(text)
    if m is None:
        return False, None
    unit = (m["unit"] or m["inv"]).lower()
    if unit not in _ITER_UNITS:
        return False, None
    if m["v"] == "?":
        return True, None
    v = float(m["v"])
    if m["inv"]:
        return True, (1.0 / v if v > 0 else None)
    return True, (v * _SI[m["si"]] if m["si"] else v)


def _tqdm_bar(text: str, d: _Draft, nested: bool) -> tuple[bool, int]:
    """A tqdm bar (with a total or without): whether there is one, and where the other
    rules start."""
    if "%|" in text and (m := _TQDM.search(text)):
        iters, rate = _bar_rate(m["rate"])
        if not iters or nested or _SIDE_TASK.search(text, 0, m.start()):
            return True, m.start()
        done, of = _count(m["n"]), _count(m["total"])
        if done is not None:
            d.progress(_BAR, done, of or None)
        d.rate = rate
        if m["remaining"] != "?":
            d.eta_s = _seconds(m["remaining"])
        return True, 0
    if "[" in text and (m := _TQDM_NO_TOTAL.search(text)):
        iters, rate = _bar_rate(m["rate"])
        if (m["unit"].lower() not in _ITER_UNITS or not iters or nested
                or _SIDE_TASK.search(text, 0, m.start())):
            return True, m.start()
        d.progress(_BAR, int(m["n"]), None)
        d.rate = rate
        return True, 0
    return False, 0


def _rich_bar(text: str, d: _Draft, bar: bool, start: int) -> tuple[bool, int]:
    """A Rich progress bar; a side task's bar moves ``start`` past it."""
    if not ("━" in text or "╸" in text or "╺" in text) or not (m := _RICH.search(text)):
        return bar, start
    if _SIDE_TASK.search(text, 0, m.start()):
        return True, m.start()
    # its rate stands alone after the bar: the standalone rule reads it
    d.progress(_BAR, int(m["n"]), int(m["total"]) or None)
    if m["remaining"]:
        d.eta_s = _seconds(m["remaining"])
    return bar, start


def _keras_bar(text: str, d: _Draft) -> None:
    if not (text[:1].isspace() or text[:1].isdigit()) or not (m := _KERAS.match(text)):
        return
    done = int(m["n"])
    of = int(m["total"]) if m["total"] else None
    d.progress(_BAR, done, of or None)
    if m["eta"] and of is not None and done < of:  # a finished bar shows time elapsed
        eta = m["eta"]
        d.eta_s = float(eta[:-1]) if eta.endswith("s") else _seconds(eta)


def _mmengine_line(text: str, d: _Draft) -> None:
    if "(" not in text or not (m := _MMENGINE.search(text)):
        return
    training = m["mode"].lower() == "train"
    if m["kind"] == "Epoch":
        d.set_epoch(float(m["a"]), int(m["at"]) if m["at"] else None)
        if training and m["b"]:
            d.progress(_BAR, int(m["b"]), int(m["bt"]) or None)
    elif training:
        d.progress(_ITER, int(m["a"]), int(m["at"]) if m["at"] else None)


def _rate_and_eta(text: str, d: _Draft) -> None:
    """A rate ("3.2 it/s", "310ms/step") and a time left standing alone in the line."""
    if d.rate is None and ("/s" in text or "s/" in text) and (m := _RATE.search(text)):
        v, unit = float(m["v"]), m["unit"]
        if unit == "it/s":
            d.rate = v
        elif v > 0:  # seconds (or ms, us) per iteration
            d.rate = 1.0 / (v / {"s": 1, "m": 1e3, "u": 1e6, "µ": 1e6}[unit[0]])
    if d.eta_s is None and (m := _ETA.search(text)):
        d.eta_s = _seconds(m["t"]) if m["t"] else float(m["s"])

"""Read metrics and progress out of one line of a training job's console output.

:class:`LineParser` is pure: no I/O, no clock, no global state. The caller splits the
job's output on both ``\\n`` and ``\\r`` (tqdm redraws its bar with ``\\r``) and hands
over one line at a time, without its terminator. ``parse`` returns a
:class:`~rota.ml.reading.Reading`, or ``None`` for the many lines that say nothing it
recognises; it never raises.

This module holds the parser, the line's cleaning, key/value text, progress words, JSON
and Python dicts and custom patterns; progress bars (tqdm, Rich, Keras, mmengine) and a
standalone rate or time left are read in :mod:`rota.ml.bars`, and what a name means
(which step count wins, which names are measurements) is :mod:`rota.ml.reading`'s.

Before parsing, a line is cut to its first 10,000 characters and ANSI escape sequences
(colours, ``ESC[K``, cursor moves, hyperlinks) are removed. A line without any digit is
dismissed at once.

Recognised formats
------------------

Key/value pairs in free text::

    loss: 1.23 | acc: 0.91          -> loss=1.23, acc=0.91
    train/loss=0.5, eval.acc=0.9    -> train/loss=0.5, eval.acc=0.9
    loss:1.5  lr:3e-4               -> loss=1.5, lr=0.0003

  A name starts with a letter and goes on with letters, digits, ``_ / . -`` (it ends
  with a letter, digit or ``_``); it is lower-cased. It must stand at the start of the
  line or after whitespace or one of ``| , [ ( { ; - ' "``, so the ``host`` of
  ``http://host:8080`` (after ``/``) is never a name. The separator is ``=`` or ``:``
  with spaces allowed around ``=`` and at least one space after ``:``; ``name:number``
  with no space counts only when the number has a fraction or an exponent
  (``loss:1.5``), so ``localhost:8080`` and ``cuda:0`` say nothing. A number is an
  optional sign, digits, an optional fraction and an optional exponent (``3e-4``,
  ``-0.5``); it must end the line or be followed by whitespace or one of ``, | ] ) } ;
  ' "``, by ``:`` or ``.`` then whitespace or the end. So ``Downloading: 100%``,
  ``time: 2.5s``, ``samples: 1,234``, ``version: 1.2.3`` and ``12:30:45`` give nothing.
  A name after ``-`` is a command-line flag (``--lr 3e-4``, ``-DVERSION=3``), not
  a name.

  Only training-shaped lines give metrics: a pair counts when its name is a
  measurement's (one of its words, split at anything not a letter or digit, is
  ``loss``, ``acc``, ``accuracy``, ``ppl``, ``lr``, ``learning``, ``grad``, ``reward``,
  ``bleu``, ``rouge``, ``f1``, ``wer``, ``auc``, ``map``, ``iou``, ``precision``,
  ``recall``, ``mse``, ``score``, ``top1``...; see ``reading._METRIC_WORDS``) or when the line
  has such a name elsewhere, a progress word or a training bar. ``OMP_NUM_THREADS=4``,
  ``batch_size: 2`` and ``int unused = 3;`` alone give nothing; ``step 10: loss=0.5
  tokens_seen=1200`` gives both. This holds for Python dict reprs too; a JSON object
  line is printed on purpose and counts as it is. A line that quotes a command (Ray's
  ``Running entrypoint for job ID: python train.py loss=0.5``, a shell's ``+ cmd``
  trace) is left to custom patterns.
  Space-separated pairs are too ambiguous in general (``epoch 3 of 10``, ``saved 12
  files``) and are read only for well-known metric names: ``loss``, ``acc``,
  ``accuracy``, ``ppl``, ``perplexity``, ``lr``, ``grad_norm``, ``reward``, ``bleu``,
  ``f1``, ``mfu``... optionally after ``train``/``val``/``valid``/``eval``/``test``, so
  nanoGPT's ``iter 100: loss 2.3456, time 12.34ms`` and ``step 500: train loss 1.61,
  val loss 1.78`` give ``loss``, ``train_loss`` and ``val_loss``. When a name appears
  twice in a line, the first value wins.

Progress words::

    Step 100/1000   step: 100   step=100   iter 5/50   iteration 5 / 50   batch 3/10
    global_step=1200   Epoch 3/10   Epoch [3/10]   epoch: 3   Epoch 3 of 10

  ``global_step``/``global step``, ``step``, ``iteration``/``iter``, ``batch`` and
  ``epoch`` (any case), followed by ``:``, ``=``, spaces or ``[``, then a count and
  optionally ``/ total`` or ``of total``. When several step words appear the most
  global one wins: global_step, then step, then iteration, then a progress bar's count,
  then batch. A bare ``[100/1000]`` with no word before it is not progress: it is as
  often samples or files as steps. A step count must be a whole number; an epoch may be
  fractional (``epoch: 0.37``).

tqdm bars (the description, a postfix and an unknown total are all optional)::

    Training:  45%|████▌     | 450/1000 [00:30<00:37, 14.8it/s, loss=0.123, lr=1e-4]
    450it [00:30, 14.8it/s]
    100%|██████████| 20/20 [1:02:03<00:00,  2.50s/it]

  step=450, total_steps=1000, rate=14.8 it/s (``2.50s/it`` gives 0.4), eta_s=37 (the
  time after ``<``: ``mm:ss``, ``h:mm:ss`` or ``N days, h:mm:ss``; ``?`` is unknown),
  and the postfix pairs as metrics. Unit-scaled counts (``1.2k/10k``) are rounded by
  tqdm and not reported as steps. A bar whose unit is not an iteration (``B/s``,
  ``examples/s``, ``tok/s``...) or whose description has a word starting like a side
  task (validation, evaluation, testing, prediction, sanity checks, loading,
  downloading, uploading, fetching, dataset ``Map``/filter/tokenising, shards,
  extracting, converting, saving, writing, generating, inference, preprocessing,
  resolving) reports no progress, rate or eta, and its description is not read for
  pairs (``Map (num_proc=4)``): it counts something other than training steps.
  A bar drawn inside another (tqdm ``position>=1``, such as Hugging Face's evaluation bar)
  ends by moving the cursor up (``ESC[A``) and reports no progress either. Keras 3's
  backspaces before a redraw are dropped. A
  ``Downloading: 100%`` with no ``|bar|`` is not a bar and gives nothing.

PyTorch Lightning bars, tqdm and rich::

    Epoch 3:  45%|████▌     | 45/100 [00:10<00:12, 4.50it/s, v_num=1, train_loss=0.532]
    Epoch 3/9  ━━━━━━━━━━━━━━━━╸━━━ 45/100 0:00:10 • 0:00:12 4.50it/s v_num: 1 train_loss: 0.532

  epoch=3 (Lightning counts from 0; stored as printed), step=45, total_steps=100, rate,
  eta_s and metrics; ``v_num`` is not a metric. Any rich bar (``━╸╺``) followed by
  ``n/total`` reads the same way.

Keras (2 and 3, verbose 1 and 2)::

    Epoch 3/10
    100/100 [==============================] - 2s 20ms/step - loss: 0.3010 - accuracy: 0.9130
     45/100 [============>.................] - ETA: 1s - loss: 0.4000
     45/100 ━━━━━━━━━━━━━━━━━━━━ 1s 20ms/step - accuracy: 0.8800 - loss: 0.4000
    100/100 - 2s - 20ms/step - loss: 0.3010

  A line starting with ``n/total`` and a bar (or `` - ``) gives the step; ``20ms/step``
  gives rate=50; ``ETA: 1s`` (or ``ETA: 1:05``) and Keras 3's time after an unfinished
  bar give eta_s.

mmengine / detectron2 style::

    Epoch(train)  [1][ 50/200]  lr: 1.0000e-02  eta: 0:10:00  time: 0.5  loss: 0.9
    Iter(train) [  50/1000]  lr: 1.0000e-02  eta: 1 day, 2:03:04  loss: 0.9
    eta: 0:12:34  iter: 19  total_loss: 2.1  lr: 0.0001

  ``Epoch(train) [e][n/total]`` gives the epoch and the step within it, ``Iter(train)
  [n/total]`` the step; other modes (``val``, ``test``) give the epoch only.
  ``eta:``/``ETA`` followed by a time or ``Ns`` anywhere gives eta_s; ``N it/s``,
  ``N s/it`` and ``N ms/step`` anywhere give the rate (not on a tqdm bar's line, whose
  own fields decide).

JSON lines and Hugging Face Trainer dicts::

    {"step": 100, "loss": 1.2, "train": {"acc": 0.9}}
    {'loss': 2.3456, 'grad_norm': 1.23, 'learning_rate': 4.5e-05, 'epoch': 0.37}
    {'eval_loss': 1.9, 'eval_runtime': 3.2, 'epoch': 1.0}

  A line that is one object (``{`` ... ``}`` once stripped) is read as JSON, or else as
  a Python literal with :func:`ast.literal_eval` when it is shaped like the repr of a
  dict of plain values. Numeric top-level values are metrics, names kept as given (but
  lower-cased: ``learning_rate`` stays ``learning_rate``); one level of nesting is
  flattened with ``/`` and deeper levels are dropped; booleans are not numbers, nor are
  strings, except in a Python repr a string that is exactly one number (transformers 5
  prints ``{'loss': '4.63', 'learning_rate': '5e-05', 'epoch': '0.0625'}``); string values
  are not searched for text formats. A dict of plain values after words (Accelerate's
  examples print ``epoch 0: {'accuracy': 0.68, 'f1': 0.81}``) gives its values too.
  Reserved keys fill the progress fields instead: ``step``, ``global_step``,
  ``iteration``, ``iter`` (step; also ``batch``, ranked lowest as above), ``epoch``,
  ``total_steps``/``max_steps``,
  ``epochs``/``num_epochs``/``total_epochs``. The same keys mean the same in key/value
  text (``max_steps=1000``, ``num_epochs=3``). A dict that neither parser takes (HF
  prints ``'grad_norm': nan`` when training diverges) still gives its top-level
  ``'key': number`` pairs, and so does one cut at 10,000 characters.

Custom patterns, per job::

    LineParser([r"acc@1 (?P<top1>[0-9.]+)", r"it (?P<step>\\d+)"])

  Applied to every line after the built-ins; each named group whose text parses as a
  number becomes a metric of that name (lower-cased), overriding a built-in value of
  the same name. The reserved keys above (``step``, ``epoch``...) fill the progress
  fields instead; a custom ``step`` replaces the built-in one but keeps its total. A
  pattern runs in RE2 (google-re2), whose time is linear in the line's length, on the
  cleaned line: a job's output cannot make its own pattern backtrack for seconds on the
  daemon's loop. Python's syntax, named groups included, is checked first; what RE2
  cannot run (backreferences, lookarounds, possessive or atomic groups) is refused with
  RE2's reason, naming the pattern's place (``metric_patterns[2]``). ``\\d``, ``\\w`` and
  ``\\s`` are ASCII, as in the built-ins.

Everywhere: non-finite values (``nan``, ``inf``) are dropped, and so are the names of a
run's setup, which are not measurements (``reading._setup``): identifiers, seeds, device
lists and counts of parts (``v_num``, ``world_size``, ``job_id``, ``random_seed``,
``local_rank``, ``CUDA_VISIBLE_DEVICES``, ``num_gpus``, ``n_layer``), so ``lr=0.001
seed=0 CUDA_VISIBLE_DEVICES=0`` gives ``lr`` only; and ``eta``, which its own rule reads.

Known limits: a numbered instruction such as ``Step 1: download data`` reads as step 1
(it has the same shape as ``step 100: loss 2.31``); percentages (``acc: 91.3%``) and
values with units (``time: 2.5s``, ``mem: 1234M``) are not metrics.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Sequence
from typing import Any

import re2

from rota.errors import InvalidSpec
from rota.metric_patterns import compile_pattern, validate_patterns
from rota.ml.bars import _keras_bar, _mmengine_line, _rate_and_eta, _rich_bar, _tqdm_bar
from rota.ml.reading import _STEP_KEYS, Reading, _Draft

#: Longer lines are cut to this many characters before parsing.
MAX_LINE = 10_000

__all__ = ["MAX_LINE", "LineParser", "validate_patterns"]


# --- patterns ------------------------------------------------------------------------------
# re.ASCII everywhere: \d and \w would otherwise take other scripts' digits and letters.

_A = re.ASCII
_AI = re.ASCII | re.IGNORECASE

_ANSI = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]"          # CSI: colours, erase line, cursor moves
    r"|\][^\x07\x1b]*(?:\x07|\x1b\\)?"     # OSC: titles, hyperlinks
    r"|[()][A-Za-z0-9]|[@-Z\\-_])?")       # charset and other two-byte escapes; lone ESC
_DIGIT = re.compile(r"[0-9]")
_CURSOR_UP = "\x1b[A"

_NUM = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
# What may follow a value: a comma only when no digit comes next (no thousands
# separators), ':' and '.' only as punctuation (not "12:30", "1.2.3").
_END = r"(?=$|[\s|\])};'\"]|,(?![0-9])|[:.](?:\s|$))"

_KV = re.compile(
    r"(?<![^\s|,\[({;'\"])"                                # start, space or a delimiter
    r"(?P<name>[A-Za-z](?:[\w./-]{0,62}\w)?)"
    r"(?:\s*=\s*|\s*:\s+|:(?=[-+]?(?:[0-9]*\.[0-9]|[0-9]+[eE])))"
    r"(?P<value>" + _NUM + ")" + _END, _A)

# "loss 1.23", "train loss 1.6": only names that cannot mean anything but a metric
_KNOWN_SPACED = re.compile(
    r"(?<![^\s|,\[({;'\"])"
    r"(?P<name>(?:(?:train|training|val|valid|validation|eval|test)[ _])?"
    r"(?:loss|acc|accuracy|ppl|perplexity|lr|learning[ _]rate|grad[ _]norm|reward|bleu|f1"
    r"|wer|mfu))"
    r"\s+(?P<value>" + _NUM + ")" + _END, _A | re.IGNORECASE)

_PROGRESS = re.compile(
    r"(?<![\w./-])(?P<word>global[_ ]step|step|iteration|iter|batch|epoch)"
    r"(?:\s*[:=]?\s*\[\s*|\s*[:=]\s*|\s+)"
    r"(?P<n>[0-9]{1,15}(?:\.[0-9]+)?)"
    r"(?:(?:\s*/\s*|\s+of\s+)(?P<total>[0-9]{1,15}))?"
    r"(?:\s*\])?(?![\w]|[.,][0-9])", _AI)

# A Python dict repr of plain values, checked before ast.literal_eval: the tokenizer
# prints SyntaxWarnings for text like "1if" and "\d", and a daemon must not spray its
# stderr because a job printed odd braces.
_PY_STR = r"'[^'\\\n]*'|\"[^\"\\\n]*\""
_PY_ATOM = rf"(?:{_PY_STR}|{_NUM}|True|False|None)"
_PY_SEQ = (rf"(?:\[\s*(?:{_PY_ATOM}\s*,\s*)*(?:{_PY_ATOM}\s*)?\]"
           rf"|\(\s*(?:{_PY_ATOM}\s*,\s*)*(?:{_PY_ATOM}\s*)?\))")
_PY_PAIR = rf"(?:{_PY_STR})\s*:\s*(?:{_PY_ATOM}|{_PY_SEQ})"
_PY_INNER = rf"\{{\s*(?:{_PY_PAIR}\s*,\s*)*(?:{_PY_PAIR}\s*)?\}}"
_PY_VALUE = rf"(?:{_PY_ATOM}|{_PY_SEQ}|{_PY_INNER})"
_PY_TOP_PAIR = rf"(?:{_PY_STR})\s*:\s*{_PY_VALUE}"
_PY_DICT = re.compile(rf"\{{\s*(?:{_PY_TOP_PAIR}\s*,\s*)*(?:{_PY_TOP_PAIR}\s*)?\}}", _A)
_NUMBER_TEXT = re.compile(_NUM, _A)
_QUOTED_KV = re.compile(
    r"(?P<q>['\"])(?P<name>[^'\"\\]{1,200})(?P=q)\s*:\s*"
    r"(?P<vq>'?)(?P<value>" + _NUM + r")(?P=vq)(?=\s*[,}])", _A)

# Lines that quote a command rather than report on a run: Ray's job supervisor before
# the job's output (its arguments are often ``--loss 0.5`` or ``loss=0.5``) and a shell's
# ``set -x`` trace.
_COMMAND_ECHO = re.compile(r"Running entrypoint for job [^\s:]{1,200}: |\++ \S", _A)


# --- helpers -------------------------------------------------------------------------------

def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_float(value: Any) -> float | None:
    try:
        f = float(value)
    except (OverflowError, ValueError, TypeError):  # ints past float range
        return None
    return f if math.isfinite(f) else None


# --- the parser ----------------------------------------------------------------------------

def _runnable(patterns: Sequence[str]) -> tuple[re2._Regexp, ...]:
    """The patterns of a job stored before RE2 ran them, less those RE2 cannot run (the
    job's other metrics are still read)."""
    out = []
    for p in patterns:
        try:
            out.append(compile_pattern(p))
        except InvalidSpec:
            continue
    return tuple(out)


class LineParser:
    """Turns console lines into :class:`Reading` objects; see the module docstring."""

    __slots__ = ("_custom",)

    def __init__(self, custom: Sequence[str] = ()) -> None:
        """custom: extra regexes given by the user per job. Each must contain at least one
        named group; every named group whose text parses as a float becomes a metric of that
        name (a group named `step` sets Reading.step, `epoch` sets epoch). An invalid regex,
        or one without named groups, raises rota.errors.InvalidSpec naming the pattern."""
        self._custom = tuple(compile_pattern(p) for p in validate_patterns(custom))

    @classmethod
    def lenient(cls, custom: Sequence[str] = ()) -> LineParser:
        """A parser for a job already stored: a pattern RE2 cannot run is left out."""
        parser = cls()
        parser._custom = _runnable(custom)
        return parser

    def parse(self, line: str) -> Reading | None:
        """None when the line holds nothing recognised (most lines). Never raises on any input."""
        if not isinstance(line, str):
            return None
        try:
            return self._parse(line)
        except Exception:  # a log reader must outlive any line; the tests fuzz _parse bare
            return None

    def _parse(self, line: str) -> Reading | None:
        text = line[:MAX_LINE]
        nested = False
        if "\x1b" in text:
            # tqdm draws a bar at position n >= 1 (an evaluation loop's, inside training's)
            # and then moves the cursor back up to its parent's line: it ends with ESC[A
            nested = text.rstrip().endswith(_CURSOR_UP)
            text = _ANSI.sub("", text)
        if "\b" in text:  # Keras 3 backspaces over its bar before redrawing it
            text = text.replace("\b", "")
        if _DIGIT.search(text) is None:  # every rule, custom ones too, needs a number
            return None
        d = _Draft()
        if _COMMAND_ECHO.match(text):
            pass  # a quoted command line: only the job's own patterns read it
        elif not _structured(text, d, cut=len(line) > MAX_LINE):
            _free_text(text, d, nested=nested)
        for pattern in self._custom:
            m = pattern.search(text)
            if m is None:
                continue
            for name, value in m.groupdict().items():
                f = _as_float(value.strip()) if value is not None else None
                if f is not None:
                    d.put(name, f, custom=True)
        return d.reading()


def _structured(text: str, d: _Draft, *, cut: bool) -> bool:
    """A JSON object or Python dict repr line; False when the line is not one."""
    s = text.strip()
    if not s.startswith("{") or not (cut or s.endswith("}")):
        return False
    obj: object = None
    python = False  # a Python repr: its numbers may be strings (transformers 5's Trainer)
    try:
        obj = json.loads(s)
    except (ValueError, RecursionError):
        if s.endswith("}") and _PY_DICT.fullmatch(s):
            python = True
            try:
                obj = ast.literal_eval(s)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                obj = None
    if not isinstance(obj, dict):
        # Unparsable but dict-shaped (a nan value, a line cut at MAX_LINE): take the plain
        # pairs, then let the free-text rules look too.
        # Only top-level pairs: a nested key without its parent's name would mislead.
        depth, pos = 0, 0
        for m in _QUOTED_KV.finditer(s):
            depth += s.count("{", pos, m.start()) - s.count("}", pos, m.start())
            pos = m.start()
            f = _as_float(m["value"])
            if depth == 1 and f is not None:
                d.put(m["name"], f)
        return False
    for key, value in obj.items():
        if not isinstance(key, str) or len(key) > 200:
            continue
        if isinstance(value, dict):  # one level: {"train": {"loss": 1}} -> train/loss
            for k2, v2 in value.items():
                f = _value(v2, python)
                if isinstance(k2, str) and len(k2) <= 200 and f is not None:
                    d.put(f"{key}/{k2}", f, trusted=not python)
        elif (f := _value(value, python)) is not None:
            d.put(key, f, trusted=not python)
    return True


def _embedded_dict(text: str, d: _Draft) -> None:
    """A dict printed after words (Accelerate's examples: ``accelerator.print(f"epoch
    {epoch}:", eval_metric)`` gives ``epoch 0: {'accuracy': 0.68, 'f1': 0.81}``): its
    plain numeric values, one level deep."""
    m = _PY_DICT.search(text)
    if m is None:
        return
    try:
        obj = ast.literal_eval(m.group())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            f = _value(value, True)
            if isinstance(key, str) and len(key) <= 200 and f is not None:
                d.put(key, f)


def _value(value: object, python: bool) -> float | None:
    """A dict value as a number: a number, or in a Python repr also a string that is
    exactly one (``'5e-05'``, ``'0.0625'``: transformers 5 formats its logs so)."""
    if _is_number(value):
        return _as_float(value)
    if python and isinstance(value, str) and _NUMBER_TEXT.fullmatch(value):
        return _as_float(value)
    return None


def _free_text(text: str, d: _Draft, *, nested: bool = False) -> None:
    # A progress bar's rate and times are read with it: the standalone rules would read
    # them again, or read a side task's bar as training speed. ``start``: where the
    # key/value and progress-word rules start, past the description of a bar that is no
    # training ("Map (num_proc=4): 100%|...").
    bar, start = _tqdm_bar(text, d, nested)
    bar, start = _rich_bar(text, d, bar, start)
    _keras_bar(text, d)
    _mmengine_line(text, d)
    _progress_words(text, d, start)
    if "}" in text and text.find("{") > 0 and not text.lstrip().startswith("{"):
        _embedded_dict(text, d)
    _key_values(text, d, start)
    if not bar:
        _rate_and_eta(text, d)


def _progress_words(text: str, d: _Draft, start: int) -> None:
    """Progress words: "epoch 3/10", "step 120 of 1000" and the like."""
    for m in _PROGRESS.finditer(text, start):
        word = m["word"].lower()
        count = float(m["n"])
        of = int(m["total"]) if m["total"] else None
        if word == "epoch":
            d.set_epoch(count, of)
        elif count.is_integer():
            d.progress(_STEP_KEYS[word.replace("_", " ")], int(count), of or None)


def _key_values(text: str, d: _Draft, start: int) -> None:
    """Values by name: "loss=0.31", "acc: 0.9", and known names written with spaces."""
    if ":" in text or "=" in text:
        for m in _KV.finditer(text, start):
            f = _as_float(m["value"])
            if f is not None:
                d.put(m["name"], f)
    for m in _KNOWN_SPACED.finditer(text, start):
        f = _as_float(m["value"])
        if f is not None:
            d.put(m["name"].replace(" ", "_"), f)

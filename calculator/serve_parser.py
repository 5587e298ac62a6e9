"""Read ``vllm serve`` arguments the way that vLLM version's own parser does (pure).

vLLM parses its command line with ``FlexibleArgumentParser``: Python's argparse plus a pre-pass (underscores read as
dashes, ``--model`` moved to the front in ``vllm serve``, ``--x.key value`` folded into JSON). The option table of
each release (every spelling, its arity and whether it is a store_true or a BooleanOptionalAction flag, whether
prefixes are accepted) is package data dumped from the real parsers (``scripts/vllm-serve-flags.py``). Here an
argparse parser is built from that table, so arity, abbreviations and boolean forms follow argparse's own rules.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from bisect import bisect_left, bisect_right
from functools import cache
from importlib import resources
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict

from .engine.vllm_versions import VllmVersion


class FlagSpec(BaseModel):
    """One option of one release: its spellings (with what a boolean spelling sets), arity and kind."""

    model_config = ConfigDict(frozen=True)
    spellings: dict[str, bool | None]
    kind: str  # argparse's action: store, append, store_true, store_false, boolean_optional, store_const, help ...
    nargs: int | str | None

    @property
    def canonical(self) -> str:
        """The long spelling people write (``--enable-prefix-caching``, not ``--no-...`` or ``-dp``)."""
        longs = sorted((s for s in self.spellings if s.startswith("--")),
                       key=lambda s: (self.spellings[s] is False, s.startswith("--no-"), len(s)))
        return longs[0] if longs else min(self.spellings)

    @property
    def takes_value(self) -> bool:
        return self.nargs != 0 and self.kind not in ("store_true", "store_false", "boolean_optional",
                                                     "store_const", "help", "version", "count")


class ReleaseTable(BaseModel):
    """The ``vllm serve`` parser of one release."""

    model_config = ConfigDict(frozen=True)
    release: str
    allow_abbrev: bool
    model_nargs: str | None  # the positional model of `vllm serve`: None (required), "?" (optional), "none" (absent)
    model_option: str  # "moved" (to the front), "refused" (ValueError) or "plain" (argparse alone)
    served_name_needs_model: bool  # --served-model-name without a positional model is a ValueError
    dotted_json: bool  # --compilation-config.level 3 is read as JSON
    options: tuple[FlagSpec, ...]

    @property
    def by_spelling(self) -> dict[str, FlagSpec]:
        return _spelling_index(self.release)


@cache
def _spelling_index(release: str) -> dict[str, FlagSpec]:
    table = next(t for t in _tables() if t.release == release)
    return {spelling: option for option in table.options for spelling in option.spellings}


@cache
def _tables() -> tuple[ReleaseTable, ...]:
    raw = json.loads((resources.files("calculator") / "data" / "vllm_serve_flags.json").read_text(encoding="utf-8"))
    specs = [FlagSpec(spellings=o["spellings"] if isinstance(o["spellings"], dict)
                      else dict.fromkeys(o["spellings"]), kind=o["kind"], nargs=o["nargs"]) for o in raw["options"]]
    tables = [ReleaseTable(release=release, options=tuple(specs[i] for i in entry["options"]),
                           **{k: v for k, v in entry.items() if k not in ("options", "built_from")})
              for release, entry in raw["releases"].items()]
    return tuple(sorted(tables, key=lambda t: VllmVersion.parse(t.release).key))


def table_for(version: str) -> ReleaseTable:
    """The parser of ``version``'s minor release (its newest stored patch), else of the newest stored release before
    it (the oldest stored one for anything older)."""
    tables = _tables()
    keys = [VllmVersion.parse(t.release).key[:2] for t in tables]
    return tables[max(0, bisect_right(keys, VllmVersion.parse(version).key[:2]) - 1)]


class Refused(ValueError):
    """What vLLM's parser refuses, in argparse's words."""


class SeenOption(BaseModel):
    """One option of the line, as argparse read it."""

    model_config = ConfigDict(frozen=True)
    spec: FlagSpec
    written: str  # the spelling the line used, after the pre-pass (``--no-enable-prefix-caching``)
    value: str | tuple[str, ...] | bool | None  # a string, the words of a multi-value flag, or what a boolean sets


class ParsedLine(BaseModel):
    """A line read by one release's parser."""

    model_config = ConfigDict(frozen=True)
    release: str
    model: str | None
    options: tuple[SeenOption, ...]  # in the order of the line
    refused: tuple[str, ...]  # per-flag refusals, each a sentence (unknown flags, `--flag=false` ...)


class _Raising(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Refused(message)


class _Record(argparse.Action):
    """Keeps every option in the order argparse met it (the report lists them so)."""

    def __init__(self, option_strings, dest, spec: FlagSpec, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.spec = spec

    def __call__(self, parser, namespace, values, option_string=None):
        value: Any = values
        if self.spec.takes_value:
            value = tuple(values) if isinstance(values, list) else values
        else:
            value = self.spec.spellings.get(option_string or "", True)
        namespace.seen.append(SeenOption(spec=self.spec, written=option_string or "", value=value))


@cache
def _argparse_of(release: str, positional_model: bool) -> argparse.ArgumentParser:
    table = next(t for t in _tables() if t.release == release)
    parser = _Raising(prog="vllm serve", add_help=False, allow_abbrev=table.allow_abbrev)
    if positional_model and table.model_nargs != "none":
        parser.add_argument("model_tag", **({"nargs": table.model_nargs} if table.model_nargs else {}))
    for index, spec in enumerate(table.options):
        nargs = spec.nargs if spec.takes_value else 0
        kwargs: dict[str, Any] = {"nargs": nargs} if nargs is not None else {}
        parser.add_argument(*spec.spellings, dest=f"option_{index}", action=_Record, spec=spec, **kwargs)
    return parser


_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_UNDERSCORES = re.compile(r"(?<=--)[^.]*")


def parse_arguments(arguments: list[str], version: str, *, serve: bool) -> ParsedLine:
    """Read ``arguments`` as ``vllm serve`` (``serve=True``) or the api_server module of ``version`` would.

    Raises ``Refused`` with argparse's message where vLLM refuses the whole line (an extra word, a missing value).
    """
    table = table_for(version)
    arguments = _pre_pass(list(arguments), table, serve)
    kept, refused = _screen(arguments, table)
    namespace = argparse.Namespace(seen=[])
    parser = _argparse_of(table.release, serve)
    try:
        parser.parse_args(kept, namespace)
    except Refused:
        raise
    except (TypeError, ValueError) as exc:  # argparse's own slips on odd input: still vLLM's refusal
        raise Refused(str(exc)) from exc
    seen = namespace.seen
    model = getattr(namespace, "model_tag", None)
    if model is None:
        models = [o.value for o in seen if o.spec.canonical == "--model"]
        model = str(models[-1]) if models else None
    return ParsedLine(release=table.release, model=model, options=tuple(seen), refused=tuple(refused))


def _pre_pass(arguments: list[str], table: ReleaseTable, serve: bool) -> list[str]:
    """FlexibleArgumentParser.parse_args before argparse: ``--model`` in serve, underscores, ``-O3`` (the
    optimization level; before it existed, the compilation config's level), dotted JSON keys."""
    if serve:
        model_index = next((i for i, a in enumerate(arguments) if re.match(r"^--model(=.+|$)", a)), None)
        if model_index is not None and table.model_option == "refused" and "--model" in arguments:
            raise Refused("With `vllm serve`, you should provide the model as a positional argument or in a config "
                          "file instead of via the `--model` option.")
        if model_index is not None and table.model_option == "moved":
            if arguments[model_index] == "--model":
                if model_index + 1 >= len(arguments):
                    raise Refused("argument --model: expected one argument")
                tag, rest = arguments[model_index + 1], model_index + 2
            else:
                tag, rest = arguments[model_index].removeprefix("--model="), model_index + 1
            arguments = [tag, *arguments[:model_index], *arguments[rest:]]
        if (table.served_name_needs_model and arguments[:1] and arguments[0].startswith("-")
                and not any(re.match(r"^--config(=.+|$)", a) for a in arguments)
                and any(re.match(r"^--served[-_]model[-_]name(=.+|$)", a) for a in arguments)):
            raise Refused("`model` should be provided as the first positional argument when using `vllm serve`. "
                          "i.e. `vllm serve <model> --<arg> <value>`.")
    processed: list[str] = []
    level_flag = "--optimization-level" in table.by_spelling
    for index, argument in enumerate(arguments):
        if argument.startswith("--"):
            key, has_value, value = argument.partition("=")
            key = _UNDERSCORES.sub(lambda m: m.group(0).replace("_", "-"), key, count=1)
            processed.append(f"{key}={value}" if has_value else key)
        elif argument.startswith("-O") and argument != "-O" and argument[2] != ".":
            level = argument[3:] if argument[2] == "=" else argument[2:]  # -O3, -O=3
            processed += ["--optimization-level", level] if level_flag else [f"-O.level={level}"]
        elif argument == "-O" and index + 1 < len(arguments) and arguments[index + 1] in ("0", "1", "2", "3"):
            processed.append("--optimization-level" if level_flag else "-O.level")
        else:
            processed.append(argument)
    return _fold_dotted(processed) if table.dotted_json else processed


def _fold_dotted(arguments: list[str]) -> list[str]:
    """``--compilation-config.level 3`` -> ``--compilation-config '{"level": 3}'`` (vLLM's JSON shorthand)."""
    folded: dict[str, dict[str, Any]] = {}
    kept: list[str] = []
    index = 0
    while index < len(arguments):
        argument = arguments[index]
        index += 1
        name = argument.split("=", 1)[0]
        if not (argument.startswith("-") and "." in name and not _NEGATIVE_NUMBER.match(argument)):
            kept.append(argument)
            continue
        if "=" in argument:
            value = argument.split("=", 1)[1]
        elif index < len(arguments):
            value, index = arguments[index], index + 1
        else:
            raise Refused(f"argument {name}: expected one argument")
        key, *keys = name.removesuffix("+").split(".")
        try:
            parsed: Any = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        target = folded.setdefault(key, {})
        for part in keys[:-1]:
            target = target.setdefault(part, {}) if isinstance(target.get(part, {}), dict) else {}
        target[keys[-1]] = parsed
    for key, value in folded.items():
        kept += [key, json.dumps(value)]
    return kept


def _screen(arguments: list[str], table: ReleaseTable) -> tuple[list[str], list[str]]:
    """Take out the flags vLLM would refuse one by one (unknown, ambiguous, ``--boolean=value``), each with a
    sentence, so that the rest of the line still reads; what remains goes to argparse."""
    index_ = table.by_spelling
    kept: list[str] = []
    refused: list[str] = []
    index = 0
    while index < len(arguments):
        token = arguments[index]
        index += 1
        if not token.startswith("-") or token == "-" or _NEGATIVE_NUMBER.match(token) or " " in token:
            kept.append(token)
            continue
        written, has_inline, inline = token.partition("=")
        matches = _resolve(written, table)
        if len(matches) == 1:
            spec = index_[matches[0]]
            if has_inline and not spec.takes_value:
                resolved = matches[0]
                how = (f"write {resolved} alone, or {_negative(spec)}" if _negative(spec)
                       else f"write {resolved} alone to turn it on, or leave it out")
                refused.append(f"{token!r}: vLLM refuses it (argument {'/'.join(spec.spellings)}: ignored explicit "
                               f"argument {inline!r}); {how}")
                continue
            kept.append(token)
            if spec.takes_value and not has_inline:
                index = _keep_values(arguments, index, spec, kept)
            continue
        if not written.startswith("--") and not matches and any(
                written.startswith(s) for s in index_ if not s.startswith("--")):
            kept.append(token)  # a short flag with its value attached (-O3, -tp2): argparse reads it
            continue
        index = _refuse_unknown(token, written, has_inline, matches, arguments, index, table, refused)
    if len(refused) > MAX_NAMED_REFUSALS:
        refused[MAX_NAMED_REFUSALS:] = [f"... and {len(refused) - MAX_NAMED_REFUSALS:,} more flags vLLM refuses"]
    return kept, refused


def _resolve(written: str, table: ReleaseTable) -> list[str]:
    """The spellings argparse would take ``written`` for: itself, or every option it is a prefix of."""
    index_ = table.by_spelling
    if written in index_:
        return [written]
    if not (table.allow_abbrev and written.startswith("--")):
        return []
    spellings = _sorted_spellings(table.release)  # the prefix's matches are one run of the sorted spellings
    start = bisect_left(spellings, written)
    end = start
    while end < len(spellings) and spellings[end].startswith(written):
        end += 1
    return list(spellings[start:end])


@cache
def _sorted_spellings(release: str) -> tuple[str, ...]:
    return tuple(sorted(_spelling_index(release)))


def _negative(spec: FlagSpec) -> str | None:
    negatives = sorted(s for s, sets in spec.spellings.items() if sets is False and s.startswith("--"))
    return negatives[0] if negatives and spec.kind == "boolean_optional" else None


def _keep_values(arguments: list[str], index: int, spec: FlagSpec, kept: list[str]) -> int:
    """The values a flag takes, so that a value that starts with a dash is not screened as a flag."""
    if spec.nargs is None and index < len(arguments):
        kept.append(arguments[index])
        return index + 1
    if isinstance(spec.nargs, int):
        kept += arguments[index:index + spec.nargs]
        return index + spec.nargs
    return index


def _refuse_unknown(token: str, written: str, has_inline: bool, matches: list[str], arguments: list[str],
                    index: int, table: ReleaseTable, refused: list[str]) -> int:
    """Note a flag vLLM refuses (unknown, or a prefix of several), with the flag it may have meant; skips its
    values: as many as the flag it resembles takes (one when nothing resembles it and a value follows)."""
    if matches:
        hint = f"; it could be any of {', '.join(matches[:6])}{' ...' if len(matches) > 6 else ''}"
        reason = f"vLLM refuses an ambiguous abbreviation (ambiguous option: {written} could match several flags)"
        resembles = table.by_spelling[matches[0]]
    else:
        close = _closest(written, table) if len(refused) < MAX_NAMED_REFUSALS else None
        hint = f"; did you mean {close}?" if close else ""
        reason = "is not a vllm serve flag (vLLM would refuse to start)"
        resembles = table.by_spelling[close] if close else None
    shown = token
    if not has_inline and index < len(arguments):
        takes = resembles.takes_value if resembles else not arguments[index].startswith("-")
        many = resembles is not None and resembles.nargs in ("+", "*")
        stop = index
        while takes and stop < len(arguments) and not arguments[stop].startswith("--") and (
                stop == index or many):
            stop += 1
        if stop > index:
            shown = " ".join([token, *arguments[index:stop]])
            index = stop
    refused.append(f"{shown!r} {reason}{hint}" if not matches else f"{shown!r}: {reason}{hint}")
    return index


_CLOSEST_CANDIDATES = 8
# Past this many refused flags the rest are counted, not named: a long paste of near misses stays quick to read.
MAX_NAMED_REFUSALS = 20


def _closest(flag: str, table: ReleaseTable) -> str | None:
    """The flag ``flag`` most likely misspells, or None. Candidates share the flag's first three letters (else all
    flags) and are ranked by difflib's quick ratio, the best few by its full ratio: linear in the table."""
    if len(flag) > 80:
        return None
    heads = _flags_by_head(table.release)
    pool = heads.get(flag[2:5], heads[""])
    if flag.startswith("--no-"):  # a --no- form the flag does not have: the flag itself is the likely meaning
        pool = (*pool, *heads.get(flag[5:8], ()))
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(flag)
    scored: list[tuple[float, str]] = []
    for candidate in pool:
        matcher.set_seq1(candidate)
        if matcher.real_quick_ratio() >= 0.75:  # lengths alone rule most candidates out
            scored.append((matcher.quick_ratio(), candidate))
    scored.sort(key=lambda pair: -pair[0])
    best = None
    for _, candidate in scored[:_CLOSEST_CANDIDATES]:
        matcher.set_seq1(candidate)
        ratio = matcher.ratio()
        if ratio >= 0.75 and (best is None or ratio > best[0]):
            best = (ratio, candidate)
    return best[1] if best else None


@cache
def _flags_by_head(release: str) -> dict[str, tuple[str, ...]]:
    longs = sorted(s for s in _spelling_index(release) if s.startswith("--"))
    heads: dict[str, list[str]] = {"": longs}
    for spelling in longs:
        heads.setdefault(spelling[2:5], []).append(spelling)
    return {head: tuple(names) for head, names in heads.items()}

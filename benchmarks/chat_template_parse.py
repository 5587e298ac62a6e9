"""Time the chat-template parse that some vLLM versions run on every chat request (calculator/speed/front_end.py).

Two code paths, each as vLLM wrote it (vllm/entrypoints/chat_utils.py of the wheels on PyPI):

* 0.11.0, ``resolve_chat_template_kwargs`` (called by ``apply_hf_chat_template``; 0.11.1 wraps it in ``lru_cache``):
  a new ``ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker,
  loopcontrols])``, ``env.parse(template)`` and ``jinja2.meta.find_undeclared_variables``.
* 0.8.2-0.9.1, ``_resolve_chat_template_content_format`` (0.8.0-0.8.1 cached the whole resolution, 0.9.2 caches
  ``_detect_content_format``): ``_try_extract_ast`` parses the template again with the compiled template's
  environment, then ``_iter_nodes_assign_content_item`` walks the AST for a loop over a message's content.

Each is timed ``--repeats`` times per template (``benchmarks/data/chat_templates``); the medians go to
``benchmarks/data/chat_template_parse.json`` with the CPU and the load average, which a shared machine must report.

    python benchmarks/chat_template_parse.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections import deque
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.sandbox

TEMPLATES = Path(__file__).resolve().parent / "data" / "chat_templates"
OUTPUT = Path(__file__).resolve().parent / "data" / "chat_template_parse.json"


class AssistantTracker(jinja2.ext.Extension):
    """vLLM's ``{% generation %}`` tag (chat_utils.py), registered in both environments."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.CallBlock:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)


def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    return jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])


def resolve_kwargs_0_11_0(template: str) -> set[str]:
    """vLLM 0.11.0's per-request work in ``resolve_chat_template_kwargs``."""
    return jinja2.meta.find_undeclared_variables(_environment().parse(template))


# vLLM 0.8.2-0.9.1's content-format detection (chat_utils.py ``_is_var_access`` .. ``_iter_nodes_assign_content_item``)
def _is_var_access(node: jinja2.nodes.Node, varname: str) -> bool:
    if isinstance(node, jinja2.nodes.Name):
        return node.ctx == "load" and node.name == varname
    return False


def _is_attr_access(node: jinja2.nodes.Node, varname: str, key: str) -> bool:
    if isinstance(node, jinja2.nodes.Getitem):
        return (_is_var_access(node.node, varname) and isinstance(node.arg, jinja2.nodes.Const)
                and node.arg.value == key)
    if isinstance(node, jinja2.nodes.Getattr):
        return _is_var_access(node.node, varname) and node.attr == key
    return False


def _is_var_or_elems_access(node: jinja2.nodes.Node, varname: str, key: str | None = None) -> bool:
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Test):
        return _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _is_var_or_elems_access(node.node, varname, key)
    return _is_attr_access(node, varname, key) if key else _is_var_access(node, varname)


def _assigned_from(root: jinja2.nodes.Node, varname: str) -> list[str]:
    names, related = [varname], deque([varname])
    while related:
        name = related.popleft()
        for assign in root.find_all(jinja2.nodes.Assign):
            if _is_var_or_elems_access(assign.node, name) and isinstance(assign.target, jinja2.nodes.Name):
                names.append(assign.target.name)
                if assign.target.name != name:
                    related.append(assign.target.name)
    return names


def _loop_targets(root: jinja2.nodes.Node, varnames: list[str], key: str | None = None) -> list[str]:
    return [loop.target.name for loop in root.find_all(jinja2.nodes.For)
            if isinstance(loop.target, jinja2.nodes.Name)
            and any(_is_var_or_elems_access(loop.iter, name, key) for name in varnames)]


def detect_content_format_0_9_1(template: str, environment: jinja2.Environment) -> str:
    """vLLM 0.8.2-0.9.1's per-request ``_try_extract_ast`` and ``_detect_content_format``."""
    root = environment.parse(template)
    messages = _loop_targets(root, _assigned_from(root, "messages"))
    return "openai" if _loop_targets(root, messages, "content") else "string"


def median_ms(work, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=41)
    args = parser.parse_args(argv)
    compiled = _environment()  # transformers compiles the template once (lru_cache); vLLM parses with its environment
    rows = {}
    for path in sorted(TEMPLATES.glob("*.jinja")):
        template = path.read_text(encoding="utf-8")
        resolve_kwargs_0_11_0(template)  # warm the interpreter's caches
        rows[path.stem] = {
            "chars": len(template),
            "resolve_kwargs_0_11_0_ms": round(median_ms(lambda: resolve_kwargs_0_11_0(template), args.repeats), 2),
            "detect_format_0_8_2_to_0_9_1_ms": round(
                median_ms(lambda: detect_content_format_0_9_1(template, compiled), args.repeats), 2),
        }
        print(f"{path.stem:42} {rows[path.stem]}")
    report = {"cpu": cpu_name(), "python": platform.python_version(), "jinja2": jinja2.__version__,
              "load_average_1m": round(os.getloadavg()[0], 2), "repeats": args.repeats, "templates": rows}
    OUTPUT.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"load average {report['load_average_1m']}; written to {OUTPUT}")
    return 0


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    raise SystemExit(main())

"""What an sglang release does when FlashInfer cannot create its allreduce-fusion workspace.

Why this exists: FlashInfer before 0.6.17 has no SM12x build of its trtllm allreduce kernel.
The first time the fusion workspace is created, its JIT raises ``RuntimeError("No supported
CUDA architectures found for major versions [9, 10]")``.  Once sm120patch has opened sglang's
gates, what follows depends on the release, as running each release's own code shows
(tests/patcher/plan/test_startup_risk.py):

* 0.5.4 - 0.5.9 create the workspace lazily, inside the first fused call (during CUDA-graph
  capture), and nothing catches the error: "Capture cuda graph failed", the server does not
  start;
* from 0.5.10 the creation sits in ``try/except Exception`` in
  ``FlashInferWorkspaceManager.initialize``: sglang logs "Disabling flashinfer allreduce
  fusion permanently" and runs unfused, so the patches change nothing.

The answer is read from ``layers/flashinfer_comm_fusion.py`` by structure with ``ast``, never
by line number or text: where the workspace is created (a call to FlashInfer's
``trtllm_create_ipc_workspace_for_all_reduce_fusion`` or ``create_allreduce_fusion_workspace``,
or to a name bound to one of them), whether that call sits in the body of a ``try`` whose
handler takes a RuntimeError (``except Exception`` / ``BaseException`` / ``RuntimeError`` or a
bare ``except``) without raising again, and if not, the same question for every call of the
function around it, up to the functions nothing in the file calls (sglang's entry points).
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

CREATORS = frozenset({"trtllm_create_ipc_workspace_for_all_reduce_fusion", "create_allreduce_fusion_workspace"})
# Handlers that take the JIT's RuntimeError.
CATCHING = frozenset({"Exception", "BaseException", "RuntimeError"})


class Effect(enum.Enum):
    CRASH = "the server does not start"
    FALLBACK = "runs unfused"


def missing_kernel_effect(source: bytes) -> Effect | None:
    """CRASH when a failing workspace creation propagates out of the file's entry points,
    FALLBACK when every path to it catches it, None for a shape this does not know (no
    creation call, a creation outside any function, paths that disagree, unparsable)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    creators = _creator_names(tree)
    calls: dict[str, list[_Site]] = {}
    for call, site in _call_sites(tree.body, None, caught=False):
        name = _terminal_name(call.func)
        if name is not None:
            calls.setdefault(name, []).append(site)
    creations = [site for name in creators for site in calls.get(name, [])]
    if not creations:
        return None
    verdicts = {_propagates(site, calls, frozenset()) for site in creations}
    if len(verdicts) != 1:
        return None
    verdict = verdicts.pop()
    if verdict is None:
        return None
    return Effect.CRASH if verdict else Effect.FALLBACK


def effect_sentence(version: str, effect: Effect) -> str:
    """One sentence for reports: what the release does when FlashInfer lacks the SM12x kernel."""
    if effect is Effect.CRASH:
        return (
            f"sglang {version} creates FlashInfer's workspace inside CUDA-graph capture with no fallback: "
            "the server would not start ('Capture cuda graph failed')"
        )
    return f"sglang {version} catches the failure and runs unfused: the patches would change nothing"


@dataclass(frozen=True)
class _Site:
    function: str | None  # the innermost enclosing def, None at module level
    caught: bool  # in the body of a try (within that def) whose handler swallows a RuntimeError


def _terminal_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _creator_names(tree: ast.Module) -> set[str]:
    """FlashInfer's creation functions and every plain name bound to one of them
    (``_create_allreduce_fusion_workspace = comm.create_allreduce_fusion_workspace``)."""
    names = set(CREATORS)
    assignments = [node for node in ast.walk(tree) if isinstance(node, ast.Assign)]
    while True:
        found = {
            target.id
            for node in assignments
            if _terminal_name(node.value) in names
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        if found <= names:
            return names
        names |= found


def _swallows(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        takes = True
    else:
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        takes = any(_terminal_name(t) in CATCHING for t in types)
    return takes and not any(isinstance(node, ast.Raise) for node in _same_scope(handler.body))


def _same_scope(statements: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node of ``statements`` except the insides of nested defs and classes."""
    for statement in statements:
        stack: list[ast.AST] = [statement]
        while stack:
            node = stack.pop()
            yield node
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                stack.extend(ast.iter_child_nodes(node))


def _call_sites(nodes: Sequence[ast.AST], function: str | None, caught: bool) -> Iterator[tuple[ast.Call, _Site]]:
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # Decorators and defaults run where the def stands; the body is its own function.
            outer: list[ast.AST] = [*node.decorator_list, *node.args.defaults]
            outer += [d for d in node.args.kw_defaults if d is not None]
            yield from _call_sites(outer, function, caught)
            yield from _call_sites(node.body, node.name, False)
        elif isinstance(node, ast.Try):
            inside = caught or any(_swallows(h) for h in node.handlers)
            yield from _call_sites(node.body, function, inside)
            yield from _call_sites([*node.handlers, *node.orelse, *node.finalbody], function, caught)
        else:
            if isinstance(node, ast.Call):
                yield node, _Site(function, caught)
            yield from _call_sites(list(ast.iter_child_nodes(node)), function, caught)


def _propagates(site: _Site, calls: dict[str, list[_Site]], seen: frozenset[str]) -> bool | None:
    """Whether a failure at ``site`` leaves the file: True, False, or None when unknown."""
    if site.caught:
        return False
    if site.function is None or site.function in seen:
        return None
    callers = calls.get(site.function, [])
    if not callers:
        return True  # nothing in the file calls it: sglang's entry point, the error goes out
    verdicts = {_propagates(caller, calls, seen | {site.function}) for caller in callers}
    return verdicts.pop() if len(verdicts) == 1 else None

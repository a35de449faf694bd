"""The prefill half's loader: what ``simulate`` loads of the release's prefill code, with the
shared machinery of ``simulate.loader`` (which never imports SGLang).

The mixin's ``process_disagg_prefill_inflight_queue`` and the inflight-queue append, the
bootstrap queue's entries, the release's own ``MooncakeKVSender`` and ``NixlKVSender`` with
their bases (SGLang's sender interface and every sender method ``prefill.py`` calls, but not
``send``), and what the world reads of the release besides its code: the default bootstrap
timeout and the env registry (``environ.py``).
"""

from __future__ import annotations

import ast
import re

from ...checks.classes import methods_of as _class_methods
from ...errors import parse
from ...sglang_names import (
    APPEND_FUNCTION,
    BOOTSTRAP_TIMEOUT_ENV,
    COMMON_CONN_PATH,
    DISAGGREGATION_DIR,
    ENVIRON_PATH,
    INFLIGHT_FUNCTION,
    MOONCAKE_CONN_PATH,
    NIXL_CONN_PATH,
    NIXL_SENDER,
    PREFILL_PATH,
    REQ_SENDER,
)
from ...sglang_names import BOOTSTRAP_QUEUE_METHODS as BOOTSTRAP_ENTRIES
from ...sglang_names import SENDER_METHODS as SENDER_ENTRIES
from ...tree import SourceTree
from .. import sandbox
from ..loader import (
    _FLAGS,
    EnvRegistry,
    Target,
    _attribute_verdicts,
    _build_order,
    _ClassPlan,
    _import_keys,
    _is_attr_of,
    _loaded_methods,
    _Loader,
    _methods_of,
    _patched_class,
    _self_reads,
    own_state,
)

NIXL_PATH = NIXL_CONN_PATH
MOONCAKE_PATH = MOONCAKE_CONN_PATH
MOONCAKE_SENDER = "MooncakeKVSender"
# Where a release sets the default of SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, in the order read.
BOOTSTRAP_DEFAULT_PATHS = (
    ENVIRON_PATH,
    COMMON_CONN_PATH,
    MOONCAKE_PATH,
)


_BOOTSTRAP_DEFAULT = re.compile(
    re.escape(BOOTSTRAP_TIMEOUT_ENV) + r"(?:\"\s*,\s*|\s*=\s*EnvInt\()(\d+)"
)


# Sender methods the simulated data path replaces (tensors, the transfer engine).
SENDER_SKIPPED = frozenset({"send"})


def load(
    tree: SourceTree,
    standin_keys: frozenset[str],
    scheduler_methods: frozenset[str] = frozenset(),
) -> Target:
    """Plan and compile what the simulation runs from ``tree``.

    ``standin_keys`` are the names the stand-ins module can give; ``scheduler_methods`` are the
    mixin methods the simulated scheduler replaces (never loaded from the target).
    """
    loader = _Loader(tree, standin_keys)
    mixin = loader.class_defining(PREFILL_PATH, INFLIGHT_FUNCTION)
    queue = loader.class_defining(PREFILL_PATH, BOOTSTRAP_ENTRIES[-1])
    queue_plan = loader.plan_class(PREFILL_PATH, queue, BOOTSTRAP_ENTRIES)
    # The bootstrap queue calls scheduler methods through self.scheduler.X.
    mixin_entries = (INFLIGHT_FUNCTION, APPEND_FUNCTION, *sorted(_scheduler_attrs(queue_plan)))
    mixin_plan = loader.plan_class(PREFILL_PATH, mixin, mixin_entries, skip=scheduler_methods)
    sender_calls = _sender_calls(loader.parsed(PREFILL_PATH))
    nixl = _plan_sender(loader, NIXL_PATH, NIXL_SENDER, sender_calls)
    mooncake = _plan_sender(loader, MOONCAKE_PATH, MOONCAKE_SENDER, sender_calls)
    _plan_patching_modules(loader)
    loader.resolve()
    self_reads = {
        mixin: _self_reads(_methods_of(mixin_plan)),
        queue: _self_reads(_methods_of(queue_plan)),
        f"{queue}.scheduler": _scheduler_reads(queue_plan),
    }
    attributes = _attribute_verdicts(loader)
    kept = {mixin: own_state(_methods_of(mixin_plan)), queue: own_state(_methods_of(queue_plan))}
    return Target(
        label=tree.label,
        version=tree.sglang_version(),
        mixin=(PREFILL_PATH, mixin),
        bootstrap_queue=(PREFILL_PATH, queue),
        nixl_sender=nixl,
        modules=_build_order(loader.modules, loader.order),
        self_reads=self_reads,
        own_state={owner: found for owner, found in kept.items() if found},
        loaded=_loaded_methods(loader),
        replaced=tuple(sorted(scheduler_methods & set(_class_methods(loader.node(mixin))))),
        pass_along=frozenset(a for a, v in attributes.items() if v.passes_along),
        attributes=attributes,
        display={rel: tree.display(rel) for rel in loader.order},
        mooncake_sender=mooncake,
        nixl_polls_manager=nixl is not None and _polls_manager(loader, *nixl),
        bootstrap_timeout_default=_bootstrap_timeout_default(tree),
        env_registry=_env_registry(tree),
        mixin_methods=frozenset(_class_methods(loader.node(mixin))),
        inflight_args=tuple(
            a.arg for a in _class_methods(loader.node(mixin))[INFLIGHT_FUNCTION].args.args
        ),
        inflight_attrs=frozenset(
            n.attr
            for n in ast.walk(_class_methods(loader.node(mixin))[INFLIGHT_FUNCTION])
            if isinstance(n, ast.Attribute)
        ),
    )


def _plan_patching_modules(loader: _Loader) -> None:
    """Plan every other module of the disaggregation package whose module-level code rebinds
    an attribute of a loaded class it imports (``MooncakeKVSender.abort = ...`` in a fork's
    ``patches.py``): its rebindings run after that class's module, as importing it would (the
    simulation takes it as imported; one inside a block is refused as unmodelled)."""
    loaded = set(loader._class_index)
    for rel in loader.tree.python_files(DISAGGREGATION_DIR):
        data = loader.tree.read_bytes(rel)
        if rel in loader.modules or data is None:
            continue
        text = data.decode("utf-8", "replace")
        if not any(name in text for name in loaded):
            continue
        module = loader.parsed(rel)
        imported = frozenset(
            name
            for name in _import_keys(module)
            if (origin := loader.class_origin(rel, name)) is not None and origin[1] in loaded
        )
        if imported and any(
            isinstance(node, ast.stmt) and _patched_class(node, imported) is not None
            for stmt in module.body
            if not isinstance(stmt, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
            for node in ast.walk(stmt)
        ):
            loader.module_plan(rel)
            loader.order.append(rel)


def _polls_manager(loader: _Loader, rel: str, name: str) -> bool:
    """Does the sender's ``poll`` (the first class of its hierarchy defining it, and the
    ``_poll_with_status`` it may call) read ``check_status`` of its KV manager?"""
    for method in ("poll", "_poll_with_status"):
        for _, node, _ in loader.hierarchy(rel, name):
            function = _class_methods(node).get(method)
            if function is not None:
                if any(
                    isinstance(n, ast.Attribute) and n.attr == "check_status"
                    for n in ast.walk(function)
                ):
                    return True
                break
    return False


def _bootstrap_timeout_default(tree: SourceTree) -> int | None:
    """The release's own default of SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT: ``EnvInt(300)`` in
    environ.py, or ``get_int_env_var("...", 30)`` in a KV manager (0.4.7 - 0.5.7)."""
    for rel in BOOTSTRAP_DEFAULT_PATHS:
        data = tree.read_bytes(rel)
        if data is None:
            continue
        found = _BOOTSTRAP_DEFAULT.search(data.decode("utf-8", "replace"))
        if found:
            return int(found.group(1))
    return None


ENV_BASE = "EnvField"


def _env_registry(tree: SourceTree) -> EnvRegistry | None:
    """The release's Env classes and registry entries, from its ``environ.py``, if any."""
    data = tree.read_bytes(ENVIRON_PATH)
    if data is None:
        return None
    module = parse(data.decode("utf-8", "replace"), tree.display(ENVIRON_PATH))
    classes = {node.name: node for node in module.body if isinstance(node, ast.ClassDef)}
    if ENV_BASE not in classes:
        return None
    env_classes = [ENV_BASE]  # EnvField, and every class built only from Env classes
    grown = True
    while grown:
        grown = False
        for name, node in classes.items():
            bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
            if (
                name not in env_classes
                and bases
                and len(bases) == len(node.bases)
                and all(b in env_classes or (b in classes and b.startswith("_")) for b in bases)
                and any(b in env_classes for b in bases)
            ):
                env_classes.append(name)
                grown = True
    mixins = {  # private mixins the Env classes are built from (``_DeprecatedEnvFallback``)
        b.id
        for name in env_classes
        for b in classes[name].bases
        if isinstance(b, ast.Name) and b.id not in env_classes
    }
    nodes = [node for name, node in classes.items() if name in env_classes or name in mixins]
    entries: dict[str, tuple[str, object]] = {}
    for node in classes.values():
        if node.name in env_classes or node.name in mixins:
            continue
        for stmt in node.body:
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Name)
                and stmt.value.func.id in env_classes
                and len(stmt.value.args) == 1
            ):
                try:
                    default = ast.literal_eval(stmt.value.args[0])
                except ValueError:
                    continue  # a computed default: that entry keeps its stand-in
                entries[stmt.targets[0].id] = (stmt.value.func.id, default)
    where = tree.display(ENVIRON_PATH)
    code = sandbox.restricted_compile(
        ast.Module(body=list(nodes), type_ignores=[]),
        ENVIRON_PATH,
        lambda line: f"{where}:{line}",
        _FLAGS,
    )
    return EnvRegistry(code, entries)


def _sender_calls(module: ast.Module) -> frozenset[str]:
    """Every ``X`` of ``<...>.disagg_kv_sender.X`` in prefill.py: the sender methods the
    scheduler's code may call."""
    return frozenset(
        node.attr
        for node in ast.walk(module)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == REQ_SENDER
    )


def _scheduler_attrs(plan: _ClassPlan) -> set[str]:
    """Every X of ``self.scheduler.X`` in the plan's methods."""
    return {
        node.attr
        for method in _methods_of(plan)
        for node in ast.walk(method)
        if isinstance(node, ast.Attribute) and _is_attr_of(node.value, "self", "scheduler")
    }


def _scheduler_reads(plan: _ClassPlan) -> dict[str, tuple[str, int]]:
    """``self.scheduler.X`` read by the plan's methods: X -> (the last method reading it, the
    line)."""
    return {
        node.attr: (method.name, node.lineno)
        for method in _methods_of(plan)
        for node in ast.walk(method)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Load)
        and _is_attr_of(node.value, "self", "scheduler")
    }


def _plan_sender(
    loader: _Loader, rel: str, name: str, calls: frozenset[str]
) -> tuple[str, str] | None:
    """Plan the release's sender class ``name`` in ``rel``, if it has one: (module, class).
    Its entries are SGLang's sender interface and every sender method prefill.py calls, but
    not ``send`` (the simulated data path marks the transfer instead)."""
    if loader.tree.read_bytes(rel) is None or name not in loader.classes(rel):
        return None
    defined = {m for _, node, _ in loader.hierarchy(rel, name) for m in _class_methods(node)}
    entries = (*SENDER_ENTRIES, *sorted(calls & defined))
    loader.plan_class(rel, name, tuple(e for e in entries if e not in SENDER_SKIPPED))
    return (rel, name)

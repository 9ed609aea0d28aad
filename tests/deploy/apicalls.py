"""The Kubernetes API calls a gpuledger service's code makes, found by reading the code (no cluster).

For a service package (``services.admission``) it follows the service's imports inside ``services``
(the code its process runs) and collects every kubernetes-asyncio API method it names:
``core.patch_namespaced_pod(...)`` is a call, ``watch_objects(core.list_node)`` or
``functools.partial(custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL)`` a reference
to a list method handed to ``services.shared.kube.watch_objects``, which lists and watches.
Each method's REST path and HTTP verb come from kubernetes-asyncio itself (the ``call_api`` line of its
``*_with_http_info`` twin), so the RBAC (group, resource, verb) is derived, not guessed. Custom-object
methods take group and plural from the call's arguments, resolved in the calling module.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
from pathlib import Path
from typing import Any, NamedTuple

import kubernetes_asyncio.client as k8s

REPO = Path(__file__).resolve().parents[2]
WATCH_FUNCTION = "watch_objects"
"""services.shared.kube.watch_objects: LISTs, then WATCHes, with the list function it is given."""
_CALL_API = re.compile(r"call_api\(\s*'(?P<path>/[^']*)',\s*'(?P<method>[A-Z]+)'")


class Permission(NamedTuple):
    """One RBAC grant: API group ("" for core), resource (``pods``, ``nodes/status``), verb."""

    group: str
    resource: str
    verb: str


class Endpoint(NamedTuple):
    """A kubernetes-asyncio method's REST shape: HTTP method, group, resource, whether it names one object."""

    method: str
    group: str
    resource: str
    named: bool


def _parse_path(path: str, method: str) -> Endpoint | None:
    """``/api/v1/namespaces/{namespace}/pods/{name}`` -> ("", "pods", named); None for discovery paths."""
    segments = [s for s in path.split("/") if s]
    if segments[0] not in ("api", "apis"):
        return None
    if segments[0] == "api":
        group, rest = "", segments[2:]
    else:
        group, rest = (segments[1], segments[3:]) if len(segments) > 3 else ("", [])
    if not rest:
        return None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[1] == "{namespace}":
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    return Endpoint(method, group, resource, named=len(rest) >= 2 and rest[1].startswith("{"))


@functools.cache
def endpoint_index() -> dict[str, Endpoint]:
    """Every public kubernetes-asyncio API method name -> its REST endpoint (watch_* paths skipped)."""
    index: dict[str, Endpoint] = {}
    for cls_name in dir(k8s):
        cls = getattr(k8s, cls_name)
        if not (cls_name.endswith("Api") and inspect.isclass(cls)):
            continue
        source = Path(inspect.getfile(cls)).read_text()  # one module per API class
        for chunk in source.split("\n    def ")[1:]:
            name, _, body = chunk.partition("(")
            match = _CALL_API.search(body) if name.endswith("_with_http_info") else None
            endpoint = _parse_path(match["path"], match["method"]) if match else None
            if match and endpoint is not None and "/watch/" not in match["path"]:
                index.setdefault(name.removesuffix("_with_http_info"), endpoint)
    return index


def verbs_of(endpoint: Endpoint, *, watched: bool) -> set[str]:
    """RBAC verbs of one request: GET -> get/list (+watch), POST create, PUT update, PATCH patch, DELETE."""
    if endpoint.method == "GET":
        if endpoint.named:
            return {"get"}
        return {"list", "watch"} if watched else {"list"}
    return {
        "POST": {"create"}, "PUT": {"update"}, "PATCH": {"patch"},
        "DELETE": {"delete"} if endpoint.named else {"deletecollection"},
    }[endpoint.method]


def module_closure(package: str) -> set[str]:
    """``package`` and every ``services.*``/``events.*`` module its modules import, transitively."""
    seen: set[str] = set()
    todo = [m for m in _modules_under(package)]
    while todo:
        name = todo.pop()
        if name in seen or _source_file(name) is None:
            continue
        seen.add(name)
        todo.extend(_imports_of(name))
    return seen


def _modules_under(package: str) -> list[str]:
    root = REPO / package.replace(".", "/")
    if root.with_suffix(".py").exists():
        return [package]
    return [package + "." + ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            for p in sorted(root.rglob("*.py"))]


def _source_file(module: str) -> Path | None:
    base = REPO / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _imports_of(module: str) -> set[str]:
    path = _source_file(module)
    assert path is not None
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node, is_package=path.name == "__init__.py")
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m.rstrip(".") for m in found if m.split(".")[0] in ("services", "events")}


def _absolute(module: str, node: ast.ImportFrom, *, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    keep = len(parts) - node.level + (1 if is_package else 0)
    return ".".join([*parts[:keep], *([node.module] if node.module else [])])


class Finding(NamedTuple):
    """A permission and where the code needs it (``module:line method``)."""

    permission: Permission
    where: str


def scan_module(module: str) -> list[Finding]:
    """Every Kubernetes API permission one module's code needs."""
    path = _source_file(module)
    assert path is not None
    return scan_source(path.read_text(), module=module)


def scan_source(source: str, *, module: str) -> list[Finding]:
    """Every Kubernetes API permission ``source`` needs (names resolve in ``module`` when not literals)."""
    code = _Code(ast.parse(source, module), module)
    index = endpoint_index()
    findings: list[Finding] = []
    for node in ast.walk(code.tree):
        if isinstance(node, ast.Attribute) and node.attr in index:
            for perm in code.permissions(node, index[node.attr]):
                findings.append(Finding(perm, f"{module}:{node.lineno} {node.attr}"))
    return findings


class _Code:
    """One parsed module: parent links, and constant resolution for custom-object arguments."""

    def __init__(self, tree: ast.Module, module: str) -> None:
        self.tree, self.module = tree, module
        self.parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
        self.watchers = {n.id for call in ast.walk(tree) if isinstance(call, ast.Call)
                         and _called_name(call) == WATCH_FUNCTION for n in ast.walk(call) if isinstance(n, ast.Name)}

    def permissions(self, node: ast.Attribute, endpoint: Endpoint) -> set[Permission]:
        """What one use of an API method needs. A list method is watched too when it is referenced rather
        than called (handed to ``watch_objects``, maybe through a ``partial``), called with
        ``watch=True``, or called inside a function that is handed to ``watch_objects``."""
        parent = self.parents.get(node)
        called = isinstance(parent, ast.Call) and parent.func is node
        call = parent if isinstance(parent, ast.Call) else None
        function = self._enclosing_function(node)
        watched = not called or (function is not None and function.name in self.watchers) or any(
            kw.arg == "watch" and isinstance(kw.value, ast.Constant) and kw.value.value is True
            for kw in (call.keywords if call else []))
        verbs = verbs_of(endpoint, watched=watched)
        if endpoint.group != "{group}":
            return {Permission(endpoint.group, endpoint.resource, verb) for verb in verbs}
        args = self._custom_args(call, node.attr, skip=0 if called else 1)
        return {Permission(group, endpoint.resource.replace("{plural}", plural), verb)
                for group in args["group"] for plural in args["plural"] for verb in verbs}

    def _custom_args(self, call: ast.Call | None, method: str, *, skip: int) -> dict[str, set[str]]:
        """group/plural of a custom-object call or ``partial(method, group, version, ..., plural)``;
        positions follow the kubernetes-asyncio method's own signature."""
        params = [p for p in inspect.signature(getattr(k8s.CustomObjectsApi, method)).parameters
                  if p not in ("self", "kwargs")]
        values: dict[str, ast.expr] = dict(zip(params, call.args[skip:], strict=False)) if call else {}
        values.update({kw.arg: kw.value for kw in (call.keywords if call else []) if kw.arg})
        if not {"group", "plural"} <= values.keys():
            raise LookupError(f"{self.module}: {method} is used without a visible group and plural")
        return {key: self.resolve(values[key]) for key in ("group", "plural")}

    def resolve(self, expr: ast.expr) -> set[str]:
        """The strings ``expr`` can be: a literal, a module constant, or a parameter of the enclosing
        function resolved at each of its call sites in this module."""
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if isinstance(expr, ast.Name) and (function := self._enclosing_function(expr)) is not None:
            names = [a.arg for a in function.args.posonlyargs + function.args.args]
            if expr.id in names or expr.id in [a.arg for a in function.args.kwonlyargs]:
                return self._call_site_values(function, expr.id, names)
        if not all(isinstance(n, ast.Name | ast.Attribute | ast.Load) for n in ast.walk(expr)):
            raise LookupError(f"{self.module}: cannot resolve {ast.unparse(expr)!r} to a constant")
        namespace: dict[str, Any] = dict(vars(importlib.import_module(self.module)))
        value = eval(compile(ast.Expression(expr), self.module, "eval"), namespace)  # names/attributes only
        if not isinstance(value, str):
            raise LookupError(f"{self.module}: {ast.unparse(expr)} is not a string")
        return {value}

    def _enclosing_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        while (node := self.parents.get(node)) is not None:  # type: ignore[assignment]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
        return None

    def _call_site_values(self, function: ast.FunctionDef | ast.AsyncFunctionDef, param: str,
                          positional: list[str]) -> set[str]:
        values: set[str] = set()
        for call in ast.walk(self.tree):
            if not isinstance(call, ast.Call) or _called_name(call) != function.name:
                continue
            offset = 1 if positional[:1] in (["self"], ["cls"]) else 0
            by_position = dict(zip(positional[offset:], call.args, strict=False))
            by_keyword = {kw.arg: kw.value for kw in call.keywords}
            arg = by_keyword.get(param, by_position.get(param))
            if arg is not None:
                values |= self.resolve(arg)
        if not values:
            raise LookupError(f"{self.module}: no call of {function.name}() gives {param!r}")
        return values


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def required_permissions(package: str) -> dict[Permission, list[str]]:
    """Permission -> where the code of ``package`` (and what it imports) needs it."""
    needed: dict[Permission, list[str]] = {}
    for module in sorted(module_closure(package)):
        for finding in scan_module(module):
            needed.setdefault(finding.permission, []).append(finding.where)
    return needed

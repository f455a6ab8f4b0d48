"""The declaration (as data) that a former release's SQL predicate stands for, to show in the
one line that refuses it.

Only this module still reads a predicate's SQL text, with pglast, and only to write TOML for
a person to paste: nothing it reads reaches the server. It knows the common shapes:
``col < %(cutoff)s``; ``coalesce(a, b) < %(cutoff)s`` and its index-friendly spelling
``a < %(cutoff)s OR (a IS NULL AND b < %(cutoff)s)``; ``(CASE WHEN conditions THEN col END) <
%(cutoff)s``; AND-ed ``col = value``, ``col <> value``, ``col IN (...)``, ``col NOT IN (...)``,
``col``, ``NOT col``, ``col IS [NOT] NULL``; ``NOT EXISTS (SELECT 1 FROM other o WHERE
o.col = table.key)``; and an OR of such rules, each with its own cutoff. Anything else: None.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pglast import ast
from pglast.enums import A_Expr_Kind, BoolExprType, NullTestType, SubLinkType

from reaper.sqltext import sqlinfo

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# A predicate's parse tree is read by recursion: one deeper than this (a former release's
# predicate is a few levels deep) is not translated, so none can exhaust the stack.
_MAX_DEPTH = 64


class _Untranslatable(Exception):
    pass


def translate(table: str, predicate: str, retention: Mapping[str, str]) -> str | None:
    """The TOML keys (one line) that declare the rows ``predicate`` matches on ``table``;
    ``retention``: each cutoff parameter's retention, as the config writes it (``30d``).
    None when the shape is not one this module knows."""
    try:
        select, names = sqlinfo.parse_select(predicate)
        where: Any = getattr(select, "whereClause", None)
        if sqlinfo.deeper_than(where, _MAX_DEPTH):
            return None
        rules, refs = _Reader(table.rsplit(".", 1)[-1], names).sweep(where)
    except (sqlinfo.PredicateSyntaxError, _Untranslatable, IndexError, AttributeError):
        return None
    try:
        rendered = [
            _rule_toml(age, when, filters, retention[param]) for age, when, filters, param in rules
        ]
    except KeyError:
        return None
    out = (
        rendered[0]
        if len(rendered) == 1
        else ("rule = [" + ", ".join("{ " + r + " }" for r in rendered) + "]")
    )
    if refs:
        out += (
            ", keep_referenced = ["
            + ", ".join(
                f"{{ table = {_str(t)}, column = {_str(c)}, key = {_str(k)} }}" for t, c, k in refs
            )
            + "]"
        )
    return out


# A rule as read: (age columns, age_when filters, filters, cutoff parameter name).
_Filters = dict[str, dict[str, Any]]
_Rule = tuple[list[str], _Filters, _Filters, str]


class _Reader:
    def __init__(self, relname: str, names: list[str]) -> None:
        self.relname = relname
        self.names = names

    def sweep(self, node: Any) -> tuple[list[_Rule], list[tuple[str, str, str]]]:
        refs: list[tuple[str, str, str]] = []
        rest = []
        for c in _conjuncts(node):
            ref = self.reference(c)
            if ref is not None:
                refs.append(ref)
            else:
                rest.append(c)
        bounds = [c for c in rest if self.age(c) is not None]
        ors = [c for c in rest if _is(c, BoolExprType.OR_EXPR) and self.age(c) is None]
        if len(bounds) + len(ors) != 1:
            raise _Untranslatable
        filters = self.filters([c for c in rest if c not in bounds and c not in ors])
        if bounds:
            age, when, param = self.age(bounds[0]) or ([], {}, "")
            return [(age, when, filters, param)], refs
        rules = []
        for branch in ors[0].args:
            got, inner_refs = self.sweep(branch)
            if inner_refs or len(got) != 1:
                raise _Untranslatable
            age, when, own, param = got[0]
            rules.append((age, when, _merge(own, filters), param))
        return rules, refs

    def column(self, node: Any) -> str | None:
        if not _isa(node, ast.ColumnRef):
            return None
        parts = [getattr(f, "sval", None) for f in node.fields or ()]
        if not parts or not all(isinstance(p, str) for p in parts):
            return None
        if (len(parts) == 2 and parts[0] == self.relname) or len(parts) == 1:
            return str(parts[-1])
        return None

    def param(self, node: Any) -> str | None:
        if _isa(node, ast.ParamRef):
            return str(self.names[node.number - 1])
        return None

    def age(self, node: Any) -> tuple[list[str], _Filters, str] | None:
        """A bound: ``X < $n`` (X a column, coalesce of columns or CASE WHEN), or the OR
        spelling of coalesce."""
        if _is(node, BoolExprType.OR_EXPR):
            return self.or_coalesce(node)
        if not _isa(node, ast.A_Expr) or node.kind != A_Expr_Kind.AEXPR_OP:
            return None
        op = node.name[-1].sval
        if op == "<" and self.param(node.rexpr):
            expr, param = node.lexpr, self.param(node.rexpr)
        elif op == ">" and self.param(node.lexpr):
            expr, param = node.rexpr, self.param(node.lexpr)
        else:
            return None
        assert param is not None
        col = self.column(expr)
        if col is not None:
            return [col], {}, param
        if _isa(expr, ast.CoalesceExpr):
            cols = [self.column(a) for a in expr.args]
            if all(cols):
                return [str(c) for c in cols], {}, param
            return None
        if (
            _isa(expr, ast.CaseExpr)
            and expr.arg is None
            and expr.defresult is None
            and len(expr.args) == 1
        ):
            col = self.column(expr.args[0].result)
            if col is None:
                return None
            try:
                when = self.filters(list(_conjuncts(expr.args[0].expr)))
            except _Untranslatable:
                return None
            return [col], when, param
        return None

    def or_coalesce(self, node: Any) -> tuple[list[str], _Filters, str] | None:
        """``a < $n OR (a IS NULL AND b < $n) OR (a IS NULL AND b IS NULL AND c < $n)``."""
        cols: list[str] = []
        param = None
        for i, arm in enumerate(node.args):
            parts = list(_conjuncts(arm))
            if len(parts) != i + 1:
                return None
            for prev, test in zip(cols, parts[:-1], strict=True):
                if not (
                    _isa(test, ast.NullTest)
                    and test.nulltesttype == NullTestType.IS_NULL
                    and self.column(test.arg) == prev
                ):
                    return None
            bound = self.age(parts[-1])
            if bound is None or len(bound[0]) != 1 or bound[1]:
                return None
            if param is not None and bound[2] != param:
                return None
            param = bound[2]
            cols.append(bound[0][0])
        return (cols, {}, param) if param and len(cols) > 1 else None

    def filters(self, nodes: list[Any]) -> _Filters:
        out: _Filters = {}
        for node in nodes:
            key, col, value = self.filter(node)
            bucket = out.setdefault(key, {})
            if col in bucket:
                raise _Untranslatable
            bucket[col] = value
        return out

    def filter(self, node: Any) -> tuple[str, str, Any]:
        col = self.column(node)
        if col is not None:
            return "where", col, True
        if _is(node, BoolExprType.NOT_EXPR):
            col = self.column(node.args[0])
            if col is not None:
                return "where", col, False
        if _isa(node, ast.NullTest):
            col = self.column(node.arg)
            if col is not None:
                null = node.nulltesttype == NullTestType.IS_NULL
                return ("is_null" if null else "not_null"), col, None
        if _isa(node, ast.A_Expr):
            op = node.name[-1].sval
            col = self.column(node.lexpr)
            if col is not None and node.kind == A_Expr_Kind.AEXPR_OP and op in ("=", "<>", "!="):
                return ("where" if op == "=" else "where_not"), col, _const(node.rexpr)
            if col is not None and node.kind == A_Expr_Kind.AEXPR_IN:
                values = [_const(v) for v in node.rexpr]
                return ("where" if op == "=" else "where_not"), col, values
        raise _Untranslatable

    def reference(self, node: Any) -> tuple[str, str, str] | None:
        """``NOT EXISTS (SELECT 1 FROM other o WHERE o.col = table.key)``."""
        if not _is(node, BoolExprType.NOT_EXPR) or len(node.args) != 1:
            return None
        link = node.args[0]
        if not _isa(link, ast.SubLink) or link.subLinkType != SubLinkType.EXISTS_SUBLINK:
            return None
        sub = link.subselect
        if len(sub.fromClause or ()) != 1 or not _isa(sub.fromClause[0], ast.RangeVar):
            raise _Untranslatable
        rel = sub.fromClause[0]
        inner = rel.alias.aliasname if rel.alias else rel.relname
        cond = sub.whereClause
        if not (
            _isa(cond, ast.A_Expr)
            and cond.kind == A_Expr_Kind.AEXPR_OP
            and cond.name[-1].sval == "="
        ):
            raise _Untranslatable
        sides = {}
        for side in (cond.lexpr, cond.rexpr):
            parts = [getattr(f, "sval", None) for f in getattr(side, "fields", None) or ()]
            if len(parts) != 2 or parts[0] not in (inner, self.relname) or parts[0] in sides:
                raise _Untranslatable
            sides[parts[0]] = str(parts[1])
        if inner == self.relname or len(sides) != 2:
            raise _Untranslatable
        schema = rel.schemaname or "public"
        return f"{schema}.{rel.relname}", sides[inner], sides[self.relname]


def _isa(node: Any, kind: type) -> bool:
    # Not isinstance: pglast's node classes type their slots loosely, and every node here is
    # read as Any.
    return isinstance(node, kind)


def _is(node: Any, op: BoolExprType) -> bool:
    return _isa(node, ast.BoolExpr) and node.boolop == op


def _conjuncts(node: Any) -> list[Any]:
    if _is(node, BoolExprType.AND_EXPR):
        return [c for a in node.args for c in _conjuncts(a)]
    return [node]


def _const(node: Any) -> Any:
    if not _isa(node, ast.A_Const) or node.isnull:
        raise _Untranslatable
    val = node.val
    if _isa(val, ast.String):
        return str(val.sval)
    if _isa(val, ast.Integer):
        return int(val.ival)
    if _isa(val, ast.Boolean):
        return bool(val.boolval)
    raise _Untranslatable


def _merge(own: _Filters, shared: _Filters) -> _Filters:
    out = {k: dict(v) for k, v in own.items()}
    for key, cols in shared.items():
        bucket = out.setdefault(key, {})
        for col, value in cols.items():
            if col in bucket:
                raise _Untranslatable
            bucket[col] = value
    return out


def _str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else _str(name)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return _str(value) if isinstance(value, str) else str(value)


def _rule_toml(age: list[str], when: _Filters, filters: _Filters, retention: str) -> str:
    if when.keys() - {"where", "where_not"}:
        raise KeyError("age_when takes comparisons only")
    parts = [f"age = {_str(age[0]) if len(age) == 1 else _value(age)}"]
    if when.get("where"):
        parts.append(
            "age_when = { "
            + ", ".join(f"{_key(c)} = {_value(v)}" for c, v in when["where"].items())
            + " }"
        )
    if when.get("where_not"):
        raise KeyError("age_when takes equalities only")
    for key in ("where", "where_not"):
        if filters.get(key):
            parts.append(
                f"{key} = {{ "
                + ", ".join(f"{_key(c)} = {_value(v)}" for c, v in filters[key].items())
                + " }"
            )
    for key in ("is_null", "not_null"):
        if filters.get(key):
            parts.append(f"{key} = {_value(list(filters[key]))}")
    parts.append(f"retention = {_str(retention)}")
    return ", ".join(parts)

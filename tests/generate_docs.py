"""The generated parts of the docs: written from the code, checked by tests/test_generated_docs.py.

Run ``python tests/generate_docs.py`` after changing what they come from; the test fails until the
pages match. Each part sits between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``.

* ``features`` in docs/errors.md: every ``UnsupportedLayoutError.feature`` value, from the
  ``Capability`` and ``Limitation`` enums and the ``#:`` comment above each member.
* ``hooks`` in docs/driver-authors.md: every hook of ``DriverHooks``, from its signature and docstring
  (required or optional, the first sentence, the ``Raises:`` section).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _member_comments(path: Path, class_name: str) -> dict[str, str]:
    """``#:`` comments above each member of ``class_name`` in ``path`` (joined, one line)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name):
                    comment: list[str] = []
                    row = item.lineno - 2
                    while row >= 0 and lines[row].strip().startswith("#:"):
                        comment.insert(0, lines[row].strip()[2:].strip())
                        row -= 1
                    out[item.targets[0].id] = " ".join(comment)
    return out


def features_table() -> str:
    from layoutcore.driver import Capability, Limitation

    path = ROOT / "layoutcore" / "_capabilities.py"
    rows = ["| `feature` | kind | what is missing |", "| --- | --- | --- |"]
    for kind in (Capability, Limitation):
        comments = _member_comments(path, kind.__name__)
        for member in kind:
            what = comments.get(member.name, "").replace("|", "\\|")
            rows.append(f"| `{member.value}` | `{kind.__name__}.{member.name}` | {what} |")
    return "\n".join(rows)


def _markdown(text: str) -> str:
    """Sphinx roles (``:meth:`~x.y```) as plain code spans."""
    return re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)


def _first_sentence(doc: str) -> str:
    text = _markdown(" ".join(doc.strip().split("\n\n")[0].split()))
    match = re.match(r"(.+?\.)(\s|$)", text)
    return (match.group(1) if match else text).replace("|", "\\|")


def _raises(doc: str) -> str:
    """The ``Raises:`` section of a (dedented) docstring, as the error names it lists ("nothing" if it says so)."""
    match = re.search(r"^Raises:\n((?:(?: {4}.*)?\n?)+)", doc, re.M)
    if not match:
        return ""
    section = match.group(1)
    if section.strip().startswith("Nothing"):
        return "nothing"
    entries = re.findall(r"^ {4}(\w[\w, ]*):", section, re.M)
    return ", ".join(f"`{name.strip()}`" for entry in entries for name in entry.split(","))


def hook_rows() -> list[tuple[str, str, str, str]]:
    """``(signature, required or optional, first sentence, raises)`` per hook, in class order."""
    from layoutcore.driver import DriverHooks

    rows = []
    members = dict(vars(DriverHooks))
    for base in DriverHooks.__mro__[1:]:  # hooks kept in bases of their own module (StreamHooks)
        if base.__module__.startswith("layoutcore.driver."):
            members.update({k: v for k, v in vars(base).items() if k not in members})
    for name, member in members.items():
        if name.startswith("_") or not callable(member):
            continue
        fn: Callable[..., object] = member
        doc = inspect.getdoc(fn) or ""
        required = "required" if getattr(fn, "__isabstractmethod__", False) else "optional"
        parameters = list(inspect.signature(fn).parameters.values())[1:]  # without self
        signature = (
            "(" + ", ".join(p.name if p.default is p.empty else f"{p.name}={p.default!r}" for p in parameters) + ")"
        )
        rows.append((f"{name}{signature}", required, _first_sentence(doc), _raises(doc)))
    return rows


def hooks_table() -> str:
    rows = ["| hook | | what it does | raises |", "| --- | --- | --- | --- |"]
    rows += [f"| `{sig}` | {kind} | {what} | {raises} |" for sig, kind, what, raises in hook_rows()]
    return "\n".join(rows)


PARTS: dict[str, tuple[Path, Callable[[], str]]] = {
    "features": (ROOT / "docs" / "errors.md", features_table),
    "hooks": (ROOT / "docs" / "driver-authors.md", hooks_table),
}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- generated: {name} -->\n)(.*?)(<!-- end generated: {name} -->)", re.S)


def current(name: str) -> str | None:
    path, _ = PARTS[name]
    match = _pattern(name).search(path.read_text(encoding="utf-8"))
    return None if match is None else match.group(2).rstrip("\n")


def write(name: str) -> None:
    path, make = PARTS[name]
    text = path.read_text(encoding="utf-8")
    new, count = _pattern(name).subn(lambda m: f"{m.group(1)}{make()}\n{m.group(3)}", text)
    if count != 1:
        raise SystemExit(f"{path}: no '<!-- generated: {name} -->' ... '<!-- end generated: {name} -->' block")
    path.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    for part in sys.argv[1:] or list(PARTS):
        write(part)

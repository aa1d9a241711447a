"""``python -m layoutcore_conformance [--driver NAME] [pytest args]``: run the suite."""

from __future__ import annotations

import sys

from ._runner import run


def main(argv: list[str] | None = None) -> int:
    """Take an optional ``--driver NAME`` (or ``--driver=NAME``) off ``argv``; pass the rest to pytest."""
    args = list(sys.argv[1:] if argv is None else argv)
    driver: str | None = None
    for i, arg in enumerate(args):
        if arg == "--driver" and i + 1 < len(args):
            driver = args[i + 1]
            del args[i : i + 2]
            break
        if arg.startswith("--driver="):
            driver = arg.split("=", 1)[1]
            del args[i]
            break
    return run(args, driver=driver)


if __name__ == "__main__":
    raise SystemExit(main())

"""The compose file's image: the Dockerfile installs the project, .dockerignore keeps the context.

Checked without Docker: the Dockerfile's instructions are parsed, and .dockerignore's patterns are
matched by Docker's rules against the paths the image needs and the ones it must not carry.
"""

from __future__ import annotations

import re

from tests.support.compose import (
    DOCKERFILE,
    DOCKERIGNORE,
    pyproject,
)


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def test_dockerfile_installs_the_project_without_dev_extras_as_a_non_root_user() -> None:
    steps = dockerfile_instructions()
    bases = [args.split()[0] for op, args in steps if op == "FROM"]
    assert bases and all(base == "python:3.11-slim" for base in bases), bases
    runs = " ".join(args for op, args in steps if op == "RUN")
    # Either `pip install .`, or `pip wheel .` in a build stage and `pip install NAME` from it.
    name = re.escape(pyproject()["project"]["name"])
    assert re.search(r"pip (install|wheel)\b[^&;]*\s\.(\s|$)", runs), "pip must build ."
    assert re.search(rf"pip install\b[^&;]*\s(\.|{name})(\s|$)", runs), "pip must install it"
    assert "[dev]" not in runs and ".[" not in runs, "no extras in the image"
    users = [args.split(":")[0] for op, args in steps if op == "USER"]
    assert users and users[-1] not in ("root", "0"), "the image runs as a non-root user"
    # The compose commands are whole argv lists: an ENTRYPOINT would be prepended to them.
    assert "ENTRYPOINT" not in {op for op, _ in steps}


def _glob(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus ``**``) as a regular expression."""
    out = ""
    for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern):
        out += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token) or re.escape(
            token
        )
    return re.compile(out)


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern also covers what is below it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        glob = _glob(raw.removeprefix("!").strip("/"))
        if any(glob.fullmatch(prefix) for prefix in prefixes):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_the_venv_out_and_the_packages_in() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for path in (".venv", ".venv/bin/python", ".git", "tests/system/test_compose.py"):
        assert dockerignored(path, patterns), f"{path} is in the build context"
    needed = ["pyproject.toml", str(pyproject()["project"]["readme"])]
    needed += pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    for path in needed:
        assert not dockerignored(path, patterns), f"{path} is missing from the build context"
        assert not dockerignored(f"{path}/__init__.py", patterns), f"{path}/ is not all there"


def test_dockerignore_matching_follows_docker_rules() -> None:
    patterns = ["**/__pycache__", "docs", "!docs/keep.md", "*.pyc"]
    assert dockerignored("agents/__pycache__/x.pyc", patterns)
    assert dockerignored("__pycache__", patterns)
    assert dockerignored("x.pyc", patterns)
    assert not dockerignored("agents/x.pyc", patterns)  # * does not cross a /
    assert dockerignored("docs/notes/a.md", patterns)
    assert not dockerignored("docs/keep.md", patterns)
    assert not dockerignored("agents/agent.py", patterns)

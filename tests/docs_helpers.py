"""The documentation's code blocks, its built API pages and the distributions.

Standard library only: the ``docs`` and ``package`` nox sessions run it in venvs
that hold Sphinx or ``build`` but not pytest::

    python -m tests.docs_helpers check-api docs/_build/html   # after sphinx-build
    python -m tests.docs_helpers check-dist DIR               # after python -m build

tests/test_docs.py runs the code blocks with it and tests both checks.
"""

from __future__ import annotations

import dataclasses
import glob
import html.parser
import os
import re
import sys
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ``<!-- fragment: why it cannot run as it is -->`` on the line just before a fence
FRAGMENT = re.compile(r"^\s*<!--\s*fragment:\s*(?P<reason>\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def doc_files() -> list[str]:
    """README.md and every page of the documentation, as paths relative to ROOT."""
    pages = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return ["README.md", *pages]


@dataclasses.dataclass(frozen=True)
class Block:
    path: str  # relative to ROOT
    line: int  # of the opening fence, 1-based
    info: str  # the fence's info string: "python", "sh", "{eval-rst}", ...
    text: str
    fragment: str | None  # the reason given by a fragment marker, if any

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info.split() else ""

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def is_python(self) -> bool:
        return self.language in ("python", "py", "pycon")

    @property
    def is_console(self) -> bool:
        return self.language in ("sh", "console", "shell", "bash")


def code_blocks(path: str) -> list[Block]:
    """The fenced code blocks of one Markdown file (outermost fences only)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        fence, indent = match["fence"], len(match["indent"])
        previous = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = FRAGMENT.match(previous)
        body = []
        j = i + 1
        while j < len(lines):
            close = FENCE.match(lines[j])
            if (
                close
                and close["fence"][0] == fence[0]
                and len(close["fence"]) >= len(fence)
                and not close["info"].strip()
            ):
                break
            body.append(lines[j][indent:] if lines[j][:indent].isspace() or not indent else lines[j].lstrip())
            j += 1
        else:
            raise ValueError(f"{path}:{i + 1}: unclosed code fence")
        text = "\n".join(body) + "\n"
        blocks.append(Block(path, i + 1, match["info"].strip(), text, marker["reason"] if marker else None))
        i = j + 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for path in doc_files() for block in code_blocks(path)]


# -- Console blocks -----------------------------------------------------------


def console_commands(block: Block) -> list[str]:
    """The commands of a shell block (without comments, prompts or blank lines),
    or those a ``text`` block shows after a ``$`` prompt."""
    commands = []
    for line in block.text.splitlines():
        line = line.split(" #", 1)[0].strip()
        prompted = line.startswith("$ ")
        if prompted:
            line = line[2:]
        if line and not line.startswith("#") and (prompted or block.is_console):
            commands.append(line)
    return commands


def nox_sessions() -> set[str]:
    """The sessions noxfile.py defines (``tests``, ``tests-3.13``, ..., ``docs``)."""
    with open(os.path.join(ROOT, "noxfile.py"), encoding="utf-8") as f:
        source = f.read()
    names = set()
    for match in re.finditer(r"@nox\.session\((?P<args>[^\n]*)\)\ndef (?P<name>\w+)\(", source):
        names.add(match["name"])
        if match["args"].replace(" ", "") == "python=PYTHONS":
            names.update(f"{match['name']}-{v}" for v in ("3.13", "3.14", "3.15"))
    return names


def dev_commands() -> set[str]:
    """The subcommands ``./dev`` dispatches on."""
    with open(os.path.join(ROOT, "dev"), encoding="utf-8") as f:
        source = f.read()
    case = source[source.index('case "$cmd" in') : source.index("esac")]
    return set(re.findall(r"^\s{4}([a-z]+)\)", case, re.MULTILINE))


# -- The built API reference ---------------------------------------------------

AUTODOC = re.compile(r"^\.\. auto(?P<kind>class|function|exception|module):: (?P<name>[\w.]+)\s*$")


def documented_objects(md_path: str) -> list[str]:
    """The dotted names whose entries the autodoc directives of a page must
    produce: each object, and each member listed in its ``:members:`` option.
    An ``automodule`` must list its members, so that they can be checked."""
    with open(md_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    names = []
    for i, line in enumerate(lines):
        match = AUTODOC.match(line.strip())
        if match is None:
            continue
        name = match["name"]
        members = None
        for option in lines[i + 1 :]:
            if not option.strip().startswith(":"):
                break
            key, _, value = option.strip()[1:].partition(":")
            if key == "members":
                members = [m.strip() for m in value.split(",") if m.strip()]
        if match["kind"] != "module":
            names.append(name)
        elif not members:
            raise ValueError(f"{md_path}: automodule {name} lists no :members:, so its section cannot be checked")
        names.extend(f"{name}.{member}" for member in members or ())
    return names


class _Entries(html.parser.HTMLParser):
    """The ids of the object entries (``<dt class="sig sig-object py" id=...>``)
    of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "dt" and "sig-object" in (attributes.get("class") or "").split() and attributes.get("id"):
            self.ids.add(str(attributes["id"]))


def check_api(out_dir: str) -> list[str]:
    """Problems with the built HTML: every object and member that a page's autodoc
    directives document must have an entry in that page's HTML (an API section
    left empty, by a module that did not import or by a stale build, fails)."""
    problems = []
    pages = 0
    for md_path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        expected = documented_objects(md_path)
        if not expected:
            continue
        pages += 1
        page = os.path.join(out_dir, os.path.basename(md_path)[: -len(".md")] + ".html")
        if not os.path.exists(page):
            problems.append(f"{page}: not built")
            continue
        parser = _Entries()
        with open(page, encoding="utf-8") as f:
            parser.feed(f.read())
        problems.extend(f"{page}: no entry for {name}" for name in expected if name not in parser.ids)
    if not pages:
        problems.append("no page of docs/ has autodoc directives")
    return problems


# -- The distributions ---------------------------------------------------------

# What the test suite and noxfile.py need from the sdist besides the package.
SDIST_NEEDS = ("LICENSE", "README.md", "pyproject.toml", "noxfile.py", "dev", "tests", "scripts", "examples", "docs")


def _repo_files(relative: str) -> set[str]:
    path = os.path.join(ROOT, relative)
    if os.path.isfile(path):
        return {relative}
    found = set()
    for folder, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith((".", "_build"))]
        for name in files:
            if not name.endswith((".pyc", ".pyo")):
                found.add(os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/"))
    return found


def check_dist(dist_dir: str) -> list[str]:
    """Problems with the sdist and wheel in dist_dir: both must carry LICENSE (the
    repository's text), and the sdist every file its tests and noxfile use."""
    with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
        license_text = f.read()
    problems = []
    sdists = glob.glob(os.path.join(dist_dir, "*.tar.gz"))
    wheels = glob.glob(os.path.join(dist_dir, "*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        return [f"{dist_dir}: expected one sdist and one wheel, found {sdists + wheels}"]
    with tarfile.open(sdists[0]) as tar:
        members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if "/" in m.name}
        entry = members.get("LICENSE")
        extracted = tar.extractfile(entry) if entry is not None else None
        if extracted is None or extracted.read() != license_text:
            problems.append(f"{sdists[0]}: no LICENSE with the repository's text")
        needed = set().union(*(_repo_files(p) for p in SDIST_NEEDS))
        problems.extend(f"{sdists[0]}: lacks {name}" for name in sorted(needed - set(members)))
        dev = members.get("dev")
        if dev is not None and not dev.mode & 0o100:
            problems.append(f"{sdists[0]}: dev is not executable")
    with zipfile.ZipFile(wheels[0]) as whl:
        licenses = [n for n in whl.namelist() if re.fullmatch(r"[^/]+\.dist-info/licenses/LICENSE", n)]
        if not licenses or whl.read(licenses[0]) != license_text:
            problems.append(f"{wheels[0]}: no .dist-info/licenses/LICENSE with the repository's text")
        metadata = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        if not metadata or b"\nLicense-File: LICENSE\n" not in whl.read(metadata[0]):
            problems.append(f"{wheels[0]}: METADATA does not name License-File: LICENSE")
    return problems


def main(argv: list[str]) -> int:
    checks = {"check-api": check_api, "check-dist": check_dist}
    if len(argv) != 2 or argv[0] not in checks:
        print("usage: python -m tests.docs_helpers check-api HTML_DIR | check-dist DIST_DIR", file=sys.stderr)
        return 2
    problems = checks[argv[0]](argv[1])
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{argv[0]}: {'FAILED' if problems else 'ok'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The README and docs/*.md say what the code does: their code blocks run.

Conventions for the code blocks of README.md and docs/*.md (tests/docs_helpers.py
reads them):

- Every fence names its language: ``python``, ``sh``, ``text`` (output, error
  messages), ``yaml``, or a MyST directive (``{eval-rst}``, ``{toctree}``, ...).
- A ``python`` block runs as it is: copied into a file of an empty folder and
  run with ``python file.py``, so ``if __name__ == "__main__":`` guards work as
  they do for a reader's script (and the workers load the file as ``__mp_main__``,
  see docs/main-module.md). It must exit with status 0 within the timeout and
  print no traceback. A block that starts with ``>>>`` is an interactive
  session and runs as a doctest: its outputs must match.
- A ``python`` block that cannot run by itself (a signature, a before/after
  pair, a continuation of an earlier block, names that stand for the reader's
  own) is marked on the line just before its fence with
  ``<!-- fragment: the reason -->``, which renders as nothing.
- In ``sh`` blocks (and after a ``$`` prompt in ``text`` blocks), the commands of
  this project must exist: ``./dev X``, ``nox -s X``, ``python -m interpexec X``
  and ``python path/in/the/repo.py``.

Also: README.md links only to absolute URLs (it is shown on package indexes,
without the repository), and its links into the documentation name pages and
anchors that the Sphinx build produces; docs/requirements.txt installs what the
API reference imports; the checks of the ``docs`` and ``package`` nox sessions
catch what they are for.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile

import pytest

from tests import docs_helpers
from tests.docs_helpers import ROOT, Block

DOCS_URL = "https://interpexec.readthedocs.io/en/latest/"
LANGUAGES = {"python", "pycon", "sh", "text", "yaml", "{eval-rst}", "{toctree}", "{warning}", "{if-available}"}

BLOCKS = docs_helpers.all_blocks()


def _unique(blocks: list[Block]) -> list[Block]:
    """One block per distinct text (the README's example is also the docs')."""
    seen: dict[str, Block] = {}
    for block in blocks:
        seen.setdefault(block.text, block)
    return list(seen.values())


RUNNABLE = _unique([b for b in BLOCKS if b.is_python and b.fragment is None])
SCRIPTS = [b for b in RUNNABLE if not b.text.lstrip().startswith(">>>")]
SESSIONS = [b for b in RUNNABLE if b.text.lstrip().startswith(">>>")]
CONSOLE = [b for b in BLOCKS if b.is_console or (b.language == "text" and docs_helpers.console_commands(b))]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _run(argv: list[str], cwd: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def test_blocks_are_found():
    assert len(SCRIPTS) >= 12 and SESSIONS and CONSOLE
    assert {b.path for b in BLOCKS} >= {"README.md", "docs/getting-started.md", "docs/async.md"}


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_every_block_names_its_language(block: Block):
    assert block.language in LANGUAGES, f"{block.id}: fence info {block.info!r}"


def test_fragment_markers_precede_python_blocks():
    """Every marker belongs to a python block and gives a reason."""
    markers = 0
    for path in docs_helpers.doc_files():
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            markers += sum(1 for line in f if "<!-- fragment" in line)
    fragments = [b for b in BLOCKS if b.fragment is not None]
    assert len(fragments) == markers
    assert all(b.is_python and len(b.fragment or "") >= 10 for b in fragments)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("block", SCRIPTS, ids=lambda b: b.id)
def test_python_block_runs(block: Block, tmp_path):
    (tmp_path / "example.py").write_text(block.text, encoding="utf-8")
    proc = _run([sys.executable, "example.py"], str(tmp_path))
    assert proc.returncode == 0, f"{block.id} failed:\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, f"{block.id}:\n{proc.stderr}"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("block", SESSIONS, ids=lambda b: b.id)
def test_interactive_block_runs_as_doctest(block: Block, tmp_path):
    (tmp_path / "session.txt").write_text(block.text, encoding="utf-8")
    proc = _run([sys.executable, "-m", "doctest", "session.txt"], str(tmp_path))
    assert proc.returncode == 0, f"{block.id} failed:\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.timeout(90)
def test_console_commands_exist():
    """./dev, nox, python -m interpexec and repository scripts named in shell blocks."""
    dev, sessions = docs_helpers.dev_commands(), docs_helpers.nox_sessions()
    problems = []
    cli = set()
    for block in CONSOLE:
        for command in docs_helpers.console_commands(block):
            words = command.split()
            if words[0] == "./dev" and len(words) > 1 and words[1] not in dev:
                problems.append(f"{block.id}: ./dev has no command {words[1]!r}")
            if words[:2] == ["nox", "-s"] and words[2] not in sessions:
                problems.append(f"{block.id}: noxfile.py has no session {words[2]!r}")
            if words[:3] == ["python", "-m", "interpexec"]:
                cli.add(words[3])
            if words[0] == "python" and len(words) > 1 and words[1].endswith(".py"):
                if not os.path.isfile(os.path.join(ROOT, words[1])):
                    problems.append(f"{block.id}: no file {words[1]}")
    for command in sorted(cli):
        proc = _run([sys.executable, "-m", "interpexec", command, "--help"], ROOT, timeout=60)
        if proc.returncode != 0:
            problems.append(f"python -m interpexec has no command {command!r}: {proc.stderr}")
    assert cli and not problems, "\n".join(problems)


def test_console_checks_see_the_commands():
    commands = {c.split()[0] for b in CONSOLE for c in docs_helpers.console_commands(b)}
    assert {"./dev", "nox", "python", "pip"} <= commands
    assert {"docs", "package", "tests-3.14", "lint"} <= docs_helpers.nox_sessions()
    assert {"test", "lint", "docs", "bench", "demo"} <= docs_helpers.dev_commands()


# -- README links ---------------------------------------------------------------

LINK = re.compile(r"\]\(\s*<?([^)\s>]+)")  # [text](target)
AUTOLINK = re.compile(r"<(https?://[^>]+)>")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)  # [label]: target
HTML_LINK = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)""")


def _readme_links() -> list[str]:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # code is not linked
    return [m for pattern in (LINK, AUTOLINK, REFERENCE, HTML_LINK) for m in pattern.findall(text)]


def test_readme_has_no_relative_links():
    """The README is shown on package indexes, without the repository."""
    links = _readme_links()
    assert len(links) >= 10
    relative = [link for link in links if not re.match(r"(https?|mailto):", link)]
    assert not relative, f"relative links in README.md: {relative}"


def _anchors(md_path: str) -> set[str]:
    """The heading anchors MyST makes (myst_heading_anchors = 3) for a page."""
    with open(md_path, encoding="utf-8") as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.DOTALL)
    anchors = set()
    for match in re.finditer(r"^#{1,3} (.+)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", match[1].strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_readme_documentation_links_name_built_pages():
    links = [link for link in _readme_links() if link.startswith("https://interpexec.readthedocs.io")]
    assert len(links) >= 10
    for link in links:
        assert link.startswith(DOCS_URL), link
        page, _, anchor = link[len(DOCS_URL) :].partition("#")
        if not page:
            continue  # the documentation's front page
        assert page.endswith(".html"), link
        source = os.path.join(ROOT, "docs", page[: -len(".html")] + ".md")
        assert os.path.isfile(source), f"{link}: no docs/{page[:-5]}.md"
        if anchor:
            assert anchor in _anchors(source), f"{link}: no such heading"


def test_documentation_url_is_the_projects():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert DOCS_URL.startswith(project["urls"]["Documentation"])


# -- docs requirements, the API check, the distributions -------------------------


def _requirement_names(lines: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~\[;]", line.strip(), maxsplit=1)[0].lower() for line in lines if line.strip()}


def test_docs_requirements_install_what_the_api_reference_imports():
    """conf.py imports interpexec from the checkout, not installed: its
    dependencies, and distributed for interpexec.dask, come from the requirements."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    with open(os.path.join(ROOT, "docs", "requirements.txt"), encoding="utf-8") as f:
        required = _requirement_names([line for line in f if not line.lstrip().startswith("#")])
    needed = _requirement_names(project["dependencies"] + project["optional-dependencies"]["dask"])
    assert needed <= required, f"docs/requirements.txt lacks {needed - required}"
    assert {"sphinx", "myst-parser"} <= required


def test_api_check_lists_every_documented_object():
    names = docs_helpers.documented_objects(os.path.join(ROOT, "docs", "api.md"))
    assert {
        "interpexec.InterpreterPoolExecutor",
        "interpexec.InterpreterPoolExecutor.submit",
        "interpexec.share",
        "interpexec.Queue.get",
        "interpexec.aio.run_sync",
        "interpexec.dask.InterpreterWorkerPlugin",
    } <= set(names)


def _entry(name: str) -> str:
    return f'<dt class="sig sig-object py" id="{name}">\n<span class="sig-name">{name}</span></dt>\n'


def test_api_check_fails_on_an_empty_section(tmp_path):
    """A section whose module did not import (or a stale build) has no entries."""
    names = docs_helpers.documented_objects(os.path.join(ROOT, "docs", "api.md"))
    (tmp_path / "api.html").write_text("<html><body>" + "".join(map(_entry, names)) + "</body></html>")
    assert docs_helpers.check_api(str(tmp_path)) == []
    kept = [n for n in names if not n.startswith("interpexec.aio")]
    (tmp_path / "api.html").write_text("<html><body>" + "".join(map(_entry, kept)) + "</body></html>")
    problems = docs_helpers.check_api(str(tmp_path))
    assert problems and all("interpexec.aio." in p for p in problems)
    assert any("interpexec.aio.run_sync" in p for p in problems)
    os.remove(tmp_path / "api.html")
    assert docs_helpers.check_api(str(tmp_path)) == [f"{tmp_path / 'api.html'}: not built"]


def test_automodule_without_members_is_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```{eval-rst}\n.. automodule:: interpexec.aio\n```\n")
    with pytest.raises(ValueError, match="lists no :members:"):
        docs_helpers.documented_objects(str(page))


def test_license_is_mit_with_the_projects_holder():
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        text = f.read()
    assert text.startswith("MIT License\n\nCopyright (c) 2026 interpexec developers\n")
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        config = tomllib.load(f)
    assert config["project"]["license"] == "MIT"
    include = config["tool"]["hatch"]["build"]["targets"]["sdist"]["include"]
    assert set(docs_helpers.SDIST_NEEDS) - {"pyproject.toml"} <= set(include)  # (hatchling adds it)


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _fake_dists(folder, *, sdist_license: bool, wheel_license: bool) -> None:
    """An sdist and a wheel shaped as hatchling builds them, from this checkout."""
    with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
        license_text = f.read()
    needed = set().union(*(docs_helpers._repo_files(p) for p in docs_helpers.SDIST_NEEDS))
    with tarfile.open(folder / "interpexec-0.1.0.tar.gz", "w:gz") as tar:
        for name in sorted(needed):
            if name == "LICENSE" and not sdist_license:
                continue
            with open(os.path.join(ROOT, name), "rb") as f:
                _add(tar, f"interpexec-0.1.0/{name}", f.read(), 0o755 if name == "dev" else 0o644)
    with zipfile.ZipFile(folder / "interpexec-0.1.0-py3-none-any.whl", "w") as whl:
        whl.writestr("interpexec/__init__.py", "")
        metadata = "Metadata-Version: 2.4\nName: interpexec\nLicense-Expression: MIT\n"
        if wheel_license:
            whl.writestr("interpexec-0.1.0.dist-info/licenses/LICENSE", license_text)
            metadata += "License-File: LICENSE\n"
        whl.writestr("interpexec-0.1.0.dist-info/METADATA", metadata + "\n")


def test_dist_check_accepts_complete_distributions(tmp_path):
    _fake_dists(tmp_path, sdist_license=True, wheel_license=True)
    assert docs_helpers.check_dist(str(tmp_path)) == []


def test_dist_check_finds_a_missing_license(tmp_path):
    _fake_dists(tmp_path, sdist_license=False, wheel_license=False)
    problems = docs_helpers.check_dist(str(tmp_path))
    assert any(p.endswith(".tar.gz: no LICENSE with the repository's text") for p in problems)
    assert any(".tar.gz: lacks LICENSE" in p for p in problems)
    assert any(p.endswith(".whl: no .dist-info/licenses/LICENSE with the repository's text") for p in problems)
    assert any("License-File" in p for p in problems)


def test_architecture_names_every_module_of_the_package():
    # docs/architecture.md is where a reader finds the file for a concern: every
    # module of the package is in it, and every module it names exists.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    package = os.path.join(root, "interpexec")
    with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as f:
        text = f.read()
    modules = set()
    for dirpath, _dirs, files in os.walk(package):
        sub = os.path.relpath(dirpath, package)
        for name in files:
            if name.endswith(".py") and name != "__init__.py":
                stem = name[:-3]
                modules.add(stem if sub == "." else f"{sub}/{stem}")
    missing = sorted(m for m in modules if f"`{m}`" not in text and f"`{m}`," not in text)
    assert not missing, f"docs/architecture.md does not name {missing}"
    named = set(re.findall(r"`((?:dask/|joblib/)?_[a-z][a-z_]*)`", text))
    unknown = sorted(n for n in named if n not in modules and not n.startswith(("_interp", "_thread", "_base")))
    assert not unknown, f"docs/architecture.md names modules that do not exist: {unknown}"

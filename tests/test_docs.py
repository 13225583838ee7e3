"""The README and docs/ show commands that still run as written: every flag a shown command
passes to a script of this suite is one that script's parser knows (read from its --help),
every make target and script it names exists, and every page links where it says."""

import functools
import re
import shlex
import subprocess
import sys

import pytest

from support import ROOT, base_env

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```(\w*)\s*$")
SHELL_BLOCKS = {"", "sh", "bash", "shell", "console"}  # `text` and `python` blocks are not run
# A shell line starts with a program of this suite's world (after an optional prompt and
# VAR=value assignments); other lines in a shell block are output.
COMMAND = re.compile(r"^(\$ )?(\w+=\S+ )*(python3?|\.venv/bin/python|deepspeed|torchrun|mpirun|"
                     r"srun|make|scripts/|env |commbench |pip )")
OPTION = re.compile(r"^--?[A-Za-z][\w-]*")


def shell_commands(page):
    """(line number, command) of every command line in the page's shell blocks, continuation
    lines joined and comments removed."""
    commands, language, pending = [], None, None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            language = fence.group(1) if language is None else None
            continue
        if language not in SHELL_BLOCKS:
            continue
        if pending is None and not COMMAND.match(line):
            continue
        text = re.sub(r"\s#.*$", "", line).rstrip()
        pending = (number, text) if pending is None else (pending[0], f"{pending[1]} {text.strip()}")
        if pending[1].endswith("\\"):
            pending = (pending[0], pending[1][:-1].rstrip())
            continue
        commands.append(pending)
        pending = None
    return commands


ALL = [(page, number, command) for page in PAGES for number, command in shell_commands(page)]


@functools.cache
def known_options(script, subcommand):
    """The options `script [subcommand] --help` lists (script: a file, or `-m commbench
    COMMAND`)."""
    argv = [sys.executable, *script.split()] + ([subcommand] if subcommand else []) + ["--help"]
    proc = subprocess.run(argv, cwd=ROOT, env=base_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"{' '.join(argv)} failed:\n{proc.stderr}"
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", proc.stdout))


@pytest.mark.fast  # in-process
def test_the_pages_show_commands():
    readme = [c for p, _, c in ALL if p.name == "README.md"]
    assert len(readme) >= 10 and len(ALL) >= 30, ALL
    assert any(c.startswith("make bench") for c in readme)
    assert any(c.startswith("make test") for c in readme)


@pytest.mark.parametrize("page,number,command", ALL,
                         ids=[f"{p.name}:{n}" for p, n, _ in ALL])
def test_every_shown_command_uses_what_exists(page, number, command):
    words = shlex.split(command.removeprefix("$ "))
    while words and re.fullmatch(r"\w+=.*", words[0]):  # VAR=value before the command
        words.pop(0)
    where = f"{page.name}:{number}: {command}"
    if words[0] == "make":
        targets = re.findall(r"^([\w.-]+):", (ROOT / "Makefile").read_text(), re.M)
        assert set(words[1:]) <= set(targets), where
        return
    if words[0].startswith("scripts/"):
        assert (ROOT / words[0]).is_file() and (ROOT / words[0]).stat().st_mode & 0o111, where
        return
    if words[0] == "pip":
        assert words[1] in ("install", "wheel"), where
        return
    # the package's commands: `commbench COMMAND`, `python -m commbench COMMAND` (any launcher's
    # -m or --module)
    package = [i for i, word in enumerate(words) if word == "commbench"
               and (i == 0 or words[i - 1] in ("-m", "--module"))]
    if package:
        at = package[0] + 1
        assert at < len(words), f"{where}: no COMMAND"
        script = f"-m commbench {words[at]}"
        rest = words[at + 1:]
        subcommand = rest[0] if words[at] == "report" and rest else None
        options = known_options(script, subcommand)
        used = {OPTION.match(word).group() for word in rest if OPTION.match(word)}
        assert used <= options, f"{where}: {sorted(used - options)} unknown to {script}"
        return
    scripts = [i for i, word in enumerate(words) if word.endswith(".py")]
    assert scripts, f"no script of the suite in {where}"
    at = scripts[0]
    script = words[at]
    assert (ROOT / script).is_file(), f"{where}: {script} does not exist"
    rest = words[at + 1:]
    if script.startswith("scripts/") and "--" in rest:  # a wrapper (scripts/stall.py -- CMD)
        wrapped = " ".join(shlex.quote(word) for word in rest[rest.index("--") + 1:])
        test_every_shown_command_uses_what_exists(page, number, wrapped)
        rest = rest[:rest.index("--")]
    subcommand = rest[0] if script == "report.py" and rest else None
    options = known_options(script, subcommand)
    used = {OPTION.match(word).group() for word in rest if OPTION.match(word)}
    assert used <= options, f"{where}: {sorted(used - options)} unknown to {script}"


@pytest.mark.fast  # in-process
def test_links_between_pages_resolve():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", (ROOT / "README.md").read_text()))
    assert linked == {p.name for p in PAGES[1:]}, "every docs page is linked from the README"


@pytest.mark.fast  # in-process
def test_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


@pytest.mark.fast  # in-process
def test_the_map_names_every_module():
    """docs/extending.md's "Where things are" is the package's one map: every module of
    commbench/ is a line of it (an op's module is `ops/`'s line, the database's `records/db/`'s)."""
    page = (ROOT / "docs" / "extending.md").read_text()
    where = page[page.index("## Where things are"):page.index("## Adding an op")]
    package = ROOT / "commbench"
    missing = [str(rel) for rel in (p.relative_to(package) for p in package.rglob("*.py"))
               if rel.name != "__init__.py" and rel.parent.name != "ops"
               and f"`{rel}`" not in where and f"`commbench/{rel}`" not in where
               and not (f"`{rel.parent}/`" in where and f"`{rel.name}`" in where)]
    assert not missing, f"docs/extending.md's map leaves out {missing}"

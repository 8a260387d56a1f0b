"""The README and the documentation site say what the project is: their examples run, their commands exist.

- Every ```python block of README.md and docs/ runs, on tiny models saved at the paths the examples
  name (``data/06_models/baseline``, ``data/06_models/incremental``), in a copy of the project's
  sample corpus and configuration: a renamed function or argument fails here. The blocks of one page
  run in order in one namespace, as a reader would run them. A block that is not meant to run says
  so, with its reason, in the comment before it (``<!-- not-run: needs a GPU -->``): its imports are
  still checked. A block that takes long (``<!-- slow: trains ... -->``) runs in the slow test of its
  page, with all the page's blocks; the quick test runs the page without it.
- Every ``coref-pipeline`` command in a shell block or inline code names a command and options it
  has; every ``--params`` and ``-S`` key is a key of its pipeline's parameters.
- Every public entry point has its reference on the API page, and every page is in the site's nav.
- The README is at most 250 lines; its results table's figures are on the benchmarks page; no page
  names a path of one machine or narrates past work.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.paths import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
DOCS = PROJECT_ROOT / "docs"
CHANGELOG = PROJECT_ROOT / "CHANGELOG.md"
PAGES = sorted([README, CHANGELOG, *DOCS.rglob("*.md")])
README_MAX_LINES = 250

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<language>[\w-]*)[ \t]*$")
MARKER = re.compile(r"^<!--\s*(?P<kind>[\w-]+)\s*:?\s*(?P<reason>.*?)\s*-->$")
MARKERS = ("not-run", "slow")


@dataclass(frozen=True)
class Block:
    """A fenced code block of a Markdown page."""

    path: Path
    line: int  # 1-based line of the first line of code
    language: str
    code: str
    marker: str | None  # "not-run" or "slow" (the comment just before the fence), else None
    reason: str

    @property
    def where(self) -> str:
        return f"{shown(self.path)}:{self.line}"


def shown(path: Path) -> str:
    """``path`` as a message names it: relative to the project when inside it."""
    return str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else path.name


def code_blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, each with the marker comment (if any) on the line before its fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        previous = next((lines[i].strip() for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        marked = MARKER.match(previous)
        kind = marked.group("kind") if marked and marked.group("kind") in MARKERS else None
        code = textwrap.dedent("\n".join(lines[index + 1 : end]))
        blocks.append(
            Block(path, index + 2, opening.group("language"), code, kind, marked.group("reason") if kind else "")
        )
        index = end + 1
    return blocks


def python_pages() -> list[Path]:
    return [path for path in PAGES if any(block.language == "python" for block in code_blocks(path))]


def page_id(path: Path) -> str:
    return shown(path)


# ------------------------------------------------------------------ the Python examples run


@pytest.fixture
def documented_project(tmp_path, monkeypatch):
    """A working directory laid out as the examples expect: the sample corpus, the configuration, and tiny
    models (a baseline and an incremental model whose tokenizer is a folder the examples can segment with)."""
    import torch

    from coref_pipeline.models.baseline import BaselineCorefModel
    from coref_pipeline.models.config import IncrementalConfig
    from coref_pipeline.models.incremental import IncrementalCorefModel
    from coref_pipeline.serving.coref_model import CorefModel
    from tests.models.tiny import tiny_config, tiny_encoder, tiny_hf_tokenizer

    shutil.copytree(PROJECT_ROOT / "data" / "01_raw" / "sample", tmp_path / "data" / "01_raw" / "sample")
    shutil.copytree(PROJECT_ROOT / "conf" / "base", tmp_path / "conf" / "base")
    tokenizer_dir = tmp_path / "tokenizers" / "tiny"
    tiny_hf_tokenizer().save_pretrained(str(tokenizer_dir))
    config = tiny_config(max_segment_len=32, tokenizer=str(tokenizer_dir))
    models = tmp_path / "data" / "06_models"
    torch.manual_seed(0)
    CorefModel("baseline", BaselineCorefModel(config, tiny_encoder(seed=3)), tiny_hf_tokenizer()).save(
        models / "baseline"
    )
    # A threshold far below any score: every span joins an entity, so the examples' views have clusters to show.
    incremental = IncrementalConfig.from_baseline(config, {"dropout_rate": 0.0, "threshold": -1e4})
    CorefModel("incremental", IncrementalCorefModel(incremental, tiny_encoder(seed=4)), tiny_hf_tokenizer()).save(
        models / "incremental"
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check_imports(block: Block) -> None:
    """Run only the import statements of a block that is not run, so a renamed module or name still fails."""
    tree = ast.parse(block.code, filename=block.where)
    imports = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    exec(compile(ast.Module(body=imports, type_ignores=[]), block.where, "exec"), {})


def run_blocks(blocks: list[Block]) -> None:
    """Run the blocks in order in one namespace; a failure names the page and line and shows the traceback."""
    namespace: dict[str, object] = {"__name__": "__documentation__"}
    for block in blocks:
        if block.marker == "not-run":
            check_imports(block)
            continue
        source = "\n" * (block.line - 1) + block.code  # tracebacks give the page's own line numbers
        try:
            exec(compile(source, shown(block.path), "exec"), namespace)
        except Exception:
            pytest.fail(
                f"the example at {block.where} fails (mark it <!-- not-run: reason --> if it is not meant to run):\n"
                + traceback.format_exc(),
                pytrace=False,
            )


@pytest.mark.parametrize("page", python_pages(), ids=page_id)
def test_the_python_examples_run(page, documented_project):
    blocks = [block for block in code_blocks(page) if block.language == "python"]
    run_blocks([block for block in blocks if block.marker != "slow"])


SLOW_PAGES = [page for page in python_pages() if any(block.marker == "slow" for block in code_blocks(page))]


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW_PAGES, ids=page_id)
def test_the_slow_python_examples_run(page, documented_project):
    """Every block of a page that has slow ones, in order (the quick test ran the others without them)."""
    run_blocks([block for block in code_blocks(page) if block.language == "python"])


def test_the_readme_and_the_site_have_examples_that_run():
    """The examples are found (a change of fence syntax would otherwise leave nothing to run)."""
    readme = [block for block in code_blocks(README) if block.language == "python"]
    assert readme and all(block.marker is None for block in readme)
    assert DOCS / "api.md" in python_pages()


def test_every_marker_names_a_kind_and_a_reason():
    for page in PAGES:
        for line in page.read_text(encoding="utf-8").splitlines():
            marked = MARKER.match(line.strip())
            if marked and marked.group("kind") in MARKERS:
                assert marked.group("reason"), f"{page_id(page)}: {line.strip()} gives no reason"


def test_the_block_reader_sees_markers_and_languages(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n<!-- not-run: needs a GPU -->\n```python\nimport gpu\n```\n\n```bash\nls\n```\n\n"
        "- a list\n\n  ```python\n  x = 1\n  ```\n"
    )
    blocks = code_blocks(page)
    assert [(b.language, b.marker, b.reason, b.code, b.line) for b in blocks] == [
        ("python", "not-run", "needs a GPU", "import gpu", 5),
        ("bash", None, "", "ls", 9),
        ("python", None, "", "x = 1", 15),
    ]


def test_a_failing_example_fails_and_a_not_run_one_has_its_imports_checked(tmp_path):
    """The runner refuses an unmarked block that fails, and a not-run block whose import no longer exists."""
    page = tmp_path / "page.md"
    page.write_text("```python\nfrom coref_pipeline import CorefModel\nCorefModel.no_such_method()\n```\n")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)page\.md:2 fails.*no_such_method"):
        run_blocks(code_blocks(page))
    page.write_text("<!-- not-run: a GPU -->\n```python\nfrom coref_pipeline import NoSuchThing\nrun()\n```\n")
    with pytest.raises(ImportError):
        run_blocks(code_blocks(page))
    page.write_text("<!-- not-run: a GPU -->\n```python\nfrom coref_pipeline import CorefModel\nrun()\n```\n")
    run_blocks(code_blocks(page))  # the import exists; the rest is not run


# ------------------------------------------------------------------ commands and parameters exist


def shell_commands(path: Path) -> list[tuple[str, str]]:
    """(where, command) for each command line of the page's shell blocks (continuations joined) and each inline
    code span that starts with a command."""
    commands = []
    for block in code_blocks(path):
        if block.language not in ("bash", "sh", "shell", "console"):
            continue
        joined = re.sub(r"\\\n\s*", " ", block.code)
        commands += [(block.where, line.strip()) for line in joined.splitlines() if line.strip()]
    text = path.read_text(encoding="utf-8")
    for match in re.finditer(r"(?<!`)`(?P<code>(?:coref-pipeline|kedro run|dvc exp run|--params )[^`\n]*)`(?!`)", text):
        line = text.count("\n", 0, match.start()) + 1
        commands.append((f"{page_id(path)}:{line}", match.group("code")))
    return commands


def words(command: str) -> list[str]:
    """The shell words of one command line, comments dropped; a line shlex cannot split gives its plain words."""
    try:
        return shlex.split(command, comments=True)
    except ValueError:
        return command.split()


def segments(tokens: list[str]) -> list[list[str]]:
    """The commands of a line joined by ``&&``, ``|`` or ``;``."""
    parts: list[list[str]] = [[]]
    for token in tokens:
        if token in ("&&", "||", "|", ";"):
            parts.append([])
        else:
            parts[-1].append(token)
    return [part for part in parts if part]


def coref_pipeline_invocations() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for where, command in shell_commands(page):
            for part in segments(words(command)):
                if "coref-pipeline" in part:
                    found.append((where, part[part.index("coref-pipeline") + 1 :]))
    return found


def test_every_documented_coref_pipeline_command_and_option_exists():
    import click

    from coref_pipeline.cli import main

    context = click.Context(main)
    invocations = coref_pipeline_invocations()
    assert len(invocations) >= 10, invocations  # the command line page alone has more
    for where, arguments in invocations:
        arguments = [a for a in arguments if a not in ("-v", "--verbose")]
        if not arguments or not re.fullmatch(r"[a-z][a-z-]*", arguments[0]):
            continue  # `coref-pipeline --help`, `coref-pipeline COMMAND --help`, `coref-pipeline -v …`
        command = main.get_command(context, arguments[0])
        assert command is not None, f"{where}: coref-pipeline has no command {arguments[0]!r}"
        rest = arguments[1:]
        if isinstance(command, click.Group):
            if not rest or rest[0] in ("-h", "--help"):
                continue  # the group named on its own (`coref-pipeline segment-study`)
            subcommand = command.get_command(context, rest[0])
            assert subcommand is not None, f"{where}: {arguments[0]} has no subcommand {rest[0]!r}"
            command, rest = subcommand, rest[1:]
        options = {"-h", "--help"} | {name for p in command.params for name in (*p.opts, *p.secondary_opts)}
        for token in rest:
            if token.startswith("-") and not re.fullmatch(r"-?\d+(\.\d+)?", token):
                name = token.split("=", 1)[0]
                assert name in options, f"{where}: `{command.name}` has no option {name} (it has {sorted(options)})"


def parameter_keys() -> dict[str, dict[str, set[str]]]:
    """What a dotted parameter path may name: pipeline -> its keys; the model and training keys under
    ``overrides`` and under a preset."""
    from coref_pipeline.evaluation.report import EvaluateSettings
    from coref_pipeline.formats.corpus import PreprocessSettings, SegmentSettings
    from coref_pipeline.models.config import (
        BaselineConfig,
        CorefTrainParameters,
        IncrementalConfig,
        IncrementalTrainParameters,
        TrainingConfig,
    )
    from coref_pipeline.pretraining.run import PretrainConfig, PretrainParameters

    return {
        "preprocess": {"keys": set(PreprocessSettings.keys())},
        "segment": {"keys": set(SegmentSettings.keys())},
        "evaluate": {"keys": set(EvaluateSettings.keys())},
        "coref_train": {
            "keys": set(CorefTrainParameters.keys()),
            "settings": set(BaselineConfig.keys()) | set(TrainingConfig.keys()),
        },
        "incremental_train": {
            "keys": set(IncrementalTrainParameters.keys()),
            "settings": set(IncrementalConfig.keys()) | set(TrainingConfig.keys()),
        },
        "pretrain": {
            "keys": set(PretrainParameters.keys()),
            "settings": set(PretrainConfig.keys()) | set(TrainingConfig.keys()),
        },
        "corpus": {"keys": {"dir", "train", "dev", "test"}},
    }


def check_parameter(key: str, where: str, known: dict) -> None:
    key = key.removeprefix("++").removeprefix("+")
    if "$" in key or "<" in key:  # a shell variable or a placeholder names the rest
        return
    parts = key.split(".")
    parts = parts[: next((i for i, part in enumerate(parts) if part.isupper()), len(parts))]  # KEY: any key
    assert parts[0] in known, f"{where}: no parameters named {parts[0]!r} ({key})"
    if len(parts) == 1:
        return
    allowed = known[parts[0]]
    assert parts[1] in allowed["keys"], f"{where}: {parts[0]} has no key {parts[1]!r} ({key})"
    if parts[1] == "overrides" and len(parts) > 2:
        assert parts[2] in allowed["settings"], f"{where}: {parts[2]!r} is no model or training key ({key})"
    if parts[1] == "presets" and len(parts) > 3:
        assert parts[3] in allowed["settings"] | {"extends"}, f"{where}: {parts[3]!r} is no preset key ({key})"


def documented_parameters() -> list[tuple[str, str]]:
    """(where, dotted key) of every ``--params`` pair and every ``-S FILE:KEY=VALUE`` setting."""
    found = []
    for page in PAGES:
        for where, command in shell_commands(page):
            tokens = words(command)
            for index, token in enumerate(tokens[:-1]):
                if token == "--params":
                    found += [(where, pair.split("=", 1)[0]) for pair in tokens[index + 1].split(",") if "=" in pair]
                if token in ("-S", "--set") and ":" in tokens[index + 1]:
                    setting = tokens[index + 1].split(":", 1)[1]
                    found.append((where, setting.split("=", 1)[0]))
    return found


def test_every_documented_parameter_key_exists():
    known = parameter_keys()
    documented = documented_parameters()
    assert len(documented) >= 10, documented
    for where, key in documented:
        check_parameter(key, where, known)


def test_the_parameter_check_refuses_a_key_that_is_gone():
    known = parameter_keys()
    check_parameter("incremental_train.overrides.max_steps", "here", known)
    check_parameter("++coref_train.presets.cpu_minilm.ffnn_size", "here", known)
    for stale in ("incremental_train.training.max_steps", "coref_train.overrides.ema_decay", "segment.length"):
        with pytest.raises(AssertionError):
            check_parameter(stale, "here", known)


# ------------------------------------------------------------------ the site's structure


def test_every_public_entry_point_has_its_reference_on_the_api_page():
    import coref_pipeline

    api = (DOCS / "api.md").read_text(encoding="utf-8")
    for name in coref_pipeline.__all__:
        module = coref_pipeline._ENTRY_POINTS[name]
        assert f"::: {module}.{name}\n" in api, f"docs/api.md has no reference for {module}.{name}"


def nav_pages(entries: list) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_is_in_the_sites_nav_and_every_nav_entry_exists():
    config = yaml.safe_load((PROJECT_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = nav_pages(config["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if p.parent.name != "images")
    assert sorted(listed) == pages


# ------------------------------------------------------------------ what the pages say


BENCHMARK_SUBJECTS = {
    "training": "Training",
    "prediction": "Prediction",
    "memory": "Memory",
    "preprocessing": "Preprocessing and scoring",
    "serving": "Serving",
    "gpu": "GPU",
}


def benchmark_programs() -> list[Path]:
    return sorted(path for path in (PROJECT_ROOT / "benchmarks").glob("*/*.py") if path.name != "__init__.py")


def test_every_benchmark_program_has_its_section_under_its_subject_on_the_benchmarks_page():
    """``benchmarks/<subject>/<program>.py`` is described in the page's section of that subject, and nothing else
    lies in ``benchmarks/`` but the subjects and what they share."""
    benchmarks = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    chapters = dict(re.findall(r"(?ms)^## ([^\n]+)\n(.*?)(?=^## |\Z)", benchmarks))
    programs = benchmark_programs()
    assert programs
    for program in programs:
        subject = program.parent.name
        assert subject in BENCHMARK_SUBJECTS, f"{program}: not in a subject folder {sorted(BENCHMARK_SUBJECTS)}"
        name = program.relative_to(PROJECT_ROOT).as_posix()
        assert f"Program: `{name}" in chapters[BENCHMARK_SUBJECTS[subject]], f"no section for {name} under its subject"
    loose = {path.name for path in (PROJECT_ROOT / "benchmarks").glob("*.py")}
    assert loose == {"__init__.py", "common.py"}, loose


def page_commands(text: str) -> list[list[str]]:
    """The ``python benchmarks/...`` commands of a page's code blocks, continuation lines joined, as words."""
    import shlex

    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip().rstrip("&;").replace("; wait", "")
            words = shlex.split(line) if "python benchmarks/" in line else []
            words = [word for word in words if "=" not in word or word.startswith("-")]  # VARIABLE=... before it
            if words:
                commands.append(words[words.index("python") + 1 :])
    return commands


@pytest.mark.slow
def test_every_command_on_the_benchmarks_page_names_a_program_and_options_it_takes():
    """Each ``python benchmarks/...`` command on the page runs a program that exists and accepts every option the
    command gives (its ``--help``), so a renamed program or option is caught here, not by a reader."""
    commands = page_commands((DOCS / "benchmarks.md").read_text(encoding="utf-8"))
    assert len(commands) > 20
    helps: dict[str, str] = {}
    for words in commands:
        program = words[0]
        assert (PROJECT_ROOT / program).is_file(), f"the benchmarks page runs {program}, which does not exist"
        if program not in helps:
            done = subprocess.run(
                [sys.executable, program, "--help"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, f"{program} --help: {done.stderr[-2000:]}"
            helps[program] = done.stdout
        for option in (word.split("=", 1)[0] for word in words[1:] if word.startswith("--")):
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", helps[program]), f"{program} takes no {option}"


def test_the_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= README_MAX_LINES


MACHINE_PATH = re.compile(
    r"(?<![\w.~:/$-])/(?:work|tmp|root|home|Users|mnt|scratch|data|shared|opt|srv|var|private)/", re.IGNORECASE
)
NARRATION = re.compile(r"\b(?:session|sitting)s?\b", re.IGNORECASE)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_page_names_a_path_of_one_machine_or_narrates_past_work(page):
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        assert not MACHINE_PATH.search(line), f"{page_id(page)}:{number}: a path of one machine: {line.strip()}"
        assert not NARRATION.search(line), f"{page_id(page)}:{number}: narration of past work: {line.strip()}"


def test_the_path_and_narration_checks_catch_what_they_are_for():
    for text in ("see /work/main/data", "`/tmp/out.conll`", "cd /home/me", "(/root/x)"):
        assert MACHINE_PATH.search(text), text
    for text in ("data/06_models/baseline", "../shared/corpora/litbank", "/path/to/ontonotes", "https://x.org/data/a"):
        assert not MACHINE_PATH.search(text), text
    assert NARRATION.search("in the fourteenth session") and NARRATION.search("this sitting")


def readme_section(name: str) -> str:
    text = README.read_text(encoding="utf-8")
    return text.split(f"--8<-- [start:{name}]", 1)[1].split(f"--8<-- [end:{name}]", 1)[0]


def table_figures(markdown: str) -> list[str]:
    """The decimal figures (59.90, 1.83x, 4,016) of the tables in ``markdown``, comments and the published
    column left out (the published figures are the papers', not this project's)."""
    markdown = re.sub(r"<!--.*?-->", "", markdown, flags=re.DOTALL)
    figures, skipped = [], None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            skipped = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if skipped is None:
            skipped = {i for i, cell in enumerate(cells) if cell.lower().startswith("published")}
            continue
        for index, cell in enumerate(cells):
            if index not in skipped and not set(cell) <= set("-: "):
                figures += re.findall(r"\d+(?:,\d{3})+|\d+\.\d+", cell)
    return figures


def test_the_readme_results_are_the_benchmarks_pages_figures():
    figures = table_figures(readme_section("results"))
    assert len(figures) >= 10, figures
    benchmarks = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    missing = [figure for figure in figures if figure not in benchmarks]
    assert not missing, f"README results not on docs/benchmarks.md: {missing}"


def test_the_site_includes_the_readmes_results_and_set_up():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    assert '--8<-- "README.md:results"' in index and '--8<-- "README.md:setup"' in index
    setup = readme_section("setup")
    assert setup.count("```bash") == 2  # the set-up section's two commands, shown on the site as they are


def test_the_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`: a broken link or anchor, a page outside the nav or an API name that does not
    resolve fails here (and in CI), not on the published site."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_benchmarks_page_has_no_figure_waiting_for_a_run():
    benchmarks = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    waiting = re.findall(r"<!--\s*(?:RERUN|FIGURE)\b[^>]*-->", benchmarks)
    assert not waiting, f"docs/benchmarks.md has figures not measured at the current code: {waiting}"

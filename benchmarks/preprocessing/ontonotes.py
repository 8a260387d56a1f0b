"""Speed of ``coref-pipeline ontonotes`` against the original CoNLL-2012 scripts, on the same inputs.

Run: python benchmarks/preprocessing/ontonotes.py [--copies 40] [--repeats 3] [--corpus FILE]
                                                   [--original-scripts DIR [--python2 PYTHON2]]

The inputs are the test fixtures (tests/fixtures/ontonotes: made-up documents in the release's formats),
the English v4 gold skeletons and their ``.parse`` files, each document copied ``--copies`` times under
its own name, in a temporary release and skeleton tree; or, with ``--corpus``, the documents of a
CoNLL-2012 file cut into skeletons and trees (``tests/formats/ontonotes_helpers.py``; each document in
all three partitions), e.g. ../shared/corpora/litbank/train.conll for long documents. Timed:

* ours: ``coref-pipeline ontonotes --release R --skeletons S OUT`` as a user runs it (a new process:
  interpreter start and imports included), and ``release_corpus(...).write(OUT)`` in this process;
* the original, when ``--original-scripts`` names a folder holding its ``skeleton2conll.sh`` and
  ``skeleton2conll.py`` (CoNLL-2012 scripts v3; nothing of them is in this repository): the script as
  ``setup_training.sh`` runs it (``bash skeleton2conll.sh -D <release>/data/files/data conll-2012``, one
  Python 2 process per skeleton), then ``compile_partition``'s ``cat`` of each split; its three files
  are compared with ours byte for byte.

Prints documents and words, the best of ``--repeats`` seconds of each, the original's time over ours,
and the host (``lscpu`` model name, CPUs).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: tests/ and its fixtures

import argparse  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from coref_pipeline.formats.ontonotes import SPLITS, release_corpus  # noqa: E402
from tests.paths import FIXTURES  # noqa: E402

ONTONOTES = FIXTURES / "ontonotes"
PARTITIONS = {"train": "train", "dev": "development", "test": "test"}


def lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")


def make_inputs(root: Path, copies: int) -> tuple[Path, Path, int, int]:
    """A release and a v4 skeleton tree holding ``copies`` copies of each English fixture document."""
    release = root / "ontonotes-release-5.0"
    skeletons = root / "conll-2012"
    documents = words = 0
    source = ONTONOTES / "conll-2012" / "v4" / "data"
    for skeleton in sorted(source.glob("*/data/english/annotations/*/*/*/*.v4_gold_skel")):
        relative = skeleton.relative_to(source)  # partition/data/english/annotations/g/s/nn/name.v4_gold_skel
        name = relative.name.removesuffix(".v4_gold_skel")
        document = Path(*relative.parts[4:-1])
        parse = ONTONOTES / "release" / "data" / "files" / "data" / "english" / "annotations" / document
        for copy in range(copies):
            target = Path(*relative.parts[:4]) / document / f"{name}_{copy:04d}"
            (skeletons / "v4" / "data" / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(skeleton, skeletons / "v4" / "data" / f"{target}.v4_gold_skel")
            tree_file = release / "data" / "files" / "data" / "english" / "annotations" / document
            tree_file.mkdir(parents=True, exist_ok=True)
            shutil.copy(parse / f"{name}.parse", tree_file / f"{name}_{copy:04d}.parse")
            documents += 1
            words += sum(1 for line in skeleton.read_text().splitlines() if line.strip() and line[0] != "#")
    return release, skeletons, documents, words


def corpus_inputs(root: Path, corpus: Path) -> tuple[Path, Path, int, int]:
    """The documents of a CoNLL-2012 file as a release and skeletons (parentheses escaped as the release's)."""
    from tests.formats.ontonotes_helpers import split_into_release

    lines = []
    for line in corpus.read_text(encoding="utf-8").splitlines():
        cells = line.split()
        if cells and not line.startswith("#"):
            cells[3] = {"(": "-LRB-", ")": "-RRB-"}.get(cells[3], cells[3])
            line = " ".join(cells)
        lines.append(line)
    text = "\n".join(lines) + "\n"
    skeletons = split_into_release(text, root)
    words = 3 * sum(1 for line in lines if line.strip() and not line.startswith("#"))
    return root / "release", root / "conll-2012", len(skeletons), words


def best(repeats: int, run) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def run_ours(release: Path, skeletons: Path, out: Path) -> None:
    command = [sys.executable, "-m", "coref_pipeline", "ontonotes", "--release", str(release)]
    subprocess.run(
        [*command, "--skeletons", str(skeletons), str(out), "--no-progress"], check=True, capture_output=True
    )


def run_original(scripts: Path, python2: str, release: Path, skeletons: Path, work: Path, out: Path) -> None:
    """The scripts as setup_training.sh runs them, in a fresh copy of the skeleton tree; the compiled files in out."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "conll-2012" / "v3" / "scripts").mkdir(parents=True)
    for name in ("skeleton2conll.sh", "skeleton2conll.py"):
        shutil.copy(scripts / name, work / "conll-2012" / "v3" / "scripts" / name)
    shutil.copytree(skeletons / "v4", work / "conll-2012" / "v4")
    shim = work / "bin"
    shim.mkdir()
    (shim / "python2").symlink_to(shutil.which(python2) or python2)
    environment = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}", "LC_ALL": "C"}
    data = release / "data" / "files" / "data"
    subprocess.run(
        ["bash", "conll-2012/v3/scripts/skeleton2conll.sh", "-D", str(data), "conll-2012"],
        cwd=work,
        env=environment,
        check=True,
        capture_output=True,
    )
    out.mkdir(parents=True, exist_ok=True)
    for split, partition in PARTITIONS.items():
        pattern = f"conll-2012/v4/data/{partition}/data/english/annotations/*/*/*/*.v4_gold_conll"
        with open(out / f"{split}.english.v4_gold_conll", "wb") as handle:
            subprocess.run(["bash", "-c", f"cat {pattern}"], cwd=work, env=environment, check=True, stdout=handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=40, help="copies of each fixture document (default 40)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each; the best is kept (default 3)")
    parser.add_argument("--corpus", type=Path, help="a CoNLL-2012 file to cut into skeletons and trees instead")
    parser.add_argument("--original-scripts", type=Path, help="a folder with the original skeleton2conll.sh/.py")
    parser.add_argument("--python2", default="python2", help="the Python 2.7 that runs the original")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        if args.corpus:
            release, skeletons, documents, words = corpus_inputs(root, args.corpus)
        else:
            release, skeletons, documents, words = make_inputs(root, args.copies)
        ours = best(args.repeats, lambda: run_ours(release, skeletons, root / "ours"))
        in_process = best(
            args.repeats, lambda: release_corpus(release, skeletons, progress=False).write(root / "library")
        )
        print(f"host: {lscpu_model()}, {os.cpu_count()} CPUs; Python {sys.version.split()[0]}")
        print(
            f"inputs: {documents} English v4 skeletons and their .parse files ({words} words), best of {args.repeats}"
        )
        print(f"coref-pipeline ontonotes (a new process) : {ours:8.2f} s  {words / ours:10.0f} words/s")
        print(f"release_corpus(...).write (in process)   : {in_process:8.2f} s  {words / in_process:10.0f} words/s")
        if args.original_scripts is None:
            return
        original = best(
            args.repeats,
            lambda: run_original(
                args.original_scripts, args.python2, release, skeletons, root / "work", root / "original"
            ),
        )
        same = all(
            (root / "original" / name).read_bytes() == (root / "ours" / name).read_bytes()
            for name in (f"{split}.english.v4_gold_conll" for split in SPLITS)
        )
        print(f"original skeleton2conll.sh + cat         : {original:8.2f} s  {words / original:10.0f} words/s")
        print(f"the original's time over ours: {original / ours:.1f}x (new process), {original / in_process:.1f}x "
              f"(in process); the same bytes: {same}")  # fmt: skip


if __name__ == "__main__":
    main()

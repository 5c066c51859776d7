"""docs/ARCHITECTURE.md's module map names every file under src/ and
include/ exactly once, and every file it names exists: the map cannot
drift from the tree.

The map is the first fenced block under "## Module map". A line that
starts in column 0 opens a folder (`src/compute/matmul/   what it holds`);
an indented line names one file, or a file and its header, relative to
that folder (`  matmul.c, matmul.h   what they do`)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCH = ROOT / "docs" / "ARCHITECTURE.md"
MAPPED_TREES = ("src", "include")
NAMES = re.compile(r"^((?:[\w./-]+\.\w+, )*[\w./-]+\.\w+)\s+\S")


def module_map(text):
    """(folder, file names, line number) per entry of the map."""
    start = text.index("```\n", text.index("\n## Module map\n")) + 4
    block = text[start:text.index("```", start)]
    first_line = text[:start].count("\n") + 1
    folder, entries = None, []
    for i, line in enumerate(block.splitlines()):
        if not line.strip():
            continue
        if not line.startswith(" "):
            folder = line.split()[0]
            assert folder.endswith("/"), f"line {first_line + i}: a folder ends in '/'"
            entries.append((folder, [], first_line + i))
            continue
        m = NAMES.match(line.strip())
        assert m and folder, f"line {first_line + i}: not 'NAME[, NAME]  description'"
        entries.append((folder, m.group(1).split(", "), first_line + i))
    return entries


def mapped_paths(entries):
    paths = {}
    for folder, names, line in entries:
        for name in names:
            paths.setdefault(folder + name, []).append(line)
    return paths


def tree_files(root):
    return {p.relative_to(root).as_posix()
            for top in MAPPED_TREES for p in (root / top).rglob("*") if p.is_file()}


def check(root, text):
    """The map's problems, one line each (empty: the map and tree agree)."""
    entries = module_map(text)
    paths = mapped_paths(entries)
    files = tree_files(root)
    problems = [f"{f}: not in the module map" for f in sorted(files - paths.keys())]
    problems += [f"{p}: in the module map (line {lines[0]}) but not in the tree"
                 for p, lines in sorted(paths.items()) if p not in files]
    problems += [f"{p}: named {len(lines)} times (lines {lines})"
                 for p, lines in sorted(paths.items()) if len(lines) > 1]
    problems += [f"{folder}: in the module map (line {line}) but not a folder"
                 for folder, names, line in entries
                 if not names and not (root / folder).is_dir()]
    return problems


def test_the_module_map_names_every_file_and_only_files_that_exist():
    assert check(ROOT, ARCH.read_text()) == []


MAP = """# x

## Module map

```
src/a/       folder a
  one.c, one.h     the one
  two.c        the two
```
"""


def test_a_file_missing_from_the_map_is_reported(tmp_path):
    for f in ("src/a/one.c", "src/a/one.h", "src/a/two.c", "src/a/three.c"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    assert check(tmp_path, MAP) == ["src/a/three.c: not in the module map"]


def test_an_entry_without_its_file_is_reported(tmp_path):
    for f in ("src/a/one.c", "src/a/one.h"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    assert check(tmp_path, MAP) == [
        "src/a/two.c: in the module map (line 8) but not in the tree"]

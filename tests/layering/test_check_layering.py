"""scripts/check_layering.py: the real tree passes, and each kind of
violation in a small synthetic tree is reported on its own line with the
file and line, and makes the check fail."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "check_layering.py"


def run_check(root):
    p = subprocess.run([sys.executable, str(CHECK), "--root", str(root)],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.splitlines()


def write_tree(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_source_tree_keeps_the_layering():
    rc, lines = run_check(ROOT)
    assert (rc, lines) == (0, [])


ALLOWED = {
    "include/spindle.h": "#include <stddef.h>\n",
    "src/base/error.h": '#include "spindle.h"\n',
    "src/compute/ops.c": '#include "base/error.h"\n#include "compute/ops.h"\n',
    "src/models/model.c": '#include "runtime/kv_cache.h"\n#include "tokenizer/x.h"\n',
    "src/template/chat.c": '#include "tokenizer/tokenizer.h"\n',
    "src/cli/main.c": '#include "spindle.h"\n#include "cli/commands.h"\n'
                      '#include "convert/convert.h"\n',
    # An include inside a comment is not an include.
    "src/base/doc.h": '/* for example:\n#include "cli/commands.h"\n */\n'
                      '// #include "models/model.h"\n',
}


def test_allowed_includes_pass(tmp_path):
    write_tree(tmp_path, ALLOWED)
    assert run_check(tmp_path) == (0, [])


VIOLATIONS = {
    # file: (text, the start of the expected message after "file:line: ")
    "src/compute/up.c": ('#include "base/error.h"\n#include "models/model.h"\n',
                         2, "folder compute includes folder models (layer order: base < compute"),
    "src/tokenizer/peer.c": ('#include "template/jinja.h"\n',
                             1, "folder tokenizer includes peer folder template (layer order:"),
    "src/template/deep.c": ('#include "tokenizer/tok_internal.h"\n',
                            1, "folder template includes peer folder tokenizer (layer order:"),
    "src/cli/inner.c": ('#include "spindle.h"\n\n#include "generation/sampler.h"\n',
                        3, "folder cli includes folder generation (cli uses spindle.h; "
                           "internal headers allowed: convert/convert.h, "),
    "src/models/odd.c": ('#include "nowhere/x.h"\n',
                         1, "folder models includes nowhere/x.h of unknown folder nowhere"),
    "src/models/flat.c": ('#include "model.h"\n',
                          1, 'includes "model.h" (write "folder/file.h"'),
    "src/newfolder/a.c": ("int a;\n", 1, "folder newfolder is not in the layer order"),
    "include/spindle.h": ('#include <stddef.h>\n#include "base/error.h"\n',
                          2, 'the public header includes "base/error.h"'),
    "include/spindle/part.h": ('#include "spindle/none.h"\n',
                               1, 'the public header includes "spindle/none.h"'),
}


def test_each_violation_is_one_line_and_fails(tmp_path):
    write_tree(tmp_path, {f: text for f, (text, _, _) in VIOLATIONS.items()})
    rc, lines = run_check(tmp_path)
    assert rc == 1
    assert len(lines) == len(VIOLATIONS), lines
    for f, (_, line, message) in VIOLATIONS.items():
        prefix = f"{f}:{line}: {message}"
        assert any(l.startswith(prefix) for l in lines), (prefix, lines)

"""Every shell command on the docs site (README.md and docs/**/*.md) runs here, or is marked with why it cannot; a
page's quoted output of a command that runs here is that run's output (docs/develop/conventions.md, "Commands on
the pages").

A fenced block of `bash`, `sh`, `shell` or `console` (a transcript: `$ ` lines are the commands, the lines after
each its output) carries a marker on the line before its fence, an HTML comment the rendered page does not show:

  <!-- docs-test: VERDICT -->                 one verdict for every command of the block
  <!-- docs-test: VERDICT; VERDICT; ... -->   one per command, in order (a command is a line with its `\\`
                                              continuations; blank and comment lines are not commands)

where VERDICT is `run [ARGS]` (run it with ARGS appended, the tiny overrides that make it cheap: it must exit 0),
`refused [ARGS]` (a command the page shows refused: it must exit non-zero) or `needs WHAT (why)`, WHAT one of NEEDS
below: the command cannot run here, and the suite does not pretend it does.
A console block's quoted output is checked against the run of its command; so is a `text` block marked
`<!-- docs-test: output -->` (every line) or `<!-- docs-test: output first N (why) -->` (its first N lines; the rest
in form only, for a run cut short by its ARGS), which quotes the output of the shell block before it.

A quoted line agrees with a line of the run when the two are equal but for their numbers, and each number agrees:
integers exactly, decimals to one unit of their last printed digit (float32 rounding on another CPU), and
durations and rates (a number followed by s, min, s/step, step/s, frames/s, ...) in form only.

The commands of a block run in order in a scratch folder that holds what the pages name as the user's own (STAND_INS:
my_lidar_pngs/, tof/, scan.npy, ...), links to the checkout's train.py, eval.py and configs/, and `../shared` beside
it (the reference files: tests that need them fail without them, as the suite's rule is). They run as a user runs
them: the checkout on PYTHONPATH, the console scripts of pyproject.toml on PATH, and none of the suite's XLA flags
(one CPU device, the default optimisation level), so that the numbers are a user's numbers. Identical runs (the
same commands with the same ARGS, on several pages) run once.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import resource
import shlex
import subprocess
import sys
import time
import tomllib

import numpy as np
import pytest

from conftest import REPO, SHARED

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SHELL_LANGS = ("bash", "sh", "shell", "console")
# What a command may need that the suite lacks: `needs WHAT (why)`.
NEEDS = {
    "kitti": "the KITTI depth download (docs/DATA.md), or a model trained on it",
    "nyu": "the NYU-Depth-v2 download, or a model trained on it",
    "gpu": "a GPU",
    "cluster": "a SLURM cluster or a TPU pod slice",
    "network": "the network (pip install, git clone, a cloud's command line)",
    "ros-bag": "a ROS 2 bag recorded from a sensor",
    "onnx": "the onnx extra installed (make onnx), or not installed, as the page says",
    "mount": "a file system of its own (full, or read-only)",
    "time": "minutes to hours on 2 CPU cores (a training, a reproduction, full-size frames, the suite itself)",
    "arguments": "its arguments (a pattern: `...` stands for them)",
}
MARKER = re.compile(r"^[ \t]*<!--\s*docs-test:\s*(.*?)\s*-->[ \t]*$")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)"
                   r"^(?P=indent)(?P=fence)[ \t]*$", re.M | re.S)
COMMAND_WORDS = ("python", "python3", "pip", "make", "pncnn-", "srun", "bash", "git", "for ", "export ")
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])")
DURATION = re.compile(r"\s*(?:s|ms|min|h|s/\w+|\w+/s)(?![\w/])")
# The user's own files that the pages name, as the scratch folder holds them (made by `_stand_ins`).
STAND_INS = {
    "my_lidar_pngs/": "two sparse depth maps, KITTI 16-bit PNGs (1/256 m) of 64x320, LiDAR-like rows",
    "tof/": "one sparse depth map as a millimetre PNG, 48x64",
    "scan.npy": "one sparse depth map [m], float32 48x64",
    "0000000005.bin, 2011_09_26/": "KITTI raw frame 5 of drive 0001 and its calibration (../shared/data)",
    "kitti_ncnn_conf_l1_checkpoint-9.pth.tar": "the official checkpoint (../shared/reference/checkpoints)",
    "in/kitti_0005.png": "a real KITTI velodyne_raw frame, 375x1242 (../shared/data/kitti_depth_mini)",
    "my_results/, results.csv": "a folder of the user's files (export.json, notes.txt) and a file",
    "train.py, eval.py, configs/": "links to the checkout's",
}


@dataclasses.dataclass(frozen=True)
class Command:
  text: str  # as on the page, `\` continuations joined into one line
  verdict: str  # 'run', 'refused' or 'needs <what>'
  args: str = ""  # run, refused: appended to the command
  output: tuple[str, ...] = ()  # a console block: the lines quoted after the command

  @property
  def runs(self) -> bool:
    return self.verdict in ("run", "refused")

  def line(self) -> str:
    """The command line that runs: the page's, less a trailing comment, plus the marker's ARGS."""
    text = re.sub(r"\s+#[^'\"]*$", "", self.text)
    return f"{text} {self.args}".strip()


@dataclasses.dataclass
class Block:
  page: pathlib.Path
  where: str  # page:line of the fence, the page relative to the checkout
  line: int  # of the fence
  lang: str
  body: str
  marker: str | None
  commands: list[Command] = dataclasses.field(default_factory=list)
  quoted: list[tuple[tuple[str, ...], int | None]] = dataclasses.field(default_factory=list)  # (lines, first N)
  errors: list[str] = dataclasses.field(default_factory=list)

  def run_key(self) -> tuple[str, ...]:
    return tuple(f"{c.verdict}: {c.line()}" for c in self.commands if c.runs)


def _logical_lines(body: str, lang: str) -> list[tuple[str, tuple[str, ...]]]:
  """(command, quoted output lines) of a block: for console, the `$ ` lines (with their continuations) and what
  follows each; else every line with its `\\` continuations, less blank and comment lines."""
  out: list[tuple[str, list[str]]] = []
  pending = ""
  for raw in body.splitlines():
    line = raw.rstrip()
    if pending:
      pending += " " + line.strip()
    elif lang == "console":
      if line.startswith("$ "):
        pending = line[2:].strip()
      else:
        if out and line.strip():
          out[-1][1].append(line)
        continue
    elif line.strip() and not line.lstrip().startswith("#"):
      pending = line.strip()
    else:
      continue
    if pending.endswith("\\"):
      pending = pending[:-1].rstrip()
      continue
    out.append((pending, []))
    pending = ""
  return [(c, tuple(o)) for c, o in out]


def _split_verdicts(text: str) -> list[str]:
  """A marker's verdicts: split at the `;` outside parentheses (a why may hold one)."""
  parts, depth, start = [], 0, 0
  for i, ch in enumerate(text):
    depth += {"(": 1, ")": -1}.get(ch, 0)
    if ch == ";" and depth == 0:
      parts.append(text[start:i])
      start = i + 1
  return parts + [text[start:]]


def _parse_verdict(text: str) -> tuple[str, str] | str:
  """(verdict, args) of one `run ARGS` / `refused ARGS` / `needs WHAT (why)`, or an error message."""
  text = text.strip()
  for verdict in ("run", "refused"):
    if text == verdict or text.startswith(verdict + " "):
      return verdict, text[len(verdict):].strip()
  m = re.fullmatch(r"needs ([\w-]+)(?:\s*\((.+)\))?", text, re.S)
  if m and m.group(1) in NEEDS:
    return f"needs {m.group(1)}", ""
  return (f"unknown verdict {text!r}: expected `run [ARGS]`, `refused [ARGS]` or `needs WHAT (why)` with WHAT one of "
          f"{', '.join(NEEDS)}")


def parse_page(page: pathlib.Path, root: pathlib.Path = REPO) -> tuple[list[Block], list[str]]:
  """The shell blocks of a page with their commands and verdicts, and the page's marker errors (the page named
  relative to `root`)."""
  text = page.read_text()
  lines = text.splitlines()
  blocks: list[Block] = []
  errors: list[str] = []
  used_markers: set[int] = set()
  last_shell: Block | None = None
  for m in FENCE.finditer(text):
    line = text[:m.start()].count("\n") + 1  # 1-based line of the fence
    prev = line - 2  # 0-based index of the line before the fence
    marker = MARKER.match(lines[prev]) if prev >= 0 else None
    if marker:
      used_markers.add(prev)
    lang, body = m.group("lang"), m.group("body")
    where = f"{page.relative_to(root)}:{line}"
    if lang in SHELL_LANGS or (lang == "text" and any(x.startswith("$ ") for x in body.splitlines())):
      block = Block(page, where, line, lang if lang in SHELL_LANGS else "text", body,
                    marker.group(1) if marker else None)
      if block.lang == "text":
        errors.append(f"{where}: a transcript (`$ ` lines) fenced as text: fence it as console")
      cmds = _logical_lines(body, "console" if block.lang in ("console", "text") else "bash")
      if not cmds:
        errors.append(f"{where}: a {lang} block without a command")
      if marker is None:
        errors.append(f"{where}: no marker on the line before the fence (`<!-- docs-test: run -->` or "
                      f"`<!-- docs-test: needs WHAT (why) -->`, docs/develop/conventions.md)")
      else:
        parts = [p for p in _split_verdicts(marker.group(1)) if p.strip()]
        if len(parts) not in (1, len(cmds)):
          errors.append(f"{where}: {len(parts)} verdicts for {len(cmds)} commands (one for all, or one each)")
        else:
          verdicts = [_parse_verdict(p) for p in (parts * len(cmds) if len(parts) == 1 else parts)]
          for (cmd, quoted), v in zip(cmds, verdicts, strict=True):
            if isinstance(v, str):
              errors.append(f"{where}: {v}")
            else:
              block.commands.append(Command(cmd, v[0], v[1], quoted))
      blocks.append(block)
      last_shell = block
    elif marker and lang == "text":
      out = re.fullmatch(r"output(?: first (\d+))?(?:\s*\((.+)\))?", marker.group(1), re.S)
      if not out:
        errors.append(f"{where}: a text block's marker is `output` or `output first N (why)`, not "
                      f"{marker.group(1)!r}")
      elif last_shell is None or not any(c.runs for c in last_shell.commands):
        errors.append(f"{where}: quotes the output of a command, but no shell block before it runs one here")
      else:
        last_shell.quoted.append((tuple(x for x in body.splitlines() if x.strip()),
                                  int(out.group(1)) if out.group(1) else None))
    elif marker:
      errors.append(f"{where}: a docs-test marker on a {lang or 'plain'} block (only shell blocks and the text "
                    f"blocks that quote their output take one)")
    elif not lang and body.strip().startswith(COMMAND_WORDS):
      errors.append(f"{where}: a fenced block of commands without a language: fence it as bash (or console)")
  inside = {i for m in FENCE.finditer(text)
            for i in range(text[:m.start()].count("\n"), text[:m.end()].count("\n") + 1)}  # fenced lines
  for i, x in enumerate(lines):
    if MARKER.match(x) and i not in used_markers and i not in inside:
      errors.append(f"{page.relative_to(root)}:{i + 1}: a docs-test marker not on the line before a fence")
  return blocks, errors


def _all_blocks() -> tuple[list[Block], list[str]]:
  blocks, errors = [], []
  for page in PAGES:
    b, e = parse_page(page)
    blocks += b
    errors += e
  return blocks, errors


BLOCKS, MARKER_ERRORS = _all_blocks()
# The runs: the blocks with a command that runs, one per distinct command sequence (its first place names it).
RUNS: dict[tuple[str, ...], list[Block]] = {}
for _b in BLOCKS:
  if _b.run_key():
    RUNS.setdefault(_b.run_key(), []).append(_b)


# --------------------------------------------------------------------------------------------------------------
# The output check


def _unit(number: str) -> float:
  """One unit of the last printed digit of a decimal ('180.9' -> 0.1, '2.195e+04' -> 10)."""
  mantissa, _, exponent = number.lower().partition("e")
  decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
  return 10.0 ** (int(exponent or 0) - decimals)


def _form(line: str) -> str:
  return NUMBER.sub("#", line.strip())


def agrees(quoted: str, ran: str, numbers: bool = True) -> bool:
  """Whether a quoted output line agrees with a line of the run (the rule of the module docstring)."""
  if _form(quoted) != _form(ran):
    return False
  if not numbers:
    return True
  for q, r in zip(NUMBER.finditer(quoted.strip()), NUMBER.finditer(ran.strip()), strict=True):
    a, b = q.group(), r.group()
    if DURATION.match(quoted.strip(), q.end()):
      continue  # a duration or a rate: in form only
    if not re.search(r"[.eE]", a):
      if a.lstrip("+") != b.lstrip("+"):
        return False
    elif abs(float(a) - float(b)) > _unit(a) * (1 + 1e-9):
      return False
  return True


def check_quoted(quoted: tuple[str, ...], output: str, first: int | None, what: str) -> list[str]:
  """The quoted lines that agree with no line of the run's output (the first `first` in numbers, the rest in
  form), as messages."""
  ran = [x for x in re.split(r"[\r\n]", output) if x.strip()]
  columns = [x.strip() for x in ran]
  bad = []
  for i, q in enumerate(quoted):
    numbers = first is None or i < first
    words = q.split()
    listed = len(words) > 1 and any(columns[j:j + len(words)] == words for j in range(len(columns)))  # ls: columns
    if not listed and not any(agrees(q, r, numbers) for r in ran):  # in a terminal, one name a line into a pipe
      bad.append(f"{what}: {'' if numbers else 'the form of '}{q.strip()!r} is not in the run's output")
  return bad


def test_the_output_rule_compares_numbers_to_their_printed_digits():
  assert agrees("| x | 180.9 | 767.4 | 2 |", "| x | 180.8 | 767.4 | 2 |")
  assert not agrees("| x | 180.9 | 767.4 | 2 |", "| x | 180.7 | 767.4 | 2 |")
  assert not agrees("| x | 180.9 | 767.4 | 2 |", "| x | 180.9 | 767.4 | 3 |")  # integers exactly
  assert agrees("mae=2.195e+04 mm", "mae=2.196e+04 mm") and not agrees("mae=2.195e+04 mm", "mae=2.198e+04 mm")
  assert agrees("summary: 1 input(s), 63.4 s (0.02 frames/s)", "summary: 1 input(s), 12.0 s (0.08 frames/s)")
  assert not agrees("summary: 1 input(s), 63.4 s", "summary: 2 input(s), 63.4 s")
  assert not agrees("step 50: val mae=4666 mm", "step 50: val rmse=4666 mm")  # the words too
  assert agrees("step 100: val mae=1 mm", "step 50: val mae=9 mm", numbers=False)
  assert check_quoted(("a 1.5 m", "b 2 m"), "x\ra 1.5 m\nb 3 m\n", first=1, what="w") == []
  assert check_quoted(("a.png  b.npy",), "a.png\nb.npy\n", first=None, what="w") == []  # ls into a pipe
  assert check_quoted(("a.png  b.npy",), "a.png\nc.json\nb.npy\n", first=None, what="w") != []
  assert check_quoted(("a 1.5 m", "b 2 m"), "a 1.7 m\n", first=None, what="w") == [
      "w: 'a 1.5 m' is not in the run's output", "w: 'b 2 m' is not in the run's output"]


def test_the_marker_parser_reads_verdicts_commands_and_transcripts(tmp_path):
  page = tmp_path / "p.md"
  page.write_text(
      "<!-- docs-test: needs kitti; run --config.num_epochs=1 -->\n```bash\n"
      "python train.py --config configs/kitti.py:pncnn \\\n    --workdir a  # the data\n\n# a comment\n"
      "python train.py --config configs/synthetic.py:ncnn --workdir b   # no data\n```\n\n"
      "<!-- docs-test: output first 1 (cut short) -->\n```text\nline 1\nline 2\n```\n\n"
      "<!-- docs-test: run -->\n```console\n$ python -c 'print(1)'\n1\n$ ls \\\n  out/\nx.png\n```\n\n"
      "```bash\nmake test\n```\n\n<!-- docs-test: needs time (a; b); needs gpu -->\n```sh\nmake demo\n```\n\n"
      "<!-- docs-test: needs coffee -->\n```bash\nmake coffee\n```\n\n```\npython x.py\n```\n\n"
      "```text\n$ python y.py\n```\n\n<!-- docs-test: run -->\nstray\n")
  blocks, errors = parse_page(page, root=tmp_path)
  a, b = blocks[0], blocks[1]
  assert [c.verdict for c in a.commands] == ["needs kitti", "run"]
  assert a.commands[0].text == "python train.py --config configs/kitti.py:pncnn --workdir a  # the data"
  assert a.run_key() == ("run: python train.py --config configs/synthetic.py:ncnn --workdir b --config.num_epochs=1",)
  assert a.quoted == [(("line 1", "line 2"), 1)]
  assert [(c.text, c.output) for c in b.commands] == [("python -c 'print(1)'", ("1",)), ("ls out/", ("x.png",))]
  wanted = ["p.md:25: no marker", "p.md:30: 2 verdicts for 1 commands", "p.md:35: unknown verdict 'needs coffee'",
            "p.md:39: a fenced block of commands without a language", "p.md:43: a transcript (`$ ` lines) fenced as "
            "text", "p.md:43: no marker", "p.md:47: a docs-test marker not on the line before a fence"]
  assert len(errors) == len(wanted), errors
  for e, want in zip(errors, wanted, strict=True):
    assert e.startswith(want), (want, e)


def test_every_command_on_the_pages_runs_here_or_is_marked_with_why_not():
  """A shell block without a marker, a verdict the rule does not know, a transcript fenced as text or a block of
  commands without a language fails here; so does a page with no shell block left to check (a broken parser)."""
  assert not MARKER_ERRORS, "\n".join(MARKER_ERRORS)
  assert len(BLOCKS) >= 25 and len(RUNS) >= 5, (len(BLOCKS), len(RUNS))


# --------------------------------------------------------------------------------------------------------------
# Running them


def _stand_ins(work: pathlib.Path) -> None:
  """The scratch folder's files (STAND_INS) and `../shared` beside it."""
  from pncnn_jax.data import io  # pylint: disable=g-import-not-at-top
  (work.parent / "shared").symlink_to(SHARED)
  for name in ("train.py", "eval.py", "configs"):
    (work / name).symlink_to(REPO / name)
  rows = np.zeros((64, 320), np.float32)
  rows[2::4, 1::2] = np.linspace(4.0, 45.0, 160, dtype=np.float32)  # one LiDAR-like row every 4, 4-45 m
  io.write_kitti_depth(work / "my_lidar_pngs" / "0000000005.png", rows)
  io.write_kitti_depth(work / "my_lidar_pngs" / "0000000006.png", np.roll(rows, 1, axis=0) * 0.9)
  small = np.zeros((48, 64), np.float32)
  small[1::3, ::2] = np.linspace(0.5, 4.0, 32, dtype=np.float32)  # a time-of-flight-like 0.5-4 m
  io.write_depth_png(work / "tof" / "frame_0.png", small, 0.001)  # millimetres
  np.save(work / "scan.npy", small)
  drive = SHARED / "data" / "kitti_raw_mini" / "2011_09_26"
  (work / "0000000005.bin").symlink_to(drive / "2011_09_26_drive_0001_sync" / "velodyne_points" / "data" /
                                       "0000000005.bin")
  (work / "2011_09_26").symlink_to(drive)
  ckpt = "kitti_ncnn_conf_l1_checkpoint-9.pth.tar"
  (work / ckpt).symlink_to(SHARED / "reference" / "checkpoints" / ckpt)
  (work / "in").mkdir()
  (work / "in" / "kitti_0005.png").symlink_to(SHARED / "data" / "kitti_depth_mini" / "train" /
                                              "2011_09_26_drive_0001_sync" / "proj_depth" / "velodyne_raw" /
                                              "image_02" / "0000000005.png")
  (work / "my_results").mkdir()
  (work / "my_results" / "export.json").write_text('{"mine": true}\n')
  (work / "my_results" / "notes.txt").write_text("my notes\n")
  (work / "results.csv").write_text("name,rmse\n")


def _bin_dir(root: pathlib.Path) -> pathlib.Path:
  """The console scripts of pyproject.toml, as pip installs them: `name` runs `module:function`."""
  scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
  bin_dir = root / "bin"
  bin_dir.mkdir()
  for name, target in scripts.items():
    module, function = target.split(":")
    code = f"import sys; from {module} import {function}; sys.argv[0] = {name!r}; sys.exit({function}())"
    (bin_dir / name).write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c {shlex.quote(code)} \"$@\"\n")
    (bin_dir / name).chmod(0o755)
  return bin_dir


def _user_env(bin_dir: pathlib.Path) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # a user's jax: one device, default level
  env.update(PYTHONPATH=str(REPO), PNCNN_SHARED=str(SHARED), JAX_PLATFORMS="cpu", MPLBACKEND="Agg",
             PATH=os.pathsep.join([str(bin_dir), str(pathlib.Path(sys.executable).parent), env.get("PATH", "")]))
  return env


@pytest.mark.slow
@pytest.mark.parametrize("key", list(RUNS), ids=[blocks[0].where for blocks in RUNS.values()])
def test_the_commands_of_a_block_run_and_print_what_the_page_quotes(key, tmp_path, shared_dir):
  del shared_dir  # the stand-ins need ../shared: without it this fails, as every real-data test does
  blocks = RUNS[key]
  work = tmp_path / "work"
  work.mkdir()
  _stand_ins(work)
  env = _user_env(_bin_dir(tmp_path))
  outputs, bad = [], []
  for command in (c for c in blocks[0].commands if c.runs):
    cpu0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    r = subprocess.run(["bash", "-c", command.line()], cwd=work, env=env, capture_output=True, timeout=600,
                       check=False)
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
    print(f"{command.line()}: exit {r.returncode}, {time.perf_counter() - t0:.1f} s, "
          f"{cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime:.1f} s CPU")
    if command.verdict == "run":
      assert r.returncode == 0, f"{blocks[0].where}: `{command.line()}` exited with {r.returncode}:\n{out[-3000:]}"
    else:
      assert r.returncode != 0, f"{blocks[0].where}: `{command.line()}` was not refused:\n{out[-3000:]}"
    outputs.append(out)
    bad += check_quoted(command.output, out, None, f"{blocks[0].where}: `{command.text}`")
  for b in blocks:
    for quoted, first in b.quoted:
      bad += check_quoted(quoted, "\n".join(outputs), first, f"{b.where} (output)")
  assert not bad, "the pages quote what the run does not print:\n" + "\n".join(bad) + "\n--- the run ---\n" + \
      "\n".join(outputs)[-4000:]

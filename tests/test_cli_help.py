"""`train --help` in named boxes, the everyday flags first; parsing exactly as before.

The boxes are a view built over ``TrainArgs`` (:func:`jaxspreeze.cli.args.parse_grouped`):
every flag keeps its name, metavar and default, and an argv parses to the same TrainArgs
as tyro's flat parse of ``TrainArgs`` (the parser before the boxes) gives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re

import pytest
import tyro

from jaxspreeze import algos, cli
from jaxspreeze.cli.args import parse
from jaxspreeze.cli.autotune import AutotuneArgs
from jaxspreeze.cli.train import RUN_GROUPS, TrainArgs, parse_run_args, parse_train_args
from jaxspreeze.setup.config import RunConfig, load

EVERYDAY = ["-h", "--algo", "--env", "--total-steps", "--seed", "--num-seeds", "--num-envs",
            "--logdir", "--config", "--resume", "--eval-every", "--eval-episodes",
            "--stop-at-return"]  # fmt: skip
BOXES = [
    ("options", EVERYDAY),
    ("algorithm options", ["--rollout-steps", "--grad-steps", "--batch-size", "--buffer-size",
                           "--learning-starts", "--chunk-iterations"]),
    ("dict observations options", ["--actor-obs-key", "--critic-obs-key"]),
    ("host workers options", ["--host-workers", "--host-stall-timeout-s"]),
    ("placement and processes options", ["--placement", "--coordinator", "--num-processes",
                                         "--process-id"]),
    ("run directory and checkpoints options", ["--run-name", "--overwrite",
                                               "--checkpoint-every", "--keep-checkpoints"]),
    ("sinks options", ["--sinks"]),
    ("autotune options", ["--autotune", "--profile", "--replay-ratio", "--autotune-budget-s"]),
    ("population options", ["--population", "--pbt", "--pbt-interval", "--pbt-quantile"]),
    ("compile and programs options", ["--compile-cache", "--compile"]),
]  # fmt: skip
RULE = re.compile(r"^[\s│|]*[─\-═]{3,}[\s│|]*$")
ENTRY = re.compile(r"^ {1,2}(-{1,2}[\w.-]+)")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def section_flags(name: str) -> list[str]:
    """The flags of one algorithm's section, in field order (``--sac.actor-lr``, ...)."""
    return [f"--{name}.{_flag(f.name)[2:]}" for f in dataclasses.fields(algos.get(name).config_cls)]


def boxes(text: str) -> list[tuple[str, dict[str, tuple[str, str]]]]:
    """The boxes of a tyro help, in order: (title, {flag: (invocation, default)}).

    Reads both of tyro's renderings (rich's box characters, or plain ASCII with a rule under
    each title); an entry is a line indented by one or two spaces inside its box that starts
    with a flag, continued by the more indented lines under it.
    """
    out: list[tuple[str, dict[str, tuple[str, str]]]] = []
    entry: list[str] = []
    lines = text.splitlines()

    def close() -> None:
        if entry:
            joined = " ".join(" ".join(entry).split())
            first = re.split(r"\s{2,}", entry[0].strip())[0]
            default = re.search(r"\(default: (.*)\)$", joined)
            flag = ENTRY.match(entry[0]).group(1)
            out[-1][1][flag] = (first, default.group(1) if default else "")
            entry.clear()

    for i, line in enumerate(lines):
        after = lines[i + 1] if i + 1 < len(lines) else ""
        if line.startswith("╭"):
            close()
            out.append((re.search(r"─ (.*?) ─", line).group(1), {}))
            continue
        body = line[1:].rstrip("│ ") if line.startswith("│") else line.rstrip()
        if re.fullmatch(r" ?((?:\S.* )?options)", body) and RULE.match(after):  # ASCII title
            close()
            out.append((body.strip(), {}))
        elif RULE.match(line) or line.startswith("╰") or not body.strip():
            close()
        elif ENTRY.match(body):
            close()
            entry.append(body)
        elif entry:
            entry.append(body)
    close()
    return out


def entries(text: str) -> dict[str, tuple[str, str]]:
    """Every entry of a help, whatever its box: {flag: (invocation, default)}."""
    return {flag: entry for _, box in boxes(text) for flag, entry in box.items()}


def help_text(argv: list[str]) -> str:
    """What ``jaxspreeze <argv> --help`` prints (in this process)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main([*argv, "--help"]) == 0
    return out.getvalue()


def flat_help(cls: type, base: RunConfig) -> str:
    """The help of tyro's flat parse of ``cls`` (the parser before the boxes)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        tyro.cli(cls, args=["--help"], prog="p", default=cls(run=base))
    return out.getvalue()


def flat_parse(argv: list[str], base: RunConfig | None = None) -> TrainArgs:
    """The parse of ``argv`` before the boxes: tyro on TrainArgs, defaults from ``base``."""
    return parse(TrainArgs, argv, "jaxspreeze train", default=TrainArgs(run=base or RunConfig()))


def test_train_help_boxes_in_order_everyday_flags_first():
    """The everyday box first, then the named boxes, then one box per algorithm (in the
    registry's order), each with exactly its flags in this order."""
    got = [(title, list(box)) for title, box in boxes(help_text(["train"]))]
    expected = BOXES + [(f"{name} options", section_flags(name)) for name in algos.NAMES]
    assert [title for title, _ in got] == [title for title, _ in expected]
    assert got == expected


def test_every_flag_once_with_its_metavar_and_default():
    """Every RunConfig field and every option of TrainArgs has exactly one flag, with the
    same invocation (name, metavar, --no- pair) and default as the flat parser shows."""
    new = boxes(help_text(["train"]))
    flags = [flag for _, entries in new for flag in entries]
    assert len(flags) == len(set(flags))
    run_fields = [f.name for f in dataclasses.fields(RunConfig)]
    own = [f.name for f in dataclasses.fields(TrainArgs) if f.name != "run"]
    leaves = {_flag(n) for n in [*run_fields, *own] if n not in algos.NAMES}
    sections = {flag for name in algos.NAMES for flag in section_flags(name)}
    assert set(flags) == {"-h"} | leaves | sections
    assert entries(help_text(["train"])) == entries(flat_help(TrainArgs, RunConfig()))
    assert len(flags) == 160  # help, 9 options of train, 33 run fields, 117 in sections


def test_the_table_names_real_fields_once():
    """RUN_GROUPS names each leaf field of RunConfig and each option of TrainArgs once (a
    new field must be placed: it would otherwise land at the end of the first box)."""
    named = [name for group in RUN_GROUPS for name in group.fields]
    assert len(named) == len(set(named))
    leaves = [f.name for f in dataclasses.fields(RunConfig) if f.name not in algos.NAMES]
    own = [f.name for f in dataclasses.fields(TrainArgs) if f.name != "run"]
    assert sorted(named) == sorted(leaves + own)


def test_help_defaults_come_from_the_preset(tmp_path):
    """With --config the boxes show the preset's values as defaults, as before."""
    preset = tmp_path / "p.toml"
    preset.write_text('num_envs = 4\nsinks = ["jsonl"]\n[ppo]\nepochs = 3\n')
    new = entries(help_text(["train", "--config", str(preset)]))
    assert new == entries(flat_help(TrainArgs, load(preset)))
    assert new["--num-envs"][1] == "4" and new["--ppo.epochs"][1] == "3"
    assert new["--sinks"][1] == "jsonl"


def test_autotune_help_uses_the_same_boxes():
    """`autotune --help`: the same boxes (its --out after the everyday flags), no train-only
    options, the same flags and defaults as its flat parser."""
    new = boxes(help_text(["autotune"]))
    titles = [title for title, _ in new]
    assert titles[:2] == ["options", "algorithm options"] and "autotune options" in titles
    first = list(new[0][1])
    assert first == [f for f in EVERYDAY if f != "--resume"] + ["--out"]
    merged = entries(help_text(["autotune"]))
    assert "--resume" not in merged and "--coordinator" not in merged
    assert list(dict(new)["autotune options"]) == ["--replay-ratio", "--autotune-budget-s"]
    assert merged == entries(flat_help(AutotuneArgs, RunConfig()))


ARGVS = [
    [],
    ["--algo", "ppo", "--env", "gymnax/CartPole-v1", "--ppo.no-anneal-lr", "--ppo.normalize-obs"],
    ["--total-steps", "20000", "--num-envs", "16", "--seed", "3", "--num-seeds", "2"],
    ["--sinks", "jsonl", "csv", "--logdir", "/tmp/x", "--run-name", "r", "--overwrite"],
    ["--sac.hidden", "32", "32", "--sac.actor-lr", "0.01", "--td3.policy-delay", "3"],
    ["--placement", "data", "--coordinator", "h:1", "--num-processes", "2", "--process-id", "1"],
    ["--autotune", "--replay-ratio", "2", "--autotune-budget-s", "5", "--compile-cache", "off"],
    ["--profile", "a.json", "--host-workers", "2", "--host-stall-timeout-s", "9",
     "--eval-every", "0", "--eval-episodes", "2", "--checkpoint-every", "100",
     "--keep-checkpoints", "1", "--batch-size", "64", "--actor-obs-key", "state"],
    ["--num-envs=8", "--algo=td3", "--grad-steps", "None"],
]  # fmt: skip


@pytest.mark.parametrize("argv", ARGVS)
def test_parses_as_before(argv):
    """An argv gives the same TrainArgs (RunConfig and train's options) as the flat parse."""
    new = parse_run_args(TrainArgs, argv, "jaxspreeze train")
    assert type(new) is TrainArgs and type(new.run) is RunConfig
    assert new == flat_parse(argv)


def test_parses_as_before_over_a_preset_and_a_resumed_run(tmp_path):
    """Defaults from --config (a TOML preset) or from a resumed run's config.json: the same
    values as the flat parse over that base; flags still override them."""
    preset = tmp_path / "p.toml"
    preset.write_text('algo = "ppo"\nnum_envs = 4\n[ppo]\nepochs = 3\nhidden = [8, 8]\n')
    argv = ["--config", str(preset), "--ppo.epochs", "5", "--seed", "2"]
    new = parse_run_args(TrainArgs, argv, "jaxspreeze train")
    assert new == flat_parse(argv, load(preset))
    run = new.run
    assert (run.algo, run.num_envs, run.ppo.epochs, run.ppo.hidden) == ("ppo", 4, 5, (8, 8))
    run_json = tmp_path / "config.json"
    run_json.write_text('{"algo": "td3", "total_steps": 999, "sinks": ["csv"]}')
    cfg = parse_train_args(["--total-steps", "1000"], base_file=run_json)
    assert cfg == flat_parse(["--total-steps", "1000"], load(run_json)).run
    assert (cfg.algo, cfg.total_steps, cfg.sinks) == ("td3", 1000, ("csv",))


@pytest.mark.parametrize(
    "argv",
    [["--num-envs", "abc"], ["--nope"], ["--placement", "x"], ["--sac.gamma"],
     ["--process-id", "x"], ["--autotune", "yes"]],
)  # fmt: skip
def test_bad_input_reported_as_before(argv):
    """A flag tyro cannot parse: exit 2 and the same one line as the flat parser."""
    messages = []
    for run in (lambda: parse_run_args(TrainArgs, argv, "jaxspreeze train"),
                lambda: flat_parse(argv)):  # fmt: skip
        err = io.StringIO()
        with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as e:
            run()
        assert e.value.code == 2
        messages.append(err.getvalue())
    assert messages[0] == messages[1] and len(messages[0].strip().splitlines()) == 1


def test_docs_show_the_first_box():
    """docs/cli.md shows `train --help`'s first box as it is (flags, metavars, defaults)."""
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "cli.md").read_text()
    block = doc.split("`jaxspreeze train --help` shows the everyday flags first:")[1]
    shown = boxes(block.split("```")[1])
    assert [title for title, _ in shown] == ["options"]
    assert shown[0][1] == boxes(help_text(["train"]))[0][1]

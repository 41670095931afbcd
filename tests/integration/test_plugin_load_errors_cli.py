"""A plugin that does not load, through the real command line (`python -m loghubd` in a
subprocess): `loghubd plugins` lists it as BROKEN with why and the fix and exits 1; `run`,
`check-config` and the other plugins' commands warn and go on; a processor that is missing
names the broken plugins as the likely reason; `--debug` adds the traceback. Two plugins
registering one processor name are both named; a processor whose `create` fails is named
with the reason, exit 2.

The plugins are throwaway distributions in a directory on the subprocess's PYTHONPATH
(`write_plugin`): nothing is installed into the virtualenv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loghubd.testing import ServerProcess, produce_logs
from tests.unit.plugins.test_plugin_load_errors import (
    GOOD,
    HOOK_TYPO,
    MKDIR,
    registers,
    write_plugin,
)

TYPO = (
    'plugin loghubd-typo 0.1.0: entry point typo = "loghubd_t_typo.plugn" cannot be imported: '
    "No module named 'loghubd_t_typo.plugn' (fix the entry point, or pip uninstall loghubd-typo)"
)
HOOKTYPO = (
    'plugin loghubd-hooktypo 0.1.0: entry point hooktypo = "loghubd_t_hooktypo" implements an '
    "unknown hook: loghubd_register_processor (did you mean loghubd_register_processors?) "
    "(rename it, or pip uninstall loghubd-hooktypo)"
)


def loghubd(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = [str(site), os.environ.get("PYTHONPATH", "")]
    return subprocess.run(
        [sys.executable, "-m", "loghubd", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)},
    )


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A plugin that loads (`fine`, and the command `fine-hello`), one whose entry point names a
    module that does not exist (the audit's typo) and one with a misspelt hook name."""
    root = tmp_path / "site"
    write_plugin(root, "loghubd-t-good", {"good": "loghubd_t_good"}, {"loghubd_t_good.py": GOOD})
    write_plugin(
        root, "loghubd-typo", {"typo": "loghubd_t_typo.plugn"},
        {"loghubd_t_typo/__init__.py": "", "loghubd_t_typo/plugin.py": registers("typo")},
    )  # fmt: skip
    write_plugin(
        root, "loghubd-hooktypo", {"hooktypo": "loghubd_t_hooktypo"},
        {"loghubd_t_hooktypo.py": HOOK_TYPO},
    )  # fmt: skip
    return root


def config(
    tmp_path: Path, processor: str, endpoint: str = "http://127.0.0.1:9", **more: str
) -> Path:
    """A config file choosing `processor` with the options `more`."""
    options = "".join(f'{k} = "{v}"\n' for k, v in more.items())
    path = tmp_path / f"{processor}.toml"
    path.write_text(f"""
[source]
endpoint = "{endpoint}"
project = "proj"
logstore = "logs"
[consumer]
group = "grp"
end = {int(time.time()) + 1}
heartbeat_interval = 1.0
[processor]
name = "{processor}"
[processor.{processor}]
{options}[ops]
listen = "127.0.0.1:0"
""")
    return path


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr


def test_plugins_lists_the_good_and_the_broken_and_exits_1(site: Path) -> None:
    done = loghubd(site, "plugins")
    no_traceback(done)
    assert done.returncode == 1, done.stderr
    assert "fine  (loghubd-t-good 0.1.0)  a processor of a plugin that loads" in done.stdout
    assert "jsonl  (loghubd " in done.stdout
    assert f"BROKEN  {TYPO}" in done.stdout.splitlines()
    assert f"BROKEN  {HOOKTYPO}" in done.stdout.splitlines()
    assert (
        done.stderr == "loghubd plugins: some plugins do not load: loghubd-hooktypo, loghubd-typo\n"
    )

    listed = loghubd(site, "plugins", "--json")
    assert listed.returncode == 1, listed.stderr
    entries = json.loads(listed.stdout)
    fine = next(e for e in entries if e["name"] == "fine")
    assert (fine["distribution"], fine["plugin"], fine["error"]) == ("loghubd-t-good", "good", None)
    broken = {e["distribution"]: e for e in entries if e["error"]}
    assert broken["loghubd-typo"] == {
        "name": None,
        "description": "",
        "distribution": "loghubd-typo",
        "version": "0.1.0",
        "plugin": "typo",
        "options": {},
        "error": TYPO,
    }
    assert broken["loghubd-hooktypo"]["error"] == HOOKTYPO

    debug = loghubd(site, "--debug", "plugins")
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr and "ModuleNotFoundError" in debug.stderr


def test_check_config_warns_and_goes_on_when_its_processor_loads(
    site: Path, tmp_path: Path
) -> None:
    done = loghubd(site, "check-config", str(config(tmp_path, "fine", x="1")))
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    file = tmp_path / "fine.toml"
    assert f"{file}: warning: {TYPO}" in done.stderr.splitlines()
    assert f"{file}: warning: {HOOKTYPO}" in done.stderr.splitlines()
    assert json.loads(done.stdout)["processor"]["name"] == "fine"


@pytest.mark.parametrize(("command", "processor"), [("check-config", "typo"), ("run", "hooked")])
def test_a_missing_processor_names_the_plugins_that_do_not_load(
    site: Path, tmp_path: Path, command: str, processor: str
) -> None:
    file = config(tmp_path, processor)
    done = loghubd(site, command, "-c", str(file))
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert f"  processor.name: no processor is named {processor!r}" in "\n".join(lines)
    assert f"  maybe it is in a plugin that does not load: {TYPO}" in lines
    assert f"  maybe it is in a plugin that does not load: {HOOKTYPO}" in lines

    debug = loghubd(site, "--debug", command, "-c", str(file))
    assert debug.returncode == 2
    assert "Traceback" in debug.stderr and "No module named 'loghubd_t_typo.plugn'" in debug.stderr


def test_a_misspelt_hook_alone_is_set_aside_and_named_with_the_hook_it_meant(
    tmp_path: Path,
) -> None:
    """The audit's case: the only broken plugin has `loghubd_register_processor` (no s)."""
    site = tmp_path / "site"
    write_plugin(
        site, "loghubd-hooktypo", {"hooktypo": "loghubd_t_hooktypo"},
        {"loghubd_t_hooktypo.py": HOOK_TYPO},
    )  # fmt: skip
    file = config(tmp_path, "jsonl", path=str(tmp_path / "out"))
    checked = loghubd(site, "check-config", str(file))
    no_traceback(checked)
    assert checked.returncode == 0, checked.stderr
    assert checked.stderr.splitlines() == [f"{file}: warning: {HOOKTYPO}"]
    ran = loghubd(site, "run", "-c", str(config(tmp_path, "hooked")))
    no_traceback(ran)
    assert ran.returncode == 2, ran.stderr
    assert f"  maybe it is in a plugin that does not load: {HOOKTYPO}" in ran.stderr.splitlines()


def test_run_warns_and_consumes_through_a_processor_that_loads(
    site: Path, tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    produce_logs(loghubd_server.endpoint, "proj", "logs", 50, create_shards=1)
    out = tmp_path / "out"
    file = config(tmp_path, "jsonl", loghubd_server.endpoint, path=str(out))
    done = loghubd(site, "run", "-c", str(file))
    no_traceback(done)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    warned = [json.loads(line) for line in done.stdout.splitlines() if "plugin_not_loaded" in line]
    assert sorted(w["problem"] for w in warned) == sorted([TYPO, HOOKTYPO])
    assert sum(len(f.read_text().splitlines()) for f in out.glob("shard-*.jsonl")) == 50


def test_the_other_plugins_commands_still_work(site: Path) -> None:
    done = loghubd(site, "fine-hello")
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello from a plugin that loads\n"
    assert f"loghubd: warning: {TYPO}" in done.stderr.splitlines()


def test_two_plugins_registering_one_processor_name_are_both_named(tmp_path: Path) -> None:
    site = tmp_path / "site"
    for n in ("1", "2"):
        write_plugin(
            site, f"loghubd-dup{n}", {f"dup{n}": f"loghubd_t_dup{n}"},
            {f"loghubd_t_dup{n}.py": registers("dup")},
        )  # fmt: skip
    done = loghubd(site, "check-config", str(config(tmp_path, "jsonl", path=str(tmp_path))))
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    assert "two plugins register a processor named 'dup': " in done.stderr
    for n in ("1", "2"):
        assert f'loghubd-dup{n} 0.1.0 (entry point dup{n} = "loghubd_t_dup{n}")' in done.stderr


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_a_create_that_fails_names_the_processor_and_the_path(tmp_path: Path, command: str) -> None:
    site = tmp_path / "site"
    write_plugin(
        site, "loghubd-mkdirs", {"mkdirs": "loghubd_t_mkdirs"}, {"loghubd_t_mkdirs.py": MKDIR}
    )
    missing = tmp_path / "missing" / "out"
    file = config(tmp_path, "mkdirs", path=str(missing))
    done = loghubd(site, command, "-c", str(file))
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    reason = (
        f"processor.mkdirs: cannot be created: [Errno 2] No such file or directory: '{missing}'"
    )
    assert reason in done.stderr.splitlines()[-1], done.stderr

    # with several [[sources]], the source is named first (`naming_source`)
    multi = tmp_path / "multi.toml"
    multi.write_text(f"""
[[sources]]
name = "app"
endpoint = "http://127.0.0.1:9"
project = "proj"
logstore = "app"
[sources.consumer]
group = "grp"
[sources.processor]
name = "mkdirs"
[sources.processor.mkdirs]
path = "{missing}"

[[sources]]
name = "audit"
endpoint = "http://127.0.0.1:9"
project = "proj"
logstore = "audit"
[sources.consumer]
group = "grp"
[sources.processor]
name = "null"
""")
    done = loghubd(site, command, "-c", str(multi))
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    assert f"sources.app: {reason}" in done.stderr, done.stderr

    debug = loghubd(site, "--debug", command, "-c", str(file))
    assert debug.returncode == 2
    assert "Traceback" in debug.stderr and "FileNotFoundError" in debug.stderr

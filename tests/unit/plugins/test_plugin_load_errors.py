"""A plugin that does not load is set aside, one entry point at a time, and the others still
work: an entry point that cannot be imported, a misspelt hook name, a registration hook that
raises. Two plugins registering one processor name are both named; a processor whose `create`
fails otherwise than by refusing its options is named with the reason.

The plugins are throwaway distributions: a `<name>.dist-info` (METADATA, entry_points.txt)
and their modules in a directory put on `sys.path` (importlib.metadata finds them there), so
nothing is installed into the virtualenv. `write_plugin` is also used by
tests/integration/test_plugin_load_errors_cli.py, which puts the directory on PYTHONPATH.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from loghubd import SinkUnreachable
from loghubd.plugins.manager import (
    PluginError,
    Plugins,
    ProcessorNotCreated,
    why,
)

GOOD = """
from loghubd import CliCommand, ProcessorSpec, hookimpl


class Factory:
    def __init__(self, options):
        self.options = options

    def __call__(self, shard):
        raise NotImplementedError


def _hello(args):
    print("hello from a plugin that loads")
    return 0


@hookimpl
def loghubd_register_processors():
    return [ProcessorSpec("fine", Factory, "a processor of a plugin that loads", {"x": "any"})]


@hookimpl
def loghubd_cli_commands():
    return [CliCommand(name="fine-hello", help="say hello", arguments=lambda p: None, run=_hello)]
"""

MISSING_DEPENDENCY = "import loghubd_no_such_dependency  # noqa\n"

HOOK_TYPO = """
from loghubd import ProcessorSpec, hookimpl


@hookimpl
def loghubd_register_processor():
    return [ProcessorSpec("hooked", lambda options: (lambda shard: None))]
"""

HOOK_RAISES = """
from loghubd import hookimpl


@hookimpl
def loghubd_register_processors():
    raise RuntimeError("no licence key")
"""


def registers(name: str) -> str:
    """A plugin module registering processor `name` (its factory makes nothing)."""
    return f"""
from loghubd import ProcessorSpec, hookimpl


@hookimpl
def loghubd_register_processors():
    return [ProcessorSpec({name!r}, lambda options: (lambda shard: None))]
"""


MKDIR = """
from pathlib import Path

from loghubd import ProcessorSpec, hookimpl


def create(options):
    Path(options["path"]).mkdir()  # no parents=True: a missing parent fails
    return lambda shard: None


@hookimpl
def loghubd_register_processors():
    return [ProcessorSpec("mkdirs", create, "makes its directory in create", {"path": "dir"})]
"""


def write_plugin(
    site: Path, dist: str, entry_points: Mapping[str, str], modules: Mapping[str, str]
) -> None:
    """Distribution `dist` 0.1.0 with `entry_points` (name -> "module") in the `loghubd`
    group and `modules` (path under `site` -> source), found by importlib.metadata once
    `site` is on the path."""
    info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[loghubd]\n{lines}")
    for path, source in modules.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(source)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path for throwaway distributions; their modules are forgotten after
    the test (the next one may reuse a name)."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    before = set(sys.modules)
    yield root
    for name in set(sys.modules) - before:
        if name.startswith("loghubd_t_"):
            del sys.modules[name]


def good(site: Path) -> None:
    write_plugin(site, "loghubd-t-good", {"good": "loghubd_t_good"}, {"loghubd_t_good.py": GOOD})


def typo(site: Path) -> None:
    """The audit's typo: the entry point names `plugn`, the package has `plugin`."""
    write_plugin(
        site, "loghubd-typo", {"typo": "loghubd_t_typo.plugn"},
        {"loghubd_t_typo/__init__.py": "", "loghubd_t_typo/plugin.py": registers("typo")},
    )  # fmt: skip


def test_an_entry_point_that_cannot_be_imported_is_set_aside_and_the_others_load(
    site: Path,
) -> None:
    typo(site)
    good(site)
    plugins = Plugins()
    assert [str(b) for b in plugins.broken] == [
        'plugin loghubd-typo 0.1.0: entry point typo = "loghubd_t_typo.plugn" cannot be '
        "imported: No module named 'loghubd_t_typo.plugn' (fix the entry point, or pip uninstall "
        "loghubd-typo)"
    ]
    assert "ModuleNotFoundError" in plugins.broken[0].traceback  # what --debug prints
    assert {"fine", "jsonl"} <= set(plugins.processors())
    fine = next(i for i in plugins.describe() if i.name == "fine")
    assert (fine.distribution, fine.version, fine.plugin) == ("loghubd-t-good", "0.1.0", "good")
    assert "fine-hello" in [c.name for c in plugins.cli_commands()]


def test_a_missing_dependency_is_named_as_what_to_install(site: Path) -> None:
    write_plugin(
        site,
        "loghubd-needy",
        {"needy": "loghubd_t_needy"},
        {"loghubd_t_needy.py": MISSING_DEPENDENCY},
    )
    (broken,) = Plugins().broken
    assert str(broken) == (
        'plugin loghubd-needy 0.1.0: entry point needy = "loghubd_t_needy" cannot be imported: '
        "No module named 'loghubd_no_such_dependency' (install the module "
        "'loghubd_no_such_dependency' it needs, or pip uninstall loghubd-needy)"
    )


def test_a_misspelt_hook_is_set_aside_with_the_hook_it_meant(site: Path) -> None:
    write_plugin(
        site, "loghubd-hooktypo", {"hooktypo": "loghubd_t_hooktypo"},
        {"loghubd_t_hooktypo.py": HOOK_TYPO},
    )  # fmt: skip
    good(site)
    plugins = Plugins()
    (broken,) = plugins.broken
    assert str(broken) == (
        'plugin loghubd-hooktypo 0.1.0: entry point hooktypo = "loghubd_t_hooktypo" '
        "implements an unknown hook: loghubd_register_processor (did you mean "
        "loghubd_register_processors?) (rename it, or pip uninstall loghubd-hooktypo)"
    )
    assert not plugins.pm.has_plugin("hooktypo")
    assert "fine" in plugins.processors() and "hooked" not in plugins.processors()


UNDECORATED = """
from loghubd import ProcessorSpec


def loghubd_register_processors():
    return [ProcessorSpec("bare", lambda options: (lambda shard: None))]
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (UNDECORATED, "implements no hook: loghubd_register_processors lacks @hookimpl "
                      "(decorate it with @loghubd.hookimpl, or pip uninstall loghubd-bare)"),
        ("VALUE = 1\n", "implements no loghubd hook (implement one of "),
    ],
)  # fmt: skip
def test_an_entry_point_that_implements_no_hook_is_set_aside(
    site: Path, source: str, expected: str
) -> None:
    """A hook function without @hookimpl is ignored by pluggy without a word: the plugin's
    processors then seem not to exist (found by a plugin author's audit)."""
    write_plugin(site, "loghubd-bare", {"bare": "loghubd_t_bare"}, {"loghubd_t_bare.py": source})
    good(site)
    plugins = Plugins()
    (broken,) = plugins.broken
    prefix = 'plugin loghubd-bare 0.1.0: entry point bare = "loghubd_t_bare" '
    assert str(broken).startswith(prefix + expected), str(broken)
    assert "fine" in plugins.processors() and "bare" not in plugins.processors()


def test_a_registration_hook_that_raises_is_set_aside(site: Path) -> None:
    write_plugin(
        site, "loghubd-raises", {"raises": "loghubd_t_raises"},
        {"loghubd_t_raises.py": HOOK_RAISES},
    )  # fmt: skip
    good(site)
    plugins = Plugins()
    assert [str(b) for b in plugins.broken] == [
        'plugin loghubd-raises 0.1.0: entry point raises = "loghubd_t_raises" fails in '
        "loghubd_register_processors: RuntimeError: no licence key (fix the plugin, or pip "
        "uninstall loghubd-raises)"
    ]
    assert not plugins.pm.has_plugin("raises") and "fine" in plugins.processors()


def test_a_missing_processor_names_the_plugins_that_do_not_load(site: Path) -> None:
    typo(site)
    with pytest.raises(PluginError) as raised:
        Plugins().processor("typo")
    assert "no processor named 'typo'" in str(raised.value)
    maybe = "; maybe it is in a plugin that does not load: plugin loghubd-typo 0.1.0: "
    assert f'{maybe}entry point typo = "loghubd_t_typo.plugn" cannot be' in str(raised.value)


def test_two_plugins_registering_one_processor_name_are_both_named(site: Path) -> None:
    for n in ("1", "2"):
        write_plugin(
            site, f"loghubd-dup{n}", {f"dup{n}": f"loghubd_t_dup{n}"},
            {f"loghubd_t_dup{n}.py": registers("dup")},
        )  # fmt: skip
    with pytest.raises(PluginError) as raised:
        Plugins()
    message = str(raised.value)
    assert message.startswith("two plugins register a processor named 'dup': ")
    for n in ("1", "2"):
        assert f'loghubd-dup{n} 0.1.0 (entry point dup{n} = "loghubd_t_dup{n}")' in message
    assert message.endswith(": pip uninstall one of them")


def test_a_plugin_registering_a_built_in_name_is_the_one_to_uninstall(site: Path) -> None:
    write_plugin(
        site, "loghubd-myjsonl", {"myjsonl": "loghubd_t_myjsonl"},
        {"loghubd_t_myjsonl.py": registers("jsonl")},
    )  # fmt: skip
    with pytest.raises(PluginError) as raised:
        Plugins()
    message = str(raised.value)
    assert message.startswith("two plugins register a processor named 'jsonl': ")
    assert "loghubd 0.1.0 (built in)" in message
    assert 'loghubd-myjsonl 0.1.0 (entry point myjsonl = "loghubd_t_myjsonl")' in message
    assert message.endswith(": pip uninstall loghubd-myjsonl")


def test_an_entry_point_name_taken_by_another_distribution_is_set_aside(site: Path) -> None:
    good(site)
    write_plugin(
        site, "loghubd-again", {"good": "loghubd_t_again"}, {"loghubd_t_again.py": registers("x")}
    )
    plugins = Plugins()
    (broken,) = plugins.broken
    assert str(broken) == (
        'plugin loghubd-again 0.1.0: entry point good = "loghubd_t_again" has the name of '
        'another plugin\'s, loghubd-t-good 0.1.0 (entry point good = "loghubd_t_good") '
        "(rename it, or pip uninstall loghubd-again)"
    )
    assert "fine" in plugins.processors() and "x" not in plugins.processors()


CREATE_FAILS = """
from loghubd import ProcessorSpec, SinkUnreachable, hookimpl


def raising(exc):
    def create(options):
        raise exc

    return create


@hookimpl
def loghubd_register_processors():
    return [
        ProcessorSpec("mkdirs", raising(FileNotFoundError(2, "No such file", "/no/out"))),
        ProcessorSpec("keyed", raising(KeyError("path"))),
        ProcessorSpec("refuses", raising(ValueError("processor.refuses.path: required"))),
        ProcessorSpec("down", raising(SinkUnreachable("processor.down.url: cannot connect"))),
    ]
"""


def test_a_create_that_fails_names_the_processor_and_the_reason(site: Path) -> None:
    write_plugin(
        site, "loghubd-fails", {"fails": "loghubd_t_fails"}, {"loghubd_t_fails.py": CREATE_FAILS}
    )
    plugins = Plugins()
    with pytest.raises(ProcessorNotCreated) as raised:
        plugins.create("mkdirs", {})
    assert str(raised.value) == (
        "processor.mkdirs: cannot be created: [Errno 2] No such file: '/no/out'"
    )
    assert isinstance(raised.value, ValueError)  # `naming_source` prefixes the source
    assert isinstance(raised.value.__cause__, FileNotFoundError)  # --debug's traceback
    with pytest.raises(ProcessorNotCreated) as keyed:
        plugins.create("keyed", {})
    assert str(keyed.value) == "processor.keyed: cannot be created: KeyError: 'path'"
    # a refusal of the options and an unreachable sink keep their own kind and words
    with pytest.raises(ValueError, match=r"^processor.refuses.path: required$") as refused:
        plugins.create("refuses", {})
    assert type(refused.value) is ValueError
    with pytest.raises(SinkUnreachable, match=r"^processor.down.url: cannot connect$"):
        plugins.create("down", {})


@pytest.mark.parametrize(
    ("exc", "said"),
    [
        (ModuleNotFoundError("No module named 'x'"), "No module named 'x'"),
        (PermissionError(13, "Permission denied", "/a"), "[Errno 13] Permission denied: '/a'"),
        (KeyError("path"), "KeyError: 'path'"),
        (RuntimeError("two\n  lines"), "RuntimeError: two lines"),
        (RuntimeError(), "RuntimeError"),
    ],
)
def test_why_says_an_exception_in_one_line(exc: BaseException, said: str) -> None:
    assert why(exc) == said

"""The CLI: ``--version``, texts from stdin or a file, and one error line (never a traceback) when
Kafka or PostgreSQL cannot be reached."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version

import orjson
import pytest
import typer
from typer.testing import CliRunner

from threadline import cli
from threadline.config import get_settings

NOWHERE_KAFKA = "127.0.0.1:9"  # the discard port: nothing listens there
NOWHERE_PG = "postgresql://threadline:s3cret-pw@127.0.0.1:9/threadline"


@pytest.fixture
def away(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("THREADLINE_KAFKA_BOOTSTRAP", NOWHERE_KAFKA)
    monkeypatch.setenv("THREADLINE_PG_DSN", NOWHERE_PG)
    monkeypatch.setenv("THREADLINE_REPLY_TIMEOUT_S", "3")
    get_settings.cache_clear()  # the CLI reads the environment set above
    yield
    get_settings.cache_clear()


def test_version() -> None:
    result = CliRunner().invoke(cli.app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"threadline {version('threadline')}"


@pytest.mark.parametrize("args", [["thread", "-r", "r", "-t", "t"], ["inbox", "-r", "r", "-t", "t"], ["migrate"]],
                         ids=["thread", "inbox", "migrate"])
def test_postgres_away_is_one_error_line_naming_the_address(away: None, args: list[str]) -> None:
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    line = orjson.loads(lines[0])
    assert line["code"] == "postgres_unavailable"
    assert "127.0.0.1:9" in line["message"] and "make up" in line["message"]
    assert "s3cret-pw" not in result.output  # the DSN's password never shows


@pytest.mark.parametrize("args", [["topics"], ["abort", "-r", "r", "-t", "t"]], ids=["topics", "abort"])
def test_kafka_away_is_one_error_line_naming_the_address(away: None, args: list[str]) -> None:
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 2, result.output
    line = orjson.loads(result.stdout.strip().splitlines()[-1])
    assert line["code"] == "broker_unavailable"
    assert NOWHERE_KAFKA in line["message"] and "make up" in line["message"]


def test_the_text_comes_from_the_argument_stdin_or_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    assert cli._text("hello", None) == "hello"
    monkeypatch.setattr("sys.stdin", type("In", (), {"read": staticmethod(lambda: "from stdin\n")})())
    assert cli._text("-", None) == "from stdin\n"
    (tmp_path / "m.txt").write_text("från en fil", encoding="utf-8")
    assert cli._text(None, str(tmp_path / "m.txt")) == "från en fil"
    for text, path in ((None, None), ("x", str(tmp_path / "m.txt")), (None, str(tmp_path / "missing.txt"))):
        with pytest.raises(typer.BadParameter):
            cli._text(text, path)


def test_a_missing_text_is_a_usage_error_not_a_send(away: None) -> None:
    result = CliRunner().invoke(cli.app, ["send-message", "-r", "r", "-t", "t"])
    assert result.exit_code == 2
    assert "no text" in result.output


def test_each_service_is_an_entry_point() -> None:
    from importlib.metadata import entry_points

    from threadline.services import ALL as NAMES

    scripts = {ep.name: ep for ep in entry_points(group="console_scripts") if ep.name.startswith("threadline")}
    for name in NAMES:
        ep = scripts[f"threadline-{name.replace('_', '-')}"]
        assert callable(ep.load())  # loads the service's module without running it
        assert ep.value == f"threadline.services.{name}.__main__:main"


@pytest.mark.parametrize(("args", "contract"), [(["migrate"], False), (["migrate", "--contract"], True)],
                         ids=["expand", "contract"])
def test_migrate_applies_the_contract_migrations_only_when_asked(away: None, monkeypatch: pytest.MonkeyPatch,
                                                                  args: list[str], contract: bool) -> None:
    from threadline.store import migrate

    asked: list[bool] = []

    def fake(dsn: str, *, contract: bool = False) -> list[str]:
        asked.append(contract)
        return ["0028_retired_saves"] if contract else []

    monkeypatch.setattr(migrate, "migrate", fake)
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    assert asked == [contract]
    assert orjson.loads(result.stdout) == {"applied": ["0028_retired_saves"] if contract else []}

"""Each option's values are declared once (kcoder/choices.py): the CLI, the agent's tools and
the MCP tools offer exactly those values, and the settings build the evaluator's and the
profiler's options."""

from __future__ import annotations

import re

import anyio
from typer.testing import CliRunner

from kcoder.choices import PRECISIONS, STAGES, TUNE_STRATEGIES


def _cli_choices(command: str, option: str) -> tuple[str, ...]:
    """The values the CLI names when `--option` gets a bad one."""
    from kcoder.cli import app

    result = CliRunner().invoke(app, [command, "a.py", "b.py", option, "bogus"], terminal_width=400)
    assert result.exit_code == 2, result.output
    return tuple(re.findall(r"'(\w+)'", " ".join(result.output.split()).split("is not one of", 1)[1]))


def test_cli_tools_and_mcp_offer_the_declared_values(tmp_path):
    from kcoder.agent.toolbox import discover_tools
    from kcoder.mcp.server import build_server
    from kcoder.settings import Settings

    tune = discover_tools()["tune"]  # the shipped tool file, as the agent loads it

    assert _cli_choices("tune", "--strategy") == TUNE_STRATEGIES
    assert _cli_choices("eval", "--precision") == _cli_choices("profile", "--precision") == PRECISIONS
    assert _cli_choices("eval", "--stop-after") == STAGES
    assert tuple(tune.parameters["properties"]["strategy"]["enum"]) == TUNE_STRATEGIES
    tools = {t.name: t for t in anyio.run(build_server(Settings(device="cpu"), tmp_path).list_tools)}
    assert tuple(tools["tune"].input_schema["properties"]["strategy"]["enum"]) == TUNE_STRATEGIES
    assert tuple(tools["eval"].input_schema["properties"]["stop_after"]["enum"]) == STAGES


def test_profile_options_follow_the_settings():
    from kcoder.settings import Settings

    options = Settings(device="cuda", precision="relaxed").profile_options(full=True, ncu_timeout_s=5.0)
    assert (options.device, options.precision, options.full, options.ncu_timeout_s) == ("cuda", "relaxed", True, 5.0)
    options.validate()

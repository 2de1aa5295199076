"""``bench server --plan``: the configurations a bench would run for this release and TP, each
with its environment and its exact bench_one_batch command line, without a GPU and without
starting anything.  The scratch directory does not exist yet: its paths read ``<scratch>``."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from sm120patch.bench.remote import bench_rank, server_hook
from sm120patch.bench.server import configs, driver

if TYPE_CHECKING:
    from rich.console import Console


def plan(settings: driver.Settings) -> dict[str, Any]:
    """The plan as JSON: ``{"configs": [{"name", "sentence", "env", "args"}], "skipped":
    [{"name", "why"}], ...}``; EnvironmentProblem (exit 2) where the release cannot be
    benched or a configuration asked for does not apply."""
    module, flags = driver.refuse_release(settings)
    chosen, notes = driver.choose_configs(settings)
    release = settings.release()
    return {
        "sglang": {"version": settings.version, "location": str(settings.package_dir), "benchmark": module},
        "tp": settings.tp,
        "configs": [
            {
                "name": c.name,
                "sentence": c.sentence,
                "env": driver.config_env(settings, c),
                "args": driver.command(settings, module, None, flags, c, 0),
            }
            for c in chosen
        ],
        "skipped": [
            {"name": c.name, "why": why}
            for c in configs.CONFIGS
            if c not in chosen and (why := configs.why_not(c, release)) is not None
        ],
        "harness_env": {**bench_rank.MULTICAST_ENV, server_hook.NUMPY_SEED_ENV: str(driver.SEED)},
        "notes": notes,
    }


def render(data: dict[str, Any], out: Console) -> None:
    from rich.markup import escape
    from rich.text import Text

    from sm120patch.output.lines import put

    sglang = data["sglang"]
    title = f"sglang {sglang['version']}, TP {data['tp']}: {len(data['configs'])} configurations"
    out.print(f"[bold]{escape(title)}[/]")
    for one in data["configs"]:
        put(out, Text.assemble((one["name"], "bold"), f": {one['sentence']}"))
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in one["env"].items())
        out.print(escape(f"  {env + ' ' if env else ''}{shlex.join(one['args'])}"), soft_wrap=True)
    for one in data["skipped"]:
        put(out, Text(f"not run: {one['name']}: {one['why']}", style="dim"))
    for note in data["notes"]:
        put(out, Text(note, style="dim"))
    harness = ", ".join(f"{k}={v}" for k, v in data["harness_env"].items())
    put(out, Text(f"every run also has the hook (sitecustomize) first on PYTHONPATH and {harness}", style="dim"))

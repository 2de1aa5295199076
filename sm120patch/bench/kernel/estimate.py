"""From per-call figures to a model's step: what fusion saves or costs per forward pass.

A transformer layer under tensor parallelism ends its attention and its MLP (or MoE) block
with an allreduce, each followed by sglang's residual add + RMSNorm: two sites a layer,
156 for a 78-layer model.  With fusion on, sglang runs each site as one fused kernel while
the batch holds 1 to 2048 tokens (``FUSE_ALLREDUCE_MAX_BATCH_SIZE``); over that it runs them
unfused, so a long prefill chunk gains nothing.  The estimate multiplies the measured
per-call medians by the sites; it leaves out everything else a step does, so its percentage
is of the step's allreduce + norm time, not of the whole step.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sm120patch.errors import EnvironmentProblem

FUSION_MAX_TOKENS = 2048
SITES_PER_LAYER = 2
#: Where a Hugging Face config keeps the layer count, hidden size and expert count,
#: in the order tried (GPT-2 style names last).
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts")


@dataclass(frozen=True)
class Model:
    layers: int
    hidden: int
    moe: bool | None  # None: not said (--layers/--hidden)
    source: str

    @property
    def sites(self) -> int:
        return SITES_PER_LAYER * self.layers


@dataclass(frozen=True)
class Step:
    """One token count's step: the allreduce + norm time with fusion off and on."""

    tokens: int
    fused_applies: bool
    off_us: float
    on_us: float

    @property
    def saved_us(self) -> float:
        """Positive: fusion saves this much per step; negative: it costs it."""
        return self.off_us - self.on_us

    @property
    def saved_pct(self) -> float:
        return self.saved_us / self.off_us * 100.0 if self.off_us else 0.0


def _first(config: dict[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        if isinstance(config.get(key), int) and not isinstance(config.get(key), bool):
            return config[key]
    return None


def read_config(path: Path) -> Model:
    """A Hugging Face ``config.json`` (or the folder holding it); a multimodal model's
    ``text_config`` is its language model."""
    file = path / "config.json" if path.is_dir() else path
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EnvironmentProblem(f"--model-config {file}: {exc.strerror or exc}", code="usage") from None
    except ValueError as exc:
        raise EnvironmentProblem(f"--model-config {file} is not JSON: {exc}", code="usage") from None
    if not isinstance(config, dict):
        raise EnvironmentProblem(f"--model-config {file} holds no JSON object", code="usage")
    text = config.get("text_config")
    if isinstance(text, dict) and _first(config, LAYER_KEYS) is None:
        config = {**config, **text}
    layers, hidden = _first(config, LAYER_KEYS), _first(config, HIDDEN_KEYS)
    if not layers or not hidden or layers < 1 or hidden < 1:
        raise EnvironmentProblem(
            f"--model-config {file} names no layer count ({'/'.join(LAYER_KEYS)}) and hidden size "
            f"({'/'.join(HIDDEN_KEYS)}): give --layers and --hidden instead",
            code="usage",
        )
    experts = _first(config, EXPERT_KEYS)
    architectures = config.get("architectures") or []
    name = architectures[0] if architectures and isinstance(architectures[0], str) else "model"
    return Model(int(layers), int(hidden), bool(experts and experts > 1), f"{file} ({name})")


def steps(model: Model, rows: Sequence[tuple[int, float, float]]) -> list[Step]:
    """``rows``: (tokens, fused µs, unfused µs) per call, measured."""
    found = []
    for tokens, fused_us, unfused_us in sorted(rows):
        applies = 0 < tokens <= FUSION_MAX_TOKENS
        off = model.sites * unfused_us
        found.append(Step(tokens, applies, off, model.sites * fused_us if applies else off))
    return found


def tokens_text(n: int) -> str:
    """``1 token``, ``2048 tokens``: batch sizes in sentences."""
    return f"{n} token" if n == 1 else f"{n} tokens"


def summary(model: Model, found: Sequence[Step]) -> str:
    """One sentence over the estimate: where fusion saves and where it costs, per step."""
    kind = {True: "MoE", False: "dense", None: "a"}[model.moe]
    head = (
        f"{model.layers} layers ({kind} model, hidden {model.hidden}): {model.sites} allreduce + add + RMSNorm "
        f"sites a step; fusion on runs them as {model.sites} fused kernels instead of {model.sites} allreduces "
        f"and {model.sites} norm kernels, up to {FUSION_MAX_TOKENS} tokens a batch (unfused above)"
    )
    if not found:
        return head
    best = max(found, key=lambda s: s.saved_us)
    worst = min(found, key=lambda s: s.saved_us)
    parts = [head]
    if best.saved_us > 0:
        at = tokens_text(best.tokens)
        parts.append(f"saves up to {best.saved_us:,.0f} µs a step ({best.saved_pct:.0f} %, {at})")
    if worst.saved_us < 0:
        at = tokens_text(worst.tokens)
        parts.append(f"costs up to {-worst.saved_us:,.0f} µs a step ({-worst.saved_pct:.0f} %, {at})")
    return "; ".join(parts)

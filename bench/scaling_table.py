#!/usr/bin/env python3
"""Print the worked scaling tables of docs/scaling.md (markdown), computed by the scaler itself.

    python bench/scaling_table.py > /tmp/tables.md
"""

from __future__ import annotations



from orchestrator.scaling.scaler import scale  # noqa: E402
from orchestrator.scaling.types import ReferenceHyp, TargetHardware  # noqa: E402
from orchestrator.devices import parse_devices  # noqa: E402

DEVICES = [("1 GPU", "0"), ("2 GPUs", "2"), ("4 GPUs", "4"), ("8 GPUs", "8"), ("TPU v3-8", "tpu:8")]
HEADER = (
    "| devices | policy | batch (total) | per device | nbs | accumulate | images/step | k | lr0 "
    "| weight_decay passed | weight_decay effective | warmup_epochs |"
)
RULE = "|" + "---|" * 12


def g(x: float) -> str:
    return f"{x:.6g}"


def table(title: str, ref: ReferenceHyp, policies: list[str], per_device: int | None) -> str:
    lines = [f"#### {title}", "", HEADER, RULE]
    for label, spec in DEVICES:
        target = TargetHardware(parse_devices(spec), batch_per_device=per_device)
        for policy in policies:
            r = scale(ref, target, policy)
            p, e = r.passed, r.effective
            lines.append(
                f"| {label} | {policy} | {p['batch']} | {e['batch_per_device']} | {p['nbs']} | {e['accumulate']} "
                f"| {e['images_per_step']} | {r.k:.3g} | {g(p['lr0'])} | {g(p['weight_decay'])} "
                f"| {g(e['weight_decay'])} | {g(p['warmup_epochs'])} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    sgd = ReferenceHyp(optimizer="SGD", world_size=1, batch=16, nbs=64, lr0=0.01, weight_decay=0.0005)
    adamw = ReferenceHyp(optimizer="AdamW", world_size=1, batch=16, nbs=64, lr0=0.001, momentum=0.9, weight_decay=0.05)
    print(
        table(
            "A. SGD reference (1 GPU, batch 16, nbs 64, lr0 0.01, wd 0.0005); target keeps 16 per device",
            sgd,
            ["auto", "table", "none"],
            None,
        )
    )
    print(
        table(
            "B. Same SGD reference; target uses 32 per device (true large batch)",
            sgd,
            ["auto", "linear", "table", "none"],
            32,
        )
    )
    print(
        table(
            "C. AdamW reference (1 GPU, batch 16, nbs 64, lr0 0.001, wd 0.05); target uses 32 per device",
            adamw,
            ["auto", "linear", "none"],
            32,
        )
    )


if __name__ == "__main__":
    main()

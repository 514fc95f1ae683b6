"""The CPU's bfloat16 instructions: Ultralytics' MuSGD orthogonalises each update in bfloat16, which a
CPU without them runs many times slower than float32 (measured: docs/scaling-campaigns.md section 7G3)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.doctor.checks import PASS, WARN, Check

BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # x86 flags in /proc/cpuinfo that give torch fast bfloat16 matmuls
MUSGD_SLOWDOWN = ("a MuSGD epoch took 212 s on an AMD EPYC without them against about 21 s on an Intel Xeon with "
                  "them (bfloat16 matmul 17x slower than float32 there; docs/scaling-campaigns.md 7G3)")


def cpuinfo_fields(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ("model name", "cpu family", "flags", ...); empty where
    it cannot be read. Also what bench/bench_scaling.py names a row's machine by."""
    fields: dict[str, str] = {}
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return fields
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, set[str]] | None:
    """The CPU's model name and x86 flags, or None where /proc/cpuinfo has no x86 flags line."""
    fields = cpuinfo_fields(cpuinfo)
    if "flags" not in fields:
        return None
    return fields.get("model name", "this CPU"), set(fields["flags"].split())


def check_cpu_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> Check:
    found = cpu_flags(cpuinfo)
    if found is None:
        return Check("cpu-bf16", PASS, "not an x86 CPU with /proc/cpuinfo flags: not checked", "")
    model, flags = found
    have = [flag for flag in BF16_FLAGS if flag in flags]
    data = {"model": model, "bf16_flags": have}
    if have:
        return Check("cpu-bf16", PASS, f"{model}: bfloat16 instructions ({', '.join(have)})", "", data)
    return Check("cpu-bf16", WARN,
                 f"{model} has no bfloat16 instructions ({' or '.join(BF16_FLAGS)}): MuSGD (optimizer=auto's pick "
                 f"above 10,000 iterations on Ultralytics 8.4) trains on this CPU many times slower: {MUSGD_SLOWDOWN}",
                 "for trainings on this CPU name the optimizer in the job (hyp: {optimizer: SGD}, or AdamW); "
                 "GPU trainings are not affected", data)

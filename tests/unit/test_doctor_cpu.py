"""doctor's cpu-bf16 check reads /proc/cpuinfo (here: files written like it) and warns where MuSGD's bfloat16
Newton-Schulz would run many times slower, naming the CPU and the fix."""

from __future__ import annotations

from orchestrator.doctor.cpu import check_cpu_bf16

ZEN3 = "fpu vme sse sse2 avx avx2 fma"
ZEN4 = ZEN3 + " avx512f avx512_bf16 avx512_vnni"


def _cpuinfo(tmp_path, flags: str, model: str = "AMD EPYC") -> object:
    path = tmp_path / "cpuinfo"
    block = f"processor\t: {{}}\nvendor_id\t: AuthenticAMD\nmodel name\t: {model}\nflags\t\t: {flags}\n\n"
    path.write_text(block.format(0) + block.format(1))
    return path


def test_a_cpu_without_bfloat16_instructions_warns_for_musgd_with_the_fix(tmp_path):
    check = check_cpu_bf16(_cpuinfo(tmp_path, ZEN3))
    assert check.status == "warn"
    assert check.detail.startswith("AMD EPYC has no bfloat16 instructions (avx512_bf16 or amx_bf16): MuSGD")
    assert "212 s" in check.detail and "docs/scaling-campaigns.md 7G3" in check.detail
    assert "hyp: {optimizer: SGD}" in check.fix
    assert check.data == {"model": "AMD EPYC", "bf16_flags": []}


def test_a_cpu_with_avx512_bf16_or_amx_passes(tmp_path):
    assert check_cpu_bf16(_cpuinfo(tmp_path, ZEN4)).status == "pass"
    amx = check_cpu_bf16(_cpuinfo(tmp_path, ZEN3 + " amx_bf16 amx_tile", model="Intel(R) Xeon(R) Processor"))
    assert amx.status == "pass" and amx.detail == "Intel(R) Xeon(R) Processor: bfloat16 instructions (amx_bf16)"


def test_no_x86_flags_or_no_file_is_not_checked(tmp_path):
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\nCPU implementer\t: 0x41\n")
    for path in (arm, tmp_path / "missing"):
        check = check_cpu_bf16(path)
        assert check.status == "pass" and "not checked" in check.detail

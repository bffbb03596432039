"""Type stubs for twolayer._cpu (cpp/bindings/cpu.c): the instruction levels compiled in and those the CPU runs."""

compiled: str

def supported() -> tuple[str, ...]: ...

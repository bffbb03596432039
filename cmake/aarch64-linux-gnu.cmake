# Cross-compilation check for aarch64 Linux (Debian's g++-aarch64-linux-gnu), used by .ci/aarch64-check: the
# extension is compiled for aarch64 on an x86-64 host and run under qemu-aarch64 against an arm64 Debian root
# (Python headers from that root: -DPython_INCLUDE_DIR=<root>/usr/include/python3.11).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

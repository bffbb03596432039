"""The shared libraries an ELF object names (its ``DT_NEEDED`` entries), read from the file: how ``build_info``
tells whether the loaded core carries its own C++ runtime (``-static-libstdc++``, which some vendor compiler
wrappers link by default) rather than the shared ``libstdc++.so``/``libc++.so``."""

from __future__ import annotations

import struct

_SHT_DYNAMIC = 6
_DT_NEEDED = 1


def needed_libraries(path: str) -> list[str] | None:
    """The ``DT_NEEDED`` names of the ELF file ``path`` in order; None if it is not an ELF file with a dynamic section
    (Mach-O, PE)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        return None
    is64 = data[4] == 2
    end = "<" if data[5] == 1 else ">"
    if is64:
        shoff, = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        section, dyn = end + "IIQQQQIIQQ", end + "qQ"
    else:
        shoff, = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        section, dyn = end + "IIIIIIIIII", end + "iI"
    headers = [struct.unpack_from(section, data, shoff + i * shentsize) for i in range(shnum)]
    dynamic = [h for h in headers if h[1] == _SHT_DYNAMIC]
    if not dynamic:  # a static executable, or section headers stripped: nothing to tell
        return None
    names: list[str] = []
    for h in dynamic:
        offset, size, link = h[4], h[5], h[6]
        strtab = headers[link][4]
        for tag, value in struct.iter_unpack(dyn, data[offset:offset + size]):
            if tag == _DT_NEEDED:
                names.append(data[strtab + value:data.index(b"\0", strtab + value)].decode())
    return names


def cxx_runtime_static(path: str) -> bool | None:
    """Whether the C++ extension module ``path`` has its C++ runtime linked in (it names no ``libstdc++``/``libc++``
    shared library); None where this cannot be read (not an ELF file)."""
    needed = needed_libraries(path)
    if needed is None:
        return None
    return not any(n.startswith(("libstdc++", "libc++")) for n in needed)

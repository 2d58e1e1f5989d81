#!/usr/bin/env python3
"""Usage: python3 scripts/cuda_layers.py [SRC_DIR]   (default: crates/cuda/src)

Checks that the files of the cuda crate import one another one way only: every `crate::NAME`
reference outside #[cfg(test)] code (and, in lib.rs, every `NAME::` path of a module) is an
arrow from the file to NAME.rs (`crate::Name` with a capital letter is an item of lib.rs).
With the layer table of lib.rs's `//!` block, each arrow must point to a lower layer; in any
case no cycle may remain. Prints the arrows; exits 1 naming what is wrong.
"""

import pathlib
import re
import sys


def code_outside_tests(text: str) -> str:
    """The text before the file's `#[cfg(test)]` module (test code may reach anywhere)."""
    i = text.find("#[cfg(test)]")
    return text if i < 0 else text[:i]


def arrows(src: pathlib.Path) -> dict[str, set[str]]:
    """Each file's imports of the crate's other files."""
    mods = {p.stem for p in src.glob("*.rs")}
    out: dict[str, set[str]] = {}
    for p in sorted(src.glob("*.rs")):
        text = code_outside_tests(p.read_text())
        names = [m.group(1) for m in re.finditer(r"crate::([A-Za-z_][A-Za-z_0-9]*)", text)]
        for g in re.finditer(r"crate::\{([^}]*)\}", text):
            names += [part.strip().split("::")[0] for part in g.group(1).split(",")]
        if p.stem == "lib":
            names += [m.group(1) for m in re.finditer(r"\b([a-z_][a-z_0-9]*)::", text)]
        deps = {"lib" if n[:1].isupper() else n for n in names if n[:1].isupper() or n in mods}
        deps.discard(p.stem)
        out[p.stem] = deps
    return out


def layers(src: pathlib.Path) -> dict[str, int]:
    """The layer table of lib.rs (`//! N  name, name   description`), if it has one."""
    table: dict[str, int] = {}
    for line in (src / "lib.rs").read_text().splitlines():
        m = re.match(r"//! (\d+)\s+([a-z_0-9, ]+?)(?:\s{2,}|$)", line)
        if m:
            for name in m.group(2).split(","):
                table[name.strip()] = int(m.group(1))
    return table


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d) :] + [d]
            if state.get(d) is None:
                c = visit(d)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if state.get(n) is None:
            c = visit(n)
            if c:
                return c
    return None


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    src = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else root / "crates" / "cuda" / "src"
    graph = arrows(src)
    table = layers(src)
    bad = []
    for n in sorted(graph):
        print(f"{table.get(n, '?'):>2} {n:10} -> {', '.join(sorted(graph[n])) or '-'}")
        if table:
            if n not in table:
                bad.append(f"{n}.rs is not in lib.rs's layer table")
            for d in sorted(graph[n]):
                if d in table and n in table and table[d] >= table[n]:
                    bad.append(f"{n} (layer {table[n]}) imports {d} (layer {table[d]})")
    cycle = find_cycle(graph)
    if cycle:
        bad.append("cycle: " + " -> ".join(cycle))
    for b in bad:
        print(b, file=sys.stderr)
    if not bad:
        print("one way: no import points up a layer or into a cycle")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

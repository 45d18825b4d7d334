"""The module graph of a crate's modules, as ARCHITECTURE.md's invariants
say it must be: no circle among sibling modules, and no module reaching up
to its crate's root for an item (an upward arrow). Reads `crate::<module>`
references (and `super::<module>` ones in a folder's files).

    python infra/python/module_graph.py <src dir> <modules dir>

<modules dir> is the folder whose modules are checked (`shared/src/app`,
`infra/sat/src`); <src dir> is the crate's root (`crate::` there). Prints
each circle and upward arrow and exits 1 if there is one.
"""

import re
import sys
from pathlib import Path

ROOTS = {"lib.rs", "main.rs", "mod.rs"}


def modules_of(folder: Path):
    """Each module of `folder` and the files that make it."""
    found = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.suffix == ".rs" and path.name not in ROOTS:
            found.setdefault(path.stem, []).append(path)
        elif path.is_dir():
            found.setdefault(path.name, []).extend(sorted(path.rglob("*.rs")))
    return found


def main(src: str, folder: str) -> int:
    src_dir, modules_dir = Path(src), Path(folder)
    modules = modules_of(modules_dir)
    prefix = "::".join(modules_dir.relative_to(src_dir).parts)
    path = f"crate::{prefix}::" if prefix else "crate::"
    reference = re.compile(re.escape(path) + r"([A-Za-z_][A-Za-z0-9_]*)")
    grouped = re.compile(re.escape(path) + r"\{([^}]*)\}")
    edges, upward = {m: set() for m in modules}, []
    for module, files in modules.items():
        for file in files:
            text = "\n".join(
                line for line in file.read_text().splitlines() if not line.lstrip().startswith("//")
            )
            named = set(reference.findall(text))
            for group in grouped.findall(text):
                named.update(part.strip().split("::")[0] for part in group.split(","))
            for name in named - {"", "self"}:
                if name in modules:
                    if name != module:
                        edges[module].add(name)
                elif not prefix:
                    upward.append(f"{file}: crate::{name} is the crate root's, not a module's")
    circles, state = [], {}

    def visit(node, trail):
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for node in sorted(modules):
        if node not in state:
            visit(node, [node])
    for circle in circles:
        print(f"{modules_dir}: a circle: {circle}")
    for arrow in upward:
        print(arrow)
    return 1 if circles or upward else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))

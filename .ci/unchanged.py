"""Fail if installing trl-ada replaced anything: `pip freeze` before and after, every package of the first must be
in the second at the same version (packages may only be added). Usage: unchanged.py before.txt after.txt"""

import sys


def read(path: str) -> dict[str, str]:
    packages = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, version = line.replace(" @ ", "==").partition("==")
            packages[name.lower().replace("_", "-")] = version
    return packages


before, after = read(sys.argv[1]), read(sys.argv[2])
replaced = [f"{name} {version} -> {after.get(name, 'removed')}" for name, version in before.items()
            if after.get(name) != version]
added = sorted(set(after) - set(before))
print(f"installing trl-ada added {len(added)} packages ({', '.join(added)}) and replaced {len(replaced)}")
if replaced:
    sys.exit("replaced: " + "; ".join(replaced))

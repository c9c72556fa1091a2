"""The user documentation stays true to the code.

- docs/operations.md is what scripts/gen_operations_doc.py writes from the registry
  (`hyprof describe --json`): a parameter added, renamed or re-ranged without
  regenerating the page fails here.
- README.md stays a user's page: under 25 KB, with the quick start (profile ->
  train -> classify -> assess) in its first 100 lines, and every `hyprof OP` it
  names is an operation of the registry.
"""
import json
import re
import subprocess
import sys

from conftest import ROOT, run

sys.path.insert(0, str(ROOT / "scripts"))
import gen_operations_doc  # noqa: E402


def test_operations_page_is_generated_from_the_registry(hyprof_exe):
    d = gen_operations_doc.describe(hyprof_exe)
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert page == gen_operations_doc.render(d), \
        "docs/operations.md is stale: run python3 scripts/gen_operations_doc.py"
    for op in d["operations"]:
        assert f"### `{op['name']}`" in page
        for p in op["params"]:
            assert f"`--{p['name']}`" in page


def test_readme_is_a_users_page(hyprof_exe):
    readme = (ROOT / "README.md").read_bytes()
    assert len(readme) < 25 * 1024, f"README.md is {len(readme)} bytes (limit 25 KB)"
    head = "\n".join(readme.decode("utf-8").splitlines()[:100])
    for step in ("hyprof eadp", "hyprof train", "hyprof classify", "hyprof assess"):
        assert step in head, f"the quick start's '{step}' is not in the README's first 100 lines"
    names = {op["name"] for op in json.loads(run("describe", "--json").stdout)["operations"]}
    code = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", readme.decode("utf-8"), re.M | re.S))
    used = set(re.findall(r"^\s*hyprof ([a-z]+) ", code, re.M))
    assert {"eadp", "train", "classify", "assess"} <= used
    assert used <= names | {"info", "describe"}, f"unknown operations in README: {used - names}"
